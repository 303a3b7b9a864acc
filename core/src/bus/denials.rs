//! Permissions the server denied a connection, kept so that a request that never gets an
//! answer (a pull request to `$JS.API.CONSUMER.MSG.NEXT...` the user may not publish) can say
//! why, instead of waiting forever.
//!
//! NATS answers a publish on a subject the user may not publish to with an asynchronous
//! `-ERR 'Permissions Violation for Publish to "SUBJECT"'`, not on the request itself: the
//! client's event callback records it here ([`Denials::record`]), and whoever waited in vain
//! asks [`Denials::last`].

use std::sync::{Arc, Mutex, PoisonError};

/// The permission violations reported on one connection (the last one is kept).
#[derive(Debug, Clone, Default)]
pub struct Denials(Arc<Mutex<Option<String>>>);

impl Denials {
    /// Records a server error if it is a permissions violation; ignores anything else.
    pub fn record(&self, server_message: &str) {
        if server_message
            .to_ascii_lowercase()
            .contains("permissions violation")
        {
            *self.0.lock().unwrap_or_else(PoisonError::into_inner) =
                Some(server_message.to_owned());
        }
    }

    /// The last denial, explained in one line that names the permission and the fix.
    pub fn last(&self) -> Option<String> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_deref()
            .map(explain)
    }
}

/// One line for a permissions violation: the subject denied, the permission to grant (with
/// the wildcard dlq's roles use for per-consumer subjects) and where the roles are documented.
pub(super) fn explain(server_message: &str) -> String {
    let subject = server_message.split('"').nth(1).unwrap_or(server_message);
    let grant = wildcard(subject);
    format!(
        "the NATS server denied this user publish on \"{subject}\": allow publish on \"{grant}\" \
         for it (the permissions of each role: deploy/nats-permissions.conf; \"Least privilege\" \
         in docs/operations.md)"
    )
}

/// The permission dlq's roles grant for `subject`: per-consumer JetStream API subjects end in
/// the consumer's name, granted as `*`.
fn wildcard(subject: &str) -> String {
    const PER_CONSUMER: &[&str] = &[
        "$JS.API.CONSUMER.MSG.NEXT.",
        "$JS.API.CONSUMER.DELETE.",
        "$JS.API.CONSUMER.INFO.",
    ];
    for prefix in PER_CONSUMER {
        if let Some(rest) = subject.strip_prefix(prefix) {
            if let Some((stream, _consumer)) = rest.split_once('.') {
                return format!("{prefix}{stream}.*");
            }
        }
    }
    subject.to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_denied_fetch_names_the_wildcard_permission_and_the_fix() {
        let denials = Denials::default();
        assert_eq!(denials.last(), None);
        denials.record("authorization violation");
        assert_eq!(denials.last(), None);
        denials.record(
            "Permissions Violation for Publish to \"$JS.API.CONSUMER.MSG.NEXT.DLQ.eph-12\"",
        );
        let line = denials.last().unwrap_or_default();
        assert!(
            line.contains("\"$JS.API.CONSUMER.MSG.NEXT.DLQ.eph-12\""),
            "{line}"
        );
        assert!(
            line.contains("allow publish on \"$JS.API.CONSUMER.MSG.NEXT.DLQ.*\""),
            "{line}"
        );
        assert!(line.contains("deploy/nats-permissions.conf"), "{line}");
        assert!(!line.contains('\n'));
    }

    #[test]
    fn other_subjects_are_named_as_they_are() {
        let line = explain("Permissions Violation for Publish to \"$JS.API.STREAM.INFO.DLQ\"");
        assert!(
            line.contains("allow publish on \"$JS.API.STREAM.INFO.DLQ\""),
            "{line}"
        );
    }
}
