//! The chat's commands as typed: `/help`'s list, the words Tab completes, and what one line
//! of input asks for.

/// The chat's commands, one line each, as `/help` prints them (each line fits 60 columns).
pub(crate) const HELP: &str = "\
/help              this list
/context           what the next request sends, by message
/summary           the active compaction summary
/recall QUERY      search what compactions summarized
/compact [text]    compact now; text adds instructions
/compact --force   compact even if it saves nothing
/undo              undo the latest compaction or clearing
/model [NAME]      the model; with NAME, use NAME from now
/clear, /new       go on in a new session file
/retry             send again after a cancel or a failure
/exit, /quit       quit (also Ctrl-D, or Ctrl-C twice)
Ctrl-J or Shift-Enter: a new line (also \\ then Enter).
Tab completes a command. What you type while a reply
streams is queued, and sent after it.
Start a message with // to send a line beginning with /.";

/// What one line of input asks for.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Line<'a> {
    /// Nothing (an empty line).
    Nothing,
    /// A message for the model.
    Message(&'a str),
    /// `/help`.
    Help,
    /// `/context`.
    Context,
    /// `/summary`.
    Summary,
    /// `/recall QUERY`.
    Recall(&'a str),
    /// `/compact [--force] [instructions]`.
    Compact {
        /// The extra instructions, if any.
        instructions: Option<&'a str>,
        /// Whether `--force` came first.
        force: bool,
    },
    /// `/undo`.
    Undo,
    /// `/model [NAME]`.
    Model(Option<&'a str>),
    /// `/clear` or `/new`.
    Clear,
    /// `/retry`.
    Retry,
    /// `/exit` or `/quit`.
    Exit,
    /// A slash command panto does not know.
    Unknown(&'a str),
    /// A bare word that names a command (`clear`, `exit`, ...), typed out of habit: not sent
    /// unless typed twice in a row.
    Habit(&'a str),
}

/// The bare words that people type out of habit for a command.
const HABITS: &[&str] = &["clear", "exit", "quit", "help", "new"];

/// Reads one line of input. A line starting with `//` is a message starting with `/`. The
/// text of a message is kept as typed (newlines included), without surrounding blanks.
pub(crate) fn parse_line(line: &str) -> Line<'_> {
    let input = line.trim();
    if input.is_empty() {
        return Line::Nothing;
    }
    if input.starts_with("//") {
        return Line::Message(&input[1..]);
    }
    let Some(command) = input.strip_prefix('/') else {
        if HABITS.contains(&input.to_lowercase().as_str()) {
            return Line::Habit(input);
        }
        return Line::Message(input);
    };
    let (name, rest) = command
        .split_once(char::is_whitespace)
        .map_or((command, ""), |(n, r)| (n, r.trim()));
    match name {
        "help" | "?" => Line::Help,
        "context" => Line::Context,
        "summary" => Line::Summary,
        "recall" => Line::Recall(rest),
        "compact" => {
            let (force, rest) = match rest.strip_prefix("--force") {
                Some(after) if after.is_empty() || after.starts_with(char::is_whitespace) => {
                    (true, after.trim())
                }
                _ => (false, rest),
            };
            Line::Compact {
                instructions: Some(rest).filter(|r| !r.is_empty()),
                force,
            }
        }
        "undo" => Line::Undo,
        "model" => Line::Model(Some(rest).filter(|r| !r.is_empty())),
        "clear" | "new" => Line::Clear,
        "retry" => Line::Retry,
        "exit" | "quit" => Line::Exit,
        _ => Line::Unknown(input),
    }
}

/// The commands Tab completes.
pub(crate) const COMMANDS: &[&str] = &[
    "/help", "/context", "/summary", "/recall", "/compact", "/undo", "/model", "/clear", "/new",
    "/retry", "/exit", "/quit",
];
