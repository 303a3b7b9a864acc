//! A progress bar for long commands that print nothing until they end (`dlq generate`, `dlq
//! import`): drawn on stderr when stderr is a terminal, nothing at all otherwise, so piped and
//! redirected output (and the tests) stay free of it. `dlq run`'s own display is
//! `crate::runner::progress`.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// How often a spinner of work without a known total is redrawn.
const SPINNER_TICK: Duration = Duration::from_millis(120);

/// A bar over `total` units, or a spinner with a count; hidden off a terminal.
pub(super) struct WorkBar(ProgressBar);

impl WorkBar {
    /// A bar over `total` units of `unit` (e.g. "items"), on stderr if it is a terminal.
    pub(super) fn new(total: u64, unit: &str) -> Self {
        Self::drawn_to(stderr_target(), Some(total), unit)
    }

    /// A spinner saying `message`, for work whose total is not known yet.
    pub(super) fn spinner(message: &str) -> Self {
        let bar = Self::drawn_to(stderr_target(), None, "");
        bar.0.set_message(message.to_owned());
        if !bar.0.is_hidden() {
            bar.0.enable_steady_tick(SPINNER_TICK);
        }
        bar
    }

    /// The bar drawn to `target` (`None` draws nothing): over `total` units of `unit`, or a
    /// spinner with its message when there is no total.
    fn drawn_to(target: Option<ProgressDrawTarget>, total: Option<u64>, unit: &str) -> Self {
        let Some(target) = target else {
            return WorkBar(ProgressBar::hidden());
        };
        let template = match total {
            Some(_) => format!(
                "{{bar:30}} {{human_pos}}/{{human_len}} {unit}  elapsed {{elapsed}}  ETA {{eta}}"
            ),
            None => "{spinner} {msg}  elapsed {elapsed}".to_owned(),
        };
        let bar = ProgressBar::with_draw_target(total, target);
        if let Ok(style) = ProgressStyle::with_template(&template) {
            bar.set_style(style);
        }
        WorkBar(bar)
    }

    /// `n` more units done.
    pub(super) fn add(&self, n: u64) {
        self.0.inc(n);
    }

    /// Removes the bar from the terminal.
    pub(super) fn finish(&self) {
        self.0.finish_and_clear();
    }
}

/// Stderr when it is a terminal; `None` (draw nothing) when it is a pipe or a file.
fn stderr_target() -> Option<ProgressDrawTarget> {
    std::io::stderr()
        .is_terminal()
        .then(ProgressDrawTarget::stderr)
}

#[cfg(test)]
mod tests;
