//! What panto draws on a terminal below its output, and everything printed above it.
//!
//! The *live region* is the bottom of the screen that panto redraws: the spinner's line while a
//! model works, the messages queued while a reply streams, and the chat's prompt with its
//! draft. Everything else (answers, messages, tables) is *output*, printed above the region:
//! every write first erases the region, writes, and draws the region again below. So no frame
//! of the spinner, no queued line and no half-drawn prompt ever stays in the output, whatever
//! prints (a reply, an error, a cancel), and a resize redraws the region at the new width.
//!
//! One region per process (the spinner of `send`, or the chat's), behind one lock: the
//! compaction's progress lines and the streamed answer are printed from deep in the library's
//! callbacks. The region is drawn on standard error for `send` (where the spinner has always
//! been) and on standard output for the chat (where its prompt is), only on a terminal.
//!
//! The region is drawn with relative cursor moves only (up, column, erase below), which a
//! scrolling terminal keeps right. An answer line still open (text streamed without its line
//! end yet) is remembered by its width, so the region goes below it and the next text of the
//! answer goes back to where it stopped.

use std::io::Write;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use panto_compact::CompactionEvent;

use crate::fit::{fit, width};
use crate::ui::{color_allowed, for_stderr, for_stdout, stderr_is_terminal, stdout_is_terminal};

/// Where the region is drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Target {
    Stdout,
    Stderr,
}

/// The chat's prompt in the region.
#[derive(Clone, Debug, Default)]
pub(crate) struct PromptView {
    /// The draft's lines as shown.
    pub lines: Vec<String>,
    /// The cursor: (line, display column).
    pub cursor: (usize, usize),
}

/// The spinner's line.
struct Status {
    message: String,
    started: Instant,
    /// Which spinner this is, so that an old ticker stops.
    id: u64,
}

struct Screen {
    status: Option<Status>,
    queued: Vec<String>,
    prompt: Option<PromptView>,
    /// The chat draws on stdout; `None` before any region was asked for.
    target: Option<Target>,
    /// Where the region was drawn, when it is on the screen.
    drawn: Option<Drawn>,
    /// The width of the answer line still open on stdout (0: at a line start).
    open: usize,
    columns: usize,
    rows: usize,
    next_id: u64,
}

/// The region as drawn: enough to find its first row again after the terminal re-wrapped it.
struct Drawn {
    /// The cursor's row, counted from the region's first row, and its column.
    cursor: (usize, usize),
    /// The display width of each row drawn.
    widths: Vec<usize>,
    /// The terminal's width when it was drawn.
    columns: usize,
}

impl Drawn {
    /// Rows from the region's first row up to the cursor on a terminal now `columns` wide.
    /// Narrowed, most terminals (VTE, kitty, iTerm2, Windows Terminal, tmux) re-wrap each
    /// row that no longer fits, so a row of the region may now take several: the count
    /// follows them, or erasing from the cursor would leave the region's first rows behind.
    fn rows_up(&self, columns: usize) -> usize {
        let columns = columns.max(1);
        if columns >= self.columns {
            return self.cursor.0;
        }
        let height = |w: usize| w.div_ceil(columns).max(1);
        let above: usize = self.widths[..self.cursor.0]
            .iter()
            .map(|&w| height(w))
            .sum();
        let row = self.widths[self.cursor.0];
        above + (self.cursor.1 / columns).min(height(row) - 1)
    }
}

static SCREEN: Mutex<Screen> = Mutex::new(Screen {
    status: None,
    queued: Vec::new(),
    prompt: None,
    target: None,
    drawn: None,
    open: 0,
    columns: 80,
    rows: 24,
    next_id: 0,
});

/// Runs `f` with the screen locked (a poisoned lock is taken over: drawing must go on).
fn with<T>(f: impl FnOnce(&mut Screen) -> T) -> T {
    let mut screen = SCREEN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    f(&mut screen)
}

/// The chat owns the terminal: its region (prompt, queue, spinner) is drawn on stdout.
pub(crate) fn take_terminal() {
    with(|s| {
        s.target = Some(Target::Stdout);
        s.measure();
    });
}

