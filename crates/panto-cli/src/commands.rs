//! The commands: `context`, `transcript`, `compact`, `send`, `chat`, `config`, `window`,
//! `trust`.
//!
//! Human-readable output goes through `ui::for_stdout` / `ui::say`, which neutralise control
//! characters on a terminal; `--json` documents are written as they are.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{Context as _, Result, anyhow};
use panto_compact::{
    AttemptFailure, CompactError, CompactOutcome, CompactRun, CompactionPrompt, Compactor,
    CompactorConfig, Conversation, Driver, Loaded, ModelRef, NothingToCompact, Reply, SessionLog,
    Store, StoreError,
};
use panto_model::{ContentBlock, EffectiveContext, Message, Role, turns};
use panto_provider::{About, ProviderError, StreamEvent, Wait};
use serde_json::json;

use crate::config::{Config, Flags, Locations, Needs, ProviderKind, Trust, TrustFile, needs};
use crate::ui::{Meter, Spinner, count, for_stdout, interrupted, print_event, say};
use crate::{Cancelled, bad_input, offline, providers};

pub(crate) use crate::stores::{AnyStore, session_name, store_error};

/// A conversation driver over one session of the configured store.
pub(crate) type CliDriver = Driver<AnyStore>;

/// Whether another writer's append made one of ours fail, anywhere in `e`'s chain.
fn is_conflict(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(e);
    while let Some(c) = cause {
        if c.downcast_ref::<StoreError>()
            .is_some_and(StoreError::is_conflict)
        {
            return true;
        }
        cause = c.source();
    }
    false
}

/// Compaction errors about the prompt files are bad input; the rest are failures, with a hint
/// saying what to do next when the cause is clear.
pub(crate) fn failure(e: CompactError, config: &Config) -> anyhow::Error {
    match e {
        CompactError::PromptUnreadable { .. } | CompactError::PromptEmpty { .. } => bad_input(e),
        other => {
            // An answer cut short is said in plain words; the protocol's are the cause.
            let text = match root_cause(&other) {
                Some(p) if panto_providers::cut_short(p) => {
                    let words = p.to_string();
                    let cause = words
                        .split_once(panto_providers::CAUSE)
                        .map_or(words.as_str(), |(_, c)| c);
                    format!(
                        "the connection closed before the reply finished, so nothing of it was kept{}{cause}",
                        panto_providers::CAUSE
                    )
                }
                _ => other.to_string(),
            };
            match hint(&other, config) {
                Some(hint) => anyhow!("{text}\nhint: {hint}"),
                None => anyhow!(text),
            }
        }
    }
}

/// The provider error at the root of a compaction error, if any.
fn root_cause(e: &CompactError) -> Option<&ProviderError> {
    match e {
        CompactError::Provider(p) | CompactError::OverflowAfterCompaction { error: p, .. } => {
            Some(p)
        }
        CompactError::Compaction {
            cause: AttemptFailure::Provider(p),
            ..
        } => Some(p),
        CompactError::BothModelsFailed { second, .. } => match second.as_ref() {
            AttemptFailure::Provider(p) => Some(p),
            _ => None,
        },
        CompactError::OverflowCompactionFailed { compaction, .. } => root_cause(compaction),
        _ => None,
    }
}

