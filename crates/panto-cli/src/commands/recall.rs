//! `panto recall` and `panto show`: search what a session's compactions summarized, and print
//! an item with its neighbours by id (docs/recall.md).

use std::io::Write;
use std::path::Path;

use anyhow::Result;
use panto_compact::{Hit, RecallQuery, StoreError, describe};
use serde_json::{Value, json};

use crate::bad_input;
use crate::config::Config;
use crate::ui::for_stdout;

use crate::screen::say;

use super::{CliDriver, load_existing, open_store_reading, print_json, session_name, store_error};

/// What `panto recall` was asked.
#[derive(Debug)]
pub(crate) struct RecallAsked {
    pub query: String,
    pub limit: usize,
    pub all: bool,
    pub json: bool,
}

/// `panto recall SESSION QUERY [--limit N] [--all] [--json]`.
pub(crate) async fn recall(config: &Config, path: &Path, asked: RecallAsked) -> Result<()> {
    let store = open_store_reading(config).await?;
    let name = session_name(path);
    load_existing(&store, &name).await?;
    let query = RecallQuery::new(asked.query.clone())
        .with_limit(asked.limit)
        .with_context(asked.all);
    let found = store.recall(&name, &query).await.map_err(store_error)?;
    if asked.json {
        let hits: Vec<Value> = found.hits.iter().map(hit_json).collect();
        return print_json(&json!({ "hits": hits, "items": found.items }));
    }
    let mut out = std::io::stdout().lock();
    let n = found.hits.len();
    if n == 0 {
        writeln!(
            out,
            "no passage of {} outside the effective context matches '{}'",
            for_stdout(&name),
            for_stdout(&asked.query)
        )?;
    }
    for hit in &found.hits {
        writeln!(out, "{}", for_stdout(&heading(hit)))?;
        writeln!(out, "  {}\n", for_stdout(&hit.snippet))?;
    }
    if n > 0 {
        writeln!(
            out,
            "{n} of {} items; `panto show {} ID` prints one whole",
            found.items,
            for_stdout(&name)
        )?;
    }
    out.flush()?;
    Ok(())
}

/// `/recall QUERY` in the chat: the best passages of the chat's session, as `panto recall`
/// prints them.
///
/// # Errors
/// When the store cannot answer, or stdout fails.
pub(crate) async fn recall_in_chat(driver: &CliDriver, query: &str) -> Result<()> {
    if query.trim().is_empty() {
        say("panto: /recall QUERY: give words, an identifier or quoted text to search for");
        return Ok(());
    }
    let found = driver
        .recall(&RecallQuery::new(query))
        .await
        .map_err(store_error)?;
    say(&format!(
        "panto: recalled {} {} for '{query}'",
        found.hits.len(),
        if found.hits.len() == 1 {
            "passage"
        } else {
            "passages"
        }
    ));
    let mut text = String::new();
    for hit in &found.hits {
        text.push_str(&format!("{}\n  {}\n", heading(hit), hit.snippet));
    }
    if !text.is_empty() {
        crate::screen::answer(&for_stdout(&text));
    }
    Ok(())
}

/// `[id] what it is · entry E at P · summarized by C · score S`.
fn heading(hit: &Hit) -> String {
    let mut out = format!(
        "[{}] {} · entry {} at {}",
        hit.id,
        describe(hit.kind, hit.role, hit.tool.as_deref(), hit.error),
        hit.entry,
        hit.position
    );
    if let Some(by) = &hit.summarized_by {
        out.push_str(&format!(" · summarized by {by}"));
    }
    out.push_str(&format!(" · score {:.2}", hit.score));
    if hit.exact > 0 {
        out.push_str(" · exact");
    }
    out
}

/// A hit as `--json` gives it: the keys of the contract, then the others.
fn hit_json(hit: &Hit) -> Value {
    json!({
        "id": hit.id,
        "role": hit.role.map(panto_model::Role::as_str),
        "tool": hit.tool,
        "snippet": hit.snippet,
        "text": hit.text,
        "score": hit.score,
        "kind": hit.kind.as_str(),
        "entry": hit.entry,
        "position": hit.position,
        "call": hit.call,
        "error": hit.error,
        "summarized_by": hit.summarized_by,
        "exact": hit.exact,
    })
}

/// `panto show SESSION ID [--context N] [--json]`.
pub(crate) async fn show(
    config: &Config,
    path: &Path,
    id: &str,
    context: usize,
    as_json: bool,
) -> Result<()> {
    let store = open_store_reading(config).await?;
    let name = session_name(path);
    load_existing(&store, &name).await?;
    let fetched = match store.fetch(&name, id, context).await {
        Err(StoreError::NotFound { .. }) => {
            return Err(bad_input(format!(
                "{name}: no item or entry has the id {id} (ids are what `panto recall` prints: an entry's id, ENTRY#BLOCK, a tool call's id, or @POSITION)"
            )));
        }
        other => other.map_err(store_error)?,
    };
    if as_json {
        let items: Vec<Value> = fetched
            .items
            .iter()
            .map(|i| {
                json!({
                    "id": i.id,
                    "role": i.role.map(panto_model::Role::as_str),
                    "tool": i.tool,
                    "text": i.text,
                    "kind": i.kind.as_str(),
                    "entry": i.entry,
                    "position": i.position,
                    "call": i.call,
                    "error": i.error,
                    "asked": fetched.asked.contains(&i.id),
                })
            })
            .collect();
        return print_json(&json!({ "items": items }));
    }
    let mut text = String::new();
    for i in &fetched.items {
        let mark = if fetched.asked.contains(&i.id) {
            " (asked)"
        } else {
            ""
        };
        text.push_str(&format!(
            "[{}] {}{mark} · entry {} at {}\n{}\n\n",
            i.id,
            describe(i.kind, i.role, i.tool.as_deref(), i.error),
            i.entry,
            i.position,
            i.text
        ));
    }
    crate::ui::paged(|out| out.write_all(for_stdout(text.trim_end()).as_bytes()))?;
    Ok(())
}
