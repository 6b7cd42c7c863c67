//! `panto chat`: the interactive loop, its slash commands (`/help`, `/context`, `/summary`,
//! `/compact`, `/retry`, `/exit`) and the context meter after every reply.
//!
//! Ctrl-C while a request runs cancels it and returns to the prompt (the message stays in the
//! session; `/retry` sends it again); Ctrl-C at the prompt right after another Ctrl-C, or
//! Ctrl-D on an empty line, ends the chat.

use std::io::Write;
use std::path::Path;

use anyhow::Result;
use panto_compact::CompactOutcome;
use panto_model::{EffectiveContext, Message, Role};

use crate::commands::{
    active_model, catch_up, driver, failure, meter, nothing_text, session_name, turn, write_context,
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
/retry                  send the conversation again (after a cancelled or failed reply)
/exit                   quit (also /quit, Ctrl-D, or Ctrl-C twice)
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
    /// `/compact [instructions]`.
    Compact(Option<&'a str>),
    /// `/retry`.
    Retry,
    /// `/exit` or `/quit`.
    Exit,
    /// A slash command panto does not know.
    Unknown(&'a str),
}

/// Reads one line of input. A line starting with `//` is a message starting with `/`.
pub(crate) fn parse_line(line: &str) -> Line<'_> {
    let input = line.trim();
    if input.is_empty() {
        return Line::Nothing;
    }
    if input.starts_with("//") {
        return Line::Message(&input[1..]);
    }
    let Some(command) = input.strip_prefix('/') else {
        return Line::Message(input);
    };
    let (name, rest) = command
        .split_once(char::is_whitespace)
        .map_or((command, ""), |(n, r)| (n, r.trim()));
    match name {
        "help" | "?" => Line::Help,
        "context" => Line::Context,
        "summary" => Line::Summary,
        "compact" => Line::Compact(Some(rest).filter(|r| !r.is_empty())),
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
        "panto chat: {} ({}). /help lists the commands; Ctrl-C cancels a reply, Ctrl-D quits.",
        path.display(),
        count(driver.context().messages.len(), "message")
    ));
    let mut prompt = Prompt::new();
    // Whether the last thing the user did was Ctrl-C (at the prompt, or cancelling a reply).
    let mut interrupted_last = false;
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
        let new = match parse_line(&line) {
            Line::Nothing => continue,
            Line::Exit => break,
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
            Line::Compact(instructions) => {
                driver = catch_up(driver).await?;
                let mut spinner = Spinner::start("compacting");
                // Ctrl-C cancels the compaction; it is written in one append, or not at all.
                let outcome = tokio::select! {
                    biased;
                    outcome = driver.compact(instructions.map(str::to_owned)) => Some(outcome),
                    () = interrupted() => None,
                };
                spinner.stop();
                match outcome {
                    None => {
                        interrupted_last = true;
                        say("panto: compaction cancelled; nothing was written");
                    }
                    // The compactor has printed its own line; the meter gives the new size.
                    Some(Ok(CompactOutcome::Compacted(_))) => say(&meter(config, &driver, None)),
                    Some(Ok(CompactOutcome::NothingToCompact(n))) => {
                        say(&format!("panto: {}", nothing_text(&n)));
                    }
                    Some(Err(e)) => say(&format!("panto: {}", error_text(&failure(e, config)))),
                }
                continue;
            }
            Line::Retry => {
                driver = catch_up(driver).await?;
                if !awaits_reply(driver.context()) {
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
                let hint = if interrupted_last {
                    "; /retry sends it again"
                } else {
                    ""
                };
                say(&format!("panto: {}{hint}", error_text(&e)));
            }
        }
    }
    Ok(())
}

/// The active compaction summary, if the context starts from one.
pub(crate) fn summary(ctx: &EffectiveContext) -> Option<&str> {
    ctx.compaction.as_ref()?;
    ctx.messages.first()?.compaction_summary()
}

/// Whether the conversation ends with a message that has no reply yet (so `/retry` can send
/// it again).
pub(crate) fn awaits_reply(ctx: &EffectiveContext) -> bool {
    ctx.conversation()
        .last()
        .is_some_and(|m| m.role == Role::User)
}

/// Prints text and a newline on stdout, neutralised on a terminal.
fn print_out(text: &str) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", for_stdout(text))?;
    out.flush()
}
