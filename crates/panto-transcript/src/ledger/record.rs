//! The record: the ledger as stored on a compaction entry, every item, bounded only by
//! [`LEDGER_CAP_BYTES`] of JSON ([`Ledger::cap`]), which past it keeps each kind of item within
//! its fair share (`share.rs`), the most telling of each first, and counts what it drops
//! ([`Ledger::dropped`], [`LedgerCounts`]). The kinds of item, in the order a rendering takes
//! them, are defined here and shared with `render.rs`.

use serde::{Deserialize, Serialize};

use super::ids::{IdentifierKind, KINDS};
use super::scan::ERROR_LINE_BYTES;
use super::share::allocate;
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
    /// Identifiers, of every kind.
    #[serde(skip_serializing_if = "is_zero")]
    pub identifiers: u64,
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
            Category::Identifiers => self.identifiers,
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
            Category::Identifiers => &mut self.identifiers,
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
    Identifiers,
}

pub(super) const CATEGORIES: [Category; 8] = [
    Category::Requests,
    Category::Modified,
    Category::Errors,
    Category::Todos,
    Category::Answers,
    Category::Identifiers,
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
            Category::Identifiers => ("identifier", "identifiers"),
        }
    }
}

/// What a rendering chooses from, most telling first: the errors split by whether a later call
/// resolved them, and each kind of identifier.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    Unresolved,
    Requests,
    Modified,
    Todos,
    Answers,
    Resolved,
    Id(IdentifierKind),
    Commands,
    Read,
}

/// The kinds in the order a rendering takes them.
pub(super) const PRIORITY: [Kind; 17] = [
    Kind::Unresolved,
    Kind::Requests,
    Kind::Modified,
    Kind::Todos,
    Kind::Answers,
    Kind::Resolved,
    Kind::Id(KINDS[0]),
    Kind::Id(KINDS[1]),
    Kind::Id(KINDS[2]),
    Kind::Id(KINDS[3]),
    Kind::Id(KINDS[4]),
    Kind::Id(KINDS[5]),
    Kind::Id(KINDS[6]),
    Kind::Id(KINDS[7]),
    Kind::Id(KINDS[8]),
    Kind::Commands,
    Kind::Read,
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
            Kind::Id(_) => Category::Identifiers,
            Kind::Commands => Category::Commands,
            Kind::Read => Category::Read,
        }
    }
}

/// The weight of each kind, in [`PRIORITY`] order; they sum to 100, so a weight is the
/// percentage of the budget a kind is sure of when every kind needs more than its share.
///
/// The user's requests weigh most (31: what was asked; on the large shared session they are
/// 40% of what the ledger's kinds would take at full length, and `cargo xtask quality` wants 90%
/// of them in the summary), then the errors nothing resolved (8) and the files modified (7);
/// the exact identifiers together weigh 37 (issue 36: half the questions people ask later are
/// answered only by what a tool printed); commands and files read, which the next model can
/// run or read again, weigh 8. Measured with `cargo xtask quality --recall` and `quality`: on
/// the shared sessions weights a few points either way move one measure up and the other down
/// by a point or two; the rendering's budget, not the weights, is what limits them
/// (docs/compaction.md).
pub(super) const WEIGHTS: [u64; PRIORITY.len()] = {
    let mut w = [0; PRIORITY.len()];
    let mut i = 0;
    while i < PRIORITY.len() {
        w[i] = PRIORITY[i].weight();
        i += 1;
    }
    w
};

impl Kind {
    /// The kind's weight (see [`WEIGHTS`]).
    pub(super) const fn weight(self) -> u64 {
        use IdentifierKind as I;
        match self {
            Kind::Unresolved => 8,
            Kind::Requests => 31,
            Kind::Modified => 7,
            Kind::Todos => 3,
            Kind::Answers => 2,
            Kind::Resolved => 4,
            Kind::Id(I::HexId) => 3,
            Kind::Id(I::Number | I::Path | I::Name) => 4,
            Kind::Id(I::Value) => 7,
            Kind::Id(I::ErrorLine) => 6,
            Kind::Id(I::Url | I::Version) => 2,
            Kind::Id(I::PathLine) => 5,
            Kind::Commands => 6,
            Kind::Read => 2,
        }
    }
}

/// Each kind's fair share of `budget` by [`WEIGHTS`], given what each `needs` (in
/// [`PRIORITY`] order): `share.rs`'s water-filling.
pub(super) fn fair_shares(budget: usize, needs: &[usize]) -> Vec<usize> {
    allocate(budget, needs, &WEIGHTS)
}

/// The positions of a kind's items in their list, most telling first (most recent, or for
/// identifiers most referenced).
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
        Kind::Id(k) => all(ledger.identifiers.get(k).len()),
        _ => all(strings(ledger, kind).len()),
    }
}