fn hint(e: &CompactError, config: &Config) -> Option<String> {
    let kind = config.provider.value;
    let (key_var, url_var) = kind.env_vars().unwrap_or(("", ""));
    if let CompactError::ExceedsWindow { window, .. } = e {
        return Some(format!(
            "shorten the newest message, or use a model with a larger context window; {}",
            if window.source == panto_compact::WindowSource::Configured {
                format!(
                    "if the window is larger than {}, raise `context_window` (in {})",
                    window.tokens,
                    user_config_file(config)
                )
            } else {
                format!(
                    "if the window of {} tokens is out of date, `panto window --forget` forgets it",
                    window.tokens
                )
            }
        ));
    }
    if let CompactError::OverflowNoProgress { .. } = e {
        return Some(
            "shorten the newest message, or use a model with a larger context window".to_owned(),
        );
    }
    if let CompactError::OverflowCompactionFailed { compaction, .. } = e
        && matches!(
            compaction.as_ref(),
            CompactError::NoRoom(_) | CompactError::FoldOverflow { .. }
        )
    {
        return Some(format!(
            "a shorter COMPACTION.md (user or .panto/), a smaller `compaction_max_output_tokens` (in {}), or a compaction_model with a larger window leaves more room",
            user_config_file(config)
        ));
    }
    if let CompactError::OverflowAfterCompaction { .. } = e {
        return Some(
            "the newest message may be too large on its own: shorten it, or use a model with a larger context window".to_owned(),
        );
    }
    if is_conflict(e) {
        return Some(
            "another writer appended to this session while panto waited for the model; to keep messages from interleaving, nothing of this answer was written (a message sent before it stays in the session). Run the command again to continue from the session as it is now".to_owned(),
        );
    }
    Some(match root_cause(e)? {
        ProviderError::Authentication { .. } => {
            format!("check the key in {key_var} (and that it belongs to this provider)")
        }
        ProviderError::Connection { message }
            if message.starts_with(panto_providers::CLOSED_EARLY) =>
        {
            return None;
        }
        ProviderError::Connection { message } => {
            let url = config
                .base_url
                .value
                .as_deref()
                .unwrap_or("the provider's API");
            let check = if message.contains("TLS handshake") {
                format!(
                    "check that {url} serves HTTPS (a local server usually wants an http:// URL)"
                )
            } else if message.contains("(DNS)") {
                format!("check the host name in {url}")
            } else {
                format!("check that the server at {url} is running")
            };
            format!(
                "{check}; another URL: --base-url URL, {url_var}, or `base_url = \"URL\"` in {}",
                user_config_file(config)
            )
        }
        ProviderError::ModelNotFound { .. } => format!(
            "check the model name: --model NAME (or /model NAME in a chat), --compaction-model NAME, or `model = \"NAME\"` in {}",
            user_config_file(config)
        ),
        ProviderError::Timeout { .. } => format!(
            "try again, or raise `timeout_secs` in {} (or pass --timeout-secs)",
            user_config_file(config)
        ),
        ProviderError::WaitExpired { wait, .. } => wait_hint(*wait, config),
        ProviderError::RateLimited {
            retry_after: Some(asked),
            ..
        } if asked.as_secs() > config.max_retry_wait_secs.value => format!(
            "the provider asked to be retried in {}, longer than panto waits (`max_retry_wait_secs` = {} s); try again later",
            About(*asked),
            config.max_retry_wait_secs.value
        ),
        ProviderError::RateLimited { .. } => "wait a moment and try again".to_owned(),
        ProviderError::QuotaExceeded { .. } => "the provider's account has no quota or credit left for this request: check the account's plan and billing (trying again will not help until they change)".to_owned(),
        _ => return None,
    })
}

/// Which setting governs a wait that expired, and its value.
fn wait_hint(wait: Wait, config: &Config) -> String {
    let (key, value, what) = match wait {
        Wait::Connect => (
            "connect_timeout_secs",
            config.connect_timeout_secs.value,
            "connecting",
        ),
        Wait::FirstByte => (
            "first_byte_timeout_secs",
            config.first_byte_timeout_secs.value,
            "the start of a streamed answer",
        ),
        Wait::Idle => (
            "idle_timeout_secs",
            config.idle_timeout_secs.value,
            "the silence between stream events (keep-alive pings do not count)",
        ),
        _ => (
            "timeout_secs",
            config.timeout_secs.value,
            "the whole request, retries included",
        ),
    };
    let flag = if wait == Wait::Request {
        " or --timeout-secs"
    } else {
        ""
    };
    format!(
        "`{key}` ({value} s) bounds {what}; raise it in {}{flag} for a slower model or server",
        user_config_file(config)
    )
}

/// The store of the configuration (`--store`, `store` in config.toml, `PANTO_STORE`): the
/// JSONL session files by default, each SESSION a path; an SQLite file or a PostgreSQL
/// database, each SESSION a name there (`stores::open`).
pub(crate) async fn open_store(config: &Config) -> Result<AnyStore> {
    crate::stores::open(config).await
}

/// The name of a new session next to `name` in `store`, for `/clear`: `notes.jsonl` gives
/// `notes-2.jsonl`, then `notes-3.jsonl`, ... (and `notes-2.jsonl` gives `notes-3.jsonl`): the
/// first that does not exist yet or holds nothing.
///
/// # Errors
/// When the store cannot tell (a session that cannot be read).
pub(crate) async fn next_session_name(store: &AnyStore, name: &str) -> Result<String> {
    let file = name.rsplit('/').next().unwrap_or(name);
    let (stem, ext) = match file.rfind('.') {
        Some(dot) if dot > 0 => name.split_at(name.len() - (file.len() - dot)),
        _ => (name, ""),
    };
    let (base, first) = match stem.rsplit_once('-') {
        Some((base, n))
            if !base.is_empty() && !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) =>
        {
            (base, n.parse::<u64>().unwrap_or(1).saturating_add(1))
        }
        _ => (stem, 2),
    };
    let mut n = first;
    loop {
        let candidate = format!("{base}-{n}{ext}");
        match store.load(&candidate).await {
            Ok(loaded) if loaded.empty => return Ok(candidate),
            Err(StoreError::NotFound { .. }) => return Ok(candidate),
            Ok(_) => n = n.saturating_add(1),
            Err(e) => return Err(store_error(e)),
        }
    }
}

