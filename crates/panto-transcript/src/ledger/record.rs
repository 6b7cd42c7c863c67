//! The record: the ledger as stored on a compaction entry, every item, bounded only by
//! [`LEDGER_CAP_BYTES`] of JSON ([`Ledger::cap`]), which drops the oldest, least telling items
//! past it and counts them ([`Ledger::dropped`], [`LedgerCounts`]). The kinds of item, in the
//! order a rendering takes them and the reverse order the record drops them, are defined here
//! and shared with `render.rs`.

use serde::{Deserialize, Serialize};

use super::{Ledger, clip, unique};

/// The most bytes of JSON a stored ledger takes: 256 KiB.
///
/// Generous on purpose: at 40 to 200 bytes an item it holds thousands of requests, files,
/// commands and errors, more than a long agent session of a thousand turns produces. It is
/// bounded at all because every chained compaction writes the whole record again on its entry
/// and every load of the session reads the latest one: 256 KiB is about a millisecond to parse,
/// and it is less than the conversation a compaction on a 128k-token window summarizes, so the
/// records never dominate the session file.
pub const LEDGER_CAP_BYTES: usize = 256 * 1024;

/// The most characters one request or one answer keeps in the record (a page of text; a longer
/// paste is cut, its start kept).
pub(super) const RECORD_TEXT_CHARS: usize = 8_000;
/// The most characters any other item keeps in the record: a path, a command, a todo, an
/// error's message or target.
pub(super) const RECORD_ITEM_CHARS: usize = 2_000;
/// Bytes kept free below the cap for the counts that dropping items adds to the JSON.
const COUNTS_SLACK: usize = 512;

/// How many items of each category; used for what the record dropped past its cap.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct LedgerCounts {
    /// The user's requests.
    #[serde(skip_serializing_if = "is_zero")]
    pub requests: u64,
    /// Files modified.
    #[serde(skip_serializing_if = "is_zero")]
    pub modified: u64,
    /// Files read.
    #[serde(skip_serializing_if = "is_zero")]
    pub read: u64,
    /// Errors, resolved or not.
    #[serde(skip_serializing_if = "is_zero")]
    pub errors: u64,
    /// Commands.
    #[serde(skip_serializing_if = "is_zero")]
    pub commands: u64,
    /// Open todos.
    #[serde(skip_serializing_if = "is_zero")]
    pub todos: u64,
    /// The user's answers to questions.
    #[serde(skip_serializing_if = "is_zero")]
    pub answers: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl LedgerCounts {
    /// The sum over every category.
    pub fn total(&self) -> u64 {
        CATEGORIES
            .iter()
            .fold(0u64, |sum, c| sum.saturating_add(self.get(*c)))
    }

    /// Whether every count is zero.
    pub fn is_empty(&self) -> bool {
        self.total() == 0
    }

    /// The counts of `self` and `other` added, category by category.
    pub fn plus(&self, other: &LedgerCounts) -> LedgerCounts {
        let mut sum = *self;
        for c in CATEGORIES {
            *sum.get_mut(c) = self.get(c).saturating_add(other.get(c));
        }
        sum
    }

    pub(super) fn get(&self, category: Category) -> u64 {
        match category {
            Category::Requests => self.requests,
            Category::Modified => self.modified,
            Category::Read => self.read,
            Category::Errors => self.errors,
            Category::Commands => self.commands,
            Category::Todos => self.todos,
            Category::Answers => self.answers,
        }
    }

    pub(super) fn get_mut(&mut self, category: Category) -> &mut u64 {
        match category {
            Category::Requests => &mut self.requests,
            Category::Modified => &mut self.modified,
            Category::Read => &mut self.read,
            Category::Errors => &mut self.errors,
            Category::Commands => &mut self.commands,
            Category::Todos => &mut self.todos,
            Category::Answers => &mut self.answers,
        }
    }
}

/// A category of the record, as counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Category {
    Requests,
    Modified,
    Read,
    Errors,
    Commands,
    Todos,
    Answers,
}

pub(super) const CATEGORIES: [Category; 7] = [
    Category::Requests,
    Category::Modified,
    Category::Errors,
    Category::Todos,
    Category::Answers,
    Category::Commands,
    Category::Read,
];

