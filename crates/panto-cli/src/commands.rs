//! The commands: `context`, `transcript`, `compact`, `send`, `chat`, `config`, `trust`.
//!
//! Human-readable output goes through `ui::for_stdout` / `ui::say`, which neutralise control
//! characters on a terminal; `--json` documents are written as they are.

use std::io::{BufRead, Write};
use std::path::Path;
use std::sync::Arc;

use anyhow::{Context as _, Result, anyhow};
use panto_compact::{
    AttemptFailure, CompactConfig, CompactError, CompactOptions, CompactOutcome, CompactionPrompt,
    Compactor, Driver, ModelRef,
};
use panto_model::{ContentBlock, EffectiveContext, Message, Role, turns};
use panto_provider::{Provider, ProviderError, StreamEvent};
use panto_session::{Loaded, Session, SessionError, SessionOptions};
use serde_json::json;

use crate::cli::{Cli, Command, Common};
use crate::config::{Config, Flags, Locations, Needs, ProviderKind, Trust, TrustFile, needs};
use crate::store::LockedLog;
use crate::ui::{Spinner, for_stdout, print_event, say};
use crate::{bad_input, offline, providers};

/// Runs one command.
pub async fn run(cli: Cli) -> Result<()> {
    let cwd = std::env::current_dir().context("cannot read the working directory")?;
    // Trusting a project must work while its configuration is still unread (or broken).
    if let Command::Trust { dir, revoke, .. } = &cli.command {
        return trust(&cwd, dir.as_deref(), *revoke);
    }
    let config = load_config(&cwd, cli.command.common())?;
    match cli.command {
        Command::Context { session, json, .. } => context(&config, &session, json),
        Command::Transcript { session, .. } => transcript(&config, &session),
        Command::Compact {
            session,
            instructions,
            dry_run,
            json,
            ..
        } => compact(&config, &session, instructions, dry_run, json).await,
        Command::Send {
            session, message, ..
        } => send(&config, &session, message).await,
        Command::Chat { session, .. } => chat(&config, &session).await,
        Command::Config { .. } => show_config(&config),
        Command::Trust { .. } => unreachable!("handled above"),
    }
}

/// Loads the configuration and says, in one line, what an untrusted project could not set.
fn load_config(cwd: &Path, common: &Common) -> Result<Config> {
    let config = Config::load(&Locations::discover(cwd), &common.flags()).map_err(bad_input)?;
    if let Some(notice) = config.trust_notice() {
        say(&format!("panto: note: {notice}"));
    }
    Ok(config)
}

/// Session errors that are the user's to fix (a missing, malformed or wrong file) exit with 2.
fn session_error(e: SessionError) -> anyhow::Error {
    match e {
        SessionError::LockTimeout { .. } | SessionError::Io { .. } => anyhow!(e),
        other => bad_input(other),
    }
}

/// Compaction errors about the prompt files are bad input; the rest are failures, with a hint
/// saying what to do next when the cause is clear.
fn failure(e: CompactError, config: &Config) -> anyhow::Error {
    match e {
        CompactError::PromptUnreadable { .. } | CompactError::PromptEmpty { .. } => bad_input(e),
        other => match hint(&other, config) {
            Some(hint) => anyhow!("{other}\nhint: {hint}"),
            None => anyhow!(other),
        },
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
    if let CompactError::OverflowAfterCompaction { .. } = e {
        return Some(
            "the newest message may be too large on its own: shorten it, or use a model with a larger context window".to_owned(),
        );
    }
    Some(match root_cause(e)? {
        ProviderError::Authentication { .. } => {
            format!("check the key in {key_var} (and that it belongs to this provider)")
        }
        ProviderError::Connection { .. } => format!(
            "is {} reachable? Set the base URL with --base-url, {url_var}, or `base_url` in config.toml",
            config
                .base_url
                .value
                .as_deref()
                .unwrap_or("the provider's API")
        ),
        ProviderError::ModelNotFound { .. } => {
            "check the model name (--model, --compaction-model, or `model` in config.toml)"
                .to_owned()
        }
        ProviderError::Timeout { .. } => {
            "try again, or raise `timeout_secs` in config.toml".to_owned()
        }
        ProviderError::RateLimited { .. } => "wait a moment and try again".to_owned(),
        _ => return None,
    })
}

fn session_options() -> SessionOptions {
    SessionOptions::default()
}

fn open_session(path: &Path) -> Result<Session> {
    Session::open(path, session_options()).map_err(session_error)
}

/// Opens the session, creating it when it does not exist (for `send` and `chat`).
fn open_or_create(path: &Path) -> Result<Session> {
    match Session::open(path, session_options()) {
        Err(SessionError::NotFound { .. }) => {
            Session::create(path, session_options()).map_err(session_error)
        }
        other => other.map_err(session_error),
    }
}

/// Loads the effective context and prints the load warnings on stderr.
fn load(session: &Session) -> Result<EffectiveContext> {
    let loaded = session.load_context().map_err(session_error)?;
    Ok(report_warnings(session, loaded))
}

fn report_warnings(session: &Session, mut loaded: Loaded) -> EffectiveContext {
    if !loaded.warnings.is_empty() {
        let _ = session.resolve_lines(&mut loaded.warnings);
    }
    for w in &loaded.warnings {
        say(&format!("panto: warning: {w}"));
    }
    loaded.context
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
        .with_config(CompactConfig {
            keep_tokens: config.keep_tokens.value,
            max_output_tokens: config.compaction_max_output_tokens.value,
        })
        .on_event(print_event))
}

