//! `tamp eval`'s progress on stderr. On a terminal: its step lines and under them a bar,
//! redrawn after each LLM call, with the share done and the time left
//! ([`tamp_host::eval::progress`] says how they are estimated). Into a file or a pipe: the step
//! lines alone, with no escape sequence to litter a log. With `-q`: nothing.
//!
//! Written here rather than taken from a crate (indicatif): the estimate is the host's, the
//! bar is one line, and the few lines below cost no dependency on every build.

use std::cell::RefCell;
use std::io::{IsTerminal as _, Write as _};
use std::time::{Duration, Instant};

use tamp_host::eval::progress::{Progress, Status};

/// Moves to the line's start and erases it.
const CLEAR: &str = "\r\x1b[2K";
/// The least time between two redraws: an offline summarizer answers thousands of calls a
/// second, and a terminal drawing each would slow the run.
const REDRAW: Duration = Duration::from_millis(80);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Show {
    Bar,
    Lines,
    Nothing,
}

/// `tamp eval`'s [`Progress`], on stderr.
pub struct EvalProgress {
    show: Show,
    state: RefCell<Drawn>,
}

#[derive(Default)]
struct Drawn {
    /// The last step line, shown after the bar.
    step: String,
    status: Option<Status>,
    /// When the bar was last drawn; `None` while it is not on screen.
    at: Option<Instant>,
}

impl EvalProgress {
    /// A bar when stderr is a terminal that can erase a line, the step lines when it is not,
    /// nothing with `-q`.
    pub fn on_stderr() -> Self {
        let terminal =
            std::io::stderr().is_terminal() && std::env::var_os("TERM").is_none_or(|t| t != "dumb");
        let show = if crate::logging::quiet() {
            Show::Nothing
        } else if terminal {
            Show::Bar
        } else {
            Show::Lines
        };
        EvalProgress {
            show,
            state: RefCell::new(Drawn::default()),
        }
    }

    fn draw(&self, drawn: &mut Drawn) {
        let Some(status) = drawn.status else { return };
        let line = render(&status, &drawn.step, width());
        let mut err = std::io::stderr().lock();
        let _ = write!(err, "{CLEAR}{line}");
        let _ = err.flush();
        drawn.at = Some(Instant::now());
    }

    /// Takes the bar off the screen, before the output is written (stdout may be the same
    /// terminal) or an error is.
    pub fn finish(&self) {
        let mut drawn = self.state.borrow_mut();
        if drawn.at.take().is_some() {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "{CLEAR}");
            let _ = err.flush();
        }
    }
}

impl Drop for EvalProgress {
    fn drop(&mut self) {
        self.finish();
    }
}

impl Progress for EvalProgress {
    fn note(&self, line: &str) {
        match self.show {
            Show::Nothing => {}
            Show::Lines => eprintln!("tamp eval: {line}"),
            Show::Bar => {
                let mut drawn = self.state.borrow_mut();
                // The line goes where the bar was, and the bar under it.
                let erase = if drawn.at.is_some() { CLEAR } else { "" };
                eprintln!("{erase}tamp eval: {line}");
                drawn.at = None;
                drawn.step = line.to_string();
                self.draw(&mut drawn);
            }
        }
    }

    fn advanced(&self, status: &Status) {
        if self.show != Show::Bar {
            return;
        }
        let mut drawn = self.state.borrow_mut();
        drawn.status = Some(*status);
        if drawn.at.is_none_or(|at| at.elapsed() >= REDRAW) {
            self.draw(&mut drawn);
        }
    }
}

/// The terminal's width as the shell tells it, else 80 columns.
fn width() -> usize {
    std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.parse().ok())
        .filter(|&c| c >= 20)
        .unwrap_or(80)
}

/// The bar's line, at most `width - 1` characters (a full line would wrap on some terminals,
/// and a wrapped bar cannot be erased).
fn render(status: &Status, step: &str, width: usize) -> String {
    const CELLS: usize = 20;
    let filled = ((status.done * CELLS as f64).round() as usize).min(CELLS);
    let left = status.left.map_or("estimating time left".to_string(), |d| {
        format!("~{} left", duration(d))
    });
    let calls = status.calls;
    let mut line = format!(
        "[{}{}] {:>3.0}%  {calls} LLM call{}  {left}  {step}",
        "#".repeat(filled),
        "-".repeat(CELLS - filled),
        100.0 * status.done,
        if calls == 1 { "" } else { "s" },
    );
    if let Some((cut, _)) = line.char_indices().nth(width.saturating_sub(1)) {
        line.truncate(cut);
    }
    line
}

/// `45s`, `2m05s`, `1h02m`.
fn duration(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(done: f64, left: Option<u64>, calls: u64) -> Status {
        Status {
            calls,
            done,
            elapsed: Duration::from_secs(10),
            left: left.map(Duration::from_secs),
        }
    }

    #[test]
    fn the_bar_shows_the_share_done_the_calls_and_the_time_left() {
        assert_eq!(
            render(
                &status(0.25, Some(185), 12),
                "hybrid on planted: one-shot",
                120
            ),
            "[#####---------------]  25%  12 LLM calls  ~3m05s left  hybrid on planted: one-shot"
        );
        assert_eq!(
            render(&status(0.0, None, 1), "x", 120),
            "[--------------------]   0%  1 LLM call  estimating time left  x"
        );
        assert_eq!(
            render(&status(1.0, Some(0), 40), "", 120).trim_end(),
            "[####################] 100%  40 LLM calls  ~0s left"
        );
    }

    #[test]
    fn the_bar_never_fills_the_terminals_width() {
        let step = "a-chain-with-a-long-name on a-conversation-with-a-long-name: replay, 10/166";
        let line = render(&status(0.5, Some(7_500), 3), step, 80);
        assert_eq!(line.chars().count(), 79, "{line}");
        assert!(line.starts_with("[##########----------]  50%  3 LLM calls  ~2h05m left  a-chain"));
        // Characters, not bytes: a name in another script is cut between two of them.
        let line = render(&status(0.5, None, 3), &"é".repeat(100), 60);
        assert_eq!(line.chars().count(), 59);
    }

    #[test]
    fn durations_read_as_people_say_them() {
        for (secs, text) in [
            (0, "0s"),
            (59, "59s"),
            (60, "1m00s"),
            (125, "2m05s"),
            (3_720, "1h02m"),
        ] {
            assert_eq!(duration(Duration::from_secs(secs)), text);
        }
    }
}