impl Category {
    /// The category's name in a note, singular and plural.
    pub(super) fn names(self) -> (&'static str, &'static str) {
        match self {
            Category::Requests => ("request", "requests"),
            Category::Modified => ("file modified", "files modified"),
            Category::Read => ("file read", "files read"),
            Category::Errors => ("error", "errors"),
            Category::Commands => ("command", "commands"),
            Category::Todos => ("open todo", "open todos"),
            Category::Answers => ("answer", "answers"),
        }
    }
}

/// What a rendering chooses from, most telling first: the errors split by whether a later call
/// resolved them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    Unresolved,
    Requests,
    Modified,
    Todos,
    Answers,
    Resolved,
    Commands,
    Read,
}

/// The kinds in the order a rendering takes them.
pub(super) const PRIORITY: [Kind; 8] = [
    Kind::Unresolved,
    Kind::Requests,
    Kind::Modified,
    Kind::Todos,
    Kind::Answers,
    Kind::Resolved,
    Kind::Commands,
    Kind::Read,
];

/// The kinds the record drops first past its cap, a tier at a time (within a tier, from the
/// kind that takes the most bytes), the oldest item of a kind first: the reverse of
/// [`PRIORITY`].
const DROP_TIERS: [&[Kind]; 7] = [
    &[Kind::Read, Kind::Commands],
    &[Kind::Resolved],
    &[Kind::Answers],
    &[Kind::Todos],
    &[Kind::Modified],
    &[Kind::Requests],
    &[Kind::Unresolved],
];

impl Kind {
    pub(super) fn index(self) -> usize {
        PRIORITY.iter().position(|k| *k == self).unwrap_or(0)
    }

    pub(super) fn category(self) -> Category {
        match self {
            Kind::Unresolved | Kind::Resolved => Category::Errors,
            Kind::Requests => Category::Requests,
            Kind::Modified => Category::Modified,
            Kind::Todos => Category::Todos,
            Kind::Answers => Category::Answers,
            Kind::Commands => Category::Commands,
            Kind::Read => Category::Read,
        }
    }
}

/// The positions of a kind's items in their list, most recent first.
pub(super) fn positions(ledger: &Ledger, kind: Kind) -> Vec<usize> {
    let all = |n: usize| (0..n).collect();
    match kind {
        Kind::Unresolved | Kind::Resolved => ledger
            .errors
            .iter()
            .enumerate()
            .filter(|(_, e)| e.resolved.is_none() == (kind == Kind::Unresolved))
            .map(|(i, _)| i)
            .collect(),
        Kind::Requests => all(ledger.requests.len()),
        Kind::Modified => all(ledger.modified.len()),
        Kind::Todos => all(ledger.todos.len()),
        Kind::Answers => all(ledger.answers.len()),
        Kind::Commands => all(ledger.commands.len()),
        Kind::Read => all(ledger.read.len()),
    }
}

/// The string list of a kind that is not an error.
pub(super) fn strings(ledger: &Ledger, kind: Kind) -> &[String] {
    match kind {
        Kind::Requests => &ledger.requests,
        Kind::Modified => &ledger.modified,
        Kind::Todos => &ledger.todos,
        Kind::Answers => &ledger.answers,
        Kind::Commands => &ledger.commands,
        Kind::Read => &ledger.read,
        Kind::Unresolved | Kind::Resolved => &[],
    }
}

/// The bytes one item adds to the record's JSON (its value and a comma).
fn json_len<T: Serialize>(item: &T) -> usize {
    serde_json::to_vec(item).map_or(0, |v| v.len()) + 1
}

