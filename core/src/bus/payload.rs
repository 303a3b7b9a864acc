//! The server's `max_payload` against the sink's `max_event_bytes`, compared once at connect.
//!
//! The sink accepts events up to `max_event_bytes`; the server refuses messages (payload plus
//! headers) above its `max_payload`. An event in between is stored but can never be published
//! as it is: the reconciler parks it and publishes a stub in its place (consumers show its item
//! as held on this node), and the full event follows once the server's limit is raised and
//! `dlq reconcile --retry-parked` runs. Saying so at start beats finding out per event.

/// The warning to log when the server's `max_payload` is below the sink's `max_event_bytes`;
/// `None` when every event the sink accepts fits (or the server's limit is unknown, 0).
pub fn payload_warning(max_payload: usize, max_event_bytes: usize) -> Option<String> {
    (max_payload > 0 && max_payload < max_event_bytes).then(|| {
        format!(
            "the bus server's max_payload ({max_payload} bytes) is below the sink's max_event_bytes ({max_event_bytes} bytes): events above {max_payload} bytes (with headers) are stored but go out as stubs (consumers show their item as held on this node, too large for the bus); raise the server's max_payload, then run `dlq reconcile --retry-parked`, or lower sink.max_event_bytes"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_server_limit_below_the_sinks_is_worth_a_warning() {
        let line = payload_warning(900, 512 * 1024).unwrap();
        assert!(
            line.contains("900 bytes") && line.contains("524288 bytes"),
            "{line}"
        );
        assert!(
            line.contains("stubs") && line.contains("--retry-parked"),
            "{line}"
        );
        assert_eq!(payload_warning(1 << 20, 512 * 1024), None);
        assert_eq!(payload_warning(512 * 1024, 512 * 1024), None);
        assert_eq!(
            payload_warning(0, 512 * 1024),
            None,
            "unknown: not connected"
        );
    }
}
