//! What `dlq` logs on stderr: warnings and errors of dlq itself unless asked for more with
//! `-v` (info), `-vv` (debug) or `RUST_LOG` (which decides alone when set). Coloured only on
//! a terminal and never with `NO_COLOR`.
//!
//! The NATS client's own log is off by default: it repeats, once per reconnect attempt, a
//! failure that dlq already reports in one line naming the cause and the fix.

use std::io::IsTerminal;

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

/// Whether the log is coloured: only on a terminal, and never when `NO_COLOR` is set to
/// anything but the empty string (<https://no-color.org>).
pub fn colours(stderr_is_terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    stderr_is_terminal && no_color.is_none_or(|value| value.is_empty())
}

/// Sends the log to stderr, filtered by [`filter`], coloured as [`colours`] says.
pub fn init(verbose: u8) {
    let ansi = colours(
        std::io::stderr().is_terminal(),
        std::env::var_os("NO_COLOR").as_deref(),
    );
    tracing_subscriber::fmt()
        .with_env_filter(filter(verbose))
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        .init();
}

#[cfg(test)]
mod tests {
    use super::colours;
    use std::ffi::OsStr;

    #[test]
    fn colours_only_on_a_terminal_without_no_color() {
        assert!(colours(true, None));
        assert!(colours(true, Some(OsStr::new(""))));
        assert!(!colours(true, Some(OsStr::new("1"))));
        assert!(!colours(false, None));
        assert!(!colours(false, Some(OsStr::new("1"))));
    }
}
