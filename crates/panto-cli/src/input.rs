//! The chat's input: on a terminal, the raw-mode keyboard (`keys.rs`) with panto's line editor
//! (`editor.rs`) and the queue of messages typed ahead while a reply streams; from a pipe or a
//! file, plain lines.
//!
//! On a terminal nothing typed is lost or echoed into a reply: keys are read all the time, a
//! message sent while the model works is queued (and shown as queued) and sent after the reply;
//! Up on an empty draft takes the last queued message back to edit it. A reply that is cancelled
//! or fails puts the queued messages back into the draft instead of sending them.
//!
//! Ctrl-C cancels what runs; at the prompt it clears a draft, and on an empty draft it quits
//! when pressed twice within [`QUIT_WINDOW`] (a Ctrl-C that cancelled or cleared something
//! never counts). Ctrl-D on an empty draft quits.
//!
//! History lives in the user's data folder (`<data dir>/panto/history`, or
//! `$PANTO_DATA_DIR/history`), created 0600, one entry a line (`\n` and `\\` escaped, as
//! rustyline wrote it before); a history that cannot be read or written costs one note, never
//! the chat.

use std::collections::VecDeque;
use std::future::Future;
use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use crossterm::event::{Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use tokio::sync::watch;

use crate::editor::{Action, Editor};
use crate::keys::Keys;
use crate::screen::say;
use crate::screen::{self, PromptView};
use crate::ui::Cancel;

/// Two Ctrl-C at an empty prompt within this time quit.
pub(crate) const QUIT_WINDOW: Duration = Duration::from_secs(1);

/// How many history entries are kept.
const HISTORY: usize = 1000;

/// What the prompt read.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Input {
    /// A message or command the user entered.
    Line(String),
    /// Ctrl-C at the prompt (plain lines only: on a terminal the prompt handles it).
    Interrupted,
    /// The user quits: Ctrl-D on an empty draft, Ctrl-C twice, or the end of the input.
    End,
}

/// The chat's prompt: a terminal, or plain lines.
pub(crate) enum Prompt {
    /// A terminal in raw mode.
    Terminal(Box<Console>),
    /// A pipe or a file: lines read on their own thread, so that Ctrl-C can end the wait.
    Lines {
        lines: tokio::sync::mpsc::Receiver<std::io::Result<String>>,
        show_prompt: bool,
    },
}

/// A message typed at the terminal: what is sent, and what the draft showed.
#[derive(Clone, Debug)]
struct Typed {
    text: String,
    shown: String,
}

/// The terminal's side of the chat: keys, the draft, the queue, the history file.
pub(crate) struct Console {
    keys: Keys,
    editor: Editor,
    queue: VecDeque<Typed>,
    /// When Ctrl-C last warned at an empty prompt.
    warned: Option<Instant>,
    history: Option<PathBuf>,
}

/// Where the chat history is kept: `$PANTO_DATA_DIR/history`, else
/// `<platform data dir>/panto/history`.
pub(crate) fn history_path() -> Option<PathBuf> {
    crate::config::data_dir().map(|dir| dir.join("history"))
}

impl Prompt {
    /// The terminal in raw mode when standard input and output are terminals, plain lines
    /// otherwise. `commands` are what Tab completes.
    pub(crate) fn new(commands: &'static [&'static str]) -> Prompt {
        if std::io::stdin().is_terminal() && std::io::stdout().is_terminal() {
            match Keys::start() {
                Ok(keys) => {
                    screen::take_terminal();
                    let history = history_path();
                    let entries = history.as_ref().map(read_history).unwrap_or_default();
                    return Prompt::Terminal(Box::new(Console {
                        keys,
                        editor: Editor::new(entries, commands),
                        queue: VecDeque::new(),
                        warned: None,
                        history,
                    }));
                }
                Err(e) => say(&format!(
                    "panto: note: the terminal cannot be put in raw mode ({e}); reading plain lines"
                )),
            }
        }
        Prompt::Lines {
            lines: stdin_lines(),
            show_prompt: crate::ui::stderr_is_terminal(),
        }
    }

    /// Whether this is a terminal.
    pub(crate) fn is_terminal(&self) -> bool {
        matches!(self, Prompt::Terminal(_))
    }

    /// Reads the next message or command: on a terminal, the first queued one, else what the
    /// user enters.
    ///
    /// # Errors
    /// When standard input cannot be read.
    pub(crate) async fn read(&mut self) -> Result<Input> {
        match self {
            Prompt::Terminal(console) => console.read().await,
            Prompt::Lines { lines, show_prompt } => read_lines(lines, *show_prompt).await,
        }
    }

    /// Runs `work` (a reply, a compaction) while the keys go on being read: on a terminal,
    /// Ctrl-C cancels it (through the [`Cancel`] that `work` was given with [`Prompt::cancel`])
    /// and what is typed goes into the draft or the queue.
    ///
    /// # Errors
    /// When the terminal cannot be read.
    pub(crate) async fn busy<T>(
        &mut self,
        work: impl Future<Output = T>,
        cancel: watch::Sender<bool>,
    ) -> Result<T> {
        match self {
            Prompt::Terminal(console) => console.busy(work, cancel).await,
            Prompt::Lines { .. } => Ok(work.await),
        }
    }

    /// A new way to cancel one piece of work: Ctrl-C as a key (on a terminal) or a signal.
    pub(crate) fn cancel() -> (watch::Sender<bool>, Cancel) {
        let (tx, rx) = watch::channel(false);
        (tx, Cancel::with_key(rx))
    }

    /// After a reply that was cancelled or failed: the queued messages go back into the draft,
    /// unsent.
    pub(crate) fn unqueue(&mut self) {
        if let Prompt::Terminal(console) = self {
            console.unqueue();
        }
    }
}

