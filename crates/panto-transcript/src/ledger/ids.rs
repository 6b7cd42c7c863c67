//! The identifiers of a ledger ([`LedgerIdentifiers`]): the exact strings of a summarized part
//! that a person asks about later (hex ids, numbers and values with their keys, URLs,
//! `path:line`, versions, error lines), found in every text, call and result by `scan.rs`, each
//! with how many items mentioned it, most referenced first. A walk counts them ([`Tally`]); a
//! merge adds the counts of two records ([`LedgerIdentifiers::merge`]).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::args;
pub(super) use super::scan::{IdentifierKind, KINDS};
use super::scan::{Origin, scan};

/// One identifier: its exact text and how many items of the summarized turns mention it (a
/// text, a call's arguments or a result counts once however often it repeats it). Stored as a
/// pair, `["45ffe0a", 3]`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "(String, u32)", into = "(String, u32)")]
#[non_exhaustive]
pub struct Identifier {
    /// The identifier as written: `45ffe0a`, `"fontSize": 14`, `src/main.rs:120`.
    pub text: String,
    /// How many items mention it.
    pub count: u32,
}

impl Identifier {
    /// An identifier mentioned `count` times.
    pub fn new(text: impl Into<String>, count: u32) -> Identifier {
        Identifier {
            text: text.into(),
            count,
        }
    }
}

impl From<(String, u32)> for Identifier {
    fn from((text, count): (String, u32)) -> Identifier {
        Identifier { text, count }
    }
}

impl From<Identifier> for (String, u32) {
    fn from(id: Identifier) -> (String, u32) {
        (id.text, id.count)
    }
}

/// The identifiers of a summarized part, by kind, each list most referenced first (then most
/// recent first), without duplicates.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct LedgerIdentifiers {
    /// Commit SHAs, hex colors, UUIDs: `45ffe0a`, `#8abeb7`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub hex_ids: Vec<Identifier>,
    /// Numbers with their keys: `Total: 37`, `offset=280`, `"fontSize": 14`, `port = 8080`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub numbers: Vec<Identifier>,
    /// Configuration values with their keys: `"accent": "#8abeb7"`, `TERM=xterm-256color`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<Identifier>,
    /// URLs.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub urls: Vec<Identifier>,
    /// `path:line` references: `src/main.rs:120:5`, `src/a.ts(3,4)`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub path_lines: Vec<Identifier>,
    /// Versions: `v0.7.29`, `2.0.0-rc.1`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub versions: Vec<Identifier>,
    /// The first lines of failed results, and lines of any output that report an error.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub error_lines: Vec<Identifier>,
    /// File paths mentioned anywhere: a folder and an extension, `packages/tui/src/editor.ts`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<Identifier>,
    /// Code names: identifiers of six characters or more with an inner capital or an
    /// underscore, `formatToolExecution`, `total_tokens`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub names: Vec<Identifier>,
}

impl LedgerIdentifiers {
    pub(super) fn get(&self, kind: IdentifierKind) -> &Vec<Identifier> {
        match kind {
            IdentifierKind::HexId => &self.hex_ids,
            IdentifierKind::Number => &self.numbers,
            IdentifierKind::Value => &self.values,
            IdentifierKind::Url => &self.urls,
            IdentifierKind::PathLine => &self.path_lines,
            IdentifierKind::Version => &self.versions,
            IdentifierKind::ErrorLine => &self.error_lines,
            IdentifierKind::Path => &self.paths,
            IdentifierKind::Name => &self.names,
        }
    }

    pub(super) fn get_mut(&mut self, kind: IdentifierKind) -> &mut Vec<Identifier> {
        match kind {
            IdentifierKind::HexId => &mut self.hex_ids,
            IdentifierKind::Number => &mut self.numbers,
            IdentifierKind::Value => &mut self.values,
            IdentifierKind::Url => &mut self.urls,
            IdentifierKind::PathLine => &mut self.path_lines,
            IdentifierKind::Version => &mut self.versions,
            IdentifierKind::ErrorLine => &mut self.error_lines,
            IdentifierKind::Path => &mut self.paths,
            IdentifierKind::Name => &mut self.names,
        }
    }

