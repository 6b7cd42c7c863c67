//! Items: the pieces of a session's history that recall finds, `panto show` prints and a
//! clearing placeholder names, each with a stable id.
//!
//! An item is one block of a message (its text, its thinking, a tool call, a tool result), or
//! one of the two texts of a compaction entry (its summary and its stored ledger). Its id is
//! stable because the history is append-only:
//! - a tool result's id is the id of the call it answers (`toolu_1`), the name a model already
//!   knows it by;
//! - every other item's id is its entry's id, `#`, and the block's index (`m7#0`); the summary
//!   of a compaction entry is block 0 and its ledger block 1;
//! - an entry without an id (one another program wrote) is named by its position among the
//!   session's entries, `@` and the 0-based number (`@12#1`).
//!
//! [`ItemRef`] resolves an id the way a person or a model gives one: an item's id, or an
//! entry's id (or `@N`) for all the items of that entry.

use std::collections::HashMap;
use std::fmt::Write as _;

use serde_json::Value;

use crate::entry::Entry;
use crate::message::{ContentBlock, Message, Role};

/// The field of a compaction entry that stores its ledger (written by panto-compact).
pub const LEDGER: &str = "ledger";

/// What an item is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ItemKind {
    /// A text block.
    Text,
    /// A thinking block.
    Thinking,
    /// A tool call: its name and arguments.
    ToolCall,
    /// A tool result.
    ToolResult,
    /// The summary of a compaction entry.
    Summary,
    /// The ledger stored on a compaction entry.
    Ledger,
}

impl ItemKind {
    /// The word for it: `text`, `thinking`, `tool_call`, `tool_result`, `summary`, `ledger`.
    pub fn as_str(self) -> &'static str {
        match self {
            ItemKind::Text => "text",
            ItemKind::Thinking => "thinking",
            ItemKind::ToolCall => "tool_call",
            ItemKind::ToolResult => "tool_result",
            ItemKind::Summary => "summary",
            ItemKind::Ledger => "ledger",
        }
    }

    /// A small number for an index: the position in the list of [`ItemKind::as_str`].
    pub fn code(self) -> u8 {
        self as u8
    }

    /// The kind a [`ItemKind::code`] stands for.
    pub fn from_code(code: u8) -> Option<ItemKind> {
        [
            ItemKind::Text,
            ItemKind::Thinking,
            ItemKind::ToolCall,
            ItemKind::ToolResult,
            ItemKind::Summary,
            ItemKind::Ledger,
        ]
        .get(usize::from(code))
        .copied()
    }
}

/// One item of a session's history, with where it is and its text.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Item {
    /// Its stable id (see the module docs).
    pub id: String,
    /// The id of its entry, or `@N` for an entry without one.
    pub entry: String,
    /// The 0-based position of its entry among the session's entries.
    pub position: u64,
    /// The index of its block in the entry.
    pub block: usize,
    /// What it is.
    pub kind: ItemKind,
    /// The author of its message (none for a compaction's texts).
    pub role: Option<Role>,
    /// The tool's name, for a tool call, and for a result whose call came earlier.
    pub tool: Option<String>,
    /// The call id, for a tool call and a tool result.
    pub call: Option<String>,
    /// Whether a tool result reports a failure.
    pub error: bool,
    /// The text: a block's text, a call's name and arguments, a ledger's strings by line.
    pub text: String,
}

impl Item {
    /// A fingerprint of what the item says (its kind, role, call and text, not where it is):
    /// equal for an item and its kept copy, so recall can leave out what the effective context
    /// holds verbatim. FNV-1a, stable across builds, so an index may store it.
    pub fn fingerprint(&self) -> u64 {
        let mut h = Fnv::default();
        h.byte(self.kind.code());
        h.byte(self.role.map_or(0, |r| r as u8 + 1));
        h.bytes(self.call.as_deref().unwrap_or("").as_bytes());
        h.byte(0xff);
        h.bytes(self.text.as_bytes());
        h.0
    }
}

/// FNV-1a, 64 bits.
struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv {
    fn byte(&mut self, b: u8) {
        self.0 ^= u64::from(b);
        self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
    }

    fn bytes(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.byte(b);
        }
    }
}

/// Walks a session's entries in order and gives their items, naming each tool result after
/// the latest earlier call with its id.
#[derive(Debug, Default)]
pub struct Items {
    tools: HashMap<String, String>,
}

impl Items {
    /// A walk from the first entry.
    pub fn new() -> Items {
        Items::default()
    }

