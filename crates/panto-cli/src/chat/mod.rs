//! `panto chat`: the interactive loop, its slash commands (`/help`, `/context`, `/summary`,
//! `/compact`, `/undo`, `/model`, `/clear`, `/retry`, `/exit`), the last exchange and the meter when a
//! chat resumes, and the context meter after every reply. The input (raw-mode keys, the
//! draft, the queue) is `input.rs`; the picker that `panto chat` without a SESSION shows is
//! `picker.rs`; what one line asks for is `line.rs`.
//!
//! Ctrl-C while a request runs cancels it and returns to the prompt (the message stays in the
//! session; `/retry` sends it again). Each reply ends in [`Chat::replied`], the one place
//! where what follows a finished reply is decided.

mod line;
mod picker;

use std::path::Path;

use anyhow::Result;
use panto_compact::{CompactError, CompactOutcome, ModelRef, Reply};
use panto_model::{ContentBlock, Cost, EffectiveContext, Message, Role};
use panto_transcript::cut::{Budget, Cut, head};

use crate::commands::{
    CliDriver, active_model, catch_up, driver, earlier_cost, failure, manual_run, meter,
    next_session_name, nothing_text, open_store, turn, undone_text, write_context,
};
use crate::config::Config;
use crate::input::{Input, Prompt};
use crate::screen::{Spinner, print, say};
use crate::ui::{count, error_text};

pub(crate) use line::{COMMANDS, HELP, Line, parse_line};

/// Runs the chat over session `session` of the configured store (created when it does not
/// exist); without one, offers the store's recent sessions to pick from.
///
/// # Errors
/// A missing provider or model, a session that cannot be opened or read again (or that
/// vanished while the chat ran), or standard input that cannot be read. A failed or cancelled
/// reply is reported and the chat goes on.
pub(crate) async fn chat(config: &Config, session: Option<&Path>) -> Result<()> {
    let active = active_model(config, false)?;
    let mut prompt = Prompt::new(COMMANDS);
    let name = match session {
        Some(path) => crate::stores::session_name(path),
        None => match picker::pick(config, &mut prompt).await? {
            Some(name) => name,
            None => return Ok(()),
        },
    };
    let driver = driver(config, active, &name).await?;
    let earlier = earlier_cost(config, &name).await;
    say(&format!(
        "panto chat: {name} ({}); /help lists commands",
        count(driver.context().messages.len(), "message")
    ));
    say("panto: Ctrl-C cancels a reply; Ctrl-D quits");
    if show_last_exchange(driver.context())? {
        say(&meter(&driver, None, earlier));
    }
    let chat = Chat {
        config,
        driver,
        earlier,
        prompt,
        held: None,
    };
    let result = chat.run().await;
    crate::screen::clear();
    result
}

/// A chat in progress.
struct Chat<'a> {
    config: &'a Config,
    driver: CliDriver,
    /// What the session's history cost when the chat opened it: the meter adds the driver's
    /// requests to it, to show the session's cost so far.
    earlier: Cost,
    prompt: Prompt,
    /// A bare command word held back, sent if typed again right away.
    held: Option<String>,
}

/// What to do after a line.
enum Flow {
    Go,
    Quit,
}

