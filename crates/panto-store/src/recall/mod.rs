//! Recall: search what a session's compactions took out of its effective context, and fetch
//! an item with its neighbours by id.
//!
//! A read path over the append-only history, like [`crate::Store::load`]. Every store answers
//! [`crate::Store::recall`] and [`crate::Store::fetch`]; their default implementations
//! ([`crate::recall_by_scan`], [`crate::fetch_by_scan`]) read the history through
//! [`crate::Store::read`], build a [`RecallIndex`] and rank with it, so a custom
//! store recalls correctly with no code of its own. An index a store keeps is derived data: it
//! must give the same hits, only sooner.
//!
//! The pieces, each pure: [`terms`] cuts text into the terms every index stores (one tokenizer
//! for all stores, so an exact-identifier query finds the same items everywhere); the query
//! parser finds the exact strings a query asks for; [`RecallIndex`] ranks (exact strings first,
//! then BM25); [`snippet`] cuts the window a hit shows.

mod fetch;
mod index;
mod near;
mod passage;
mod persist;
mod postings;
mod query;
mod rank;
mod snippet;
mod terms;

use std::collections::HashSet;

use panto_model::{EffectiveContext, Item, ItemKind, Role, context_items};

pub use fetch::{IdRow, Named, at_position, fetch_in, fetch_window, id_rows, no_such_id};
pub use index::RecallIndex;
pub use persist::{CallRow, DocRow, IndexState, Lookup, Picker, Update, item_at};
pub use postings::{Block, Posting, RANGE_DOCS, RangeMeta, decode as decode_block, range_of};
pub use rank::{Candidate, Corrupt, RangeBound, Stats, Tiers, join_bounds};
pub use snippet::{SNIPPET_CHARS, snippet};
pub use terms::terms;

use query::{Query, normalize};

/// The most hits one recall returns.
pub const MAX_LIMIT: usize = 50;

/// What to recall: the query and how many hits.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RecallQuery {
    /// Words, identifiers, quoted text.
    pub text: String,
    /// The most hits (at most [`MAX_LIMIT`]).
    pub limit: usize,
    /// Whether items the effective context holds verbatim may be hits too.
    pub include_context: bool,
}

impl RecallQuery {
    /// A query for the best 5 hits outside the effective context.
    pub fn new(text: impl Into<String>) -> RecallQuery {
        RecallQuery {
            text: text.into(),
            limit: 5,
            include_context: false,
        }
    }

    /// The query with at most `limit` hits (1 to [`MAX_LIMIT`]).
    #[must_use]
    pub fn with_limit(mut self, limit: usize) -> RecallQuery {
        self.limit = limit.clamp(1, MAX_LIMIT);
        self
    }

    /// The query searching the effective context too.
    #[must_use]
    pub fn with_context(mut self, include: bool) -> RecallQuery {
        self.include_context = include;
        self
    }
}

/// One hit: an item of the history, where it is, and the window of it that matched.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Hit {
    /// The item's id, which [`crate::Store::fetch`] takes.
    pub id: String,
    /// Its entry's id (`@N` for an entry without one).
    pub entry: String,
    /// The position of its entry in the session (0 for the first).
    pub position: u64,
    /// What it is.
    pub kind: ItemKind,
    /// Its message's author (none for a compaction's summary or ledger).
    pub role: Option<Role>,
    /// The tool, for a tool call or result.
    pub tool: Option<String>,
    /// The call id, for a tool call or result.
    pub call: Option<String>,
    /// Whether a tool result reports a failure.
    pub error: bool,
    /// The compaction that summarized it: the first compaction entry after it.
    pub summarized_by: Option<String>,
    /// How many of the query's exact strings (identifiers, quoted text) it holds.
    pub exact: u32,
    /// How many distinct terms of the query its text holds close together (within a window of
    /// 24 words), which orders hits of the same `exact` before their score.
    pub near: u32,
    /// Its BM25 score.
    pub score: f64,
    /// The window of its text around the match (at most [`SNIPPET_CHARS`] characters).
    pub snippet: String,
    /// Its whole text.
    pub text: String,
}

/// What a recall found.
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct Recalled {
    /// The hits, best first.
    pub hits: Vec<Hit>,
    /// How many items the history holds.
    pub items: u64,
}

impl Recalled {
    /// `hits` found among `items` items.
    pub fn new(hits: Vec<Hit>, items: u64) -> Recalled {
        Recalled { hits, items }
    }
}

