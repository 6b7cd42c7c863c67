//! `panto compact`: a manual compaction, and why there was nothing to compact.

use std::io::Write;
use std::path::Path;

use anyhow::{Result, anyhow};
use panto_compact::{
    CompactError, CompactOutcome, CompactRun, CompactionStrategy, Conversation, NothingToCompact,
    SessionLog, Store, Undone,
};
use panto_model::{UniqueIds, usage_cost};
use serde_json::json;

use crate::config::Config;
use crate::providers;
use crate::screen::{Spinner, say};
use crate::ui::for_stdout;

use super::cost::cost_json;
use super::failure::failure;
use super::{
    compactor, exiting, load_existing, open_store, open_store_reading, print_json, session_name,
    store_error, user_config_file,
};

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
/// conversation, so that it summarizes something. It knows what `send` and `chat` requests look
/// like, for native compaction.
pub(crate) fn manual_run(config: &Config, instructions: Option<String>, force: bool) -> CompactRun {
    let conversation = Conversation::new(config.system_prompt.value.clone())
        .with_max_output_tokens(config.max_output_tokens.value);
    let run = CompactRun::manual(instructions)
        .with_force(force)
        .with_conversation(conversation);
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
    // A dry run writes nothing, so it creates no store either.
    let store = if dry_run {
        open_store_reading(config).await?
    } else {
        open_store(config).await?
    };
    let name = session_name(path);
    let mut compactor = compactor(config)?;
    let options = manual_run(config, instructions, force);
    // What is known of the window (configured, learned, discovered, the catalogue's) bounds
    // the compaction; the run gives back what its requests taught.
    let model = compactor.active().model.clone();
    let mut windows = providers::known_windows(config, &model).0;
    let mut spinner = Spinner::start("compacting");
    let outcome = if dry_run {
        let ctx = load_existing(&store, &name).await?.context;
        let outcome = compactor.dry_run(&ctx, options, &mut windows).await;
        exiting(ctx);
        outcome
    } else {
        // No lock while the model summarizes: the append checks that nobody wrote meanwhile.
        store.prepare_append(&name).await.map_err(store_error)?;
        let loaded = load_existing(&store, &name).await?;
        let mut log = SessionLog::new(store.clone(), name.as_str(), loaded.head);
        compactor
            .compact(&loaded.context, &mut log, options, &mut windows)
            .await
    };
    spinner.stop();
    // What the compaction requests taught of the window is kept for the next command.
    providers::remember(config, &model, &windows);
    if let Err(e @ CompactError::NothingToClear { .. }) = &outcome {
        // Not a failure: like nothing to compact, a normal outcome.
        if as_json {
            print_json(
                &json!({"summary": null, "nothing_to_compact": true, "message": e.to_string()}),
            )?;
        } else {
            say(&format!("panto: {e}"));
        }
        return Ok(());
    }
    let outcome = match outcome {
        Ok(outcome) => outcome,
        Err(e) => {
            let error = match e {
                CompactError::NotSmaller(n) => anyhow!(
                    "{n}\nhint: `panto compact {} --force` writes it anyway",
                    path.display()
                ),
                e => failure(e, config),
            }
            .context(format!("nothing was written to {}", path.display()));
            // `--json` promises one document on stdout, a failure's included; the message
            // still goes to stderr with the exit code.
            if as_json {
                print_json(&json!({
                    "summary": null,
                    "written": false,
                    "error": format!("{error:#}"),
                }))?;
            }
            return Err(error);
        }
    };
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
                    "strategy": r.strategy.as_str(),
                    "cleared": r.cleared.iter().map(|c| json!({
                        "id": c.id,
                        "kind": c.kind,
                        "bytes": c.bytes,
                    })).collect::<Vec<_>>(),
                    "native": r.native,
                    "usage": r.usage.as_ref().and_then(|u| serde_json::to_value(u).ok()),
                    "cost": r.usage.as_ref().map(|u| cost_json(
                        &usage_cost(u, Some(&r.model), &config.prices())
                    )),
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
                        "recorded": s.recorded,
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

/// `panto compact --undo`: the context before the latest compaction or clearing is current
/// again (one undo entry appended; no model asked, so no provider is needed).
pub(crate) async fn compact_undo(config: &Config, path: &Path, as_json: bool) -> Result<()> {
    let store = open_store(config).await?;
    let name = session_name(path);
    store.prepare_append(&name).await.map_err(store_error)?;
    let loaded = load_existing(&store, &name).await?;
    let mut log = SessionLog::new(store.clone(), name.as_str(), loaded.head);
    let undone = panto_compact::undo(&loaded.context, &mut log, &UniqueIds)
        .await
        .map_err(|e| match e {
            CompactError::NothingToUndo(_) => crate::bad_input(format!("{}: {e}", path.display())),
            e => failure(e, config),
        })?;
    if as_json {
        print_json(&json!({
            "undone": undone.undid,
            "id": undone.id,
            "strategy": undone.strategy.as_deref().unwrap_or(CompactionStrategy::Summary.as_str()),
            "tokens_before": undone.tokens_before,
            "tokens_after": undone.tokens_after,
            "tokens_counted": "conversation",
        }))?;
    } else {
        say(&format!(
            "panto: {}",
            undone_text(&undone, "`panto compact --undo`")
        ));
    }
    exiting(undone.context);
    Ok(())
}

/// What an undo did, for a person; `again` names the command that goes one step further back.
pub(crate) fn undone_text(undone: &Undone, again: &str) -> String {
    let what = match undone
        .strategy
        .as_deref()
        .and_then(CompactionStrategy::parse)
    {
        Some(CompactionStrategy::Clear) => "the clearing",
        Some(CompactionStrategy::Native) => "the native compaction",
        _ => "the compaction",
    };
    format!(
        "undid {what}: the conversation is about {} tokens again (it was about {}); {again} again goes one step further back",
        undone.tokens_after, undone.tokens_before
    )
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
