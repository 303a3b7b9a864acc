//! Failure classification, message normalisation and error signatures.
//!
//! Everything here is a pure function of its inputs (no I/O, no clock). A failure is
//! [`classify`]-ed into an [`ErrorType`], its message is [`normalize`]-d so that volatile details
//! (ids, times, paths, numbers) do not split one problem into many, and the pair is hashed into a
//! [`Signature`] that groups similar failures. [`reprocess_eligible`], [`manual_review_required`]
//! and [`remediation`] turn the classification into advice for the queue and its operators.

use std::sync::LazyLock;

use regex::{Captures, Regex};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::domain::model::ErrorType;
use crate::domain::model::ErrorType as E;

/// An item that has failed this many times needs a person, whatever its error type. Three is the
/// count at which a failure is treated as recurring rather than incidental.
pub(crate) const MANUAL_REVIEW_AFTER_FAILURES: u32 = 3;

/// Upper bound, in `char`s, of a [`normalize`]d message.
pub(crate) const MAX_NORMALIZED_CHARS: usize = 200;

/// How many words of the normalised message the readable [`Signature::pattern`] keeps.
pub(crate) const PATTERN_WORDS: usize = 8;

/// Compiles a constant pattern. Constants always compile; should one not, its rule is skipped
/// rather than aborting the process.
fn re(pattern: &str) -> Option<Regex> {
    Regex::new(pattern).ok()
}

/// A case-insensitive, whole-word regex matching any of `words`.
fn any_word(words: &[&str]) -> Option<Regex> {
    re(&format!(r"(?i)\b(?:{})\b", words.join("|")))
}

/// Whether `re` is present and matches `text`.
fn hit(re: Option<&Regex>, text: &str) -> bool {
    re.is_some_and(|re| re.is_match(text))
}

/// A filesystem path: `/`, `./`, `../`, `~/` or a drive like `C:\`, at the start of the text or
/// after whitespace, a quote, `=`, an opening bracket, `,` or `;` (kept in group `lead`), running
/// to whitespace or a quote; trailing sentence punctuation is left outside.
const PATH: &str =
    r#"(?i)(?P<lead>^|[\s"'`=(\[{,;])(?:\.{0,2}/|~/|[a-z]:\\)[^\s"'`]*[^\s"'`.,;:!?)\]}]"#;

static PATH_RE: LazyLock<Option<Regex>> = LazyLock::new(|| re(PATH));

/// One normalisation step: occurrences of `re` accepted by `guard` become `placeholder`.
struct Rule {
    re: Option<Regex>,
    placeholder: &'static str,
    guard: fn(&str) -> bool,
}

fn has_digit(s: &str) -> bool {
    s.bytes().any(|b| b.is_ascii_digit())
}

/// Hex ids mix digits and letters; pure-letter words (`defaced`) stay, pure digits become `<n>`.
fn has_digit_and_letter(s: &str) -> bool {
    has_digit(s) && s.bytes().any(|b| b.is_ascii_alphabetic())
}

/// The normalisation rules, applied in this order to the lowercased message:
///
/// 1. paths first, so the ids, dates and numbers inside a path vanish with it;
/// 2. UUIDs before hex ids and numbers, which would otherwise cut them into pieces;
/// 3. timestamps (`2025-01-11T10:30:00Z`, dates, `10:30:00`) before durations and numbers;
/// 4. `0x..` and bare hex ids of 7 or more characters;
/// 5. durations (`3.2s`, `45ms`, `2m`, `1h30m`) before plain numbers;
/// 6. every remaining run of digits (with decimal or version dots) becomes `<n>`.
///
/// Every rule but the first needs an ASCII digit to fire and the last removes all digits, and a
/// path left unmatched stays unmatched, so a second pass changes nothing: `normalize` is
/// idempotent (checked by a property test).
#[rustfmt::skip]
static RULES: LazyLock<Vec<Rule>> = LazyLock::new(|| {
    let rule = |pattern: &str, placeholder, guard: fn(&str) -> bool| {
        Rule { re: re(pattern), placeholder, guard }
    };
    vec![
        rule(PATH, "<path>", |_| true),
        rule(r"\b[0-9a-f]{8}(?:-[0-9a-f]{4}){3}-[0-9a-f]{12}\b", "<uuid>", has_digit),
        rule(concat!(
            r"\b[0-9]{4}[-/][0-9]{2}[-/][0-9]{2}",
            r"(?:[t ][0-9]{2}:[0-9]{2}(?::[0-9]{2}(?:[.,][0-9]+)?)?(?:z|[+-][0-9]{2}:?[0-9]{2})?)?",
            r"|\b[0-9]{1,2}:[0-9]{2}:[0-9]{2}(?:[.,][0-9]+)?",
        ), "<ts>", |_| true),
        rule(r"\b0x[0-9a-f]+\b", "<hex>", |_| true),
        rule(r"\b[0-9a-f]{7,}\b", "<hex>", has_digit_and_letter),
        rule(r"\b(?:[0-9]+(?:\.[0-9]+)?(?:[nuµm]s|mins?|secs?|[smhd]))+\b", "<dur>", |_| true),
        rule(r"[0-9]+(?:\.[0-9]+)*", "<n>", |_| true),
    ]
});