/// The terminal's width now (80 when it cannot be told).
pub(crate) fn columns() -> usize {
    with(|s| {
        s.measure();
        s.columns
    })
}

/// The terminal changed size: the region is drawn again at the new width.
pub(crate) fn resized(columns: u16, rows: u16) {
    with(|s| {
        s.erase_at(usize::from(columns).max(1));
        s.columns = usize::from(columns).max(1);
        s.rows = usize::from(rows).max(1);
        s.draw();
    });
}

/// Prints one line on stderr above the region (an answer line still open is ended first).
pub(crate) fn notice(line: &str) {
    let line = for_stderr(line);
    with(|s| {
        s.erase();
        // On one screen the line goes below the answer's; a piped answer is left as it is.
        if s.open_here() > 0 && stderr_is_terminal() {
            s.end_open_line();
        }
        let mut err = std::io::stderr().lock();
        let _ = writeln!(err, "{line}");
        let _ = err.flush();
        s.draw();
    });
}

/// Prints one message line on stderr, neutralised for a terminal, above the region.
pub(crate) fn say(line: &str) {
    notice(line);
}

/// Prints a compaction event on stderr (it may quote a provider's error message).
pub(crate) fn print_event(event: &CompactionEvent) {
    if matches!(event, CompactionEvent::SilentTruncation { .. }) {
        // The answer of the cut request was streamed: its line ends before the next one.
        end_answer_line();
    }
    let line = crate::ui::describe_event(event);
    if !line.is_empty() {
        notice(&line);
    }
    if let CompactionEvent::Finished(report) = event
        && let Some(cause) = &report.degraded
    {
        for line in crate::ui::describe_degraded(cause, &report.failed_attempts) {
            notice(&line);
        }
    }
}

/// Prints `text` and a newline on stdout above the region, neutralised on a terminal.
pub(crate) fn print(text: &str) -> std::io::Result<()> {
    let text = for_stdout(text);
    with(|s| {
        s.erase();
        s.end_open_line();
        let mut out = std::io::stdout().lock();
        let written = writeln!(out, "{text}").and_then(|()| out.flush());
        s.draw();
        written
    })
}

/// Writes part of an answer on stdout above the region, neutralised on a terminal; the line
/// may stay open for the next part.
pub(crate) fn answer(text: &str) {
    let text = for_stdout(text);
    with(|s| {
        s.erase();
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(text.as_bytes());
        let _ = out.flush();
        s.open = advance(s.open, &text);
        s.draw();
    });
}

/// Ends the line of an answer, when one is open.
pub(crate) fn end_answer_line() {
    with(|s| {
        s.erase();
        s.end_open_line();
        s.draw();
    });
}

/// Sets the chat's prompt (`None`: not shown) and the queued messages, and draws them.
pub(crate) fn set_prompt(prompt: Option<PromptView>, queued: Vec<String>) {
    with(|s| {
        s.erase();
        s.prompt = prompt;
        s.queued = queued;
        s.draw();
    });
}

/// Erases the region from the screen and forgets it (the chat is over).
pub(crate) fn clear() {
    with(|s| {
        s.erase();
        s.end_open_line();
        s.prompt = None;
        s.queued.clear();
        s.status = None;
    });
}

/// The width `open` becomes after `text` is written at it.
fn advance(open: usize, text: &str) -> usize {
    let line = match text.rfind('\n') {
        Some(i) => return width_from(0, &text[i + 1..]),
        None => text,
    };
    width_from(open, line)
}

/// The column after writing `text` from column `at` (tabs to the next multiple of 8).
fn width_from(at: usize, text: &str) -> usize {
    text.chars().fold(at, |at, c| match c {
        '\t' => (at / 8 + 1) * 8,
        '\r' => 0,
        c => at + width(c.encode_utf8(&mut [0; 4])),
    })
}

impl Screen {
    /// The width of the answer line open on the screen (0 when stdout is not the terminal).
    fn open_here(&self) -> usize {
        if stdout_is_terminal() { self.open } else { 0 }
    }