/// The active model. With `summarize_only`, the offline summarizer is acceptable.
fn active_model(config: &Config, summarize_only: bool) -> Result<ModelRef> {
    let kind = config.provider.value;
    if kind == ProviderKind::Offline {
        if !summarize_only {
            return Err(bad_input(NO_PROVIDER));
        }
        let provider: Arc<dyn Provider> = Arc::new(offline::OfflineSummarizer::new());
        return Ok(ModelRef::new(provider, offline::MODEL));
    }
    let model = config.model.value.clone().ok_or_else(|| {
        bad_input(format!(
            "no model configured for provider {kind}: pass --model NAME, or set `model = \"NAME\"` in .panto/config.toml"
        ))
    })?;
    let provider = providers::build(kind, config)?;
    Ok(ModelRef::new(provider, model))
}

const NO_PROVIDER: &str = "no provider is configured, and the offline summarizer cannot chat.
Configure one with --provider (anthropic, openai, openai-responses, gemini) and --model, or in
.panto/config.toml:
    provider = \"anthropic\"
    model = \"claude-sonnet-4-5\"
and set the provider's key: ANTHROPIC_API_KEY, OPENAI_API_KEY or GEMINI_API_KEY.
For a local OpenAI-compatible server: --provider openai --base-url http://127.0.0.1:8080/v1";

// ---------------------------------------------------------------------------------------------
// context

