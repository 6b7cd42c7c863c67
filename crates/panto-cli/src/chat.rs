//! `panto chat`: the interactive loop, its slash commands (`/help`, `/context`, `/summary`,
//! `/compact`, `/model`, `/clear`, `/retry`, `/exit`), the last exchange and the meter when a
//! chat resumes, and the context meter after every reply.
//!
//! Ctrl-C while a request runs cancels it and returns to the prompt (the message stays in the
//! session; `/retry` sends it again); Ctrl-C at the prompt right after another Ctrl-C, or
//! Ctrl-D on an empty line, ends the chat.

use std::io::Write;
use std::path::Path;

use anyhow::Result;
use panto_compact::{CompactError, CompactOutcome, ModelRef};
use panto_model::{ContentBlock, EffectiveContext, Message, Role};

use crate::commands::{
    CliDriver, active_model, catch_up, driver, failure, manual_run, meter, next_session_name,
    nothing_text, open_store, session_name, turn, write_context,
};
use crate::config::Config;
use crate::input::{Input, Prompt};
use crate::ui::interrupted;
use crate::ui::{Spinner, count, error_text, for_stdout, say};

/// The chat's commands, one line each, as `/help` prints them.
pub(crate) const HELP: &str = "\
/help                   this list
/context                the context that the next request sends, message by message
/summary                the active compaction summary
/compact [instructions] compact now, with optional extra instructions for the summary
/compact --force [...]  compact even when it would not make the conversation smaller
/model [NAME]           the active model; with NAME, use NAME for the next requests
/clear                  start a new session file (the old one stays as it is); also /new
/retry                  send the conversation again (after a cancelled or failed reply)
/exit                   quit (also /quit, Ctrl-D, or Ctrl-C twice)
A \\ at the end of a line starts a new line of the same message (Enter after it).
Anything else is sent as your message; start it with // to send a line beginning with /.";

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
    /// `/compact [--force] [instructions]`.
    Compact {
        /// The extra instructions, if any.
        instructions: Option<&'a str>,
        /// Whether `--force` came first.
        force: bool,
    },
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
        "model" => Line::Model(Some(rest).filter(|r| !r.is_empty())),
        "clear" | "new" => Line::Clear,
        "retry" => Line::Retry,
        "exit" | "quit" => Line::Exit,
        _ => Line::Unknown(input),
    }
}

/// Runs the chat over the session at `path`, created when it does not exist.
///
/// # Errors
/// A missing provider or model, a session that cannot be opened or read again, or standard
/// input that cannot be read. A failed or cancelled reply is reported and the chat goes on.
pub(crate) async fn chat(config: &Config, path: &Path) -> Result<()> {
    let active = active_model(config, false)?;
    let mut driver = driver(config, active, &session_name(path)).await?;
    say(&format!(
        "panto chat: {} ({}); /help lists commands",
        path.display(),
        count(driver.context().messages.len(), "message")
    ));
    say("panto: Ctrl-C cancels a reply; Ctrl-D quits");
    if show_last_exchange(driver.context())? {
        say(&meter(config, &driver, None));
    }
    let mut prompt = Prompt::new();
    // Whether the last thing the user did was Ctrl-C (at the prompt, or cancelling a reply).
    let mut interrupted_last = false;
    // A bare command word held back, sent if typed again right away.
    let mut held: Option<String> = None;
    loop {
        let line = match prompt.read().await? {
            Input::End => break,
            Input::Interrupted if interrupted_last => break,
            Input::Interrupted => {
                interrupted_last = true;
                say("panto: press Ctrl-C again, or Ctrl-D, to quit");
                continue;
            }
            Input::Line(line) => line,
        };
        interrupted_last = false;
        let held_before = held.take();
        let new = match parse_line(&line) {
            Line::Nothing => continue,
            Line::Exit => break,
            Line::Habit(word) if held_before.as_deref() != Some(word) => {
                say(&format!(
                    "panto: `{word}` was not sent; did you mean /{}?",
                    word.to_lowercase()
                ));
                say(&format!(
                    "panto: type `{word}` again to send it as a message"
                ));
                held = Some(word.to_owned());
                continue;
            }
            Line::Habit(word) => vec![Message::user_text(word)],
            Line::Help => {
                print_out(HELP)?;
                continue;
            }
            Line::Unknown(name) => {
                say(&format!(
                    "panto: unknown command {name}; /help lists the commands"
                ));
                continue;
            }
            Line::Context => {
                driver = catch_up(driver).await?;
                let mut out = std::io::stdout().lock();
                write_context(&mut out, driver.log().session(), config, driver.context())?;
                out.flush()?;
                continue;
            }
            Line::Summary => {
                driver = catch_up(driver).await?;
                match summary(driver.context()) {
                    Some(text) => print_out(text.trim_end())?,
                    None => say("panto: no summary yet: this session has not been compacted"),
                }
                continue;
            }
            Line::Compact {
                instructions,
                force,
            } => {
                driver = catch_up(driver).await?;
                interrupted_last = compact(config, &mut driver, instructions, force).await;
                continue;
            }
            Line::Model(None) => {
                say(&format!(
                    "panto: the model is {}; /model NAME uses another one for the next requests",
                    driver.compactor().active().model
                ));
                continue;
            }
            Line::Model(Some(name)) => {
                let before = driver.compactor().active().clone();
                let after = ModelRef::new(before.provider.clone(), name);
                driver.compactor_mut().set_active(after);
                // The window of the old model says nothing of the new one's.
                crate::commands::give_windows(config, &mut driver, name).await;
                say(&format!(
                    "panto: the next requests go to {name} (not {})",
                    before.model
                ));
                say(&meter(config, &driver, None));
                continue;
            }
            Line::Clear => {
                driver = clear(config, driver).await?;
                continue;
            }
            Line::Retry => {
                driver = catch_up(driver).await?;
                if !driver.awaits_reply() {
                    say("panto: nothing to resend: the last message already has its reply");
                    continue;
                }
                Vec::new()
            }
            Line::Message(text) => vec![Message::user_text(text)],
        };
        let (next, result) = turn(config, driver, new).await?;
        driver = next;
        match result {
            Ok(reply) => say(&meter(config, &driver, Some(&reply))),
            Err(e) => {
                interrupted_last = e.is::<crate::Cancelled>();
                if interrupted_last {
                    say(&format!("panto: {}; /retry sends it again", error_text(&e)));
                } else {
                    say(&format!("panto: {}", error_text(&e)));
                    if driver.awaits_reply() {
                        say("panto: your message stays in the session; /retry sends it again");
                    }
                }
            }
        }
    }
    Ok(())
}

