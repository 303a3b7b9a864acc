//! Progress reporting: a bar on a terminal, plain lines otherwise.
//!
//! On a terminal, `dlq run` and `dlq retry` show items done / failed / in flight and an ETA;
//! piped or redirected, they print one line per finished item instead, so logs stay readable.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// How progress is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProgressMode {
    /// A bar when stderr is a terminal, lines otherwise.
    Auto,
    /// One line per finished item on stderr.
    Lines,
    /// Nothing.
    Quiet,
}

/// The progress display of one run.
pub(super) struct Progress {
    bar: Option<ProgressBar>,
    lines: bool,
    total: u64,
    done: u64,
    failed: u64,
}

impl Progress {
    /// Starts a display for `total` items.
    pub(super) fn new(mode: ProgressMode, total: u64) -> Self {
        let terminal = std::io::stderr().is_terminal();
        let bar = (mode == ProgressMode::Auto && terminal).then(|| {
            let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
            let style = ProgressStyle::with_template(
                "{bar:30} {pos}/{len} items  {msg}  elapsed {elapsed}  ETA {eta}",
            );
            if let Ok(style) = style {
                bar.set_style(style);
            }
            bar
        });
        Progress {
            bar,
            lines: mode == ProgressMode::Lines || (mode == ProgressMode::Auto && !terminal),
            total,
            done: 0,
            failed: 0,
        }
    }

    /// An item finished; `line` describes it.
    pub(super) fn finished(&mut self, failed: bool, in_flight: usize, line: &str) {
        self.done += 1;
        if failed {
            self.failed += 1;
        }
        if let Some(bar) = &self.bar {
            bar.set_position(self.done);
            bar.set_message(format!("failed {}  in flight {in_flight}", self.failed));
        } else if self.lines {
            eprintln!("[{}/{}] {line}", self.done, self.total);
        }
    }

    /// The number of agents in flight changed.
    pub(super) fn in_flight(&self, in_flight: usize) {
        if let Some(bar) = &self.bar {
            bar.set_message(format!("failed {}  in flight {in_flight}", self.failed));
        }
    }

    /// A message that is not about one item (breaker, stop, error reports).
    pub(super) fn note(&self, line: &str) {
        match &self.bar {
            Some(bar) => bar.println(line),
            None if self.lines => eprintln!("{line}"),
            None => {}
        }
    }

    /// Removes the bar.
    pub(super) fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}