fn context(config: &Config, path: &Path, as_json: bool) -> Result<()> {
    let session = open_session(path)?;
    let ctx = load(&session)?;
    let estimated = panto_size::estimate_request(&config.system_prompt.value, &ctx.messages);
    let conversation_turns = turns(ctx.conversation()).len();
    if as_json {
        // Written straight from the messages: no second copy of the context in memory.
        let doc = ContextDoc {
            messages: &ctx.messages,
            estimated_tokens: estimated,
            turns: conversation_turns,
            compaction: ctx.compaction.as_ref().map(|c| {
                json!({
                    "id": c.id,
                    "trigger": c.trigger.as_ref().map(|t| t.as_str()),
                    "model": c.model,
                    "kept_messages": ctx.kept,
                })
            }),
        };
        let mut out = std::io::BufWriter::new(std::io::stdout().lock());
        serde_json::to_writer(&mut out, &doc)?;
        writeln!(out)?;
        out.flush()?;
        return Ok(());
    }
    // Every line quotes the session (text, ids, the path): neutralised on a terminal.
    let mut out = std::io::stdout().lock();
    let header = format!(
        "{}: {} messages in {} turns, about {} tokens for the next request",
        path.display(),
        ctx.conversation().len(),
        conversation_turns,
        estimated
    );
    writeln!(out, "{}", for_stdout(&header))?;
    if let Some(c) = &ctx.compaction {
        let line = format!(
            "compacted ({}), {} kept messages follow the summary",
            c.id.as_deref().unwrap_or("no id"),
            ctx.kept
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

/// The `panto context --json` document (Contract 3); extra keys are allowed.
#[derive(serde::Serialize)]
struct ContextDoc<'a> {
    messages: &'a [Message],
    estimated_tokens: u64,
    turns: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    compaction: Option<serde_json::Value>,
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

fn transcript(config: &Config, path: &Path) -> Result<()> {
    let session = open_session(path)?;
    let ctx = load(&session)?;
    let compactor = compactor(config)?;
    match compactor.prepare(&ctx, &CompactOptions::manual(None)) {
        Ok(prepared) => {
            let mut out = std::io::stdout().lock();
            out.write_all(for_stdout(&prepared.user_prompt).as_bytes())?;
            out.flush()?;
        }
        Err(nothing) => say(&format!("panto: {nothing}")),
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// compact

async fn compact(
    config: &Config,
    path: &Path,
    instructions: Option<String>,
    dry_run: bool,
    as_json: bool,
) -> Result<()> {
    let session = open_session(path)?;
    let mut compactor = compactor(config)?;
    let options = CompactOptions::manual(instructions);
    let mut spinner = Spinner::start("compacting");
    let outcome = if dry_run {
        let ctx = load(&session)?;
        compactor.summarize(&ctx, options).await
    } else {
        let writer = session.lock().map_err(session_error)?;
        let loaded = writer.load_context().map_err(session_error)?;
        let ctx = report_warnings(&session, loaded);
        let mut log = LockedLog { writer };
        compactor.compact(&ctx, &mut log, options).await
    };
    spinner.stop();
    let outcome = outcome.map_err(|e| failure(e, config))?;
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
                    "truncated": r.truncated,
                    "dry_run": dry_run,
                    "id": r.id,
                });
                println!("{doc}");
            } else {
                let mut out = std::io::stdout().lock();
                writeln!(out, "{}", for_stdout(r.summary.trim_end()))?;
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
                println!("{doc}");
            } else {
                say(&format!("panto: {nothing}"));
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// send and chat

/// Streams assistant text to stdout as it arrives; stops the spinner at the first event.
fn stream_to_stdout(spinner: &mut Spinner) -> impl FnMut(StreamEvent<'_>) + Send + '_ {
    move |event| {
        spinner.stop();
        if let StreamEvent::Text(text) = event {
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(for_stdout(text).as_bytes());
            let _ = out.flush();
        }
    }
}

async fn send(config: &Config, path: &Path, message: String) -> Result<()> {
    let active = active_model(config, false)?;
    let session = open_or_create(path)?;
    let mut driver = driver(config, active, &session)?;
    send_one(config, &mut driver, message).await
}

/// A conversation driver over `session`, holding its append lock until dropped.
fn driver<'s>(
    config: &Config,
    active: ModelRef,
    session: &'s Session,
) -> Result<Driver<LockedLog<'s>>> {
    let writer = session.lock().map_err(session_error)?;
    // A conversation starts in an empty file (the one `open_or_create` just made, or one
    // created by hand): its first append is the prompt about to be sent.
    let ctx = match writer.load_context() {
        Err(SessionError::Empty { .. }) => EffectiveContext::default(),
        loaded => report_warnings(session, loaded.map_err(session_error)?),
    };
    let mut compactor = compactor(config)?;
    compactor.set_active(active);
    Ok(Driver::new(compactor, LockedLog { writer }, ctx)
        .with_system(config.system_prompt.value.clone())
        .with_max_output_tokens(config.max_output_tokens.value))
}

/// Sends one user message and prints the streamed reply.
async fn send_one(config: &Config, driver: &mut Driver<LockedLog<'_>>, text: String) -> Result<()> {
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
        driver
            .send(vec![Message::user_text(text)], &mut counting)
            .await
    };
    spinner.stop();
    let reply = result.map_err(|e| failure(e, config))?;
    let mut out = std::io::stdout().lock();
    if !printed {
        // The provider did not stream: print the whole answer now.
        write!(out, "{}", for_stdout(&reply.message.text()))?;
    }
    writeln!(out)?;
    out.flush()?;
    Ok(())
}

async fn chat(config: &Config, path: &Path) -> Result<()> {
    let active = active_model(config, false)?;
    let session = open_or_create(path)?;
    let mut driver = driver(config, active, &session)?;
    let interactive = crate::ui::stderr_is_terminal();
    say(&format!(
        "panto chat: {} ({} messages). /compact [instructions] compacts, /exit quits.",
        path.display(),
        driver.context().messages.len()
    ));
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    loop {
        if interactive {
            eprint!("> ");
            let _ = std::io::stderr().flush();
        }
        let Some(line) = lines.next() else { break };
        let line = line.context("cannot read standard input")?;
        let input = line.trim();
        if input.is_empty() {
            continue;
        }
        if input == "/exit" || input == "/quit" {
            break;
        }
        if let Some(rest) = input.strip_prefix("/compact")
            && (rest.is_empty() || rest.starts_with(char::is_whitespace))
        {
            let instructions = Some(rest.trim().to_owned()).filter(|s| !s.is_empty());
            let before = panto_size::estimate_request("", &driver.context().messages);
            let mut spinner = Spinner::start("compacting");
            let outcome = driver.compact(instructions).await;
            spinner.stop();
            match outcome {
                Ok(CompactOutcome::Compacted(c)) => say(&format!(
                    "panto: compacted: about {} -> {} tokens",
                    before, c.report.tokens_after
                )),
                Ok(CompactOutcome::NothingToCompact(n)) => say(&format!("panto: {n}")),
                Err(e) => say(&format!("panto: {e}")),
            }
            continue;
        }
        if input.starts_with('/') && !input.starts_with("//") {
            say(&format!(
                "panto: unknown command {input}; try /compact [instructions] or /exit"
            ));
            continue;
        }
        // A failed turn is reported and the chat goes on; the prompt stays in the session.
        if let Err(e) = send_one(config, &mut driver, input.to_owned()).await {
            say(&format!("panto: {e:#}"));
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// config

fn show_config(config: &Config) -> Result<()> {
    let mut out = std::io::stdout().lock();
    let mut line = |text: String| writeln!(out, "{}", for_stdout(&text));
    for (key, value, source) in config.rows() {
        line(format!("{key:<29} = {value:<30} # {source}"))?;
    }
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
    for p in &config.files {
        line(format!("# read {}", p.display()))?;
    }
    Ok(())
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
fn trust(cwd: &Path, dir: Option<&Path>, revoke: bool) -> Result<()> {
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