/// Prints the warnings of a load on stderr.
fn report_warnings(warnings: &[String]) {
    for w in warnings {
        say(&format!("panto: warning: {w}"));
    }
}

/// Loads a session for a command that reads it: a missing or empty session is bad input.
async fn load_existing(store: &AnyStore, name: &str) -> Result<Loaded> {
    let loaded = store.load(name).await.map_err(store_error)?;
    if loaded.empty {
        return Err(bad_input(format!(
            "{name}: the session is empty: no entries yet"
        )));
    }
    report_warnings(&loaded.warnings);
    Ok(loaded)
}

/// The compactor for `config`: active model, compaction model, prompt layers, budget, events.
fn compactor(config: &Config) -> Result<Compactor> {
    let compact_error = |e| failure(e, config);
    let active = active_model(config, true)?;
    let compaction_model = match &config.compaction_model.value {
        Some(model) if config.provider.value != ProviderKind::Offline => {
            Some(ModelRef::new(active.provider.clone(), model.clone()))
        }
        _ => None,
    };
    let prompt = CompactionPrompt::load_layers(&config.prompt_layers).map_err(compact_error)?;
    Ok(Compactor::new(active)
        .with_compaction_model(compaction_model)
        .with_prompt(prompt)
        .with_config(
            CompactorConfig::new()
                .with_keep_tokens(config.keep_tokens.value)
                .with_max_output_tokens(config.compaction_max_output_tokens.value)
                .with_context_window(config.context_window.value)
                // The offline summarizer quotes the conversation: that is its whole job.
                .with_extractive_summaries(config.provider.value == ProviderKind::Offline)
                .with_compaction_strategy(config.compaction_strategy.value),
        )
        // What `send` and `chat` requests look like, for native compaction.
        .with_conversation(
            Conversation::new(config.system_prompt.value.clone())
                .with_max_output_tokens(config.max_output_tokens.value),
        )
        .on_event(print_event))
}

/// The active model. With `summarize_only`, the offline summarizer is acceptable.
pub(crate) fn active_model(config: &Config, summarize_only: bool) -> Result<ModelRef> {
    let kind = config.provider.value;
    if kind == ProviderKind::Offline {
        if !summarize_only {
            return Err(bad_input(no_provider(config)));
        }
        let provider = Arc::new(offline::OfflineSummarizer::new());
        return Ok(ModelRef::with_source(provider, offline::MODEL));
    }
    let model = config.model.value.clone().ok_or_else(|| {
        bad_input(format!(
            "no model configured for provider {kind}: pass --model NAME, or write `model = \"NAME\"` in {}",
            user_config_file(config)
        ))
    })?;
    let provider = providers::build(kind, config)?;
    Ok(ModelRef::new(provider, model))
}

