//! The ledger: a deterministic record of what a summarized part of a conversation did,
//! derived from its transcript items rather than from any model's answer.
//!
//! [`Ledger::from_items`] walks the items once: the user's requests (verbatim), the files
//! modified and read, the errors tools reported and whether a later call on the same target
//! succeeded, the distinct commands, the open todos of the latest todo list, the user's
//! answers to the agent's questions, and the exact identifiers of every text, call and result
//! ([`LedgerIdentifiers`]: hex ids, numbers and values with their keys, URLs, `path:line`,
//! versions, error lines, file paths, code names), each with how many items mention it.
//! [`Ledger::merge`] combines an older ledger with a newer one (recency first, identifiers'
//! counts added) into the record stored typed on the compaction entry (see `serde`): every
//! item, bounded only by [`LEDGER_CAP_BYTES`] of JSON ([`Ledger::cap`], each kind within its
//! fair share). What the next model reads is a rendering of that record within a budget
//! ([`Ledger::render_within`], each kind within its fair share, most telling first);
//! [`Ledger::render`] writes all of it.
//!
//! One file per job: the type and its merge here; the tool tables and argument readers in
//! `tools.rs`; the pruned reading of a call's JSON arguments in `args.rs`; the walk over items
//! in `walk.rs`; the identifiers found in a text in `scan/`, counted and merged in `ids.rs`;
//! the fair shares of a budget in `share.rs`; the record's cap in `record.rs`; the rendering in
//! `render.rs`.

mod args;
mod ids;
mod record;
mod render;
mod scan;
mod share;
#[cfg(test)]
mod tests;
mod tools;
mod walk;

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};

use panto_model::{ContentBlock, Message, ToolResultContent};
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use ids::{Identifier, LedgerIdentifiers};
pub use record::{LEDGER_CAP_BYTES, LedgerCounts};
use walk::{Walk, error_key};

use crate::cut::{Budget, Cut, head};
use crate::item::TranscriptItem;

/// The heading that opens a rendered ledger. Everything from a line equal to it to the end of a
/// summary is the ledger ([`strip_ledger`]).
pub const LEDGER_HEADING: &str =
    "## Ledger (recorded by panto from the conversation, not by a model)";

/// The most characters any request but the most recent keeps; longer ones are shortened.
pub const REQUEST_CHARS: usize = 600;
/// The most characters of a command, an error message, a todo or a path.
const ITEM_CHARS: usize = 200;
/// The most characters of one answer of the user.
const ANSWER_CHARS: usize = 400;

/// One error a tool reported.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct LedgerError {
    /// The tool that failed.
    pub tool: String,
    /// What it was called on: a path, or the command (shortened).
    pub target: String,
    /// The most telling line of the error output.
    pub message: String,
    /// How often the same error occurred.
    pub count: u32,
    /// When a later call of the same tool on the same target succeeded: that call, described.
    pub resolved: Option<String>,
}

impl LedgerError {
    /// The first occurrence of an error, not resolved.
    fn first(tool: String, target: String, message: String) -> LedgerError {
        LedgerError {
            tool,
            target,
            message,
            count: 1,
            resolved: None,
        }
    }
}

/// The deterministic record of a summarized part of a conversation. Every list is most recent
/// first and holds no duplicates.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct Ledger {
    /// The user's messages that are not tool results, bare slash commands or interruptions.
    pub requests: Vec<String>,
    /// Files that tool calls created, edited or deleted.
    pub modified: Vec<String>,
    /// Files that tool calls read, listed or searched (and not modified).
    pub read: Vec<String>,
    /// Errors that tools reported.
    pub errors: Vec<LedgerError>,
    /// Distinct shell commands, first line only.
    pub commands: Vec<String>,
    /// The items of the latest todo list that are not done, in the list's order.
    pub todos: Vec<String>,
    /// The user's answers to the agent's questions (answers to question tools).
    pub answers: Vec<String>,
    /// The exact identifiers of every text, call and result, successful output included,
    /// each with how many items mention it, most referenced first.
    #[serde(skip_serializing_if = "LedgerIdentifiers::is_empty")]
    pub identifiers: LedgerIdentifiers,
    /// How many items the record no longer holds, over every merge so far: the oldest items
    /// dropped past [`LEDGER_CAP_BYTES`], and (in records an older panto wrote) the items its
    /// rendering budget cut from the record. One number, so that older readers still load it.
    pub left_out: u64,
    /// The items dropped past [`LEDGER_CAP_BYTES`], by category. Their sum is at most
    /// [`Ledger::left_out`]; the difference is what an older panto cut without counting by
    /// category.
    #[serde(skip_serializing_if = "LedgerCounts::is_empty")]
    pub dropped: LedgerCounts,
    /// Whether a todo list was seen (a newer list replaces an older one, even an empty one).
    #[serde(skip)]
    todo_list_seen: bool,
    /// The targets of successful calls, with the call described: they resolve older errors
    /// when this ledger is merged over an older one.
    #[serde(skip)]
    successes: Vec<(String, String)>,
}