/// Normalises a failure message so that recurrences of one problem compare equal.
///
/// The message is lowercased, then paths, UUIDs, timestamps, hex ids, durations and numbers are
/// replaced by `<path>`, `<uuid>`, `<ts>`, `<hex>`, `<dur>` and `<n>` (in that order, see the
/// rule list in the source), whitespace runs collapse to one space, and the result is trimmed and
/// cut to `MAX_NORMALIZED_CHARS` characters (on a `char` boundary). `normalize` is idempotent.
///
/// ```
/// # use dlq::domain::signature::normalize;
/// assert_eq!(
///     normalize("Build 42 FAILED after 3.2s in /tmp/a1"),
///     "build <n> failed after <dur> in <path>"
/// );
/// ```
#[must_use]
pub fn normalize(message: &str) -> String {
    let mut text = message.to_lowercase();
    for rule in RULES.iter() {
        let Some(re) = &rule.re else { continue };
        let replaced = re.replace_all(&text, |caps: &Captures| {
            let whole = caps.get(0).map_or("", |m| m.as_str());
            if !(rule.guard)(whole) {
                return whole.to_string();
            }
            let lead = caps.name("lead").map_or("", |m| m.as_str());
            format!("{lead}{}", rule.placeholder)
        });
        text = replaced.into_owned();
    }
    let collapsed = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let cut: String = collapsed.chars().take(MAX_NORMALIZED_CHARS).collect();
    cut.trim_end().to_string()
}

/// Classification keywords in precedence order (see [`classify`]). `merge conflict` matches in
/// any case, but a bare `conflict` only as git's upper-case `CONFLICT` marker: "version
/// conflict" is a dependency problem, not a merge.
#[rustfmt::skip]
static KEYWORDS: LazyLock<[(Option<Regex>, ErrorType); 6]> = LazyLock::new(|| {
    let merge = r"(?i:\bmerge conflicts?\b|\bautomatic merge failed\b)|\bCONFLICT\b";
    [
        (any_word(&["permission denied", "access denied", "operation not permitted", "eacces",
            "eperm", "forbidden"]), E::PermissionError),
        (any_word(&["out of memory", "oom", "oom-?kill(?:ed|er)", "cannot allocate memory",
            "enomem", "no space left", "enospc", "disk full", "resources? exhausted",
            "too many open files", "emfile"]), E::ResourceExhausted),
        (re(merge), E::MergeConflict),
        (any_word(&["timed? ?out", "timeouts?", "deadline exceeded", "etimedout"]), E::Timeout),
        (any_word(&["worktrees?"]), E::WorktreeError),
        (any_word(&["validations?", "validators?", "failed to validate"]), E::ValidationFailed),
    ]
});

/// What is known about a failed attempt, named so that a call reads:
/// `classify(&Outcome { message, exit_code: Some(101), timed_out: false })`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Outcome<'a> {
    /// The failure's message (stderr tail, error text).
    pub message: &'a str,
    /// The command's exit code, when a command ran and exited.
    pub exit_code: Option<i32>,
    /// Whether the caller enforced a time limit and the attempt ran past it.
    pub timed_out: bool,
}

