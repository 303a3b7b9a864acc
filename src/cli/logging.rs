//! What `dlq` logs on stderr: warnings and errors of dlq itself unless asked for more with
//! `-v` (info), `-vv` (debug) or `RUST_LOG` (which decides alone when set).
//!
//! The NATS client's own log is off by default: it repeats, once per reconnect attempt, a
//! failure that dlq already reports in one line naming the cause and the fix.

use tracing_subscriber::EnvFilter;

/// The filter without `-v` and without `RUST_LOG`.
pub const DEFAULT_FILTER: &str = "warn,async_nats=off";

/// The filter for `RUST_LOG` (when set) or `verbose` (`-v` given that many times).
pub fn filter(verbose: u8) -> EnvFilter {
    if let Ok(filter) = EnvFilter::try_from_default_env() {
        return filter;
    }
    EnvFilter::new(match verbose {
        0 => DEFAULT_FILTER,
        1 => "info",
        _ => "debug",
    })
}

/// Sends the log to stderr, filtered by [`filter`].
pub fn init(verbose: u8) {
    tracing_subscriber::fmt()
        .with_env_filter(filter(verbose))
        .with_writer(std::io::stderr)
        .init();
}
