//! Reading the chat's input: a line editor with history (rustyline) when standard input is a
//! terminal, plain lines otherwise, and the Ctrl-C and Ctrl-D of the prompt.
//!
//! A message may hold several lines: a line that ends with a backslash goes on in the next one
//! (Enter after `\` starts a new line of the same message, in the editor and in plain lines
//! alike); the backslash itself is not part of the message. (Alt-Enter would need rustyline's
//! `custom-bindings` feature, which panto does not build.)
//!
//! History lives in the user's data folder (`<data dir>/panto/history`, or
//! `$PANTO_DATA_DIR/history`), created 0600; a history that cannot be read or written costs
//! one note, never the chat.

use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;

use anyhow::{Context as _, Result};
use rustyline::completion::Completer;
use rustyline::error::ReadlineError;
use rustyline::highlight::Highlighter;
use rustyline::hint::Hinter;
use rustyline::history::DefaultHistory;
use rustyline::validate::{ValidationContext, ValidationResult, Validator};
use rustyline::{Config as EditorConfig, Editor, Helper};

use crate::ui::say;

/// What the prompt read.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Input {
    /// A line the user entered (without its line end).
    Line(String),
    /// Ctrl-C at the prompt.
    Interrupted,
    /// Ctrl-D on an empty line, or the end of standard input.
    End,
}

/// The chat's prompt.
pub(crate) struct Prompt {
    source: Source,
}

enum Source {
    /// A terminal: line editing and history.
    Editor {
        editor: Box<ChatEditor>,
        history: Option<PathBuf>,
    },
    /// A pipe or a file: lines read on their own thread, so that Ctrl-C can end the wait.
    Lines {
        lines: tokio::sync::mpsc::Receiver<std::io::Result<String>>,
        show_prompt: bool,
    },
}

/// The prompt shown before each line.
const PROMPT: &str = "> ";

/// The line editor of the chat.
type ChatEditor = Editor<Continuation, DefaultHistory>;

/// The editor's helper: a line that ends with a backslash is not finished, so Enter starts a
/// new line of the same message instead of sending it.
struct Continuation;

impl Validator for Continuation {
    fn validate(&self, ctx: &mut ValidationContext<'_>) -> rustyline::Result<ValidationResult> {
        Ok(if ctx.input().ends_with('\\') {
            ValidationResult::Incomplete
        } else {
            ValidationResult::Valid(None)
        })
    }
}

impl Completer for Continuation {
    type Candidate = String;
}

impl Hinter for Continuation {
    type Hint = String;
}

impl Highlighter for Continuation {}

impl Helper for Continuation {}

/// A message as typed: each backslash that ended a line (to go on in the next one) removed.
pub(crate) fn joined(text: &str) -> String {
    text.replace("\\\n", "\n")
}

/// Where the chat history is kept: `$PANTO_DATA_DIR/history`, else
/// `<platform data dir>/panto/history`.
pub(crate) fn history_path() -> Option<PathBuf> {
    crate::config::data_dir().map(|dir| dir.join("history"))
}

impl Prompt {
    /// A line editor when standard input and output are terminals, plain lines otherwise.
    pub(crate) fn new() -> Prompt {
        if std::io::stdin().is_terminal() && std::io::stdout().is_terminal() {
            match editor() {
                Ok(source) => return Prompt { source },
                Err(e) => say(&format!(
                    "panto: note: line editing is off ({e}); reading plain lines"
                )),
            }
        }
        Prompt {
            source: Source::Lines {
                lines: stdin_lines(),
                show_prompt: crate::ui::stderr_is_terminal(),
            },
        }
    }

    /// Reads the next line. With the line editor this blocks the thread (nothing else runs
    /// while the user types); Ctrl-C is then a key, not a signal.
    ///
    /// # Errors
    /// When standard input cannot be read.
    pub(crate) async fn read(&mut self) -> Result<Input> {
        match &mut self.source {
            Source::Editor { editor, history } => match editor.readline(PROMPT) {
                Ok(line) => {
                    remember(editor, history, &line);
                    Ok(Input::Line(joined(&line)))
                }
                Err(ReadlineError::Interrupted) => Ok(Input::Interrupted),
                Err(ReadlineError::Eof) => Ok(Input::End),
                Err(e) => Err(anyhow::Error::new(e).context("cannot read the terminal")),
            },
            Source::Lines { lines, show_prompt } => {
                if *show_prompt {
                    let mut err = std::io::stderr().lock();
                    let _ = write!(err, "{PROMPT}");
                    let _ = err.flush();
                }
                // A line that ends with a backslash goes on in the next one.
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
        }
    }
}

/// The line editor, with the history loaded.
fn editor() -> Result<Source> {
    let config = EditorConfig::builder()
        .max_history_size(1000)
        .map_err(anyhow::Error::new)?
        .history_ignore_dups(true)
        .map_err(anyhow::Error::new)?
        .history_ignore_space(true)
        .auto_add_history(false)
        .build();
    let mut editor = ChatEditor::with_config(config)?;
    editor.set_helper(Some(Continuation));
    let history = history_path();
    if let Some(path) = &history
        && path.exists()
        && let Err(e) = editor.load_history(path)
    {
        say(&format!(
            "panto: note: cannot read the chat history {}: {e}",
            path.display()
        ));
    }
    Ok(Source::Editor {
        editor: Box::new(editor),
        history,
    })
}

/// Adds a non-empty line to the history and appends it to the history file. A file that
/// cannot be written is reported once, and the history is then kept in memory only.
fn remember(editor: &mut ChatEditor, history: &mut Option<PathBuf>, line: &str) {
    if line.trim().is_empty() || editor.add_history_entry(line).is_err() {
        return;
    }
    let Some(path) = history.as_ref() else { return };
    let written = match path.parent() {
        Some(dir) => std::fs::create_dir_all(dir).map_err(ReadlineError::from),
        None => Ok(()),
    }
    .and_then(|()| editor.append_history(path));
    if let Err(e) = written {
        say(&format!(
            "panto: note: cannot write the chat history {}: {e}; it is kept for this chat only",
            path.display()
        ));
        *history = None;
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