    /// The items of `entry`, the entry at `position`, in block order.
    pub fn of(&mut self, position: u64, entry: &Entry) -> Vec<Item> {
        let name = entry
            .id()
            .map_or_else(|| format!("@{position}"), str::to_owned);
        match entry {
            Entry::Message(m) => self.message(position, name, m),
            Entry::Compaction(c) => {
                let mut out = vec![plain(&name, position, 0, ItemKind::Summary, &c.summary)];
                if let Some(ledger) = c.extra.get(LEDGER) {
                    let mut text = String::new();
                    strings(ledger, &mut text);
                    out.push(plain(&name, position, 1, ItemKind::Ledger, &text));
                }
                out
            }
            Entry::Undo(_) | Entry::Unknown(_) => Vec::new(),
        }
    }

    fn message(&mut self, position: u64, entry: String, m: &Message) -> Vec<Item> {
        let mut out = Vec::new();
        for (block, b) in m.content.iter().enumerate() {
            let mut item = Item {
                id: format!("{entry}#{block}"),
                entry: entry.clone(),
                position,
                block,
                kind: ItemKind::Text,
                role: Some(m.role),
                tool: None,
                call: None,
                error: false,
                text: String::new(),
            };
            match b {
                ContentBlock::Text(t) => item.text.clone_from(&t.text),
                ContentBlock::Thinking(t) => {
                    item.kind = ItemKind::Thinking;
                    item.text.clone_from(&t.thinking);
                }
                ContentBlock::ToolUse(u) => {
                    self.tools.insert(u.id.clone(), u.name.to_string());
                    item.kind = ItemKind::ToolCall;
                    item.tool = Some(u.name.to_string());
                    item.call = Some(u.id.clone());
                    item.text = format!("{} {}", u.name, u.input.json());
                }
                ContentBlock::ToolResult(r) => {
                    item.id.clone_from(&r.tool_use_id);
                    item.kind = ItemKind::ToolResult;
                    item.tool = self.tools.get(&r.tool_use_id).cloned();
                    item.call = Some(r.tool_use_id.clone());
                    item.error = r.failed();
                    item.text = r.content.text();
                }
                ContentBlock::Compaction(c) => {
                    item.kind = ItemKind::Summary;
                    item.role = None;
                    item.text.clone_from(&c.summary);
                }
                ContentBlock::Image(_) | ContentBlock::Other(_) => continue,
            }
            out.push(item);
        }
        out
    }
}

fn plain(entry: &str, position: u64, block: usize, kind: ItemKind, text: &str) -> Item {
    Item {
        id: format!("{entry}#{block}"),
        entry: entry.to_owned(),
        position,
        block,
        kind,
        role: None,
        tool: None,
        call: None,
        error: false,
        text: text.to_owned(),
    }
}

/// Every string (and number) of a JSON value, one a line, keys left out.
fn strings(value: &Value, out: &mut String) {
    match value {
        Value::String(s) => {
            out.push_str(s);
            out.push('\n');
        }
        Value::Number(n) => {
            let _ = writeln!(out, "{n}");
        }
        Value::Array(items) => items.iter().for_each(|v| strings(v, out)),
        Value::Object(fields) => fields.values().for_each(|v| strings(v, out)),
        Value::Bool(_) | Value::Null => {}
    }
}

/// The items of every message of an effective context (its compaction block is a
/// [`ItemKind::Summary`] item): what recall leaves out, by [`Item::fingerprint`].
pub fn context_items(messages: &[Message]) -> Vec<Item> {
    let mut walk = Items::new();
    let mut out = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        out.extend(walk.message(i as u64, format!("@{i}"), m));
    }
    out
}

/// An id as a person or a model gives it: what [`ItemRef::matches`] compares items with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ItemRef(String);

impl ItemRef {
    /// The id `text`, trimmed.
    pub fn new(text: &str) -> ItemRef {
        ItemRef(text.trim().to_owned())
    }

    /// The id as given.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether `item` is the item this id names ([`Match::Item`]), one of the items of the
    /// entry it names ([`Match::Entry`]), or neither.
    pub fn matches(&self, item: &Item) -> Option<Match> {
        if item.id == self.0 {
            Some(Match::Item)
        } else if item.entry == self.0 || format!("@{}", item.position) == self.0 {
            Some(Match::Entry)
        } else {
            None
        }
    }
}

/// How an item matched an [`ItemRef`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Match {
    /// The id is the item's own.
    Item,
    /// The id names the item's entry.
    Entry,
}
