//! Progress on stderr for anything that can take more than a second: a
//! spinner with the elapsed time, shown only when stderr is a terminal and
//! `--quiet` was not given, and cleared when the work ends.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

/// How often the spinner redraws: smooth enough to show life, cheap enough
/// to cost nothing measurable.
const TICK: Duration = Duration::from_millis(120);

/// A spinner that clears itself when dropped.
pub struct Spinner(Option<ProgressBar>);

impl Spinner {
    /// Starts a spinner saying `what` (nothing if quiet or not a terminal).
    pub fn start(quiet: bool, what: &str) -> Spinner {
        if quiet || !std::io::stderr().is_terminal() {
            return Spinner(None);
        }
        let bar = ProgressBar::new_spinner();
        if let Ok(style) = ProgressStyle::with_template("{spinner} {msg} ({elapsed})") {
            bar.set_style(style);
        }
        bar.set_message(what.to_string());
        bar.enable_steady_tick(TICK);
        Spinner(Some(bar))
    }
}

impl Drop for Spinner {
    fn drop(&mut self) {
        if let Some(bar) = self.0.take() {
            bar.finish_and_clear();
        }
    }
}
