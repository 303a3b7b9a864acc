//! The JetStream stream dlq publishes to: the configuration dlq wants, and the check of a
//! stream that already exists against it.
//!
//! A missing stream is created from the [`BusConfig`] ([`wanted`]). A stream that exists
//! belongs to whoever made it: at start dlq reads it and never changes it, so the limits an
//! operator set (`max_age`, `max_msgs`, `max_bytes`, ...) and a cluster's replica count stay as
//! they are. [`check`] decides whether such a stream can take dlq's events:
//!
//! * **refused** (publishing stops with a one-line error saying what to do) when it cannot
//!   hold them: its subjects do not cover the subject dlq publishes on, it keeps messages in
//!   memory where dlq's configuration asks for file storage, it is sealed, or it is a mirror;
//! * **warned about** (a `warn!` when the bus checks the stream) when it is weaker than
//!   configured: fewer replicas than `bus.replicas`, a shorter duplicate window than
//!   `bus.duplicate_window`.
//!
//! Only `dlq stream update` changes an existing stream, on purpose: [`updated`] is the stream
//! with dlq's settings applied and [`changes`] what that would change. Everything here is pure;
//! the requests are in `nats.rs` and `cli/stream.rs`.

use std::time::Duration;

use async_nats::jetstream::stream::{Config, StorageType};
use serde::Serialize;

use super::BusConfig;

/// The stream dlq creates when it is missing: the configured name, subjects `<subject>` and
/// `<subject>.>`, file storage, the configured duplicate window and replicas, no limits.
pub fn wanted(config: &BusConfig) -> Config {
    let subject = &config.subject;
    Config {
        name: config.stream.clone(),
        subjects: vec![subject.clone(), format!("{subject}.>")],
        storage: StorageType::File,
        duplicate_window: config.duplicate_window,
        num_replicas: config.replicas,
        ..Default::default()
    }
}

/// What [`check`] found wrong with an existing stream.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Fit {
    /// Why the stream cannot hold dlq's events; dlq does not publish to it while any is left.
    pub refusals: Vec<String>,
    /// Settings weaker than configured; dlq publishes anyway and says so.
    pub warnings: Vec<String>,
}

impl Fit {
    /// No refusal: dlq may publish to the stream.
    pub(crate) fn is_usable(&self) -> bool {
        self.refusals.is_empty()
    }
}

/// Compares an existing stream with what `config` asks for. Limits are never compared: they
/// are the operator's.
pub fn check(existing: &Config, config: &BusConfig) -> Fit {
    let name = &existing.name;
    let mut fit = Fit::default();
    if !takes_subject(existing, &config.subject) {
        fit.refusals.push(format!(
            "stream {name} does not take subject {} (its subjects: {}): add it with \
             `dlq stream update`, or configure another bus.stream or subject",
            config.subject,
            subjects_of(existing)
        ));
    }
    if existing.storage == StorageType::Memory {
        fit.refusals.push(format!(
            "stream {name} keeps messages in memory, but dlq needs file storage so that \
             acknowledged events survive a server restart: recreate it with file storage \
             (delete it, then `dlq stream create`), or configure another bus.stream"
        ));
    }
    if existing.sealed {
        fit.refusals.push(format!(
            "stream {name} is sealed and takes no new messages: configure another bus.stream"
        ));
    }
    if existing.mirror.is_some() {
        fit.refusals.push(format!(
            "stream {name} is a mirror and takes no published messages: configure the \
             stream it mirrors, or another bus.stream"
        ));
    }
    if existing.num_replicas.max(1) < config.replicas {
        fit.warnings.push(format!(
            "stream {name} has {} replica(s), fewer than the {} configured (bus.replicas): a \
             server failure can lose acknowledged events; raise it with `dlq stream update`",
            existing.num_replicas.max(1),
            config.replicas
        ));
    }
    if existing.duplicate_window < config.duplicate_window {
        fit.warnings.push(format!(
            "stream {name} drops re-published event ids for {}, less than the {} configured \
             (bus.duplicate_window): a re-publish after that is stored twice (consumers still \
             drop it by id); raise it with `dlq stream update`",
            human(existing.duplicate_window),
            human(config.duplicate_window)
        ));
    }
    fit
}

/// Whether a message published on `subject` is stored by the stream.
pub(crate) fn takes_subject(stream: &Config, subject: &str) -> bool {
    if stream.subjects.is_empty() {
        // A stream without subjects listens on its own name.
        return subject_covers(&stream.name, subject);
    }
    stream.subjects.iter().any(|p| subject_covers(p, subject))
}