impl Ledger {
    /// Keeps the record within `max_bytes` of JSON ([`Ledger::to_json`]): each item is first
    /// cut to the record's per-item length (8,000 characters for a request or an answer, 2,000
    /// for anything else), then, while the JSON is larger than `max_bytes`, the oldest items
    /// are dropped, least telling kinds first (files read and commands, then resolved errors,
    /// answers, todos, files modified, requests, and unresolved errors last), and counted in
    /// [`Ledger::dropped`] and [`Ledger::left_out`]. A record within the cap keeps every item.
    ///
    /// [`Ledger::merge`] applies it with [`LEDGER_CAP_BYTES`].
    pub fn cap(&mut self, max_bytes: usize) {
        self.clip_to_record();
        let mut target = max_bytes.saturating_sub(COUNTS_SLACK);
        loop {
            let size = serde_json::to_vec(self).map_or(0, |v| v.len());
            if size <= max_bytes || self.items() == 0 {
                return;
            }
            self.drop_oldest(size.saturating_sub(target));
            // Dropping is counted in the JSON too; should the slack not have covered it, the
            // next round aims lower.
            target = target.saturating_sub(COUNTS_SLACK);
        }
    }

    /// Cuts every item to the record's per-item length, keeping the lists free of duplicates.
    fn clip_to_record(&mut self) {
        let long = |list: &mut Vec<String>, max: usize| {
            if list.iter().any(|x| x.len() > max) {
                let clipped: Vec<String> = list.iter().map(|x| clip(x, max)).collect();
                *list = unique(clipped.iter());
            }
        };
        long(&mut self.requests, RECORD_TEXT_CHARS);
        long(&mut self.answers, RECORD_TEXT_CHARS);
        long(&mut self.modified, RECORD_ITEM_CHARS);
        long(&mut self.read, RECORD_ITEM_CHARS);
        long(&mut self.commands, RECORD_ITEM_CHARS);
        for todo in &mut self.todos {
            if todo.len() > RECORD_ITEM_CHARS {
                *todo = clip(todo, RECORD_ITEM_CHARS);
            }
        }
        for e in &mut self.errors {
            for text in [&mut e.message, &mut e.target] {
                if text.len() > RECORD_ITEM_CHARS {
                    *text = clip(text, RECORD_ITEM_CHARS);
                }
            }
        }
    }

    /// Drops the oldest items, by [`DROP_TIERS`], until about `bytes` of JSON are gone.
    fn drop_oldest(&mut self, mut bytes: usize) {
        let positions: Vec<Vec<usize>> = PRIORITY.iter().map(|k| positions(self, *k)).collect();
        let sizes: Vec<Vec<usize>> = PRIORITY
            .iter()
            .zip(&positions)
            .map(|(kind, at)| match kind {
                Kind::Unresolved | Kind::Resolved => {
                    at.iter().map(|&i| json_len(&self.errors[i])).collect()
                }
                _ => {
                    let list = strings(self, *kind);
                    at.iter().map(|&i| json_len(&list[i])).collect()
                }
            })
            .collect();
        let mut keep: Vec<usize> = positions.iter().map(Vec::len).collect();
        let mut kept: Vec<usize> = sizes.iter().map(|s| s.iter().sum()).collect();
        for tier in DROP_TIERS {
            while bytes > 0 {
                let Some(k) = tier
                    .iter()
                    .map(|k| k.index())
                    .filter(|&k| keep[k] > 0)
                    .max_by_key(|&k| kept[k])
                else {
                    break;
                };
                keep[k] -= 1;
                let size = sizes[k][keep[k]];
                kept[k] -= size;
                bytes = bytes.saturating_sub(size);
            }
        }
        let mut dropped = 0u64;
        for (k, kind) in PRIORITY.iter().enumerate() {
            let gone = (positions[k].len() - keep[k]) as u64;
            *self.dropped.get_mut(kind.category()) += gone;
            dropped += gone;
        }
        self.left_out = self.left_out.saturating_add(dropped);
        let kept_of = |kind: Kind| keep[kind.index()];
        let mut keep_error = vec![false; self.errors.len()];
        for kind in [Kind::Unresolved, Kind::Resolved] {
            for &i in positions[kind.index()].iter().take(kept_of(kind)) {
                keep_error[i] = true;
            }
        }
        let mut kept_errors = keep_error.into_iter();
        self.errors.retain(|_| kept_errors.next().unwrap_or(false));
        self.requests.truncate(kept_of(Kind::Requests));
        self.modified.truncate(kept_of(Kind::Modified));
        self.todos.truncate(kept_of(Kind::Todos));
        self.answers.truncate(kept_of(Kind::Answers));
        self.commands.truncate(kept_of(Kind::Commands));
        self.read.truncate(kept_of(Kind::Read));
    }
}
