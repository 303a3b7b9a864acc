use std::io;
use std::sync::{Arc, Mutex};

use indicatif::{ProgressDrawTarget, TermLike};

use super::WorkBar;

/// A terminal that keeps what is written to it.
#[derive(Debug, Clone, Default)]
struct Screen(Arc<Mutex<String>>);

impl Screen {
    fn text(&self) -> String {
        self.0.lock().map(|s| s.clone()).unwrap_or_default()
    }
}

impl TermLike for Screen {
    fn width(&self) -> u16 {
        100
    }
    fn move_cursor_up(&self, _: usize) -> io::Result<()> {
        Ok(())
    }
    fn move_cursor_down(&self, _: usize) -> io::Result<()> {
        Ok(())
    }
    fn move_cursor_right(&self, _: usize) -> io::Result<()> {
        Ok(())
    }
    fn move_cursor_left(&self, _: usize) -> io::Result<()> {
        Ok(())
    }
    fn write_line(&self, s: &str) -> io::Result<()> {
        self.write_str(&format!("{s}\n"))
    }
    fn write_str(&self, s: &str) -> io::Result<()> {
        if let Ok(mut text) = self.0.lock() {
            text.push_str(s);
        }
        Ok(())
    }
    fn clear_line(&self) -> io::Result<()> {
        Ok(())
    }
    fn flush(&self) -> io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_terminal_shows_the_count_over_the_total() {
    let screen = Screen::default();
    let target = ProgressDrawTarget::term_like(Box::new(screen.clone()));
    let bar = WorkBar::drawn_to(Some(target), Some(2000), "items");
    bar.add(1500);
    bar.0.abandon();
    let text = screen.text();
    assert!(text.contains("1,500/2,000 items"), "{text:?}");
}

#[test]
fn no_terminal_draws_nothing() {
    let bar = WorkBar::drawn_to(None, Some(2000), "items");
    assert!(bar.0.is_hidden());
    bar.add(1500);
    assert_eq!(bar.0.position(), 1500, "still counts");
}