/// Whether every subject matching `subject` (which may hold wildcards itself) also matches
/// `pattern`, by NATS rules: tokens separated by `.`, `*` matches one token, `>` one or more
/// trailing tokens.
pub(crate) fn subject_covers(pattern: &str, subject: &str) -> bool {
    let mut wanted = subject.split('.');
    for token in pattern.split('.') {
        match (token, wanted.next()) {
            // `>` takes the rest, which must hold at least one token.
            (">", Some(_)) => return true,
            (_, None) => return false,
            // `*` takes one token of any value, but not the many of a `>`.
            ("*", Some(">")) => return false,
            ("*", Some(_)) => {}
            (literal, Some(other)) if literal == other => {}
            _ => return false,
        }
    }
    wanted.next().is_none()
}

/// The existing stream with dlq's settings applied: the configured subject added when the
/// stream does not take it (its own subjects kept), the configured duplicate window and
/// replicas. Everything else (limits, retention, storage) is kept.
pub fn updated(existing: &Config, config: &BusConfig) -> Config {
    let mut next = existing.clone();
    if !takes_subject(existing, &config.subject) {
        if next.subjects.is_empty() {
            // Naming subjects replaces the implicit one (the stream's name): keep it.
            next.subjects.push(existing.name.clone());
        }
        for subject in wanted(config).subjects {
            if !next.subjects.iter().any(|p| subject_covers(p, &subject)) {
                next.subjects.push(subject);
            }
        }
    }
    next.duplicate_window = config.duplicate_window;
    next.num_replicas = config.replicas;
    next
}

/// One setting `dlq stream update` changes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Change {
    /// The setting, as `dlq stream show` names it.
    pub setting: &'static str,
    /// Its value now.
    pub from: String,
    /// Its value after the update.
    pub to: String,
}

/// What turning `existing` into `next` changes, in the order `dlq stream show` lists settings.
pub fn changes(existing: &Config, next: &Config) -> Vec<Change> {
    let mut out = Vec::new();
    let mut differ = |setting, from: String, to: String| {
        if from != to {
            out.push(Change { setting, from, to });
        }
    };
    differ("subjects", subjects_of(existing), subjects_of(next));
    differ(
        "replicas",
        existing.num_replicas.max(1).to_string(),
        next.num_replicas.max(1).to_string(),
    );
    differ(
        "duplicate window",
        human(existing.duplicate_window),
        human(next.duplicate_window),
    );
    out
}

/// The stream's subjects, comma separated (its name when it names none).
pub fn subjects_of(stream: &Config) -> String {
    if stream.subjects.is_empty() {
        stream.name.clone()
    } else {
        stream.subjects.join(", ")
    }
}

