//! The send and chat path: one turn to the provider, the driver over a session, the meter.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{Result, anyhow};
use panto_compact::{
    CompactError, Conflict, Driver, EffectiveContext, ModelRef, Reply, Role, SessionChange,
    StoreError,
};
use panto_model::{Cost, Message};
use panto_provider::{PromptCache, RequestOptions, StreamEvent};

use crate::config::Config;
use crate::screen::{Spinner, say};
use crate::store_value::Choice;
use crate::ui::{Cancel, Meter};
use crate::{Cancelled, bad_input, providers};

use super::failure::failure;
use super::{
    CliDriver, active_model, compactor, open_store, report_warnings, session_name, store_error,
};

// ---------------------------------------------------------------------------------------------
// send and chat

/// Streams assistant text to stdout as it arrives; stops the spinner at the first part of the
/// answer (a retry notice is not one: `ShowRetries` prints it above the spinner).
fn stream_to_stdout(spinner: &mut Spinner) -> impl FnMut(StreamEvent<'_>) + Send + '_ {
    move |event| {
        if matches!(event, StreamEvent::Retry(_)) {
            return;
        }
        spinner.stop();
        if let StreamEvent::Text(text) = event {
            crate::screen::answer(text);
        }
    }
}

pub(crate) async fn send(config: &Config, path: &Path, message: String) -> Result<()> {
    if message.trim().is_empty() {
        return Err(bad_input(
            "MESSAGE is empty: nothing was sent or written; give the text to send",
        ));
    }
    let active = active_model(config, false)?;
    let name = session_name(path);
    let mut driver = driver(config, active, &name).await?;
    // The meter is for a person watching; a script reading stderr gets only messages (and the
    // history is read for the meter's cost only when it is shown).
    let watched = crate::ui::stderr_is_terminal();
    let earlier = if watched {
        earlier_cost(config, &name).await
    } else {
        Cost::default()
    };
    // An earlier `panto send` of the same message stored it and failed before its reply was
    // written: answer it, rather than store it a second time.
    let new = if stored_unanswered(driver.context(), &message) {
        say(&format!(
            "panto: this message is already in {name} without an answer (an earlier send stored it, then failed); answering it instead of storing it again"
        ));
        Vec::new()
    } else {
        vec![Message::user_text(message)]
    };
    let reply = turn(config, &mut driver, new, &mut Cancel::signal()).await??;
    if watched {
        say(&meter(&driver, Some(&reply), earlier));
    }
    Ok(())
}

/// The context meter: the size of the next request (system prompt included, as
/// `panto context` counts it, from the same ruler) with its share of the model's window when
/// the window is known (the driver's, `Driver::window`), the tokens of the request just
/// answered as the provider counted them, the session's cost so far (`earlier`, what its
/// history cost when the driver opened it ([`earlier_cost`]), and what the driver spent since),
/// and the active model. When the window is unknown it says so once per run.
pub(crate) fn meter(driver: &CliDriver, reply: Option<&Reply>, earlier: Cost) -> String {
    static SAID_UNKNOWN: AtomicBool = AtomicBool::new(false);
    let model = driver.compactor().active().model.as_str();
    // The driver's window: the CLI's (configured, kept, discovered, the catalogue's) and what
    // it learned since.
    let window = driver.window().map(|w| w.tokens);
    let say_unknown = window.is_none() && !SAID_UNKNOWN.swap(true, Ordering::Relaxed);
    // Said once, with the unknown window: what makes the share appear.
    let hint = if say_unknown {
        "\nhint: set context_window to see how full the window is"
    } else {
        ""
    };
    let line = crate::ui::describe_meter(&Meter {
        answered: reply.map(|r| r.message.usage.as_ref()),
        next_request: driver.estimate().total(),
        window,
        say_unknown,
        model,
        auto_compact: driver.next_request().auto_compact,
        spent: Some(earlier + driver.spent().total()),
    });
    format!("{line}{hint}")
}

/// What session `name`'s history cost before this run (`panto cost`'s totals), for the meter:
/// nothing when the history cannot be read (the meter then counts this run's requests alone;
/// `panto cost` names what is wrong).
pub(crate) async fn earlier_cost(config: &Config, name: &str) -> Cost {
    match super::cost::session_cost(config, name).await {
        Ok(report) => report.map(|r| r.totals).unwrap_or_default(),
        Err(e) => {
            tracing::debug!("the meter counts this run alone: {e:#}");
            Cost::default()
        }
    }
}

/// How session `name`'s requests use the prompt cache: as `prompt_cache` and `cache_ttl` say,
/// with the conversation's key (docs/providers.md, "Prompt caching").
pub(crate) fn prompt_cache(config: &Config, name: &str) -> PromptCache {
    if !config.prompt_cache.value {
        return PromptCache::off();
    }
    PromptCache::new()
        .with_ttl(config.cache_ttl.value)
        .with_key(cache_key(config, name))
}

/// The conversation's `prompt_cache_key`: `panto-` and a 128-bit hash (FNV-1a) of the store
/// (redacted: a database password never enters it) and the session (a file's absolute path), so
/// that one conversation's requests share it, no other conversation's do, and neither name
/// nor path travels in clear.
pub(crate) fn cache_key(config: &Config, name: &str) -> String {
    let absolute = |path: &Path| {
        std::fs::canonicalize(path)
            .or_else(|_| std::env::current_dir().map(|d| d.join(path)))
            .map_or_else(|_| path.display().to_string(), |p| p.display().to_string())
    };
    let identity = match crate::store_value::parse(&config.store.value) {
        Ok(Choice::Jsonl(dir)) => absolute(&dir.join(name)),
        Ok(Choice::Sqlite(file)) => format!("sqlite:{}\u{0}{name}", absolute(&file)),
        _ => format!(
            "{}\u{0}{name}",
            crate::store_value::redacted(&config.store.value)
        ),
    };
    let mut hash: u128 = 0x6c62_272e_07bb_0142_62b8_2175_6295_c58d;
    for byte in identity.bytes() {
        hash ^= u128::from(byte);
        hash = hash.wrapping_mul(0x0000_0000_0100_0000_0000_0000_0000_013b);
    }
    format!("panto-{hash:032x}")
}

/// Whether `message` is a prompt of the conversation that no reply follows: one an earlier
/// send stored before it failed (the only way a prompt goes unanswered).
fn stored_unanswered(ctx: &EffectiveContext, message: &str) -> bool {
    let conversation = ctx.conversation();
    let after = conversation
        .iter()
        .rposition(|m| m.role == Role::Assistant)
        .map_or(0, |at| at + 1);
    conversation[after..]
        .iter()
        .any(|m| m.role == Role::User && m.text() == message)
}

/// How often a turn starts again when another writer appended first: before its prompt was
/// stored (the prompt is sent again) or while the compaction ahead of its request was written
/// (the stored prompt is answered).
const PROMPT_CONFLICTS: usize = 3;

/// A turn that failed, and what of it is stored when another writer's append was the cause.
struct Failed {
    error: anyhow::Error,
    conflict: Option<Conflict>,
}

impl From<anyhow::Error> for Failed {
    fn from(error: anyhow::Error) -> Failed {
        Failed {
            error,
            conflict: None,
        }
    }
}

/// One user turn (`new` is the prompt, or nothing to resend the conversation as it stands):
/// catches up with other writers, then sends. When another writer appended first, the turn
/// goes on from the session as it is now (a few times at most): a prompt that was not stored
/// is sent again, and one that was stored (the compaction ahead of its request lost) is
/// answered without being stored again, unless another writer's reply answered it already
/// (that reply is shown). A conflict when the reply is appended is reported: the prompt stays
/// in the session, and the same `panto send` answers it. Returns the outcome of the turn.
///
/// # Errors
/// When the session cannot be read again; the outcome of the turn is the inner result.
pub(crate) async fn turn(
    config: &Config,
    driver: &mut CliDriver,
    mut new: Vec<Message>,
    cancel: &mut Cancel,
) -> Result<Result<Reply>> {
    catch_up(driver).await?;
    let mut starts = 1;
    loop {
        let result = match send_one(config, driver, new.clone(), cancel).await {
            // The model's recall calls are answered and the answers sent, until it replies.
            // The prompt is stored and answered by then: a conflict on the tool results ends
            // the turn (starting it again would store the prompt twice).
            Ok(reply) => answer_tools(config, driver, reply, cancel)
                .await
                .map_err(|f| Failed::from(f.error)),
            failed => failed,
        };
        // What the turn taught of the window is kept for the next command and conversation.
        let model = driver.compactor().active().model.clone();
        providers::remember(config, &model, &driver.windows());
        let failed = match result {
            Ok(reply) => return Ok(Ok(reply)),
            Err(failed) => failed,
        };
        match failed.conflict {
            Some(Conflict::NotStored) if starts <= PROMPT_CONFLICTS => {}
            Some(Conflict::CompactionLost) if starts <= PROMPT_CONFLICTS => new.clear(),
            _ => return Ok(Err(failed.error)),
        }
        starts += 1;
        catch_up(driver).await?;
        if new.is_empty() && !driver.awaits_reply() {
            return Ok(answered_by_another(driver));
        }
    }
}

/// When another writer's reply answered the turn's stored prompt while its compaction was
/// written: that reply, printed as this turn's would have been, and said so.
fn answered_by_another(driver: &CliDriver) -> Result<Reply> {
    let answer = driver
        .context()
        .conversation()
        .iter()
        .rev()
        .find(|m| m.role == Role::Assistant)
        .cloned()
        .ok_or_else(|| anyhow!("the session changed and holds no reply to show"))?;
    say(&format!(
        "panto: another writer's reply, in {}, answered your message meanwhile:",
        driver.log().session()
    ));
    crate::screen::answer(&answer.text());
    crate::screen::answer("\n");
    Ok(Reply::new(answer, None))
}

/// A conversation driver over session `name` of the configured store, loaded now (a session
/// that does not exist yet is the empty conversation: the prompt's append creates it). It
/// holds no lock: each append checks that the session still ends where the driver last saw it.
pub(crate) async fn driver(config: &Config, active: ModelRef, name: &str) -> Result<CliDriver> {
    let store = open_store(config).await?;
    // A lock path panto must refuse is reported before any model is asked, not after.
    store.prepare_append(name).await.map_err(store_error)?;
    let mut compactor = compactor(config)?;
    compactor.set_active(active);
    let (driver, warnings) = Driver::open(compactor, store, name)
        .await
        .map_err(store_error)?;
    report_warnings(&warnings);
    let mut driver = driver
        .with_system(config.system_prompt.value.clone())
        .with_max_output_tokens(config.max_output_tokens.value)
        .with_auto_compact(config.auto_compact_share())
        .with_request_options(RequestOptions::new().with_cache(prompt_cache(config, name)))
        .with_prices(config.prices())
        .with_recall_tool();
    let model = driver.compactor().active().model.clone();
    give_windows(config, &mut driver, &model).await;
    Ok(driver)
}

/// Gives `driver` everything known of the window of `model` (configured, learned and
/// discovered ones kept in the data folder, the catalogue's), and, when proactive compaction
/// needs one and none but the catalogue's guess is known, asks the server for it once (a server of the user's own: llama-server, Ollama, vLLM, LM Studio; the answer,
/// or that there was none, is kept). A server that cannot be asked costs nothing but the
/// question: the request that follows says what is wrong.
pub(crate) async fn give_windows(config: &Config, driver: &mut CliDriver, model: &str) {
    driver.set_windows(providers::known_windows(config, model).0);
    let asked = providers::kept_windows(config, model)
        .iter()
        .any(|r| r.source == panto_compact::WindowSource::Discovered.as_str());
    if driver.auto_compact().is_none()
        || !providers::told_nothing(driver.window())
        || asked
        || !providers::own_server(config)
    {
        return;
    }
    match providers::discover(config, model).await {
        Ok(Some(record)) => {
            if let Some(window) = record.window() {
                driver.learn_window(window);
            }
        }
        Ok(None) => {}
        Err(e) => tracing::info!(error = %e, "the server could not be asked for its window"),
    }
}

/// Sends `new` (one user message, or nothing to resend the conversation) and prints the
/// streamed reply. Ctrl-C cancels the request: the message stays in the session (it is
/// appended before the request goes out) and no reply, whole or partial, is appended.
async fn send_one(
    config: &Config,
    driver: &mut CliDriver,
    new: Vec<Message>,
    cancel: &mut Cancel,
) -> Result<Reply, Failed> {
    let name = driver.log().session().to_owned();
    let mut spinner = Spinner::start("waiting for the model");
    let mut printed = false;
    let result = {
        let mut sink = stream_to_stdout(&mut spinner);
        let mut counting = |event: StreamEvent<'_>| {
            if matches!(event, StreamEvent::Text(_)) {
                printed = true;
            }
            sink(event);
        };
        let sending = driver.send(new, &mut counting);
        // Polled first, the send appends the message before Ctrl-C is listened to.
        tokio::select! {
            biased;
            result = sending => Some(result),
            () = cancel.cancelled() => None,
        }
    };
    spinner.stop();
    let Some(result) = result else {
        crate::screen::end_answer_line();
        return Err(anyhow::Error::new(Cancelled(format!(
            "cancelled: no reply was appended; your message stays in {name}"
        )))
        .into());
    };
    let reply = match result {
        Ok(reply) => reply,
        Err(e) => {
            if !printed && let CompactError::ReplyNotAppended { reply, .. } = &e {
                // An answer the session could not take is still the user's: shown, never
                // dropped (the error below says it was not written).
                crate::screen::answer(&reply.text());
                crate::screen::answer("\n");
            }
            // A reply cut short ends its line before the error is said.
            crate::screen::end_answer_line();
            let hopeless = !super::failure::retry_helps(&e);
            let conflict = e.conflict();
            let e = failure(e, config);
            let error = if hopeless {
                e.context(super::failure::Hopeless)
            } else {
                e
            };
            return Err(Failed { error, conflict });
        }
    };
    if !printed {
        // The provider did not stream: print the whole answer now.
        crate::screen::answer(&reply.message.text());
    }
    crate::screen::answer("\n");
    if reply.compaction.is_some() {
        say("panto: the retried request was answered");
    }
    Ok(reply)
}

