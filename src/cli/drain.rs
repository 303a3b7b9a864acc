//! The end of a command that emitted (`run`, `resume`, `retry`, `demo`): wait for the bus to
//! acknowledge what is unpublished, unless the bus is known down.
//!
//! A bus that is not connected when the work ends cannot acknowledge anything within a wait:
//! the events are durable in the sink and the reconciler (of the next dlq process on the data
//! directory, or `dlq reconcile`) publishes them once it is back. Waiting `--drain-timeout`
//! for it would only make every job slower during an outage, so the wait is skipped and said
//! in one line instead ([`Drained::line`]).

use std::time::Duration;

use dlq::bus::auth::redact_url;
use dlq::bus::Bus;
use dlq::emitter::NodeEmitter;
use dlq::sink::{Sink, SinkError};

/// How the end-of-work wait for the bus went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Drained {
    /// Nothing is left unpublished.
    All,
    /// The bus is connected but did not acknowledge everything within the wait.
    TimedOut {
        /// Events still unpublished.
        unpublished: u64,
    },
    /// The bus is not connected: nothing was waited for.
    BusDown {
        /// Events stored and unpublished.
        unpublished: u64,
        /// The server(s), without credentials.
        url: String,
        /// Why the server refused the connection, when it did (credentials, TLS).
        refusal: Option<String>,
    },
}

impl Drained {
    /// Events still unpublished.
    pub fn unpublished(&self) -> u64 {
        match self {
            Drained::All => 0,
            Drained::TimedOut { unpublished } | Drained::BusDown { unpublished, .. } => {
                *unpublished
            }
        }
    }

    /// Whether the backlog emptied.
    pub fn drained(&self) -> bool {
        matches!(self, Drained::All)
    }

    /// One line for people when events are left unpublished; `None` when none are.
    pub fn line(&self) -> Option<String> {
        match self {
            Drained::All => None,
            Drained::TimedOut { unpublished } => Some(format!(
                "{unpublished} events not yet acknowledged by the bus; the reconciler publishes them when it is back (`dlq reconcile`)"
            )),
            Drained::BusDown {
                unpublished,
                url,
                refusal: None,
            } => Some(format!(
                "bus at {url} unreachable: {unpublished} events stored, the reconciler publishes them when it is back (`dlq reconcile`)"
            )),
            Drained::BusDown {
                unpublished,
                url,
                refusal: Some(why),
            } => Some(format!(
                "bus at {url} refused the connection ({why}): {unpublished} events stored, the reconciler publishes them once that is fixed (`dlq reconcile`)"
            )),
        }
    }
}

/// Waits up to `timeout` for the backlog to drain, or not at all when there is none or the
/// bus is not connected (see the module doc).
pub async fn drain(emitter: &NodeEmitter, timeout: Duration) -> Result<Drained, SinkError> {
    let unpublished = emitter.sink().backlog()?.count;
    if unpublished == 0 {
        return Ok(Drained::All);
    }
    let bus = emitter.bus();
    if !bus.is_healthy() {
        return Ok(Drained::BusDown {
            unpublished,
            url: redact_url(&bus.config().url),
            refusal: bus.refusal(),
        });
    }
    if emitter.wait_for_drain(timeout).await? {
        return Ok(Drained::All);
    }
    let unpublished = emitter.sink().backlog()?.count;
    Ok(if unpublished == 0 {
        Drained::All
    } else {
        Drained::TimedOut { unpublished }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bus_down_says_where_and_how_many_in_one_line() {
        let down = Drained::BusDown {
            unpublished: 3,
            url: "nats://127.0.0.1:1".into(),
            refusal: None,
        };
        let line = down.line().unwrap_or_default();
        assert_eq!(
            line,
            "bus at nats://127.0.0.1:1 unreachable: 3 events stored, the reconciler publishes them when it is back (`dlq reconcile`)"
        );
        assert!(!line.contains('\n'));
        assert_eq!(down.unpublished(), 3);
        assert!(!down.drained());
        assert_eq!(Drained::All.line(), None);
    }
}