/// A duration as the configuration writes it (`2m`, `7days`), `unlimited` for zero.
pub fn human(duration: Duration) -> String {
    if duration.is_zero() {
        "unlimited".into()
    } else {
        humantime::format_duration(duration).to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bus() -> BusConfig {
        BusConfig::default()
    }

    fn made_by_operator() -> Config {
        Config {
            max_age: Duration::from_secs(7 * 86_400),
            max_messages: 1_000_000,
            ..wanted(&bus())
        }
    }

    #[test]
    fn covers_by_nats_wildcard_rules() {
        let yes = [
            ("sys.job.dlq", "sys.job.dlq"),
            ("sys.job.*", "sys.job.dlq"),
            ("sys.>", "sys.job.dlq"),
            (">", "sys.job.dlq"),
            ("*.*.*", "sys.job.dlq"),
            ("sys.job.dlq.>", "sys.job.dlq.>"),
            ("sys.job.dlq.>", "sys.job.dlq.a.*"),
            ("sys.job.*.>", "sys.job.dlq.>"),
            ("sys.job.*", "sys.job.*"),
        ];
        for (pattern, subject) in yes {
            assert!(
                subject_covers(pattern, subject),
                "{pattern} covers {subject}"
            );
        }
        let no = [
            ("sys.job.dlq.>", "sys.job.dlq"),
            ("sys.job", "sys.job.dlq"),
            ("sys.job.dlq.x", "sys.job.dlq"),
            ("other.>", "sys.job.dlq"),
            ("sys.*", "sys.job.dlq"),
            ("sys.job.*", "sys.job.>"),
            ("sys.job.dlq", "sys.job.*"),
            ("sys.job.dlq.*", "sys.job.dlq.>"),
        ];
        for (pattern, subject) in no {
            assert!(
                !subject_covers(pattern, subject),
                "{pattern} does not cover {subject}"
            );
        }
    }

    #[test]
    fn the_stream_dlq_creates_passes_its_own_check() {
        assert_eq!(check(&wanted(&bus()), &bus()), Fit::default());
        assert!(changes(&wanted(&bus()), &updated(&wanted(&bus()), &bus())).is_empty());
    }

    #[test]
    fn operator_limits_are_neither_refused_nor_warned_about_nor_updated() {
        let stream = made_by_operator();
        assert_eq!(check(&stream, &bus()), Fit::default());
        let next = updated(&stream, &bus());
        assert_eq!(next.max_age, Duration::from_secs(7 * 86_400));
        assert_eq!(next.max_messages, 1_000_000);
        assert!(changes(&stream, &next).is_empty());
    }

    #[test]
    fn subjects_that_do_not_cover_ours_are_refused_and_update_adds_ours() {
        let stream = Config {
            subjects: vec!["other.>".into()],
            ..made_by_operator()
        };
        let fit = check(&stream, &bus());
        assert!(!fit.is_usable());
        assert_eq!(fit.refusals.len(), 1);
        assert!(fit.refusals[0].contains("does not take subject sys.job.dlq"));
        assert!(fit.refusals[0].contains("other.>"));
        assert!(fit.refusals[0].contains("dlq stream update"));
        assert!(!fit.refusals[0].contains('\n'));

        let next = updated(&stream, &bus());
        assert_eq!(next.subjects, ["other.>", "sys.job.dlq", "sys.job.dlq.>"]);
        assert_eq!(next.max_age, stream.max_age);
        assert!(check(&next, &bus()).is_usable());
        let changed = changes(&stream, &next);
        assert_eq!(changed.len(), 1);
        assert_eq!(changed[0].setting, "subjects");
    }

    #[test]
    fn a_wider_subject_is_enough_and_a_stream_without_subjects_takes_its_name() {
        let wide = Config {
            subjects: vec!["sys.>".into()],
            ..made_by_operator()
        };
        assert!(check(&wide, &bus()).is_usable());
        assert_eq!(updated(&wide, &bus()).subjects, ["sys.>"]);

        let unnamed = Config {
            name: "DLQ".into(),
            subjects: vec![],
            ..made_by_operator()
        };
        assert!(!check(&unnamed, &bus()).is_usable());
        assert_eq!(
            updated(&unnamed, &bus()).subjects,
            ["DLQ", "sys.job.dlq", "sys.job.dlq.>"]
        );
    }

    #[test]
    fn memory_storage_sealed_streams_and_mirrors_are_refused() {
        let memory = Config {
            storage: StorageType::Memory,
            ..made_by_operator()
        };
        let fit = check(&memory, &bus());
        assert_eq!(fit.refusals.len(), 1);
        assert!(fit.refusals[0].contains("memory"));
        // Storage cannot be changed in place: update leaves it, and the check still refuses.
        assert!(!check(&updated(&memory, &bus()), &bus()).is_usable());

        let sealed = Config {
            sealed: true,
            ..made_by_operator()
        };
        assert!(check(&sealed, &bus()).refusals[0].contains("sealed"));
    }

    #[test]
    fn fewer_replicas_and_a_shorter_window_are_warnings_that_update_fixes() {
        let config = BusConfig {
            replicas: 3,
            ..bus()
        };
        let stream = Config {
            num_replicas: 1,
            duplicate_window: Duration::from_secs(30),
            ..made_by_operator()
        };
        let fit = check(&stream, &config);
        assert!(fit.is_usable());
        assert_eq!(fit.warnings.len(), 2, "{fit:?}");
        assert!(fit.warnings[0].contains("1 replica(s), fewer than the 3"));
        assert!(fit.warnings[1].contains("30s, less than the 2m"));

        let next = updated(&stream, &config);
        assert_eq!(check(&next, &config), Fit::default());
        let changed = changes(&stream, &next);
        let settings: Vec<_> = changed.iter().map(|c| c.setting).collect();
        assert_eq!(settings, ["replicas", "duplicate window"]);
        assert_eq!(
            (changed[0].from.as_str(), changed[0].to.as_str()),
            ("1", "3")
        );
    }

    #[test]
    fn more_replicas_and_a_longer_window_than_configured_are_fine() {
        let stream = Config {
            num_replicas: 3,
            duplicate_window: Duration::from_secs(600),
            ..made_by_operator()
        };
        assert_eq!(check(&stream, &bus()), Fit::default());
    }
}