/// Classifies a failed attempt, first match wins:
///
/// 1. `timed_out` (the runner enforced its limit) → [`ErrorType::Timeout`];
/// 2. keywords in `message` (case-insensitive, whole words, with paths removed first so that
///    `/tmp/worktrees/a` does not read as a worktree failure), most specific cause first:
///    permission (`permission denied`, `EACCES`, `forbidden`, ...) → `PermissionError`;
///    resources (`out of memory`, `no space left`, `resource exhausted`, `too many open files`,
///    ...) → `ResourceExhausted`; `merge conflict` / git's `CONFLICT` → `MergeConflict`;
///    `timed out` / `timeout` → `Timeout`; `worktree` → `WorktreeError`; `validation` →
///    `ValidationFailed`. Causes come before symptoms: a permission or memory problem often
///    surfaces as a timeout or a failed worktree step, and retrying will not fix it;
/// 3. exit-code conventions: 124 is what `timeout(1)` returns when the limit hits →
///    `Timeout`; 137 (128 + SIGKILL) without the runner's timeout is, in practice, the OOM killer
///    → `ResourceExhausted` (both are retried either way, so a wrong guess only costs a label);
/// 4. any other non-zero exit code → [`ErrorType::CommandFailed`] with that code;
/// 5. otherwise (no code, or 0) → [`ErrorType::Unknown`].
#[must_use]
pub fn classify(outcome: &Outcome<'_>) -> ErrorType {
    if outcome.timed_out {
        return E::Timeout;
    }
    let text = match PATH_RE.as_ref() {
        Some(path) => path.replace_all(outcome.message, "${lead}<path>"),
        None => outcome.message.into(),
    };
    if let Some((_, kind)) = KEYWORDS.iter().find(|(re, _)| hit(re.as_ref(), &text)) {
        return kind.clone();
    }
    match outcome.exit_code {
        Some(124) => E::Timeout,
        Some(137) => E::ResourceExhausted,
        Some(code) if code != 0 => E::CommandFailed { exit_code: code },
        _ => E::Unknown,
    }
}

/// Whether an item failing with `error_type` may be retried automatically.
///
/// The runner spec retries every failed or timed-out agent. We keep that for failures that can
/// pass on a later attempt without anyone changing anything: `Timeout`, `ResourceExhausted`,
/// `CommandFailed` (flaky tests, network, an agent that does better next time) and `Unknown`.
/// `MergeConflict`, `PermissionError`, `ValidationFailed` and `WorktreeError` describe state
/// (the repository, the worktree, access rights, the acceptance criteria) that a retry would
/// meet again unchanged, so retrying them only burns agent time.
#[must_use]
pub fn reprocess_eligible(error_type: &ErrorType) -> bool {
    match error_type {
        E::Timeout | E::ResourceExhausted | E::CommandFailed { .. } | E::Unknown => true,
        E::MergeConflict | E::PermissionError | E::ValidationFailed | E::WorktreeError => false,
    }
}

/// Whether a person should look at the item before it is retried.
///
/// True for every type that is not [`reprocess_eligible`] (the runner spec asks for review of
/// permission errors; the other persistent-state failures need the same hands-on fix), and for
/// any item that has failed `MANUAL_REVIEW_AFTER_FAILURES` times or more, since a "transient"
/// failure that keeps recurring is not transient.
#[must_use]
pub fn manual_review_required(error_type: &ErrorType, failure_count: u32) -> bool {
    !reprocess_eligible(error_type) || failure_count >= MANUAL_REVIEW_AFTER_FAILURES
}

/// A stable fingerprint grouping similar failures.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Signature {
    /// First 16 lowercase hex characters of SHA-256 over `"{type name}\n{normalised message}"`.
    pub hash: String,
    /// Readable form: `"{type name}::{first PATTERN_WORDS words of the normalised message}"`.
    pub pattern: String,
}

/// Computes the [`Signature`] of a failure.
///
/// Only the variant name of `error_type` enters the signature, so `CommandFailed` with exit
/// codes 1 and 101 and the same normalised text group together: the code is as volatile as the
/// numbers `normalize` already strips from the message (it usually appears there too), and it
/// stays available in each [`crate::domain::model::FailureDetail`]. Different variants never share a
/// signature, because the name is hashed along with the message.
#[must_use]
pub fn signature(error_type: &ErrorType, message: &str) -> Signature {
    let name = error_type.name();
    let normalized = normalize(message);
    let digest = Sha256::digest(format!("{name}\n{normalized}").as_bytes());
    let hash = format!("{digest:x}").chars().take(16).collect();
    let pattern = format!("{name}::{}", pattern_words(&normalized));
    Signature { hash, pattern }
}