/// The string list of a kind that is not an error nor an identifier.
pub(super) fn strings(ledger: &Ledger, kind: Kind) -> &[String] {
    match kind {
        Kind::Requests => &ledger.requests,
        Kind::Modified => &ledger.modified,
        Kind::Todos => &ledger.todos,
        Kind::Answers => &ledger.answers,
        Kind::Commands => &ledger.commands,
        Kind::Read => &ledger.read,
        Kind::Unresolved | Kind::Resolved | Kind::Id(_) => &[],
    }
}

/// The bytes one item adds to the record's JSON (its value and a comma).
fn json_len<T: Serialize>(item: &T) -> usize {
    serde_json::to_vec(item).map_or(0, |v| v.len()) + 1
}

impl Ledger {
    /// Keeps the record within `max_bytes` of JSON ([`Ledger::to_json`]): each item is first
    /// cut to the record's per-item length (8,000 characters for a request or an answer, 2,000
    /// for anything else, 200 for an error line), then, while the JSON is larger than
    /// `max_bytes`, each kind keeps its fair share of the room (`share.rs`: a kind that needs
    /// less than its share keeps everything, the others divide what is left by weight), its
    /// most telling items first (the most recent, the most referenced identifiers); the rest
    /// is dropped and counted in [`Ledger::dropped`] and [`Ledger::left_out`]. So no kind is
    /// emptied by another, and a record within the cap keeps every item.
    ///
    /// [`Ledger::merge`] applies it with [`LEDGER_CAP_BYTES`].
    pub fn cap(&mut self, max_bytes: usize) {
        self.clip_to_record();
        let mut slack = COUNTS_SLACK;
        loop {
            let size = serde_json::to_vec(self).map_or(0, |v| v.len());
            if size <= max_bytes || self.items() == 0 {
                return;
            }
            self.keep_shares(size, max_bytes.saturating_sub(slack));
            // Dropping is counted in the JSON too; should the slack not have covered it, the
            // next round aims lower.
            slack = slack.saturating_mul(2);
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
        for kind in KINDS {
            let max = match kind {
                IdentifierKind::ErrorLine => ERROR_LINE_BYTES,
                _ => RECORD_ITEM_CHARS,
            };
            let list = self.identifiers.get_mut(kind);
            if list.iter().any(|id| id.text.len() > max) {
                let mut seen = std::collections::HashSet::new();
                let clipped: Vec<_> = list
                    .iter()
                    .map(|id| super::Identifier::new(clip(&id.text, max), id.count))
                    .filter(|id| seen.insert(id.text.clone()))
                    .collect();
                *list = clipped;
            }
        }
    }

    /// The JSON bytes of each kind's items, most telling first, by kind in [`PRIORITY`] order.
    fn item_sizes(&self) -> Vec<Vec<usize>> {
        PRIORITY
            .iter()
            .map(|kind| {
                let at = positions(self, *kind);
                match kind {
                    Kind::Unresolved | Kind::Resolved => {
                        at.iter().map(|&i| json_len(&self.errors[i])).collect()
                    }
                    Kind::Id(k) => {
                        let list = self.identifiers.get(*k);
                        at.iter().map(|&i| json_len(&list[i])).collect()
                    }
                    _ => {
                        let list = strings(self, *kind);
                        at.iter().map(|&i| json_len(&list[i])).collect()
                    }
                }
            })
            .collect()
    }

    /// Keeps each kind within its fair share of the room its items may take in a record of
    /// `target` bytes (the record is `size` bytes now), and counts what it drops.
    fn keep_shares(&mut self, size: usize, target: usize) {
        let sizes = self.item_sizes();
        let items: usize = sizes.iter().flatten().sum();
        let room = target.saturating_sub(size.saturating_sub(items));
        let needs: Vec<usize> = sizes.iter().map(|s| s.iter().sum()).collect();
        let shares = fair_shares(room, &needs);
        let keep: Vec<usize> = sizes
            .iter()
            .zip(&shares)
            .map(|(s, share)| {
                let mut used = 0;
                s.iter()
                    .take_while(|n| {
                        used += **n;
                        used <= *share
                    })
                    .count()
            })
            .collect();
        self.keep_first(&keep);
    }

    /// Keeps the first `keep[k]` items of each kind, most telling first, and counts the rest.
    fn keep_first(&mut self, keep: &[usize]) {
        let positions: Vec<Vec<usize>> = PRIORITY.iter().map(|k| positions(self, *k)).collect();
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
        for kind in KINDS {
            self.identifiers
                .get_mut(kind)
                .truncate(kept_of(Kind::Id(kind)));
        }
    }
}
