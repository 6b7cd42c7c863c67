//! The `panto` binary: inspect a session, compact it, chat with automatic overflow recovery.
//!
//! Exit codes (Contract 3): 0 success; 1 a provider or compaction failure; 2 bad usage or bad
//! input (the message names the file, the line and the field); 130 a request cancelled with
//! Ctrl-C, as for any process that SIGINT stops. Messages go to stderr; `--json`
//! output is one JSON document on stdout.

#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "printing is what the binary is for"
)]

mod chat;
mod cli;
mod commands;
mod config;
mod editor;
mod fit;
mod input;
mod keys;
mod lists;
mod offline;
mod providers;
mod screen;
mod store_value;
mod stores;
mod ui;
mod windows;

#[cfg(test)]
mod tests;

use std::process::ExitCode;

use clap::Parser;

use std::path::Path;

use anyhow::{Context as _, Result};

use crate::cli::{Cli, Command, Common};
use crate::commands::{
    CompactAsked, RecallAsked, compact, compact_undo, context, ledger, recall, send, show,
    show_config, show_window, transcript, trust,
};
use crate::config::{Config, Locations};
use crate::screen::say;

/// An error that is the user's to fix (bad usage, bad input, missing configuration): exit 2.
#[derive(Debug)]
pub struct BadInput(pub String);

impl std::fmt::Display for BadInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BadInput {}

/// The user interrupted a request with Ctrl-C: exit code 130, as a shell reports for a
/// process that SIGINT stopped.
#[derive(Debug)]
pub struct Cancelled(pub String);

impl std::fmt::Display for Cancelled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Cancelled {}

/// Marks an error as bad input (exit code 2), keeping its whole message.
pub fn bad_input(e: impl std::fmt::Display) -> anyhow::Error {
    anyhow::Error::new(BadInput(format!("{e:#}")))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_tracing();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("panto: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        // The reader of a pipe stopped reading (`panto context s.jsonl | head`): it has what
        // it wanted, so the output command ends quietly.
        Err(e) if ui::is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            let code = if e
                .chain()
                .any(<dyn std::error::Error + 'static>::is::<BadInput>)
            {
                2
            } else if e
                .chain()
                .any(<dyn std::error::Error + 'static>::is::<Cancelled>)
            {
                130
            } else {
                1
            };
            say(&format!("panto: {}", ui::error_text(&e)));
            ExitCode::from(code)
        }
    }
}

/// Runs one command.
pub(crate) async fn run(cli: Cli) -> Result<()> {
    let cwd = std::env::current_dir().context("cannot read the working directory")?;
    // Trusting a project must work while its configuration is still unread (or broken).
    if let Command::Trust { dir, revoke, .. } = &cli.command {
        return trust(&cwd, dir.as_deref(), *revoke);
    }
    let config = load_config(&cwd, cli.command.common())?;
    match cli.command {
        Command::Context { session, json, .. } => context(&config, &session, json).await,
        Command::Transcript { session, .. } => transcript(&config, &session).await,
        Command::Compact {
            session,
            json,
            undo: true,
            ..
        } => compact_undo(&config, &session, json).await,
        Command::Compact {
            session,
            instructions,
            dry_run,
            json,
            force,
            ..
        } => {
            let asked = CompactAsked {
                instructions,
                dry_run,
                json,
                force,
            };
            compact(&config, &session, asked).await
        }
        Command::Ledger { session, json, .. } => ledger(&config, &session, json).await,
        Command::Cost { session, json, .. } => commands::cost(&config, &session, json).await,
        Command::Recall {
            session,
            query,
            limit,
            all,
            json,
            ..
        } => {
            let asked = RecallAsked {
                query,
                limit,
                all,
                json,
            };
            recall(&config, &session, asked).await
        }
        Command::Show {
            session,
            id,
            context,
            json,
            ..
        } => show(&config, &session, &id, context, json).await,
        Command::Send {
            session, message, ..
        } => send(&config, &session, message).await,
        Command::Chat { session, .. } => chat::chat(&config, session.as_deref()).await,
        Command::Import { file, session, .. } => stores::import(&config, &file, &session).await,
        Command::Export { session, .. } => stores::export(&config, &session).await,
        Command::Sessions { schema, .. } => stores::sessions(&config, schema).await,
        Command::Config { .. } => show_config(&config),
        Command::Window { forget, all, .. } => show_window(&config, forget, all).await,
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

/// Logs go to stderr, filtered by `PANTO_LOG` (for example `PANTO_LOG=debug`); off by default.
fn init_tracing() {
    let Ok(filter) = std::env::var("PANTO_LOG") else {
        return;
    };
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .with_writer(std::io::stderr)
        .with_ansi(ui::color_allowed() && ui::stderr_is_terminal())
        .try_init();
}