/// The first [`PATTERN_WORDS`] words of a normalised message, never ending inside a quoted
/// string (`"..."`, `` `...` ``, `'...'`): one the cut would split is kept whole when it closes
/// within [`PATTERN_WORDS`] more words, else left out and the cut marked with ` …`.
fn pattern_words(normalized: &str) -> String {
    let words: Vec<&str> = normalized.split(' ').collect();
    if words.len() <= PATTERN_WORDS {
        return words.join(" ");
    }
    let mut quote = None;
    let mut opened_at = 0;
    for (i, word) in words.iter().take(PATTERN_WORDS).enumerate() {
        let before = quote;
        quote = quote_after(quote, word);
        if before.is_none() && quote.is_some() {
            opened_at = i;
        }
    }
    let Some(open) = quote else {
        return words[..PATTERN_WORDS].join(" ");
    };
    let mut state = Some(open);
    for (i, word) in words
        .iter()
        .enumerate()
        .skip(PATTERN_WORDS)
        .take(PATTERN_WORDS)
    {
        state = quote_after(state, word);
        if state.is_none() {
            return words[..=i].join(" ");
        }
    }
    match opened_at {
        0 => format!("{} …", words[..PATTERN_WORDS].join(" ")),
        start => format!("{} …", words[..start].join(" ")),
    }
}

/// The quote still open after `word`, given the one open before it. `"` and `` ` `` open and
/// close by turns; `'` opens only after a non-alphanumeric character or at the start of the
/// word, and closes only before one or at its end, so apostrophes (`don't`) are not quotes.
fn quote_after(mut open: Option<char>, word: &str) -> Option<char> {
    let chars: Vec<char> = word.chars().collect();
    for (i, &c) in chars.iter().enumerate() {
        let alnum_before = i > 0 && chars[i - 1].is_alphanumeric();
        let alnum_after = chars.get(i + 1).is_some_and(|n| n.is_alphanumeric());
        open = match (open, c) {
            (None, '"' | '`') => Some(c),
            (None, '\'') if !alnum_before => Some(c),
            (Some(q), _) if q == c && (c != '\'' || !alnum_after) => None,
            (other, _) => other,
        };
    }
    open
}

#[rustfmt::skip]
static NETWORK_RE: LazyLock<Option<Regex>> = LazyLock::new(|| {
    any_word(&["connection (?:refused|reset|closed)", "could not resolve", "network is unreachable",
        "dns", "econnrefused", "econnreset", "tls", "ssl"])
});

