//! The progress indicator of long work: a spinner on stderr, drawn only when stderr is a
//! terminal and the output is not JSON.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::time::Duration;

/// A spinner saying `message`, ticking on its own; hidden with `--json` or when stderr is
/// not a terminal. `len` steps when the work has them (shown as `pos/len`).
pub(crate) fn spinner(json: bool, len: Option<u64>, message: &str) -> ProgressBar {
    if json || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let pb = match len {
        Some(n) => ProgressBar::with_draw_target(Some(n), ProgressDrawTarget::stderr()),
        None => ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr()),
    };
    let template = if len.is_some() {
        "{spinner} [{elapsed_precise}] {pos}/{len} {msg}"
    } else {
        "{spinner} [{elapsed_precise}] {msg}"
    };
    pb.set_style(
        ProgressStyle::with_template(template).unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    pb.set_message(message.to_owned());
    pb.enable_steady_tick(Duration::from_millis(120));
    pb
}
