//! The commands: `context`, `transcript`, `compact`, `cost`, `send`, `chat`, `config`,
//! `window`, `trust`.
//!
//! Human-readable output goes through `ui::for_stdout` / `screen::say`, which neutralise control
//! characters on a terminal; `--json` documents are written as they are.
//!
//! This file holds what the commands share (the store, the compactor, the active model, the
//! output helpers); each group of commands is a file of its own: `views` (`context`,
//! `transcript`, `ledger`), `recall` (`recall`, `show`), `compact`, `cost`, `send` (`send` and the chat's turns), `tools` (the
//! tool loop that answers the model's recall calls after each reply), `setup` (`config`,
//! `window`, `trust`), and `failure` (how a failure is told, with a hint).

use std::io::Write;
use std::sync::Arc;

use anyhow::Result;
use panto_compact::{
    CompactionPrompt, Compactor, CompactorConfig, Driver, Loaded, ModelRef, Store, StoreError,
};
use panto_model::EffectiveContext;

use crate::config::{Config, ProviderKind};
use crate::screen::{print_event, say};
use crate::{bad_input, offline, providers};

mod compact;
mod cost;
mod failure;
mod recall;
mod send;
mod setup;
mod tools;
mod views;

pub(crate) use compact::{
    CompactAsked, compact, compact_undo, manual_run, nothing_text, undone_text,
};
pub(crate) use cost::cost;
pub(crate) use failure::{Hopeless, failure};
pub(crate) use recall::{RecallAsked, recall, recall_in_chat, show};
pub(crate) use send::{catch_up, driver, earlier_cost, give_windows, meter, send, turn};
pub(crate) use setup::{show_config, show_window, trust};
pub(crate) use views::{context, ledger, transcript, write_context};
#[cfg(test)]
pub(crate) use {setup::key_state, views::exchanges};

pub(crate) use crate::stores::{AnyStore, session_name, store_error};

/// A conversation driver over one session of the configured store.
pub(crate) type CliDriver = Driver<AnyStore>;

/// The store of the configuration (`--store`, `store` in config.toml, `PANTO_STORE`): the
/// JSONL session files by default, each SESSION a path; an SQLite file or a PostgreSQL
/// database, each SESSION a name there (`stores::open`).
pub(crate) async fn open_store(config: &Config) -> Result<AnyStore> {
    crate::stores::open(config).await
}

/// The store of the configuration, for a command that only reads: it creates nothing (no
/// SQLite file, no PostgreSQL table), and a missing file is bad input.
pub(crate) async fn open_store_reading(config: &Config) -> Result<AnyStore> {
    crate::stores::open_reading(config).await
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
fn report_warnings(warnings: &[panto_compact::Warning]) {
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
                // The offline summarizer quotes the conversation: that is its whole job.
                .with_extractive_summaries(config.provider.value == ProviderKind::Offline)
                .with_compaction_strategy(config.compaction_strategy.value),
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
and set the provider's key: {}.
For a local OpenAI-compatible server: --provider openai --base-url http://127.0.0.1:8080/v1 --model NAME",
        user_config_file(config),
        crate::lists::listed(&ProviderKind::key_variables(), " or ")
    )
}

/// Lets go of a loaded context without freeing it message by message: the command is done
/// and the process exits next, which returns the memory at once (on a long session the frees
/// cost about a tenth of the command's time).
fn exiting(ctx: EffectiveContext) {
    std::mem::forget(ctx);
}

/// Writes one JSON document and a newline on stdout.
fn print_json(doc: &serde_json::Value) -> Result<()> {
    let mut out = std::io::stdout().lock();
    serde_json::to_writer(&mut out, doc)?;
    writeln!(out)?;
    out.flush()?;
    Ok(())
}

/// The user configuration file, where a setting applies without trusting any project.
pub(crate) fn user_config_file(config: &Config) -> String {
    config.user_file.as_ref().map_or_else(
        || "<config dir>/panto/config.toml".to_owned(),
        |p| p.display().to_string(),
    )
}
