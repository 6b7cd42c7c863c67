//! The read-only views of a session: `context`, `transcript`, `ledger`.

use std::io::Write;
use std::path::Path;

use anyhow::Result;
use panto_model::{ContentBlock, EffectiveContext, Message, Role, turns};
use serde_json::json;

use crate::config::Config;
use crate::providers;
use crate::screen::say;
use crate::ui::{count, for_stdout};

use super::compact::{manual_run, nothing_text};
use super::{compactor, exiting, load_existing, open_store_reading, print_json, session_name};

// ---------------------------------------------------------------------------------------------
// context

pub(crate) async fn context(config: &Config, path: &Path, as_json: bool) -> Result<()> {
    let store = open_store_reading(config).await?;
    let ctx = load_existing(&store, &session_name(path)).await?.context;
    // The one ruler: every size below comes from this estimate.
    let size = panto_size::estimate(&config.system_prompt.value, "", &ctx.messages);
    let conversation_turns = turns(ctx.conversation()).len();
    if as_json {
        // Written straight from the messages: no second copy of the context in memory.
        let model = config.model.value.as_deref().unwrap_or("");
        let (known, records) = providers::known_windows(config, model);
        let window = known.window().map(|w| {
            json!({
                "tokens": w.tokens,
                "source": w.source.as_str(),
                "origin": providers::window_origin(config, w, &records),
                "auto_compact": config.auto_compact_share(),
                "threshold_tokens": config
                    .auto_compact_share()
                    .map(|s| (w.tokens as f64 * s).floor() as u64),
                "counts_output": known.counts_output,
            })
        });
        let doc = ContextDoc {
            messages: &ctx.messages,
            window,
            estimated_tokens: size.total(),
            conversation_tokens: size.conversation(),
            size: SizeDoc {
                system_prompt: size.system,
                tools: size.tools,
                summary: size.summary,
                messages: size.messages,
                system_prompt_measured: size.measured,
            },
            turns: conversation_turns,
            compaction: ctx.compaction.as_ref().map(|c| {
                json!({
                    "id": c.id,
                    "trigger": c.trigger.as_ref().map(panto_model::Trigger::as_str),
                    "model": c.model,
                    "kept_messages": ctx.kept,
                })
            }),
        };
        let mut out = std::io::BufWriter::new(std::io::stdout().lock());
        serde_json::to_writer(&mut out, &doc)?;
        writeln!(out)?;
        out.flush()?;
        exiting(ctx);
        return Ok(());
    }
    // A long list: through the pager on a terminal.
    let width = crate::ui::stdout_is_terminal().then(crate::screen::columns);
    crate::ui::paged(|out| write_context(out, &path.display().to_string(), config, &ctx, width))?;
    Ok(())
}

/// The human-readable context: a header with the size of the next request, a line with its
/// parts (system prompt, summary, messages; they add up to the total, and the messages' rows
/// below add up to the summary and the messages), the compaction it starts from, and one line
/// per message with its estimated size. Every line quotes the session (text, ids, the path),
/// so each is neutralised on a terminal. With a `width` (a terminal's), every line fits it: the
/// sentences wrap between words, each message's row is cut with `…`.
///
/// # Errors
/// When `out` cannot be written (a closed pipe, for example).
pub(crate) fn write_context(
    out: &mut (impl Write + ?Sized),
    name: &str,
    config: &Config,
    ctx: &EffectiveContext,
    width: Option<usize>,
) -> std::io::Result<()> {
    let sentence = |text: &str| match width {
        Some(w) => crate::fit::wrap_words(text, w, 4),
        None => text.to_owned(),
    };
    let size = panto_size::estimate(&config.system_prompt.value, "", &ctx.messages);
    let total = size.total();
    let model = config.model.value.as_deref().unwrap_or("");
    let (known, records) = providers::known_windows(config, model);
    let window = known.window();
    let share = window.map_or(String::new(), |w| {
        format!(
            " ({} of the {}-token window)",
            crate::ui::percent(total, w.tokens),
            w.tokens
        )
    });
    let header = format!(
        "{name}: {}, {}; about {total} tokens for the next request{share}",
        count(ctx.conversation().len(), "message"),
        count(exchanges(ctx.conversation()), "exchange"),
    );
    writeln!(out, "{}", sentence(&for_stdout(&header)))?;
    writeln!(out, "{}", sentence(&size_parts(&size)))?;
    writeln!(
        out,
        "{}",
        sentence(&for_stdout(&window_line(config, window, &records, total)))
    )?;
    if let Some(c) = &ctx.compaction {
        let line = format!(
            "compacted ({}): the summary, then {} kept verbatim",
            c.id.as_deref().unwrap_or("no id"),
            count(ctx.kept, "message")
        );
        writeln!(out, "{}", sentence(&for_stdout(&line)))?;
    }
    let sizes = panto_size::UsageSizer::default();
    let sizes = panto_size::Sizer::message_sizes(&sizes, &ctx.messages);
    for (i, (m, size)) in ctx.messages.iter().zip(sizes).enumerate() {
        let line = match width {
            Some(w) => crate::fit::fit(
                &for_stdout(&format!(
                    "{i:>4} {:<9} {size:>7}  {}",
                    role_label(m),
                    preview(m, w)
                )),
                w,
            ),
            None => for_stdout(&format!(
                "{i:>4} {:<9} {size:>7}  {}",
                role_label(m),
                preview(m, 100)
            ))
            .into_owned(),
        };
        writeln!(out, "{line}")?;
    }
    Ok(())
}