    fn on_terminal(&self) -> bool {
        match self.target {
            Some(Target::Stdout) => stdout_is_terminal(),
            Some(Target::Stderr) => stderr_is_terminal(),
            None => false,
        }
    }

    /// Reads the terminal's size.
    fn measure(&mut self) {
        if let Ok((columns, rows)) = crossterm::terminal::size()
            && columns > 0
        {
            self.columns = usize::from(columns);
            self.rows = usize::from(rows).max(1);
        }
    }

    fn write(&self, bytes: &[u8]) {
        let _ = match self.target {
            Some(Target::Stdout) => {
                let mut out = std::io::stdout().lock();
                out.write_all(bytes).and_then(|()| out.flush())
            }
            _ => {
                let mut err = std::io::stderr().lock();
                err.write_all(bytes).and_then(|()| err.flush())
            }
        };
    }

    /// Ends an open answer line with a newline on stdout.
    fn end_open_line(&mut self) {
        if self.open > 0 {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out);
            let _ = out.flush();
            self.open = 0;
        }
    }

    /// The region's rows, wrapped at the terminal's width, and the cursor (row, column).
    fn rows(&self) -> (Vec<String>, (usize, usize)) {
        let mut rows = Vec::new();
        if let Some(status) = &self.status {
            let frame =
                FRAMES[(status.started.elapsed().as_millis() / 100) as usize % FRAMES.len()];
            let text = format!("{} ({})", status.message, elapsed(status.started.elapsed()));
            let text = fit(&text, self.columns.saturating_sub(2));
            rows.push(if color_allowed() {
                format!("\x1b[36m{frame}\x1b[0m {text}")
            } else {
                format!("{frame} {text}")
            });
        }
        for q in &self.queued {
            let first = q.lines().next().unwrap_or("");
            let more = if q.contains('\n') { " …" } else { "" };
            rows.push(fit(&format!("queued: {first}{more}"), self.columns));
        }
        let mut cursor = (rows.len().saturating_sub(1), 0);
        if let Some(prompt) = &self.prompt {
            for (i, line) in prompt.lines.iter().enumerate() {
                let lead = if i == 0 { "> " } else { "  " };
                let start = rows.len();
                let (wrapped, at) =
                    wrap(&format!("{lead}{line}"), self.columns, prompt.cursor.1 + 2);
                if i == prompt.cursor.0 {
                    cursor = (start + at.0, at.1);
                }
                rows.extend(wrapped);
            }
        }
        (rows, cursor)
    }

    /// Draws the region below the output, the cursor at the draft's.
    fn draw(&mut self) {
        if self.drawn.is_some() || !self.on_terminal() {
            return;
        }
        let (rows, cursor) = self.rows();
        // An answer line that filled its last row exactly: the terminal waits to wrap, and no
        // move can return there, so the region waits for the next part of the answer.
        let open = self.open_here();
        if rows.is_empty() || (open > 0 && open.is_multiple_of(self.columns)) {
            return;
        }
        let keep = self.rows.saturating_sub(1).max(1);
        let first = if rows.len() > keep {
            cursor.0.saturating_sub(keep - 1).min(rows.len() - keep)
        } else {
            0
        };
        let shown = &rows[first..rows.len().min(first + keep)];
        let mut out = String::new();
        if open > 0 {
            out.push('\n');
        }
        out.push_str(&shown.join("\n"));
        let row = cursor.0 - first;
        let up = shown.len() - 1 - row;
        if up > 0 {
            out.push_str(&format!("\x1b[{up}A"));
        }
        out.push_str(&format!("\r\x1b[{}G", cursor.1 + 1));
        self.write(out.as_bytes());
        self.drawn = Some(Drawn {
            cursor: (row, cursor.1),
            widths: shown.iter().map(|r| width(&strip_sgr(r))).collect(),
            columns: self.columns,
        });
    }

    /// Erases the region, leaving the cursor where the output goes on. The terminal's width
    /// is read first: one that changed since the region was drawn (a resize not yet
    /// reported, or reported only now) re-wrapped it.
    fn erase(&mut self) {
        if self.drawn.is_none() {
            return;
        }
        let columns = crossterm::terminal::size()
            .ok()
            .filter(|(c, _)| *c > 0)
            .map_or(self.columns, |(c, _)| usize::from(c));
        self.erase_at(columns);
    }

    /// Erases the region from a terminal now `columns` wide.
    fn erase_at(&mut self, columns: usize) {
        let Some(drawn) = self.drawn.take() else {
            return;
        };
        self.columns = columns.max(1);
        let row = drawn.rows_up(self.columns);
        let mut out = String::from("\r");
        if row > 0 {
            out.push_str(&format!("\x1b[{row}A"));
        }
        out.push_str("\x1b[J");
        let open = self.open_here();
        if open > 0 {
            out.push_str(&format!("\x1b[A\x1b[{}G", open % self.columns + 1));
        }
        self.write(out.as_bytes());
    }
}