/// A short suggested remediation for a failure with `error_type` and signature `pattern`
/// (a [`Signature::pattern`] or any message text). Network symptoms in the pattern get network
/// advice whatever the type; otherwise the advice follows the type, with resource exhaustion
/// split into disk, file-descriptor and memory cases.
#[must_use]
pub fn remediation(error_type: &ErrorType, pattern: &str) -> &'static str {
    let text = pattern.to_lowercase();
    if hit(NETWORK_RE.as_ref(), &text) {
        return "Check network connectivity and the retry/backoff settings, then retry the item.";
    }
    let disk = text.contains("space") || text.contains("disk");
    let files = text.contains("open files") || text.contains("emfile");
    match error_type {
        E::Timeout => "Raise agent_timeout_secs (timeout_config) or give each agent less work.",
        E::ResourceExhausted if disk => "Free disk space (stale worktrees, build caches).",
        E::ResourceExhausted if files => "Raise the open-file limit or lower parallelism.",
        E::ResourceExhausted => "Lower parallelism or give agents more memory, then retry.",
        E::PermissionError => "Check file permissions and the agent's access rights, then requeue.",
        E::MergeConflict => "Resolve the conflict by hand, or rerun on the updated branch.",
        E::WorktreeError => "Prune stale worktrees and branches and check the repository state.",
        E::ValidationFailed => "Read the validation output; fix the item or the validation rules.",
        E::CommandFailed { .. } => "Read the command output and the agent's JSON log, then retry.",
        E::Unknown => "Review the error logs and the agent's JSON log for details.",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use ErrorType::*;

    fn failed(exit_code: i32) -> ErrorType {
        ErrorType::CommandFailed { exit_code }
    }

    /// `classify` of a message with an exit code, not timed out.
    fn exited(message: &str, exit_code: Option<i32>) -> ErrorType {
        classify(&Outcome {
            message,
            exit_code,
            timed_out: false,
        })
    }

    #[test]
    fn classify_keywords() {
        let cases = [
            ("Operation timed out after 30s", Timeout),
            ("request TIMEOUT", Timeout),
            ("Permission denied: cannot write to file", PermissionError),
            ("open failed: EACCES", PermissionError),
            ("HTTP 403 Forbidden", PermissionError),
            ("fatal: Out of memory", ResourceExhausted),
            ("write: No space left on device", ResourceExhausted),
            ("resource exhausted: quota", ResourceExhausted),
            ("Too many open files (os error 24)", ResourceExhausted),
            ("Merge conflict in src/lib.rs", MergeConflict),
            ("CONFLICT (content): src/main.rs", MergeConflict),
            ("git worktree add failed", WorktreeError),
            ("Validation failed: missing field", ValidationFailed),
        ];
        for (message, expected) in cases {
            assert_eq!(exited(message, Some(1)), expected, "{message}");
        }
    }

    #[test]
    fn classify_precedence() {
        // The runner's flag beats everything, keywords beat exit codes, causes beat symptoms.
        let timed_out = Outcome {
            message: "forbidden",
            exit_code: Some(1),
            timed_out: true,
        };
        assert_eq!(classify(&timed_out), Timeout);
        assert_eq!(exited("forbidden", Some(124)), PermissionError);
        let cases = [
            ("worktree: permission denied", PermissionError),
            ("out of memory, timed out", ResourceExhausted),
            ("worktree add timed out", Timeout),
            ("worktree validation", WorktreeError),
            // Paths, identifiers and lower-case "conflict" are not keywords.
            ("failed in /tmp/worktrees/a", failed(101)),
            ("test test_validation_x failed", failed(101)),
            ("bad agent_timeout_secs", failed(101)),
            ("dependency version conflict", failed(101)),
        ];
        for (message, expected) in cases {
            assert_eq!(exited(message, Some(101)), expected, "{message}");
        }
    }

    #[test]
    fn classify_exit_codes() {
        assert_eq!(exited("boom", Some(124)), Timeout);
        assert_eq!(exited("boom", Some(137)), ResourceExhausted);
        assert_eq!(exited("boom", Some(2)), failed(2));
        assert_eq!(exited("boom", Some(-1)), failed(-1));
        for code in [Some(0), None] {
            assert_eq!(exited("boom", code), Unknown);
        }
        assert_eq!(classify(&Outcome::default()), Unknown);
    }

    #[test]
    fn eligibility_and_review() {
        for t in [Timeout, ResourceExhausted, Unknown, failed(1)] {
            assert!(reprocess_eligible(&t), "{t:?}");
            assert!(!manual_review_required(&t, 1), "{t:?}");
        }
        let review = [MergeConflict, PermissionError, ValidationFailed];
        for t in review.into_iter().chain([WorktreeError]) {
            assert!(!reprocess_eligible(&t), "{t:?}");
            assert!(manual_review_required(&t, 1), "{t:?}");
        }
        let limit = MANUAL_REVIEW_AFTER_FAILURES;
        assert!(!manual_review_required(&failed(1), limit - 1));
        assert!(manual_review_required(&failed(1), limit));
    }

    #[test]
    fn normalize_rules() {
        let cases = [
            ("id 550E8400-E29B-41D4-A716-446655440000", "id <uuid>"),
            ("at 2025-01-11T10:30:00.123Z", "at <ts>"),
            ("at 2025-01-11 10:30:00+02:00", "at <ts>"),
            ("on 2025/01/11 at 10:30:00", "on <ts> at <ts>"),
            ("commit abc1234 ptr 0xDEADBEEF", "commit <hex> ptr <hex>"),
            ("defaced deadbeef stays", "defaced deadbeef stays"),
            ("in /tmp/a1, ./x ../y/z", "in <path>, <path> <path>"),
            ("~/w C:\\Tmp\\f.txt", "<path> <path>"),
            ("see (/var/log/x.log).", "see (<path>)."),
            ("and/or https://host/p", "and/or https://host/p"),
            ("3.2s 45ms 2m 1h30m 500us", "<dur> <dur> <dur> <dur> <dur>"),
            ("v1.2.3 agent-7 64mb", "v<n> agent-<n> <n>mb"),
            ("  Many\t\n  SPACES  ", "many spaces"),
        ];
        for (input, expected) in cases {
            assert_eq!(normalize(input), expected, "{input}");
        }
    }

    #[test]
    fn normalize_truncates_on_char_boundary() {
        let out = normalize(&"é€😀 ".repeat(100));
        assert!(out.chars().count() <= MAX_NORMALIZED_CHARS);
        assert!(out.starts_with("é€😀 é€😀"));
        let eszett = normalize(&"ß".repeat(500));
        assert_eq!(eszett.chars().count(), MAX_NORMALIZED_CHARS);
    }

    #[test]
    fn shared_signature_for_volatile_differences() {
        let first = "cargo test failed with exit code 101 after 3.2s in /tmp/a1";
        let second = "cargo test failed with exit code 1 after 45ms in /home/x/build/y";
        let a = signature(&failed(101), first);
        assert_eq!(a, signature(&failed(1), second));
        let expected = "CommandFailed::cargo test failed with exit code <n> after";
        assert_eq!(a.pattern, expected);
    }

    #[test]
    fn the_pattern_never_ends_inside_a_quoted_string() {
        let pattern = |message: &str| signature(&ErrorType::Unknown, message).pattern;
        // A quoted string across the eighth word is kept whole ...
        assert_eq!(
            pattern(r#"config error: unknown key in the section "max paralel items" here"#),
            r#"Unknown::config error: unknown key in the section "max paralel items""#
        );
        assert_eq!(
            pattern("thread 'main' panicked at 'index out of range for slice' here"),
            "Unknown::thread 'main' panicked at 'index out of range for slice'"
        );
        // ... or, when it runs on past eight more words, left out with an ellipsis.
        let long = format!(
            "bad input for step two: \"{}\"",
            "word ".repeat(20).trim_end()
        );
        assert_eq!(pattern(&long), "Unknown::bad input for step two: …");
        // Apostrophes are not quotes; a message of eight words or fewer is whole.
        assert_eq!(
            pattern("it can't run because the agent isn't ready yet today"),
            "Unknown::it can't run because the agent isn't ready"
        );
        assert_eq!(pattern(r#"missing "a b"#), r#"Unknown::missing "a b"#);
    }

    #[test]
    fn distinct_signatures_and_hash_format() {
        let a = signature(&failed(1), "cargo test failed");
        assert_ne!(a.hash, signature(&failed(1), "cargo build failed").hash);
        assert_ne!(a.hash, signature(&Timeout, "cargo test failed").hash);
        assert_eq!(signature(&Unknown, "").pattern, "Unknown::");
        assert_eq!(a.hash.len(), 16);
        assert!(a.hash.chars().all(|c| matches!(c, '0'..='9' | 'a'..='f')));
    }

    #[test]
    fn remediation_follows_type_and_pattern() {
        assert!(remediation(&Timeout, "Timeout::x").contains("agent_timeout_secs"));
        assert!(remediation(&Timeout, "Timeout::connection refused").contains("network"));
        assert!(remediation(&ResourceExhausted, "no space left on device").contains("disk"));
        assert!(remediation(&PermissionError, "").contains("permissions"));
        assert!(remediation(&Unknown, "").contains("logs"));
    }

    /// Messages built from tokens that exercise the placeholders and their neighbours.
    fn tricky() -> impl Strategy<Value = String> {
        let token = prop_oneof![
            "[a-zA-Z]{1,6}",
            "[0-9]{1,9}",
            "[0-9a-f]{6,10}",
            "[0-9]{1,3}(\\.[0-9])?(ms|s|m|h|us)",
            "(/|\\./|~/|C:\\\\)[a-z0-9/.<>]{0,6}",
            "[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9]{2}:[0-9]{2}:[0-9]{2}Z?",
            "[ \t/.:,;'\"()<>=-]",
            "\\PC",
        ];
        prop::collection::vec(token, 0..40).prop_map(|parts| parts.concat())
    }

    proptest! {
        #[test]
        fn normalize_is_total_bounded_and_idempotent(s in prop_oneof![any::<String>(), tricky()]) {
            let once = normalize(&s);
            prop_assert!(once.chars().count() <= MAX_NORMALIZED_CHARS);
            prop_assert_eq!(normalize(&once), once);
        }

        #[test]
        fn numbers_do_not_change_the_signature(
            words in prop::collection::vec("[a-z]{1,8}", 1..8),
            xs in prop::collection::vec(any::<u32>(), 8),
            ys in prop::collection::vec(any::<u32>(), 8),
        ) {
            let fill = |nums: &[u32]| {
                let parts = words.iter().zip(nums).map(|(w, n)| format!("{w} {n}"));
                parts.collect::<Vec<_>>().join(" ")
            };
            let t = failed(1);
            prop_assert_eq!(signature(&t, &fill(&xs)), signature(&t, &fill(&ys)));
        }
    }
}