/// The window line of `panto context`: the window, where it came from, and when requests are
/// compacted ahead (`total` is the next request's estimate).
pub(crate) fn window_line(
    config: &Config,
    window: Option<panto_compact::Window>,
    records: &[crate::windows::Record],
    total: u64,
) -> String {
    let Some(w) = window else {
        return format!(
            "  window unknown: set context_window, or let a local server tell it{}",
            if config.auto_compact_share().is_some() {
                "; auto_compact waits for one (compacting only after an overflow until then)"
            } else {
                ""
            }
        );
    };
    let origin = providers::window_origin(config, w, records);
    let ahead = match config.auto_compact_share() {
        Some(share) => {
            let threshold = (w.tokens as f64 * share).floor() as u64;
            format!(
                "; compacts ahead above {}% ({threshold} tokens){}",
                (share * 100.0).round(),
                if total > threshold {
                    ": the next request will"
                } else {
                    ""
                }
            )
        }
        None => "; compacts only after an overflow (auto_compact is off)".to_owned(),
    };
    format!("  window {} tokens ({origin}){ahead}", w.tokens)
}

/// The parts of a request's size as one line that adds up:
/// `= 2595 system prompt + 120 summary + 3562 messages`, with a note when the system prompt's
/// part is what the provider counted beyond the messages.
pub(crate) fn size_parts(size: &panto_size::RequestEstimate) -> String {
    let mut parts = vec![format!("{} system prompt", size.system)];
    if size.tools > 0 {
        parts.push(format!("{} tools", size.tools));
    }
    if size.summary > 0 {
        parts.push(format!("{} summary", size.summary));
    }
    parts.push(format!("{} messages", size.messages));
    let note = if size.measured {
        " (the system prompt's part is what the provider counted beyond the messages in its last reply)"
    } else {
        ""
    };
    format!("  = {}{note}", parts.join(" + "))
}

/// The exchanges a person counts in `messages`: the prompts they typed (user messages with
/// something other than tool results), each with whatever answered it. The library's turns
/// count a prompt and its answer separately.
pub(crate) fn exchanges(messages: &[Message]) -> usize {
    messages
        .iter()
        .filter(|m| {
            m.role == Role::User
                && m.compaction_summary().is_none()
                && m.content
                    .iter()
                    .any(|b| !matches!(b, ContentBlock::ToolResult(_)))
        })
        .count()
}

/// The `panto context --json` document (Contract 3); extra keys are allowed.
#[derive(serde::Serialize)]
struct ContextDoc<'a> {
    messages: &'a [Message],
    /// The model's window, where it came from, and the share above which requests are
    /// compacted ahead; `null` when unknown.
    window: Option<serde_json::Value>,
    estimated_tokens: u64,
    /// The conversation alone, without the system prompt: what `compact` reports.
    conversation_tokens: u64,
    /// The parts of `estimated_tokens`, which add up to it.
    size: SizeDoc,
    turns: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    compaction: Option<serde_json::Value>,
}