impl Ledger {
    /// Whether the ledger records nothing.
    pub fn is_empty(&self) -> bool {
        self.requests.is_empty()
            && self.modified.is_empty()
            && self.read.is_empty()
            && self.errors.is_empty()
            && self.commands.is_empty()
            && self.todos.is_empty()
            && self.answers.is_empty()
            && self.identifiers.is_empty()
    }

    /// The ledger of `items` (a transcript, oldest first), less the placeholders a clearing
    /// left (tool results whose text starts with [`panto_model::CLEARED_PREFIX`]), whose
    /// originals the clearing's own ledger holds. Deterministic; not budgeted.
    pub fn from_items(items: &[TranscriptItem]) -> Ledger {
        let mut walk = Walk::default();
        for item in items {
            walk.item(item.view());
        }
        walk.finish()
    }

    /// [`Ledger::from_items`] of the transcript items of `messages`, read one at a time
    /// instead of all held at once, less the placeholders a clearing left (results marked
    /// `cleared`, or whose text says they are one), whose originals the clearing's own ledger
    /// holds.
    pub fn from_messages(messages: &[Message]) -> Ledger {
        // The items of `crate::for_each_item` that the walk reads, taken from the blocks
        // directly: a user's text, a call, a result. A result's name is left out: the walk
        // names a result by its call, and one whose call it has not met has no name in the
        // items either. A result's text is joined from its blocks only when it is read.
        let mut walk = Walk::default();
        for message in messages {
            for block in &message.content {
                match block {
                    ContentBlock::Text(t) => walk.text(message.role, &t.text),
                    ContentBlock::ToolUse(u) => walk.call_json(&u.id, &u.name, &u.input),
                    // A clearing's placeholder, by its mark or, as `from_items` knows it, by
                    // its text (`walk::is_placeholder`).
                    ContentBlock::ToolResult(r)
                        if r.extra.contains_key(panto_model::CLEARED)
                            || matches!(&r.content, ToolResultContent::Text(t) if walk::is_placeholder(t)) =>
                        {}
                    ContentBlock::ToolResult(r) => {
                        walk.result(&r.tool_use_id, None, r.failed(), || match &r.content {
                            ToolResultContent::Text(text) => Cow::Borrowed(text.as_str()),
                            content => Cow::Owned(content.text()),
                        });
                    }
                    _ => {}
                }
            }
        }
        walk.finish()
    }