/// `text` without its SGR sequences (colours), as wide as it shows.
fn strip_sgr(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find("\x1b[") {
        out.push_str(&rest[..at]);
        rest = &rest[at + 2..];
        let end = rest.find('m').map_or(rest.len(), |e| e + 1);
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// `rows` of `text` wrapped at `columns` cells, and where display column `at` of the text
/// falls (row, column); a cursor just past a full row goes to the start of the next one.
fn wrap(text: &str, columns: usize, at: usize) -> (Vec<String>, (usize, usize)) {
    let columns = columns.max(2);
    let mut rows = vec![String::new()];
    let (mut col, mut seen) = (0, 0);
    let mut cursor = None;
    for c in text.chars() {
        let w = width(c.encode_utf8(&mut [0; 4]));
        if col + w > columns {
            rows.push(String::new());
            col = 0;
        }
        if cursor.is_none() && seen >= at {
            cursor = Some((rows.len() - 1, col));
        }
        if let Some(r) = rows.last_mut() {
            r.push(c);
        }
        col += w;
        seen += w;
    }
    let cursor = cursor.unwrap_or_else(|| {
        if col >= columns {
            rows.push(String::new());
            (rows.len() - 1, 0)
        } else {
            (rows.len() - 1, col)
        }
    });
    (rows, cursor)
}

/// The frames of the spinner.
const FRAMES: [char; 10] = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];

/// Time since a start, as the spinner shows it: `4s`, `2m 5s`.
fn elapsed(d: Duration) -> String {
    let s = d.as_secs();
    if s < 60 {
        format!("{s}s")
    } else {
        format!("{}m {}s", s / 60, s % 60)
    }
}

/// A spinner in the region while a model works; nothing when the region is not on a terminal.
pub(crate) struct Spinner {
    id: Option<u64>,
}

impl Spinner {
    /// Starts a spinner with `message` (on stderr, unless the chat drew its region on stdout).
    pub(crate) fn start(message: &str) -> Spinner {
        let id = with(|s| {
            if s.target.is_none() {
                s.target = Some(Target::Stderr);
                s.measure();
            }
            if !s.on_terminal() {
                return None;
            }
            s.erase();
            s.next_id += 1;
            let id = s.next_id;
            s.status = Some(Status {
                message: message.to_owned(),
                started: Instant::now(),
                id,
            });
            s.draw();
            Some(id)
        });
        if let Some(id) = id {
            std::thread::spawn(move || tick(id));
        }
        Spinner { id }
    }

    /// Removes the spinner from the screen.
    pub(crate) fn stop(&mut self) {
        let Some(id) = self.id.take() else { return };
        with(|s| {
            if s.status.as_ref().is_some_and(|st| st.id == id) {
                s.erase();
                s.status = None;
                s.draw();
            }
        });
    }
}

impl Drop for Spinner {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Turns spinner `id` every tenth of a second until it stops; a change of the terminal's size
/// redraws the region at the new width.
#[expect(
    clippy::disallowed_methods,
    reason = "a thread of its own, never the async runtime's"
)]
fn tick(id: u64) {
    loop {
        std::thread::sleep(Duration::from_millis(100));
        let going = with(|s| {
            if s.status.as_ref().is_none_or(|st| st.id != id) {
                return false;
            }
            s.erase();
            s.measure();
            s.draw();
            true
        });
        if !going {
            return;
        }
    }
}
