//! A reader that goes away (`dlq status | head -3`) ends the command quietly, as other tools
//! do: exit [`EXIT_CLOSED_PIPE`] without a message or a backtrace, whichever write met it.
//!
//! Rust ignores SIGPIPE, so a write to a closed pipe fails with `EPIPE`: `println!` panics
//! and a buffered writer returns the error. Restoring SIGPIPE's default would end the process
//! the way `cat` ends, but also `dlq serve` when an HTTP client goes away during a vectored
//! socket write. So the two ways a closed stdout surfaces are caught instead, once for every
//! command: a panic hook ([`install`]) and the command's error ([`is_closed_stdout`]).

use std::io::ErrorKind;

/// Exit code of a command whose stdout reader went away: 128 + SIGPIPE, what a shell reports
/// for a tool that SIGPIPE ended.
pub const EXIT_CLOSED_PIPE: u8 = 141;

/// True when stdout is a pipe whose reading end is closed.
fn stdout_closed() -> bool {
    pipe_closed(libc::STDOUT_FILENO)
}

/// True when `fd` is a pipe whose reading end is closed (`poll` reports `POLLERR` on it).
fn pipe_closed(fd: i32) -> bool {
    let mut fd = libc::pollfd {
        fd,
        events: 0,
        revents: 0,
    };
    // SAFETY: `fd` is one valid `pollfd` that outlives the call; a zero timeout never blocks.
    let ready = unsafe { libc::poll(&mut fd, 1, 0) };
    ready == 1 && fd.revents & libc::POLLERR != 0
}

/// Makes a `print!` or `eprint!` that failed because its reader went away end the process
/// quietly with [`EXIT_CLOSED_PIPE`]; every other panic is reported as before.
pub(crate) fn install() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("");
        if message.starts_with("failed printing to stdout") && stdout_closed() {
            std::process::exit(i32::from(EXIT_CLOSED_PIPE));
        }
        // `dlq run 2>&1 | head`: the progress lines on stderr meet the closed pipe, and the
        // panic could not be reported there anyway.
        if message.starts_with("failed printing to stderr") && pipe_closed(libc::STDERR_FILENO) {
            std::process::exit(i32::from(EXIT_CLOSED_PIPE));
        }
        previous(info);
    }));
}

/// True when `err` is a broken pipe and stdout's reader is gone: the command ends quietly.
pub(crate) fn is_closed_stdout(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut source = Some(err);
    while let Some(err) = source {
        let broken = err
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == ErrorKind::BrokenPipe);
        if broken {
            return stdout_closed();
        }
        source = err.source();
    }
    false
}