/// What to do when no provider is configured: advice that works as given. The user file is
/// named by its path (a project's file may choose the provider only once it is trusted).
fn no_provider(config: &Config) -> String {
    format!(
        "no provider is configured, and the offline summarizer cannot chat.
Choose one for this command with flags:
    --provider anthropic --model claude-sonnet-4-5
or once for every command, in {}:
    provider = \"anthropic\"
    model = \"claude-sonnet-4-5\"
(a project's .panto/config.toml may choose the provider too, once you run `panto trust` in it),
and set the provider's key: ANTHROPIC_API_KEY, OPENAI_API_KEY or GEMINI_API_KEY.
For a local OpenAI-compatible server: --provider openai --base-url http://127.0.0.1:8080/v1 --model NAME",
        user_config_file(config)
    )
}

// ---------------------------------------------------------------------------------------------
// context

pub(crate) async fn context(config: &Config, path: &Path, as_json: bool) -> Result<()> {
    let store = open_store(config).await?;
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
    crate::ui::paged(|out| write_context(out, &path.display().to_string(), config, &ctx))?;
    Ok(())
}

/// The human-readable context: a header with the size of the next request, a line with its
/// parts (system prompt, summary, messages; they add up to the total, and the messages' rows
/// below add up to the summary and the messages), the compaction it starts from, and one line
/// per message with its estimated size. Every line quotes the session (text, ids, the path),
/// so each is neutralised on a terminal.
///
/// # Errors
/// When `out` cannot be written (a closed pipe, for example).
pub(crate) fn write_context(
    out: &mut (impl Write + ?Sized),
    name: &str,
    config: &Config,
    ctx: &EffectiveContext,
) -> std::io::Result<()> {
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
    writeln!(out, "{}", for_stdout(&header))?;
    writeln!(out, "{}", size_parts(&size))?;
    writeln!(
        out,
        "{}",
        for_stdout(&window_line(config, window, &records, total))
    )?;
    if let Some(c) = &ctx.compaction {
        let line = format!(
            "compacted ({}): the summary, then {} kept verbatim",
            c.id.as_deref().unwrap_or("no id"),
            count(ctx.kept, "message")
        );
        writeln!(out, "{}", for_stdout(&line))?;
    }
    let sizes = panto_size::UsageSizer::default();
    let sizes = panto_size::Sizer::message_sizes(&sizes, &ctx.messages);
    for (i, (m, size)) in ctx.messages.iter().zip(sizes).enumerate() {
        let line = format!("{i:>4} {:<9} {size:>7}  {}", role_label(m), preview(m, 100));
        writeln!(out, "{}", for_stdout(&line))?;
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
    if line.chars().count() > width {
        let cut: String = line.chars().take(width.saturating_sub(1)).collect();
        format!("{cut}…")
    } else {
        line
    }
}

// ---------------------------------------------------------------------------------------------
// transcript

pub(crate) async fn transcript(config: &Config, path: &Path) -> Result<()> {
    let store = open_store(config).await?;
    let ctx = load_existing(&store, &session_name(path)).await?.context;
    let compactor = compactor(config)?;
    match compactor.prepare(&ctx, &manual_run(config, None, false)) {
        Ok(prepared) => {
            let text = prepared.into_user_prompt();
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
    let store = open_store(config).await?;
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
    let ledger = panto_compact::previous_ledger(&ctx);
    if as_json {
        print_json(&ledger.to_json())?;
        return Ok(());
    }
    if ledger.is_empty() {
        let mut out = std::io::stdout().lock();
        writeln!(out, "the ledger of {} records nothing", for_stdout(&name))?;
        out.flush()?;
    } else {
        // The whole record, often long: through the pager on a terminal.
        let text = ledger.render();
        crate::ui::paged(|out| out.write_all(for_stdout(&text).as_bytes()))?;
    }
    Ok(())
}

/// Lets go of a loaded context without freeing it message by message: the command is done
/// and the process exits next, which returns the memory at once (on a long session the frees
/// cost about a tenth of the command's time).
fn exiting(ctx: EffectiveContext) {
    std::mem::forget(ctx);
}

// ---------------------------------------------------------------------------------------------
// compact

/// What `panto compact` was asked.
#[derive(Debug, Default)]
pub(crate) struct CompactAsked {
    /// `--instructions`.
    pub instructions: Option<String>,
    /// `--dry-run`.
    pub dry_run: bool,
    /// `--json`.
    pub json: bool,
    /// `--force`.
    pub force: bool,
}

/// A manual compaction run as the configuration asks: a keep budget given with `--keep-tokens`
/// is the run's own (honoured as given); otherwise the compactor keeps at most half of the
/// conversation, so that it summarizes something.
pub(crate) fn manual_run(config: &Config, instructions: Option<String>, force: bool) -> CompactRun {
    let run = CompactRun::manual(instructions).with_force(force);
    if keep_tokens_flag(config) {
        run.with_keep_tokens(config.keep_tokens.value)
    } else {
        run
    }
}

/// Whether `--keep-tokens` was given on the command line.
fn keep_tokens_flag(config: &Config) -> bool {
    matches!(config.keep_tokens.source, crate::config::Source::Flag(_))
}

pub(crate) async fn compact(config: &Config, path: &Path, asked: CompactAsked) -> Result<()> {
    let CompactAsked {
        instructions,
        dry_run,
        json: as_json,
        force,
    } = asked;
    let store = open_store(config).await?;
    let name = session_name(path);
    let mut compactor = compactor(config)?;
    let mut options = manual_run(config, instructions, force);
    // A window learned or discovered for the model bounds the compaction like a stated limit.
    options.context_limit = providers::given_windows(config, &compactor.active().model)
        .window()
        .map(|w| w.tokens);
    let mut spinner = Spinner::start("compacting");
    let outcome = if dry_run {
        let ctx = load_existing(&store, &name).await?.context;
        let outcome = compactor.dry_run(&ctx, options).await;
        exiting(ctx);
        outcome
    } else {
        // No lock while the model summarizes: the append checks that nobody wrote meanwhile.
        store.prepare_append(&name).await.map_err(store_error)?;
        let loaded = load_existing(&store, &name).await?;
        let mut log = SessionLog::new(store.clone(), name.as_str(), loaded.head);
        compactor.compact(&loaded.context, &mut log, options).await
    };
    spinner.stop();
    // What the compaction requests taught of the window is kept for the next command.
    providers::remember(config, &compactor.active().model, None);
    let outcome = outcome
        .map_err(|e| match e {
            CompactError::NotSmaller(n) => anyhow!(
                "{n}\nhint: `panto compact {} --force` writes it anyway",
                path.display()
            ),
            e => failure(e, config),
        })
        .with_context(|| format!("nothing was written to {}", path.display()))?;
    match outcome {
        CompactOutcome::Compacted(c) => {
            let r = &c.report;
            if as_json {
                let doc = json!({
                    "summary": r.summary,
                    "tokens_before": r.tokens_before,
                    "tokens_after": r.tokens_after,
                    "kept_turns": r.plan.kept_turns,
                    "summarized_turns": r.plan.summarized_turns,
                    "model": r.model,
                    "provider": r.provider,
                    "fallback": r.fallback,
                    "degraded": r.degraded,
                    "failed_attempts": r.failed_attempts,
                    "truncated": r.truncated,
                    "dry_run": dry_run,
                    "strategy": if r.native.is_some() { "native" } else { "summary" },
                    "native": r.native,
                    "usage": r.usage.as_ref().and_then(|u| serde_json::to_value(u).ok()),
                    "tokens_counted": "conversation",
                    "id": r.id,
                    "requests": r.requests,
                    "steps": r.steps.iter().map(|s| json!({
                        "turns": s.turns.len(),
                        "messages": s.messages.len(),
                        "model": s.model,
                        "fallback": s.fallback,
                        "input_tokens": s.input_tokens,
                        "max_output_tokens": s.max_output_tokens,
                        "summary_tokens": s.summary_tokens,
                        "elided": s.elided,
                        "rejected": s.rejected,
                    })).collect::<Vec<_>>(),
                    "elided": r.elided.iter().map(|e| json!({
                        "message": e.message_id,
                        "block": e.block,
                        "bytes": e.bytes,
                        "kept": e.kept,
                    })).collect::<Vec<_>>(),
                });
                print_json(&doc)?;
            } else {
                let mut out = std::io::stdout().lock();
                writeln!(out, "{}", for_stdout(r.summary.trim_end()))?;
                out.flush()?;
                if dry_run {
                    say(&format!(
                        "panto: dry run: nothing was written to {}",
                        path.display()
                    ));
                }
            }
        }
        CompactOutcome::NothingToCompact(nothing) => {
            if as_json {
                let doc = json!({
                    "summary": null,
                    "tokens_before": nothing.tokens,
                    "tokens_after": nothing.tokens,
                    "kept_turns": nothing.turns,
                    "summarized_turns": 0,
                    "model": null,
                    "nothing_to_compact": true,
                    "message": nothing.to_string(),
                });
                print_json(&doc)?;
            } else {
                say(&format!("panto: {}", nothing_text(&nothing, config)));
            }
        }
    }
    Ok(())
}

/// Writes one JSON document and a newline on stdout.
fn print_json(doc: &serde_json::Value) -> Result<()> {
    let mut out = std::io::stdout().lock();
    serde_json::to_writer(&mut out, doc)?;
    writeln!(out)?;
    out.flush()?;
    Ok(())
}

/// Why there was nothing to compact, in the words a person counts (not the library's turns),
/// and what would change it.
pub(crate) fn nothing_text(nothing: &NothingToCompact, config: &Config) -> String {
    match nothing.turns {
        0 => "nothing to compact: the conversation is empty".to_owned(),
        1 => "nothing to compact: the conversation is only its newest message (with any tool results answering it), which is always kept verbatim".to_owned(),
        _ if keep_tokens_flag(config) => format!(
            "nothing to compact: the whole conversation (about {} tokens) fits the keep-verbatim budget of {} tokens that --keep-tokens gave; a smaller --keep-tokens summarizes the older part, and without it a manual compaction keeps at most half of the conversation",
            nothing.tokens, nothing.budget
        ),
        _ => format!(
            "nothing to compact: the whole conversation (about {} tokens) fits the keep-verbatim budget of {} tokens; a smaller --keep-tokens (or `keep_tokens` in {}) summarizes the older part",
            nothing.tokens,
            nothing.budget,
            user_config_file(config)
        ),
    }
}

/// The user configuration file, where a setting applies without trusting any project.
pub(crate) fn user_config_file(config: &Config) -> String {
    config.user_file.as_ref().map_or_else(
        || "<config dir>/panto/config.toml".to_owned(),
        |p| p.display().to_string(),
    )
}

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
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(for_stdout(text).as_bytes());
            let _ = out.flush();
            crate::ui::answer_written(text);
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
    let driver = driver(config, active, &session_name(path)).await?;
    let (driver, reply) = turn(config, driver, vec![Message::user_text(message)]).await?;
    let reply = reply?;
    // The meter is for a person watching; a script reading stderr gets only messages.
    if crate::ui::stderr_is_terminal() {
        say(&meter(config, &driver, Some(&reply)));
    }
    Ok(())
}

/// The context meter: the size of the next request (system prompt included, as
/// `panto context` counts it, from the same ruler) with its share of the model's window when
/// the window is known (`providers::known_window`), the tokens of the request just answered as
/// the provider counted them, and the active model. When the window is unknown it says so once
/// per run.
pub(crate) fn meter(config: &Config, driver: &CliDriver, reply: Option<&Reply>) -> String {
    static SAID_UNKNOWN: AtomicBool = AtomicBool::new(false);
    let model = driver.compactor().active().model.as_str();
    // The driver's window: the CLI's (configured, kept, discovered) and what it learned since.
    let window = driver
        .window()
        .into_iter()
        .chain(providers::known_window(config, model))
        .min_by_key(|w| w.tokens)
        .map(|w| w.tokens);
    let say_unknown = window.is_none() && !SAID_UNKNOWN.swap(true, Ordering::Relaxed);
    crate::ui::describe_meter(&Meter {
        answered: reply.map(|r| r.message.usage.as_ref()),
        next_request: driver.estimate().total(),
        window,
        say_unknown,
        model,
        auto_compact: driver.auto_compact(),
    })
}

/// How often a turn starts again when another writer appended between its load and its
/// prompt's append.
const PROMPT_CONFLICTS: usize = 3;

/// One user turn (`new` is the prompt, or nothing to resend the conversation as it stands):
/// catches up with other writers, then sends. When another writer appended between the load
/// and the append of the prompt, nothing has been sent yet, so the turn starts again from the
/// session as it is now (a few times at most); a conflict when the reply is appended is
/// reported (the prompt stays in the session). Returns the driver, for the next turn, and the
/// outcome of this one.
///
/// # Errors
/// When the session cannot be read again; the outcome of the turn is the inner result.
pub(crate) async fn turn(
    config: &Config,
    driver: CliDriver,
    new: Vec<Message>,
) -> Result<(CliDriver, Result<Reply>)> {
    let mut driver = catch_up(driver).await?;
    let mut starts = 1;
    loop {
        let before = driver.log().head();
        let result = send_one(config, &mut driver, new.clone()).await;
        // What the turn taught of the window is kept for the next command and conversation.
        let model = driver.compactor().active().model.clone();
        providers::remember(config, &model, driver.learned_window());
        let prompt_refused =
            result.is_err() && driver.log().conflicted() && driver.log().head() == before;
        if !prompt_refused || starts > PROMPT_CONFLICTS {
            return Ok((driver, result));
        }
        starts += 1;
        driver = catch_up(driver).await?;
    }
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
        .with_auto_compact(config.auto_compact_share());
    let model = driver.compactor().active().model.clone();
    give_windows(config, &mut driver, &model).await;
    Ok(driver)
}

/// Gives `driver` the windows known for `model` (learned and discovered, kept in the data
/// folder), and, when proactive compaction needs one and none is known, asks the server for
/// it once (a server of the user's own: llama-server, Ollama, vLLM, LM Studio; the answer,
/// or that there was none, is kept). A server that cannot be asked costs nothing but the
/// question: the request that follows says what is wrong.
pub(crate) async fn give_windows(config: &Config, driver: &mut CliDriver, model: &str) {
    driver.set_windows(providers::given_windows(config, model));
    let asked = providers::kept_windows(config, model)
        .iter()
        .any(|r| r.source == panto_compact::WindowSource::Discovered.as_str());
    if driver.auto_compact().is_none()
        || driver.window().is_some()
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
async fn send_one(config: &Config, driver: &mut CliDriver, new: Vec<Message>) -> Result<Reply> {
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
            () = interrupted() => None,
        }
    };
    spinner.stop();
    let mut out = std::io::stdout().lock();
    let Some(result) = result else {
        if printed {
            writeln!(out)?;
        }
        return Err(anyhow::Error::new(Cancelled(format!(
            "cancelled: no reply was appended; your message stays in {name}"
        ))));
    };
    let reply = match result {
        Ok(reply) => reply,
        Err(e) => {
            // A reply cut short ends its line before the error is said.
            if printed {
                writeln!(out)?;
                out.flush()?;
            }
            return Err(failure(e, config));
        }
    };
    if !printed {
        // The provider did not stream: print the whole answer now.
        write!(out, "{}", for_stdout(&reply.message.text()))?;
    }
    writeln!(out)?;
    out.flush()?;
    crate::ui::answer_written("\n");
    drop(out);
    if reply.compaction.is_some() {
        say("panto: the retried request was answered");
    }
    Ok(reply)
}

/// The driver again, over the session as it is now, when another writer appended since it
/// last looked; says so on stderr.
pub(crate) async fn catch_up(mut driver: CliDriver) -> Result<CliDriver> {
    if !driver.log().changed().await.map_err(store_error)? {
        return Ok(driver);
    }
    let warnings = driver.reload().await.map_err(store_error)?;
    report_warnings(&warnings);
    say(&format!(
        "panto: {} changed (another writer appended); continuing from it as it is now ({} messages)",
        driver.log().session(),
        driver.context().messages.len()
    ));
    Ok(driver)
}

// ---------------------------------------------------------------------------------------------
// config

pub(crate) fn show_config(config: &Config) -> Result<()> {
    let mut out = std::io::stdout().lock();
    let mut line = |text: String| writeln!(out, "{}", for_stdout(&text));
    for (key, value, source) in config.rows() {
        line(format!("{key:<29} = {value:<30} # {source}"))?;
    }
    let model = config.model.value.as_deref().unwrap_or("");
    let (known, records) = providers::known_windows(config, model);
    let (value, note) = match known.window() {
        Some(w) => (
            w.tokens.to_string(),
            format!(
                "{}{}",
                providers::window_origin(config, w, &records),
                if w.source == panto_compact::WindowSource::Configured {
                    String::new()
                } else {
                    format!(
                        "; kept in {}; `panto window --forget` forgets it",
                        crate::windows::path()
                            .map_or_else(|| "the data folder".to_owned(), |p| p.display().to_string())
                    )
                }
            ),
        ),
        None => (
            "unknown".to_owned(),
            "none configured, learned or discovered for this model; `panto window` asks a local server".to_owned(),
        ),
    };
    line(format!("{:<29} = {value:<30} # {note}", "window"))?;
    let kind = config.provider.value;
    let key = kind
        .env_vars()
        .map(|(var, _)| (var, std::env::var_os(var).map(|v| !v.is_empty())));
    let (state, note) = key_state(key);
    line(format!("{:<29} = {state:<30} # {note}", "api_key"))?;
    let prompt =
        CompactionPrompt::load_layers(&config.prompt_layers).map_err(|e| failure(e, config))?;
    let prompt_source = prompt
        .source()
        .map_or_else(|| "built-in".to_owned(), |p| p.display().to_string());
    line(format!("{:<29} = {prompt_source}", "compaction_prompt"))?;
    let (state, note) = match &config.trust {
        Trust::NoProject => (
            "no project",
            "no .panto folder above the working directory".to_owned(),
        ),
        Trust::Trusted(root) => ("trusted", format!("project {}", root.display())),
        Trust::Untrusted(root) => (
            "untrusted",
            format!(
                "project {}: its file cannot set {}; `panto trust {}` allows it",
                root.display(),
                trust_keys().join(", "),
                root.display()
            ),
        ),
    };
    line(format!("{:<29} = {state:<30} # {note}", "trust"))?;
    for i in &config.ignored {
        line(format!(
            "# ignored: {} = {} from {} (the project is not trusted)",
            i.key,
            i.value,
            i.file.display()
        ))?;
    }
    line("# configuration files, in the order they apply (later wins; then the environment, then flags):".to_owned())?;
    for searched in &config.searched {
        let state = match (&searched.path, searched.found) {
            (Some(path), true) => format!("{}: read", path.display()),
            (Some(path), false) => format!("{}: not found", path.display()),
            (None, _) => "none".to_owned(),
        };
        line(format!(
            "#   {:<12} {state} ({})",
            searched.layer, searched.why
        ))?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// window

/// `panto window [--forget [--all]]`: the window known for the configured model, where it
/// came from and when requests are compacted ahead (asking the server when nothing is known);
/// or forgets the learned and discovered windows kept for it (or for every model).
pub(crate) async fn show_window(config: &Config, forget: bool, all: bool) -> Result<()> {
    let model = config.model.value.clone().unwrap_or_default();
    let mut out = std::io::stdout().lock();
    if forget {
        let Some(path) = crate::windows::path() else {
            return Err(bad_input(
                "there is no data folder on this system; set PANTO_DATA_DIR",
            ));
        };
        let mut file = crate::windows::WindowFile::read(&path).map_err(bad_input)?;
        let key = crate::windows::Key::of(config, &model);
        let forgotten = file.forget((!all).then_some(&key));
        if forgotten > 0 {
            file.write(&path)?;
        }
        let whose = if all {
            "every model".to_owned()
        } else {
            format!(
                "{} on {}",
                if model.is_empty() {
                    "(no model)"
                } else {
                    &model
                },
                config.provider.value
            )
        };
        let line = format!(
            "forgot {} of {whose} (in {})",
            count(forgotten, "window"),
            path.display()
        );
        writeln!(out, "{}", for_stdout(&line))?;
        return Ok(());
    }
    if model.is_empty() && config.provider.value != ProviderKind::Offline {
        return Err(bad_input(format!(
            "no model configured: pass --model NAME, or write `model = \"NAME\"` in {}",
            user_config_file(config)
        )));
    }
    let asked = providers::kept_windows(config, &model)
        .iter()
        .any(|r| r.source == panto_compact::WindowSource::Discovered.as_str());
    if providers::known_window(config, &model).is_none() && !asked && providers::own_server(config)
    {
        drop(out);
        let spinner = Spinner::start("asking the server for its window");
        let found = providers::discover(config, &model).await;
        drop(spinner);
        if let Err(e) = found {
            say(&format!(
                "panto: note: the server could not be asked for its window: {e:#}"
            ));
        }
        out = std::io::stdout().lock();
    }
    let (known, records) = providers::known_windows(config, &model);
    let window = known.window();
    let heading = match window {
        Some(w) => format!("{model}: a window of {} tokens", w.tokens),
        None => format!("{model}: the window is unknown"),
    };
    writeln!(out, "{}", for_stdout(&heading))?;
    writeln!(
        out,
        "{}",
        for_stdout(&window_line(config, window, &records, 0))
    )?;
    for r in &records {
        let what = match r.window() {
            Some(w) => format!("{} tokens, {}", w.tokens, w.source),
            None => "nothing".to_owned(),
        };
        let line = format!("  kept: {what} ({})", r.detail);
        writeln!(out, "{}", for_stdout(&line))?;
    }
    Ok(())
}

/// What `panto config` says of the chosen provider's key: whether its variable is set, never
/// its value. `key` is the variable and whether it holds something (`None`: unset), or `None`
/// for the offline summarizer, which needs no key.
pub(crate) fn key_state(key: Option<(&str, Option<bool>)>) -> (&'static str, String) {
    match key {
        None => (
            "not needed",
            "the offline summarizer sends nothing".to_owned(),
        ),
        Some((var, Some(true))) => ("set", format!("in {var} (the value is never shown)")),
        Some((var, Some(false))) => (
            "empty",
            format!("{var} is set but empty; a local server needs no key, any other does"),
        ),
        Some((var, None)) => (
            "not set",
            format!("{var} is not set; a local server needs no key, any other does"),
        ),
    }
}

/// The keys a project file may set only when the project is trusted.
fn trust_keys() -> Vec<&'static str> {
    crate::config::KEYS
        .iter()
        .filter(|(k, _)| matches!(needs(k), Needs::Trust(_)))
        .map(|(k, _)| *k)
        .collect()
}

// ---------------------------------------------------------------------------------------------
// trust

/// `panto trust [DIR] [--revoke]`: records (or removes) the project holding DIR in the trust
/// file, then shows what the project's file now decides.
pub(crate) fn trust(cwd: &Path, dir: Option<&Path>, revoke: bool) -> Result<()> {
    let start = dir.map_or_else(|| cwd.to_path_buf(), |d| cwd.join(d));
    let start = std::fs::canonicalize(&start)
        .map_err(|e| bad_input(format!("{}: {e}", start.display())))?;
    let locations = Locations::discover(&start);
    let Some(root) = locations.project_root() else {
        return Err(bad_input(format!(
            "{}: no .panto folder here or above, so there is no project to trust",
            start.display()
        )));
    };
    let root =
        std::fs::canonicalize(root).map_err(|e| bad_input(format!("{}: {e}", root.display())))?;
    let file = locations.trust_file().ok_or_else(|| {
        bad_input("there is no user configuration folder on this system; set PANTO_CONFIG_DIR")
    })?;
    // A trust file that cannot be read is never overwritten: its records would be lost.
    let mut record = TrustFile::read(&file).map_err(bad_input)?;
    let (changed, state, verb) = if revoke {
        (record.remove(&root), "not trusted", "cannot")
    } else {
        (record.add(root.clone()), "trusted", "may")
    };
    if changed {
        record.write(&file)?;
    }
    let mut out = std::io::stdout().lock();
    let line = format!(
        "{} is {state}: its .panto/config.toml {verb} set {} (recorded in {})",
        root.display(),
        trust_keys().join(", "),
        file.display()
    );
    writeln!(out, "{}", for_stdout(&line))?;
    if revoke {
        return Ok(());
    }
    // What the project now decides, so the user sees where requests and the key will go.
    let config = Config::load(&locations, &Flags::default()).map_err(bad_input)?;
    for (key, value, source) in config.rows() {
        if matches!(source, crate::config::Source::ProjectFile(_))
            && matches!(needs(key), Needs::Trust(_))
        {
            writeln!(out, "{}", for_stdout(&format!("  it sets {key} = {value}")))?;
        }
    }
    Ok(())
}