/// The tool loop, the smallest that runs the recall tool: answers the tool calls of `reply`
/// (`tools::results`) and sends the results, again for the next reply, until a reply calls no
/// tool (or `tools::MAX_ROUNDS` rounds). Returns the last reply.
///
/// # Errors
/// As the send of the results.
async fn answer_tools(
    config: &Config,
    driver: &mut CliDriver,
    mut reply: Reply,
    cancel: &mut Cancel,
) -> Result<Reply, Failed> {
    for _ in 0..super::tools::MAX_ROUNDS {
        let results = super::tools::results(driver, &reply.message).await;
        if results.is_empty() {
            break;
        }
        let results = Message::new(Role::User, results);
        reply = send_one(config, driver, vec![results], cancel).await?;
    }
    Ok(reply)
}

/// The driver again, over the session as it is now, when another writer appended since it
/// last looked; says so on stderr. A session that vanished (moved away, deleted) or was
/// replaced (by a shorter file, or by another conversation of any length: the record the log
/// last wrote or read is not where it was, `SessionLog::change`) is not continued: the chat
/// would go on from another conversation, or an empty one.
///
/// # Errors
/// When the session cannot be read, or vanished or was replaced (bad input: exit 2).
pub(crate) async fn catch_up(driver: &mut CliDriver) -> Result<()> {
    let name = driver.log().session().to_owned();
    let change = match driver.log().change().await {
        Ok(change) => change,
        // The store cannot say now (a database out of reach past its reconnect time): go on
        // from what this driver saw. The prompt's append is conditional on it, and says what is
        // wrong if the store is still out of reach; a chat is not ended by it.
        Err(e @ StoreError::Unavailable { .. }) => {
            say(&format!(
                "panto: warning: cannot tell whether {name} changed: {}",
                crate::ui::error_text(&store_error(e))
            ));
            return Ok(());
        }
        Err(e) => return Err(store_error(e)),
    };
    match change {
        SessionChange::Unchanged => return Ok(()),
        SessionChange::Appended(_) => {}
        SessionChange::Gone => return Err(bad_input(vanished(&name, true))),
        _ => return Err(bad_input(vanished(&name, false))),
    }
    let warnings = driver.reload().await.map_err(store_error)?;
    report_warnings(&warnings);
    say(&format!(
        "panto: {name} changed (another writer appended); continuing from it as it is now ({} messages)",
        driver.context().messages.len()
    ));
    Ok(())
}

/// What is said of a session that vanished (`gone`) or was replaced while a command held it.
fn vanished(name: &str, gone: bool) -> String {
    let what = if gone {
        "is gone since panto last read it (moved away or deleted)"
    } else {
        "was replaced since panto last read it (it no longer holds the conversation panto read and wrote)"
    };
    format!(
        "{name} {what}, so the chat stops here rather than go on from a conversation that is not this one; nothing was written. `panto chat {name}` starts again from whatever is there now"
    )
}
