//! `panto chat` without a SESSION: the store's recent sessions to pick from, or a new one.
//!
//! The JSONL store's sessions are listed newest first, by when their file last changed; a
//! database store records no such time, so its sessions come in the store's order (by name),
//! and the list says so. Only on a terminal: without one, SESSION is required.

use std::path::Path;
use std::time::{Duration, SystemTime};

use anyhow::Result;
use panto_compact::{Store, StoreError};

use crate::bad_input;
use crate::commands::{next_session_name, open_store};
use crate::config::Config;
use crate::fit::fit;
use crate::input::{Input, Prompt};
use crate::screen::say;
use crate::screen::{columns, print};
use crate::store_value::{Choice, parse};
use crate::stores::{AnyStore, store_error};

/// How many sessions the picker offers.
const SHOWN: usize = 10;

/// A session to offer: its name and, when the store can tell, when it last changed.
struct Offer {
    name: String,
    changed: Option<SystemTime>,
}

/// Offers the recent sessions of the store and reads the user's choice: a session's name, or
/// `None` when the user quit instead.
///
/// # Errors
/// Bad input without a terminal (SESSION is then required), or a store that cannot list.
pub(super) async fn pick(config: &Config, prompt: &mut Prompt) -> Result<Option<String>> {
    if !prompt.is_terminal() {
        return Err(bad_input(
            "panto chat needs a SESSION when its input is not a terminal (`panto sessions` lists the sessions of the store)",
        ));
    }
    let store = open_store(config).await?;
    let offers = recent(config, &store).await?;
    let fresh = new_name(config, &store).await?;
    if offers.is_empty() {
        say(&format!(
            "panto: no sessions yet in {}; starting {fresh}",
            store.location()
        ));
        return Ok(Some(fresh));
    }
    let width = columns();
    let dated = offers.iter().any(|o| o.changed.is_some());
    let place = match parse(&config.store.value) {
        Ok(Choice::Jsonl(root)) if root.as_os_str().is_empty() => "this folder".to_owned(),
        _ => store.location(),
    };
    print(&fit(
        &format!(
            "Sessions in {place}, {}:",
            if dated {
                "the most recent first"
            } else {
                "by name (the store keeps no dates)"
            }
        ),
        width,
    ))?;
    let now = SystemTime::now();
    for (i, offer) in offers.iter().enumerate() {
        let when = offer
            .changed
            .map_or(String::new(), |t| format!("  {}", ago(now, t)));
        print(&fit(&format!("{:>3}  {}{when}", i + 1, offer.name), width))?;
    }
    print(&fit(
        &format!("A number, a name, or Enter for a new one ({fresh})"),
        width,
    ))?;
    loop {
        let line = match prompt.read().await? {
            Input::End => return Ok(None),
            Input::Interrupted => continue,
            Input::Line(line) => line,
        };
        let choice = line.trim();
        if choice.is_empty() {
            return Ok(Some(fresh));
        }
        match choice.parse::<usize>() {
            Ok(n) if (1..=offers.len()).contains(&n) => {
                return Ok(Some(offers[n - 1].name.clone()));
            }
            Ok(_) => say(&format!("panto: choose 1 to {}", offers.len())),
            Err(_) => return Ok(Some(choice.to_owned())),
        }
    }
}

/// The store's sessions, the most recent first where the store can tell, at most [`SHOWN`].
async fn recent(config: &Config, store: &AnyStore) -> Result<Vec<Offer>> {
    let names = store.list().await.map_err(store_error)?;
    let root = match parse(&config.store.value) {
        Ok(Choice::Jsonl(root)) => Some(root),
        _ => None,
    };
    let mut offers: Vec<Offer> = names
        .into_iter()
        .map(|name| {
            let changed = root.as_ref().and_then(|root| {
                let path = if root.as_os_str().is_empty() {
                    Path::new(&name).to_path_buf()
                } else {
                    root.join(&name)
                };
                std::fs::metadata(path).and_then(|m| m.modified()).ok()
            });
            Offer { name, changed }
        })
        .collect();
    offers.sort_by_key(|o| std::cmp::Reverse(o.changed));
    offers.truncate(SHOWN);
    Ok(offers)
}

/// The name of a new session: `chat.jsonl` (or `chat` in a database) when free, else the next
/// free `chat-2.jsonl`, `chat-3.jsonl`, ...
async fn new_name(config: &Config, store: &AnyStore) -> Result<String> {
    let first = match parse(&config.store.value) {
        Ok(Choice::Jsonl(_)) => "chat.jsonl",
        _ => "chat",
    };
    match store.load(first).await {
        Ok(loaded) if loaded.empty => Ok(first.to_owned()),
        Err(StoreError::NotFound { .. }) => Ok(first.to_owned()),
        Ok(_) => next_session_name(store, first).await,
        Err(e) => Err(store_error(e)),
    }
}

/// How long ago `then` was, in a few characters: `just now`, `5 min ago`, `3 h ago`, `2 days ago`.
fn ago(now: SystemTime, then: SystemTime) -> String {
    let d = now.duration_since(then).unwrap_or(Duration::ZERO).as_secs();
    match d {
        0..=59 => "just now".to_owned(),
        60..=3_599 => format!("{} min ago", d / 60),
        3_600..=172_799 => format!("{} h ago", d / 3_600),
        _ => format!("{} days ago", d / 86_400),
    }
}