    /// `newer` over `older`: newer items first, duplicates removed, older errors resolved by
    /// newer successes, the newer todo list when it saw one. The result is the record: every
    /// item of both, unless together they pass [`LEDGER_CAP_BYTES`] of JSON, when the oldest
    /// items of the least telling categories are dropped and counted ([`Ledger::cap`]). What
    /// a model reads is chosen later, by [`Ledger::render_within`].
    pub fn merge(older: &Ledger, newer: &Ledger) -> Ledger {
        // The first success of a key in `newer` (its most recent) resolves the older errors.
        let mut resolving: HashMap<&str, &str> = HashMap::with_capacity(newer.successes.len());
        for (key, how) in &newer.successes {
            resolving.entry(key.as_str()).or_insert(how.as_str());
        }
        let mut errors = newer.errors.clone();
        for e in &older.errors {
            let mut e = e.clone();
            if e.resolved.is_none() {
                e.resolved = resolving
                    .get(error_key(&e.tool, &e.target).as_str())
                    .map(|how| (*how).to_owned());
            }
            errors.push(e);
        }
        let modified = chain(&newer.modified, &older.modified);
        let is_modified: HashSet<&str> = modified.iter().map(String::as_str).collect();
        let read = chain(&newer.read, &older.read)
            .into_iter()
            .filter(|f| !is_modified.contains(f.as_str()))
            .collect();
        let mut successes = newer.successes.clone();
        successes.extend(older.successes.iter().cloned());
        let mut merged = Ledger {
            requests: chain(&newer.requests, &older.requests),
            modified,
            read,
            errors,
            commands: chain(&newer.commands, &older.commands),
            todos: if newer.todo_list_seen {
                newer.todos.clone()
            } else {
                older.todos.clone()
            },
            answers: chain(&newer.answers, &older.answers),
            identifiers: LedgerIdentifiers::merge(&older.identifiers, &newer.identifiers),
            left_out: older.left_out.saturating_add(newer.left_out),
            dropped: older.dropped.plus(&newer.dropped),
            todo_list_seen: newer.todo_list_seen || older.todo_list_seen,
            successes,
        };
        merged.cap(LEDGER_CAP_BYTES);
        merged
    }

    /// How many items the ledger holds, over every category.
    fn items(&self) -> usize {
        self.requests.len()
            + self.modified.len()
            + self.read.len()
            + self.errors.len()
            + self.commands.len()
            + self.todos.len()
            + self.answers.len()
            + self.identifiers.len()
    }

    /// The ledger stored on a compaction entry, read leniently: unknown fields are ignored, a
    /// missing field is empty, and a value that is not a ledger gives `None`. A record an older
    /// panto wrote (with `left_out` only) loads as it is.
    pub fn from_json(value: &Value) -> Option<Ledger> {
        let mut ledger = Ledger::deserialize(value).ok()?;
        ledger.left_out = ledger.left_out.max(ledger.dropped.total());
        Some(ledger)
    }

    /// The ledger as the JSON stored on a compaction entry.
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

/// `summary` without a ledger rendered into it: everything from the first line equal to
/// [`LEDGER_HEADING`] on is removed (a model may copy the ledger of its previous summary).
pub fn strip_ledger(summary: &str) -> &str {
    let mut at = 0;
    for line in summary.split_inclusive('\n') {
        if line.trim_end() == LEDGER_HEADING {
            return summary[..at].trim_end();
        }
        at += line.len();
    }
    summary
}

/// Text in backticks, with as many backticks as it needs.
fn code_span(text: &str) -> String {
    let text = one_line(text);
    let ticks = if text.contains('`') { "``" } else { "`" };
    let pad = if text.starts_with('`') || text.ends_with('`') {
        " "
    } else {
        ""
    };
    format!("{ticks}{pad}{text}{pad}{ticks}")
}

fn chain(newer: &[String], older: &[String]) -> Vec<String> {
    unique(newer.iter().chain(older))
}

/// The first occurrence of each item of `items`, in order.
fn unique<'a>(items: impl Iterator<Item = &'a String>) -> Vec<String> {
    let mut seen: HashSet<&str> = HashSet::new();
    items
        .filter(|item| seen.insert(item.as_str()))
        .cloned()
        .collect()
}

/// `text` on one line: whitespace collapsed to single spaces.
pub fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `text` cut to at most `max` characters, the last of them an ellipsis when it was cut.
pub fn clip(text: &str, max: usize) -> String {
    if Budget::chars(max).fits(text) {
        return text.to_owned();
    }
    let mut out = head(text, Budget::chars(max.saturating_sub(1)), Cut::Char).to_owned();
    out.push('…');
    out
}

/// Whether a user text is a request: not empty, not a bare slash command (`/mode`), not an
/// interruption notice or a command's captured output.
pub fn is_request(text: &str) -> bool {
    let t = text.trim();
    if t.is_empty() || t.starts_with("[Request interrupted") {
        return false;
    }
    if t.starts_with("<local-command-stdout>") || t.starts_with("<local-command-stderr>") {
        return false;
    }
    let bare_command =
        t.starts_with('/') && !t.contains(char::is_whitespace) && !t[1..].contains('/');
    !bare_command
}