impl Console {
    async fn read(&mut self) -> Result<Input> {
        if let Some(typed) = self.queue.pop_front() {
            self.sent(&typed);
            return Ok(Input::Line(typed.text));
        }
        loop {
            self.draw(true);
            let Some(event) = self.keys.next().await else {
                return Ok(Input::End);
            };
            let key = match event.context("cannot read the terminal")? {
                Event::Key(key) => key,
                Event::Paste(text) => {
                    self.editor.paste(&text);
                    continue;
                }
                Event::Resize(columns, rows) => {
                    screen::resized(columns, rows);
                    continue;
                }
                _ => continue,
            };
            if key.kind == KeyEventKind::Release {
                continue;
            }
            let empty = self.editor.is_empty();
            match self.editor.key(key) {
                Action::Submit { text, shown } => {
                    self.warned = None;
                    let typed = Typed { text, shown };
                    self.sent(&typed);
                    return Ok(Input::Line(typed.text));
                }
                Action::Interrupt if !empty => {
                    self.editor.clear();
                    self.warned = None;
                }
                Action::Interrupt => {
                    if self.warned.is_some_and(|at| at.elapsed() <= QUIT_WINDOW) {
                        screen::set_prompt(None, Vec::new());
                        return Ok(Input::End);
                    }
                    self.warned = Some(Instant::now());
                    say("panto: press Ctrl-C again to quit (or Ctrl-D)");
                }
                Action::End => {
                    screen::set_prompt(None, Vec::new());
                    return Ok(Input::End);
                }
                Action::Candidates(found) => {
                    self.warned = None;
                    say(&format!("panto: {}", found.join("  ")));
                }
                Action::Edited => self.warned = None,
            }
        }
    }

    async fn busy<T>(
        &mut self,
        work: impl Future<Output = T>,
        cancel: watch::Sender<bool>,
    ) -> Result<T> {
        let mut work = std::pin::pin!(work);
        self.draw(false);
        loop {
            tokio::select! {
                biased;
                out = &mut work => {
                    self.warned = None;
                    screen::set_prompt(None, self.shown_queue());
                    return Ok(out);
                }
                event = self.keys.next() => {
                    let Some(event) = event else {
                        // The terminal is gone: the work finishes on its own.
                        return Ok(work.await);
                    };
                    match event.context("cannot read the terminal")? {
                        Event::Key(key) => self.busy_key(key, &cancel),
                        Event::Paste(text) => self.editor.paste(&text),
                        Event::Resize(columns, rows) => screen::resized(columns, rows),
                        _ => {}
                    }
                    self.draw(false);
                }
            }
        }
    }

    /// A key while work runs: Ctrl-C cancels it, Enter queues the draft, Up on an empty draft
    /// takes the last queued message back; the rest edits the draft.
    fn busy_key(&mut self, key: KeyEvent, cancel: &watch::Sender<bool>) {
        if key.kind == KeyEventKind::Release {
            return;
        }
        let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
        if key.code == KeyCode::Up && self.editor.is_empty() && !self.queue.is_empty() {
            if let Some(last) = self.queue.pop_back() {
                self.editor.load(&last.text);
            }
            return;
        }
        if key.code == KeyCode::Char('d') && ctrl {
            return;
        }
        match self.editor.key(key) {
            Action::Interrupt => {
                let _ = cancel.send(true);
                // A cancel never counts towards quitting.
                self.warned = None;
            }
            Action::Submit { text, shown } if !text.trim().is_empty() => {
                self.queue.push_back(Typed { text, shown });
            }
            Action::Candidates(found) => say(&format!("panto: {}", found.join("  "))),
            _ => {}
        }
    }

