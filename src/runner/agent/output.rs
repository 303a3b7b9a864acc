//! What an agent's output says: the stderr tail, the one-line failure message of a step, and
//! the JSON log location an agent command reports (the protocol is in the parent module doc).
//!
//! Reading the logs is the only I/O here; the interpretation is pure and unit-tested.

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::ExitStatus;

use nix::sys::signal::Signal;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncSeekExt};

/// Longest stderr line quoted in a failure message, in `char`s.
pub(super) const MESSAGE_LINE_CHARS: usize = 200;

/// Longest step label quoted in a failure message, in `char`s.
const LABEL_CHARS: usize = 120;

/// The last `max` bytes of `path` after byte `from`, as text cut at a character boundary;
/// `None` when there are none.
pub(super) async fn read_tail(path: &Path, from: u64, max: usize) -> Option<String> {
    let mut file = tokio::fs::File::open(path).await.ok()?;
    let len = file.metadata().await.ok()?.len();
    let start = from.max(len.saturating_sub(max as u64));
    file.seek(std::io::SeekFrom::Start(start)).await.ok()?;
    let mut bytes = Vec::new();
    file.take(max as u64).read_to_end(&mut bytes).await.ok()?;
    let tail = utf8_tail(&bytes, max);
    (!tail.is_empty()).then_some(tail)
}

/// The last JSON log location reported in `path` after byte `from` (protocol in the parent
/// module doc).
pub(super) async fn scan_json_log(path: &Path, from: u64) -> Option<String> {
    let mut file = tokio::fs::File::open(path).await.ok()?;
    file.seek(std::io::SeekFrom::Start(from)).await.ok()?;
    let mut reader = tokio::io::BufReader::new(file);
    let (mut line, mut found) = (Vec::new(), None);
    while reader.read_until(b'\n', &mut line).await.ok()? > 0 {
        if let Some(location) = log_location(&line) {
            found = Some(location);
        }
        line.clear();
    }
    found
}

/// The JSON log location one stdout line reports, if it reports one.
pub(super) fn log_location(line: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(line);
    let text = text.trim();
    let location = if let Some(rest) = text.strip_prefix("json_log_location:") {
        rest.trim().to_string()
    } else if text.starts_with('{') {
        let value: serde_json::Value = serde_json::from_str(text).ok()?;
        let field = |name| value.get(name).and_then(serde_json::Value::as_str);
        field("json_log_location")
            .or_else(|| field("session_log"))?
            .trim()
            .to_string()
    } else {
        return None;
    };
    (!location.is_empty()).then_some(location)
}

/// The failure message of a step that ended with `status`, and the exit code to report
/// (`128 + n` for signal `n`, as shells do). The last stderr line comes first, so that
/// signatures (which keep the message's first words) group failures by what went wrong rather
/// than by which step ran: `checksum mismatch (step "shell: ./x" exited with code 3)`.
pub(super) fn failure_message(
    label: &str,
    status: ExitStatus,
    stderr: Option<&str>,
) -> (String, Option<i32>) {
    let label = short_label(label);
    let (status_text, code) = match (status.code(), status.signal()) {
        (Some(code), _) => (
            format!("step \"{label}\" exited with code {code}"),
            Some(code),
        ),
        (None, Some(signal)) => {
            let name = Signal::try_from(signal).map_or("an unknown signal", Signal::as_str);
            (
                format!("step \"{label}\" was killed by signal {name}"),
                Some(128 + signal),
            )
        }
        (None, None) => (format!("step \"{label}\" ended with {status}"), None),
    };
    let message = match stderr.and_then(last_line) {
        Some(line) => format!("{line} ({status_text})"),
        None => status_text,
    };
    (message, code)
}

/// The last non-empty line of `text`, trimmed and cut to [`MESSAGE_LINE_CHARS`].
fn last_line(text: &str) -> Option<String> {
    let line = text.lines().map(str::trim).rfind(|l| !l.is_empty())?;
    Some(cut_chars(line, MESSAGE_LINE_CHARS))
}

/// A step label fit for a one-line message: its first line, cut to [`LABEL_CHARS`].
pub(super) fn short_label(label: &str) -> String {
    let first = label.lines().next().unwrap_or_default();
    let cut = cut_chars(first, LABEL_CHARS);
    if label.trim_end().contains('\n') && cut == first {
        format!("{first} …")
    } else {
        cut
    }
}

/// `text` cut to `max` chars, with `…` when something was cut.
fn cut_chars(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    }
}

/// The last at most `max` bytes of `bytes` as text, starting at a UTF-8 character boundary.
pub(super) fn utf8_tail(bytes: &[u8], max: usize) -> String {
    let mut start = bytes.len().saturating_sub(max);
    while bytes.get(start).is_some_and(|b| b & 0xC0 == 0x80) {
        start += 1;
    }
    let text = String::from_utf8_lossy(&bytes[start..]);
    let mut cut = text.len().saturating_sub(max);
    while !text.is_char_boundary(cut) {
        cut += 1;
    }
    text[cut..].to_string()
}