/// An item fetched by id, with its neighbours.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Fetched {
    /// The items, in order: the neighbours before, the items the id names, the neighbours after.
    pub items: Vec<Item>,
    /// The ids of the items the id named.
    pub asked: Vec<String>,
}

/// The fingerprints of the items `context` holds: what recall leaves out.
pub fn context_fingerprints(context: &EffectiveContext) -> HashSet<u64> {
    context_items(&context.messages)
        .iter()
        .map(Item::fingerprint)
        .collect()
}

/// How many first-stage candidates the second stage reads for `limit` hits.
pub(crate) fn candidates_for(limit: usize) -> usize {
    (limit * 4).max(32)
}

/// The second stage: the candidates' items read, the exact strings each holds counted and the
/// window holding most of the query's terms found ([`near::nearest`]), ordered again (exact
/// strings, terms near each other, BM25, the earlier item), the best `limit` made hits. `item`
/// gives a candidate's item and the compaction that summarized it.
pub(crate) fn finish<'a>(
    query: &Query,
    candidates: Vec<Candidate>,
    limit: usize,
    mut item: impl FnMut(u32) -> Option<(&'a Item, Option<String>)>,
) -> Vec<Hit> {
    let mut scored: Vec<(Candidate, near::Near, &Item, Option<String>)> = Vec::new();
    for mut c in candidates {
        let Some((it, by)) = item(c.doc) else {
            continue;
        };
        let text = normalize(&it.text);
        c.tier = query
            .exact
            .iter()
            .filter(|e| text.contains(&e.needle))
            .count() as u32;
        let near = near::nearest(&it.text, &query.terms);
        scored.push((c, near, it, by));
    }
    scored.sort_by(|a, b| {
        b.0.tier
            .cmp(&a.0.tier)
            .then(b.1.terms.cmp(&a.1.terms))
            .then(rank::order(&a.0, &b.0))
    });
    scored
        .into_iter()
        .take(limit)
        .map(|(c, near, it, by)| Hit {
            id: it.id.clone(),
            entry: it.entry.clone(),
            position: it.position,
            kind: it.kind,
            role: it.role,
            tool: it.tool.clone(),
            call: it.call.clone(),
            error: it.error,
            summarized_by: by,
            exact: c.tier,
            near: near.terms,
            score: c.score,
            snippet: cut_passage(&it.text, query, near, SNIPPET_CHARS),
            text: it.text.clone(),
        })
        .collect()
}

/// What the recall tool shows of a hit's text: whole lines of at most about `chars` characters
/// in all, chosen around what the query finds in it (the window holding most of its terms
/// near each other, else its first exact string, else its first term), with the text's first line
/// and the lines elsewhere that hold an exact string or say error, failed, panic, fatal or
/// exception (the `passage` module says how); `…` lines mark what is left out. The whole text,
/// its whitespace runs made one space, when it fits. A hit's snippet is one line of
/// [`SNIPPET_CHARS`].
pub fn passage(text: &str, query: &str, chars: usize) -> String {
    let query = Query::parse(query);
    let near = near::nearest(text, &query.terms);
    passage::cut(text, &query, near, chars)
}

/// A hit's snippet: a window of at most `chars` characters of `text` on one line (and `…`
/// marks) around its first exact string, else the window of the query's terms, else its
/// first term.
fn cut_passage(text: &str, query: &Query, near: near::Near, chars: usize) -> String {
    let exact: Vec<&str> = query.exact.iter().map(|e| e.needle.as_str()).collect();
    if near.terms > 0 {
        snippet::snippet_near(text, &exact, Some(near.at), chars)
    } else {
        let words = query.terms.iter().map(String::as_str);
        let needles: Vec<&str> = exact.iter().copied().chain(words).collect();
        snippet::snippet_near(text, &needles, None, chars)
    }
}

/// Recalls `query` from `index`, leaving out what `exclude` fingerprints.
pub fn recall_in(index: &RecallIndex, query: &RecallQuery, exclude: &HashSet<u64>) -> Recalled {
    let parsed = Query::parse(&query.text);
    let limit = query.limit.clamp(1, MAX_LIMIT);
    let hits = if parsed.is_empty() {
        Vec::new()
    } else {
        let none = HashSet::new();
        let exclude = if query.include_context {
            &none
        } else {
            exclude
        };
        let candidates = index.candidates(&parsed, exclude, candidates_for(limit));
        finish(&parsed, candidates, limit, |doc| {
            let it = index.item(doc)?;
            Some((it, index.summarized_by(it.position).map(str::to_owned)))
        })
    };
    Recalled {
        hits,
        items: index.len() as u64,
    }
}

#[cfg(test)]
mod tests;
