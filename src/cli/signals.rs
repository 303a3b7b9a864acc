//! Ctrl-C and SIGTERM for long-running commands, in one place.
//!
//! The handlers are installed when a command asks for them ([`StopSignals::install`]), not when
//! a future first waits for them: until a handler is installed a signal has its default
//! disposition, which ends the process without cleaning up (`dlq serve` would leave its
//! `serve.json` behind, a job its state unsaved).

use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio_util::sync::CancellationToken;

/// SIGINT and SIGTERM, caught from the moment this is made.
pub struct StopSignals {
    interrupt: Option<Signal>,
    terminate: Option<Signal>,
}

impl StopSignals {
    /// Installs both handlers now (a kind that cannot be installed is never received).
    pub fn install() -> Self {
        StopSignals {
            interrupt: signal(SignalKind::interrupt()).ok(),
            terminate: signal(SignalKind::terminate()).ok(),
        }
    }

    /// Resolves at the next Ctrl-C (SIGINT) or SIGTERM.
    pub async fn next(&mut self) {
        tokio::select! {
            _ = recv(&mut self.interrupt) => {}
            _ = recv(&mut self.terminate) => {}
        }
    }
}

/// The next delivery of `signal`; never, when it could not be installed.
async fn recv(signal: &mut Option<Signal>) {
    match signal.as_mut() {
        Some(signal) => {
            signal.recv().await;
        }
        None => std::future::pending::<()>().await,
    }
}

/// A token cancelled at the first Ctrl-C or SIGTERM.
pub fn cancel_on_signal() -> CancellationToken {
    let cancel = CancellationToken::new();
    let token = cancel.clone();
    let mut signals = StopSignals::install();
    tokio::spawn(async move {
        signals.next().await;
        token.cancel();
    });
    cancel
}

/// Two tokens: the first cancelled at the first Ctrl-C or SIGTERM, the second at the next one
/// (`dlq retry`: stop starting items, then kill the running ones). `note` is printed at each.
pub fn two_stage(note: &'static str) -> (CancellationToken, CancellationToken) {
    let (first, second) = (CancellationToken::new(), CancellationToken::new());
    let tokens = [first.clone(), second.clone()];
    let mut signals = StopSignals::install();
    tokio::spawn(async move {
        for token in tokens {
            signals.next().await;
            eprintln!("{note}");
            token.cancel();
        }
    });
    (first, second)
}