/// `/compact [--force] [instructions]`: compacts now and says what happened. Returns whether
/// the user cancelled it with Ctrl-C.
async fn compact(
    config: &Config,
    driver: &mut CliDriver,
    instructions: Option<&str>,
    force: bool,
) -> bool {
    let mut spinner = Spinner::start("compacting");
    let run = manual_run(config, instructions.map(str::to_owned), force);
    // Ctrl-C cancels the compaction; it is written in one append, or not at all.
    let outcome = tokio::select! {
        biased;
        outcome = driver.compact_with(run) => Some(outcome),
        () = interrupted() => None,
    };
    spinner.stop();
    match outcome {
        None => {
            say("panto: compaction cancelled; nothing was written");
            return true;
        }
        // The compactor has printed its own line; the meter gives the new size.
        Some(Ok(CompactOutcome::Compacted(_))) => say(&meter(config, driver, None)),
        Some(Ok(CompactOutcome::NothingToCompact(n))) => {
            say(&format!("panto: {}", nothing_text(&n, config)));
        }
        Some(Err(CompactError::NotSmaller(n))) => say(&format!(
            "panto: {n}; nothing was written\nhint: /compact --force writes it anyway"
        )),
        Some(Err(e)) => say(&format!("panto: {}", error_text(&failure(e, config)))),
    }
    false
}

/// `/clear`: goes on in a new session of the same store, named after the current one (the
/// first free `notes-2.jsonl`, `notes-3.jsonl`, ...), with the same model; the old session
/// stays as it is.
async fn clear(config: &Config, old: CliDriver) -> Result<CliDriver> {
    let store = open_store(config).await?;
    let from = old.log().session().to_owned();
    let name = next_session_name(&store, &from).await?;
    let active = old.compactor().active().clone();
    let driver = driver(config, active, &name).await?;
    say(&format!("panto: a new conversation, in {name}"));
    say(&format!("panto: the earlier one stays in {from}"));
    Ok(driver)
}

/// How many lines of a prompt and of a reply a resumed chat shows.
const PROMPT_LINES: usize = 3;
const REPLY_LINES: usize = 12;

/// Prints the last exchange of `ctx` (the last prompt a person typed, and the text of the last
/// answer after it) as a resumed chat shows it. Returns whether there was one.
fn show_last_exchange(ctx: &EffectiveContext) -> std::io::Result<bool> {
    let conversation = ctx.conversation();
    let Some(at) = conversation.iter().rposition(is_prompt) else {
        return Ok(false);
    };
    let prompt = conversation[at].text();
    let answer = conversation[at + 1..]
        .iter()
        .rev()
        .find(|m| m.role == Role::Assistant && !m.text().trim().is_empty())
        .map(Message::text);
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", for_stdout("The last exchange:"))?;
    for line in cut_lines(&prompt, PROMPT_LINES).lines() {
        writeln!(out, "{}", for_stdout(&format!("> {line}")))?;
    }
    match answer {
        Some(text) => writeln!(out, "{}", for_stdout(&cut_lines(&text, REPLY_LINES)))?,
        None => writeln!(out, "(no answer yet: /retry sends the message)")?,
    }
    out.flush()?;
    Ok(true)
}

/// Whether `m` is a prompt a person typed: a user message with something besides tool results,
/// not a summary.
fn is_prompt(m: &Message) -> bool {
    m.role == Role::User
        && m.compaction_summary().is_none()
        && m.content
            .iter()
            .any(|b| !matches!(b, ContentBlock::ToolResult(_)))
}

/// `text` cut to its first `max` lines, saying how many more there were.
fn cut_lines(text: &str, max: usize) -> String {
    let lines: Vec<&str> = text.trim_end().lines().collect();
    if lines.len() <= max {
        return lines.join("\n");
    }
    format!(
        "{}\n[... {} more; /context lists the whole conversation]",
        lines[..max].join("\n"),
        count(lines.len() - max, "line")
    )
}

/// The active compaction summary, if the context starts from one.
pub(crate) fn summary(ctx: &EffectiveContext) -> Option<&str> {
    ctx.compaction.as_ref()?;
    ctx.messages.first()?.compaction_summary()
}

/// Prints text and a newline on stdout, neutralised on a terminal.
fn print_out(text: &str) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", for_stdout(text))?;
    out.flush()
}