impl Chat<'_> {
    async fn run(mut self) -> Result<()> {
        // Whether the last thing read was Ctrl-C (plain lines only: the terminal's prompt
        // counts its own).
        let mut interrupted_last = false;
        loop {
            let line = match self.prompt.read().await? {
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
            if let Flow::Quit = self.line(&line).await? {
                break;
            }
        }
        Ok(())
    }

    /// Does what one line asks.
    async fn line(&mut self, line: &str) -> Result<Flow> {
        let config = self.config;
        let held_before = self.held.take();
        let new = match parse_line(line) {
            Line::Nothing => return Ok(Flow::Go),
            Line::Exit => return Ok(Flow::Quit),
            Line::Habit(word) if held_before.as_deref() != Some(word) => {
                say(&format!(
                    "panto: `{word}` was not sent; did you mean /{}?",
                    word.to_lowercase()
                ));
                say(&format!(
                    "panto: type `{word}` again to send it as a message"
                ));
                self.held = Some(word.to_owned());
                return Ok(Flow::Go);
            }
            Line::Habit(word) => vec![Message::user_text(word)],
            Line::Help => {
                print(HELP)?;
                return Ok(Flow::Go);
            }
            Line::Unknown(name) => {
                say(&format!(
                    "panto: unknown command {name}; /help lists the commands"
                ));
                return Ok(Flow::Go);
            }
            Line::Context => {
                self.catch_up().await?;
                let mut out = Vec::new();
                let name = self.driver.log().session().to_owned();
                let width = Some(crate::screen::columns());
                write_context(&mut out, &name, config, self.driver.context(), width)?;
                print(String::from_utf8_lossy(&out).trim_end())?;
                return Ok(Flow::Go);
            }
            Line::Summary => {
                self.catch_up().await?;
                match summary(self.driver.context()) {
                    Some(text) => print(text.trim_end())?,
                    None => say("panto: no summary yet: this session has not been compacted"),
                }
                return Ok(Flow::Go);
            }
            Line::Recall(query) => {
                self.catch_up().await?;
                crate::commands::recall_in_chat(&self.driver, query).await?;
                return Ok(Flow::Go);
            }
            Line::Compact {
                instructions,
                force,
            } => {
                self.catch_up().await?;
                self.compact(instructions, force).await?;
                return Ok(Flow::Go);
            }
            Line::Undo => {
                self.catch_up().await?;
                match self.driver.undo().await {
                    Ok(undone) => {
                        say(&format!("panto: {}", undone_text(&undone, "/undo")));
                        say(&meter(&self.driver, None, self.earlier));
                    }
                    Err(e @ CompactError::NothingToUndo(_)) => say(&format!("panto: {e}")),
                    Err(e) => say(&format!("panto: {}", error_text(&failure(e, config)))),
                }
                return Ok(Flow::Go);
            }
            Line::Model(name) => {
                self.model(name).await;
                return Ok(Flow::Go);
            }
            Line::Clear => {
                self.clear().await?;
                return Ok(Flow::Go);
            }
            Line::Retry => {
                self.catch_up().await?;
                if !self.driver.awaits_reply() {
                    say("panto: nothing to resend: the last message already has its reply");
                    return Ok(Flow::Go);
                }
                Vec::new()
            }
            Line::Message(text) => vec![Message::user_text(text)],
        };
        self.send(new).await?;
        Ok(Flow::Go)
    }

    /// The driver again, over the session as it is now.
    async fn catch_up(&mut self) -> Result<()> {
        catch_up(&mut self.driver).await
    }

    /// Sends `new` (a message, or nothing to resend the conversation) and waits for the reply
    /// while the keys go on being read.
    async fn send(&mut self, new: Vec<Message>) -> Result<()> {
        let (key, mut cancel) = Prompt::cancel();
        let sending = turn(self.config, &mut self.driver, new, &mut cancel);
        let result = Box::pin(self.prompt.busy(sending, key)).await??;
        self.replied(result);
        Ok(())
    }

    /// A reply has finished (answered, failed or cancelled): the meter, or what went wrong.
    /// Queued messages are sent next only after an answer; otherwise they go back into the
    /// draft, unsent.
    fn replied(&mut self, result: Result<Reply>) {
        let e = match result {
            Ok(reply) => {
                say(&meter(&self.driver, Some(&reply), self.earlier));
                return;
            }
            Err(e) => e,
        };
        if e.is::<crate::Cancelled>() {
            say(&format!("panto: {}; /retry sends it again", error_text(&e)));
        } else {
            say(&format!("panto: {}", error_text(&e)));
            if self.driver.awaits_reply() {
                say(if e.is::<crate::commands::Hopeless>() {
                    "panto: your message stays in the session"
                } else {
                    "panto: your message stays in the session; /retry sends it again"
                });
            }
        }
        self.prompt.unqueue();
    }

    /// `/compact [--force] [instructions]`: compacts now and says what happened.
    async fn compact(&mut self, instructions: Option<&str>, force: bool) -> Result<()> {
        let config = self.config;
        let mut spinner = Spinner::start("compacting");
        let run = manual_run(config, instructions.map(str::to_owned), force);
        let (key, mut cancel) = Prompt::cancel();
        let driver = &mut self.driver;
        // Ctrl-C cancels the compaction; it is written in one append, or not at all.
        let compacting = async {
            tokio::select! {
                biased;
                outcome = driver.compact_with(run) => Some(outcome),
                () = cancel.cancelled() => None,
            }
        };
        let outcome = Box::pin(self.prompt.busy(compacting, key)).await?;
        spinner.stop();
        match outcome {
            None => {
                say("panto: compaction cancelled; nothing was written");
                self.prompt.unqueue();
            }
            // The compactor has printed its own line; the meter gives the new size.
            Some(Ok(CompactOutcome::Compacted(_))) => {
                say(&meter(&self.driver, None, self.earlier));
            }
            Some(Ok(CompactOutcome::NothingToCompact(n))) => {
                say(&format!("panto: {}", nothing_text(&n, config)));
            }
            Some(Err(e @ CompactError::NothingToClear { .. })) => say(&format!("panto: {e}")),
            Some(Err(CompactError::NotSmaller(n))) => say(&format!(
                "panto: {n}; nothing was written\nhint: /compact --force writes it anyway"
            )),
            Some(Err(e)) => say(&format!("panto: {}", error_text(&failure(e, config)))),
        }
        Ok(())
    }

    /// `/model [NAME]`: names the active model, or uses NAME for the next requests.
    async fn model(&mut self, name: Option<&str>) {
        let Some(name) = name else {
            say(&format!(
                "panto: the model is {}; /model NAME uses another one for the next requests",
                self.driver.compactor().active().model
            ));
            return;
        };
        let before = self.driver.compactor().active().clone();
        let after = ModelRef::new(before.provider.clone(), name);
        self.driver.compactor_mut().set_active(after);
        // The window of the old model says nothing of the new one's.
        crate::commands::give_windows(self.config, &mut self.driver, name).await;
        say(&format!(
            "panto: the next requests go to {name} (not {})",
            before.model
        ));
        say(&meter(&self.driver, None, self.earlier));
    }

    /// `/clear`: goes on in a new session of the same store, named after the current one (the
    /// first free `notes-2.jsonl`, `notes-3.jsonl`, ...), with the same model; the old session
    /// stays as it is.
    async fn clear(&mut self) -> Result<()> {
        let config = self.config;
        let store = open_store(config).await?;
        let from = self.driver.log().session().to_owned();
        let name = next_session_name(&store, &from).await?;
        let active = self.driver.compactor().active().clone();
        self.driver = driver(config, active, &name).await?;
        // A new session: nothing spent in it yet (a free name holds nothing).
        self.earlier = Cost::default();
        say(&format!("panto: a new conversation, in {name}"));
        say(&format!("panto: the earlier one stays in {from}"));
        Ok(())
    }
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
    print("The last exchange:")?;
    for line in cut_lines(&prompt, PROMPT_LINES).lines() {
        print(&format!("> {line}"))?;
    }
    match answer {
        Some(text) => print(&cut_lines(&text, REPLY_LINES))?,
        None => print("(no answer yet: /retry sends the message)")?,
    }
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
    let text = text.trim_end();
    let kept = head(text, Budget::lines(max), Cut::Line);
    let joined = kept.lines().collect::<Vec<_>>().join("\n");
    if kept.len() == text.len() {
        return joined;
    }
    format!(
        "{joined}\n[... {} more; /context lists the whole conversation]",
        count(text[kept.len()..].lines().count(), "line")
    )
}

/// The active compaction summary, if the context starts from one.
pub(crate) fn summary(ctx: &EffectiveContext) -> Option<&str> {
    ctx.compaction.as_ref()?;
    ctx.messages.first()?.compaction_summary()
}

#[cfg(test)]
mod tests {
    use super::cut_lines;

    #[test]
    fn long_text_is_cut_to_its_first_lines_saying_how_many_more() {
        assert_eq!(cut_lines("a\nb\nc\n\n", 3), "a\nb\nc");
        assert_eq!(
            cut_lines("a\r\nb\nc\nd", 2),
            "a\nb\n[... 2 lines more; /context lists the whole conversation]"
        );
        assert_eq!(cut_lines("", 2), "");
    }
}
