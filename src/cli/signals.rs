//! Ctrl-C and SIGTERM for long-running commands, in one place.

use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio_util::sync::CancellationToken;

/// Resolves at the next Ctrl-C (SIGINT) or SIGTERM.
pub async fn interrupted(term: &mut Option<Signal>) {
    let terminated = async {
        match term.as_mut() {
            Some(term) => {
                term.recv().await;
            }
            None => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminated => {}
    }
}

/// A token cancelled at the first Ctrl-C or SIGTERM.
pub fn cancel_on_signal() -> CancellationToken {
    let cancel = CancellationToken::new();
    let token = cancel.clone();
    tokio::spawn(async move {
        let mut term = signal(SignalKind::terminate()).ok();
        interrupted(&mut term).await;
        token.cancel();
    });
    cancel
}

/// Two tokens: the first cancelled at the first Ctrl-C or SIGTERM, the second at the next one
/// (`dlq retry`: stop starting items, then kill the running ones). `note` is printed at each.
pub fn two_stage(note: &'static str) -> (CancellationToken, CancellationToken) {
    let (first, second) = (CancellationToken::new(), CancellationToken::new());
    let tokens = [first.clone(), second.clone()];
    tokio::spawn(async move {
        let mut term = signal(SignalKind::terminate()).ok();
        for token in tokens {
            interrupted(&mut term).await;
            eprintln!("{note}");
            token.cancel();
        }
    });
    (first, second)
}
