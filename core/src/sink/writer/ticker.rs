//! The ticker: a thread that asks the writer to checkpoint at a fixed interval.

use std::time::Duration;

use tokio::sync::mpsc;

use super::Request;
use crate::sink::SinkError;

/// Asks the writer to checkpoint every `every`; stops when the sink is gone.
pub(crate) fn spawn_ticker(
    requests: mpsc::WeakSender<Request>,
    every: Duration,
) -> Result<(), SinkError> {
    std::thread::Builder::new()
        .name("dlq-sink-ticker".into())
        .spawn(move || loop {
            std::thread::sleep(every.max(Duration::from_millis(10)));
            let Some(sender) = requests.upgrade() else {
                return;
            };
            if let Err(mpsc::error::TrySendError::Closed(_)) = sender.try_send(Request::Tick) {
                return;
            }
        })
        .map(|_| ())
        .map_err(|source| SinkError::Io {
            context: "cannot start the ticker thread".into(),
            source,
        })
}