/// The parts of a request's estimated size in `panto context --json`: they add up to
/// `estimated_tokens`, and `summary` and `messages` to `conversation_tokens`.
#[derive(serde::Serialize)]
struct SizeDoc {
    system_prompt: u64,
    tools: u64,
    summary: u64,
    messages: u64,
    /// Whether `system_prompt` is what the provider counted beyond the messages in the last
    /// request it answered (else panto's estimate of the configured system prompt).
    system_prompt_measured: bool,
}

fn role_label(m: &Message) -> &'static str {
    if m.compaction_summary().is_some() {
        return "summary";
    }
    match m.role {
        Role::User => "user",
        Role::Assistant => "assistant",
    }
}

/// A one-line description of a message for humans.
fn preview(m: &Message, width: usize) -> String {
    let mut parts = Vec::new();
    for b in &m.content {
        parts.push(match b {
            ContentBlock::Text(t) => t.text.clone(),
            ContentBlock::Thinking(_) => "(thinking)".to_owned(),
            ContentBlock::ToolUse(u) => format!("[{} {}]", u.name, u.input),
            ContentBlock::ToolResult(r) => format!(
                "[{} {}]",
                if r.failed() { "error" } else { "result" },
                r.content.text()
            ),
            ContentBlock::Image(_) => "[image]".to_owned(),
            ContentBlock::Compaction(c) => c.summary.clone(),
            ContentBlock::Other(o) => format!("[{}]", o.kind),
        });
    }
    let line = parts
        .join(" ")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    crate::fit::fit(&line, width)
}

// ---------------------------------------------------------------------------------------------
// transcript

pub(crate) async fn transcript(config: &Config, path: &Path) -> Result<()> {
    let store = open_store_reading(config).await?;
    let ctx = load_existing(&store, &session_name(path)).await?.context;
    let compactor = compactor(config)?;
    let windows = providers::known_windows(config, &compactor.active().model).0;
    match compactor.prepare_request(&ctx, &manual_run(config, None, false), &windows) {
        Ok((_, text)) => {
            // Megabytes, often: through the pager on a terminal.
            crate::ui::paged(|out| out.write_all(for_stdout(&text).as_bytes()))?;
        }
        Err(nothing) => say(&format!("panto: {}", nothing_text(&nothing, config))),
    }
    exiting(ctx);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// ledger

/// `panto ledger SESSION [--json]`: the whole record stored on the active compaction entry
/// (what the summary's rendering may have left out included).
pub(crate) async fn ledger(config: &Config, path: &Path, as_json: bool) -> Result<()> {
    let store = open_store_reading(config).await?;
    let name = session_name(path);
    let ctx = load_existing(&store, &name).await?.context;
    if ctx.compaction.is_none() {
        say(&format!(
            "panto: {name} has not been compacted, so there is no ledger yet (the conversation is all in the context: `panto context {name}`)"
        ));
        if as_json {
            print_json(&serde_json::Value::Null)?;
        }
        return Ok(());
    }
    // A ledger stored but unreadable is not an empty one: say so, and where it is.
    let stored = ctx
        .compaction
        .as_ref()
        .and_then(|c| c.extra.get(panto_compact::LEDGER_FIELD));
    if let Some(value) = stored
        && panto_compact::Ledger::from_json(value).is_none()
    {
        let id = ctx.compaction.as_ref().and_then(|c| c.id.clone());
        return Err(crate::bad_input(format!(
            "{name}: the ledger stored on the latest compaction entry{} (field `{}`) cannot be read; the summary still carries its rendering (`panto context {name}`)",
            id.map_or_else(String::new, |id| format!(" {id}")),
            panto_compact::LEDGER_FIELD
        )));
    }
    let ledger = panto_compact::previous_ledger(&ctx);
    if as_json {
        print_json(&ledger.to_json())?;
        return Ok(());
    }
    if ledger.is_empty() {
        let mut out = std::io::stdout().lock();
        if stored.is_some() {
            writeln!(out, "the ledger of {} records nothing", for_stdout(&name))?;
        } else {
            writeln!(
                out,
                "the latest compaction of {} stores no ledger (another program or an earlier panto wrote it)",
                for_stdout(&name)
            )?;
        }
        out.flush()?;
    } else {
        // The whole record, often long: through the pager on a terminal.
        let text = ledger.render();
        crate::ui::paged(|out| out.write_all(for_stdout(&text).as_bytes()))?;
    }
    Ok(())
}