    /// How many identifiers, over every kind.
    pub fn len(&self) -> usize {
        KINDS.iter().map(|k| self.get(*k).len()).sum()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `newer` over `older`: the counts of an identifier in both added, most referenced
    /// first, and among equals the newer first.
    pub fn merge(older: &LedgerIdentifiers, newer: &LedgerIdentifiers) -> LedgerIdentifiers {
        let mut merged = LedgerIdentifiers::default();
        for kind in KINDS {
            let mut list: Vec<Identifier> = Vec::new();
            let mut at: HashMap<&str, usize> = HashMap::new();
            for id in newer.get(kind).iter().chain(older.get(kind)) {
                match at.get(id.text.as_str()) {
                    Some(&i) => list[i].count = list[i].count.saturating_add(id.count),
                    None => {
                        at.insert(&id.text, list.len());
                        list.push(id.clone());
                    }
                }
            }
            // Stable: equal counts keep the newer first.
            list.sort_by_key(|id| std::cmp::Reverse(id.count));
            *merged.get_mut(kind) = list;
        }
        merged
    }
}

/// What a walk knows of one identifier.
#[derive(Clone, Copy)]
struct Seen {
    count: u32,
    /// The latest item that mentioned it.
    item: usize,
}

/// A multiply-rotate hash taking eight bytes a step: a walk hashes every identifier it finds
/// (up to an error line's 200 bytes) and has no adversary to fear (the texts are the session's
/// own), so a simple hash serves better than `SipHash`, and eight bytes a step better than
/// FNV's one (whose byte-by-byte multiply chain was most of the time spent counting an
/// identifier). The order of a tally's lists never depends on the hash (`Tally::finish` sorts).
#[derive(Clone, Copy, Default)]
struct Fast(u64);

/// An odd constant with well-spread bits (the one `rustc-hash` uses).
const MULTIPLIER: u64 = 0xf135_7aea_2e62_a9c5;

impl Fast {
    fn add(&mut self, word: u64) {
        self.0 = (self.0 ^ word).wrapping_mul(MULTIPLIER).rotate_left(26);
    }
}

impl Hasher for Fast {
    fn finish(&self) -> u64 {
        // The table takes its bucket from the low bits and its tag from the top seven: mix
        // the high product bits down once more.
        self.0 ^ (self.0 >> 29)
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            self.add(u64::from_le_bytes(chunk.try_into().expect("eight bytes")));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut last = [0u8; 8];
            last[..rest.len()].copy_from_slice(rest);
            // The length keeps `ab` and `ab\0` apart.
            self.add(u64::from_le_bytes(last) ^ ((rest.len() as u64) << 59));
        }
    }
}

type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<Fast>>;

/// The identifiers of a walk's items, counted once per item.
#[derive(Default)]
pub(super) struct Tally {
    seen: [FastMap<Box<str>, Seen>; KINDS.len()],
    /// The number of the item being read.
    item: usize,
}

impl Tally {
    /// Counts the identifiers of one item's `text` (an item may give several texts: a call's
    /// arguments; call [`Tally::next_item`] between items).
    pub(super) fn text(&mut self, text: &str, origin: Origin) {
        let item = self.item;
        let seen = &mut self.seen;
        scan(text, origin, &mut |kind, id| {
            let map = &mut seen[kind.index()];
            match map.get_mut(id) {
                Some(s) if s.item == item => {}
                Some(s) => {
                    s.count = s.count.saturating_add(1);
                    s.item = item;
                }
                None => {
                    map.insert(id.into(), Seen { count: 1, item });
                }
            }
        });
    }

    /// Moves on to the next item.
    pub(super) fn next_item(&mut self) {
        self.item += 1;
    }

    /// The identifiers, most referenced first, then most recent, then by text.
    pub(super) fn finish(self) -> LedgerIdentifiers {
        let mut ids = LedgerIdentifiers::default();
        for (kind, map) in KINDS.into_iter().zip(self.seen) {
            let mut list: Vec<(Box<str>, Seen)> = map.into_iter().collect();
            list.sort_unstable_by(|(a, x), (b, y)| {
                y.count
                    .cmp(&x.count)
                    .then(y.item.cmp(&x.item))
                    .then(a.cmp(b))
            });
            *ids.get_mut(kind) = list
                .into_iter()
                .map(|(text, s)| Identifier::new(text, s.count))
                .collect();
        }
        ids
    }
}

impl Tally {
    /// Counts the identifiers of a call's arguments: every string of `value` but its keys and
    /// the placeholders a clearing left for large ones ([`cleared_argument`]).
    pub(super) fn value(&mut self, value: &Value) {
        match value {
            Value::String(s) if cleared_argument(s) => {}
            Value::String(s) => self.text(s, Origin::Said),
            Value::Array(items) => items.iter().for_each(|v| self.value(v)),
            Value::Object(map) => map.values().for_each(|v| self.value(v)),
            _ => {}
        }
    }

    /// Counts the identifiers of a call's arguments given as JSON text, and returns what the
    /// ledger reads of the call (the pruned value of [`args::read_with_strings`]), both from
    /// one parse: every string value (not the keys), decoded, as [`Tally::value`] counts them
    /// in the parsed value. Returns `None`, having counted nothing, when the text is to be
    /// read through its parsed value: the pruned reading steps aside, or an object names a key
    /// twice (the parsed value keeps only the last).
    pub(super) fn json(&mut self, text: &str) -> Option<Value> {
        let mut strings = args::Strings::default();
        let value = args::read_with_strings(text, &mut strings)?;
        if strings.repeated {
            return None;
        }
        for s in strings.list.iter().filter(|s| !cleared_argument(s)) {
            self.text(s, Origin::Said);
        }
        Some(value)
    }
}

/// Whether a call's argument is the placeholder a clearing left for a large one (it starts
/// with [`panto_model::CLEARED_INPUT_PREFIX`]): panto's words, whose size and id are no
/// identifiers of the conversation; the clearing's ledger recorded the original's.
fn cleared_argument(s: &str) -> bool {
    s.starts_with(panto_model::CLEARED_INPUT_PREFIX)
}