    fn unqueue(&mut self) {
        if self.queue.is_empty() {
            return;
        }
        let mut texts: Vec<String> = self.queue.drain(..).map(|t| t.text).collect();
        if !self.editor.is_empty() {
            texts.push(self.editor.shown().to_owned());
        }
        say(&format!(
            "panto: {} back in the draft, not sent",
            if texts.len() == 1 {
                "the queued message is".to_owned()
            } else {
                format!("{} queued messages are", texts.len())
            }
        ));
        self.editor.load(&texts.join("\n"));
    }

    fn shown_queue(&self) -> Vec<String> {
        self.queue.iter().map(|t| t.shown.clone()).collect()
    }

    /// Draws the prompt (at the prompt always, during work only when a draft is typed).
    fn draw(&self, at_prompt: bool) {
        let prompt = (at_prompt || !self.editor.is_empty()).then(|| {
            let (lines, cursor) = self.editor.view();
            PromptView {
                lines: lines.into_iter().map(str::to_owned).collect(),
                cursor,
            }
        });
        screen::set_prompt(prompt, self.shown_queue());
    }

    /// A message leaves the draft (or the queue): it is printed as the draft showed it, and
    /// kept in the history.
    fn sent(&mut self, typed: &Typed) {
        screen::set_prompt(None, self.shown_queue());
        let echo: Vec<String> = typed
            .shown
            .split('\n')
            .enumerate()
            .map(|(i, l)| format!("{}{l}", if i == 0 { "> " } else { "  " }))
            .collect();
        let _ = screen::print(&echo.join("\n"));
        self.editor.remember(&typed.text);
        self.save_history(&typed.text);
    }

    /// Appends `entry` to the history file. A file that cannot be written is reported once,
    /// and the history is then kept in memory only.
    fn save_history(&mut self, entry: &str) {
        let Some(path) = self.history.as_ref() else {
            return;
        };
        if entry.trim().is_empty() {
            return;
        }
        if let Err(e) = append_history(path, entry) {
            say(&format!(
                "panto: note: cannot write the chat history {}: {e}; it is kept for this chat only",
                path.display()
            ));
            self.history = None;
        }
    }
}

/// The entries of the history file, oldest first (the last [`HISTORY`]).
#[expect(
    clippy::disallowed_methods,
    reason = "panto's own file in the user's data folder, not a project's: read whole, as the line editor before did"
)]
fn read_history(path: &PathBuf) -> Vec<String> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Vec::new(),
        Err(e) => {
            say(&format!(
                "panto: note: cannot read the chat history {}: {e}",
                path.display()
            ));
            return Vec::new();
        }
    };
    let entries: Vec<String> = text
        .lines()
        .filter(|l| *l != "#V2" && !l.is_empty())
        .map(unescape)
        .collect();
    entries[entries.len().saturating_sub(HISTORY)..].to_vec()
}

fn append_history(path: &PathBuf, entry: &str) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)?;
    let escaped = entry.replace('\\', "\\\\").replace('\n', "\\n");
    writeln!(file, "{escaped}")
}

fn unescape(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match (c, c == '\\') {
            (_, true) => match chars.next() {
                Some('n') => out.push('\n'),
                Some(other) => out.push(other),
                None => out.push('\\'),
            },
            (c, false) => out.push(c),
        }
    }
    out
}

/// Reads one message of plain lines: a line that ends with a backslash goes on in the next.
async fn read_lines(
    lines: &mut tokio::sync::mpsc::Receiver<std::io::Result<String>>,
    show_prompt: bool,
) -> Result<Input> {
    if show_prompt {
        let mut err = std::io::stderr().lock();
        let _ = write!(err, "> ");
        let _ = err.flush();
    }
    let mut message = String::new();
    loop {
        let line = tokio::select! {
            line = lines.recv() => line,
            () = crate::ui::interrupted() => return Ok(Input::Interrupted),
        };
        let Some(line) = line else {
            return Ok(if message.is_empty() {
                Input::End
            } else {
                Input::Line(message)
            });
        };
        let line = line.context("cannot read standard input")?;
        match line.strip_suffix('\\') {
            Some(start) => {
                message.push_str(start);
                message.push('\n');
            }
            None => {
                message.push_str(&line);
                return Ok(Input::Line(message));
            }
        }
    }
}

/// Lines of standard input, read on their own thread.
fn stdin_lines() -> tokio::sync::mpsc::Receiver<std::io::Result<String>> {
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            if tx.blocking_send(line).is_err() {
                break;
            }
        }
    });
    rx
}
