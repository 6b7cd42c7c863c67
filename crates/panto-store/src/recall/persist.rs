//! What a store needs to keep an index of its own, pure: the rows an append adds to it
//! ([`Update`]), and the steps of a recall that reads it ([`Lookup`], [`Picker`]).
//!
//! An index a store keeps has five tables, whatever it keeps them in (docs/recall.md):
//! - its state ([`IndexState`]): how many entries it covers, the store's head after them, how
//!   many items, and their terms in all (BM25's statistics);
//! - postings: per term and range of [`RANGE_DOCS`](super::postings::RANGE_DOCS) items, a
//!   [`Block`]'s bytes; an append only adds bytes at the end of a term's last range, so a
//!   database appends them with `||`;
//! - bounds: per term and range, how many items hold the term and the front of its postings
//!   ([`super::join_bounds`]), apart from the postings, so that a recall reads the bounds of
//!   its terms first, then the postings of the ranges it scores ([`Lookup::rank_bounded`]);
//! - items ([`DocRow`]): where each item is (its entry's position and store head, its block)
//!   and its fingerprint, which recall leaves out by;
//! - calls ([`CallRow`]) and compactions: a tool result's tool is its latest earlier call's,
//!   an item's `summarized_by` the first compaction after it.
//!
//! The ranking is the one of the index in memory ([`super::RecallIndex`]), over the same
//! blocks, so a store's answer is the scan's to the last bit (the conformance suite's
//! `same_as_scan` checks it).

use std::collections::{HashMap, HashSet};

use panto_model::{Entry, Item, ItemKind, Items};

use super::fetch::{IdRow, id_rows};
use super::index::term_counts;
use super::postings::{Block, Posting, range_of};
use super::query::Query;
use super::rank::{Candidate, Corrupt, RangeBound, Ranking, Stats, Tiers, tiers_of};
use super::{Hit, MAX_LIMIT, RecallQuery, candidates_for, finish};
use crate::head::Head;

/// Where an index stands: the entries it covers and BM25's statistics over their items.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IndexState {
    /// How many entries of the session it covers (the first ones).
    pub entries: u64,
    /// The store's head after them.
    pub head: Head,
    /// How many items they hold.
    pub docs: u32,
    /// The sum of those items' lengths in terms.
    pub total_len: u64,
}

impl IndexState {
    /// BM25's statistics.
    pub fn stats(&self) -> Stats {
        Stats {
            docs: self.docs,
            total_len: self.total_len,
        }
    }
}

/// Where an item is: what a store reads to give it back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DocRow {
    /// Its number among the session's items (0 for the first).
    pub doc: u32,
    /// The position of its entry.
    pub position: u64,
    /// The store's head before its entry (where a read of the entry starts).
    pub at: Head,
    /// Its block in the entry.
    pub block: u32,
    /// [`Item::fingerprint`].
    pub fingerprint: u64,
}

/// A tool call: its id, where it is, and its tool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallRow {
    /// The call id.
    pub call: String,
    /// The position of its entry.
    pub position: u64,
    /// Its block.
    pub block: u32,
    /// The tool's name.
    pub tool: String,
}

/// The rows that entries add to an index, from the state it had before them.
#[derive(Debug, Default)]
pub struct Update {
    /// The state after the entries.
    pub state: IndexState,
    /// Their items.
    pub docs: Vec<DocRow>,
    /// Their tool calls.
    pub calls: Vec<CallRow>,
    /// Their compactions: position and id (`@N` without one).
    pub compactions: Vec<(u64, String)>,
    /// Their items' ids and their entries' ([`super::fetch`]'s index of ids).
    pub ids: Vec<IdRow>,
    blocks: HashMap<(String, u32), Block>,
    walk: Items,
}

impl Update {
    /// No rows yet, from `state`.
    pub fn new(state: IndexState) -> Update {
        Update {
            state,
            ..Update::default()
        }
    }

    /// Whether it adds nothing.
    pub fn is_empty(&self) -> bool {
        self.docs.is_empty() && self.compactions.is_empty() && self.blocks.is_empty()
    }

    /// Adds the next entry of the session, which the store holds from head `at` to `next`.
    pub fn push(&mut self, entry: &Entry, at: Head, next: Head) {
        let position = self.state.entries;
        if let Entry::Compaction(c) = entry {
            let name = c.id.clone().unwrap_or_else(|| format!("@{position}"));
            self.compactions.push((position, name));
        }
        let items = self.walk.of(position, entry);
        id_rows(entry, position, &items, &mut self.ids);
        for item in items {
            let doc = self.state.docs;
            let (counts, len) = term_counts(&item.text);
            for (term, tf) in counts {
                let range = range_of(doc);
                self.blocks
                    .entry((term, range))
                    .or_insert_with(|| Block::new(range))
                    .push(Posting { doc, tf, len });
            }
            let block = u32::try_from(item.block).unwrap_or(u32::MAX);
            if item.kind == ItemKind::ToolCall
                && let (Some(call), Some(tool)) = (&item.call, &item.tool)
            {
                self.calls.push(CallRow {
                    call: call.clone(),
                    position,
                    block,
                    tool: tool.clone(),
                });
            }
            self.docs.push(DocRow {
                doc,
                position,
                at,
                block,
                fingerprint: item.fingerprint(),
            });
            self.state.docs = self.state.docs.saturating_add(1);
            self.state.total_len += u64::from(len);
        }
        self.state.entries += 1;
        self.state.head = next;
    }

    /// The postings blocks, by term and range: each to be added at the end of what the index
    /// holds for that term and range.
    pub fn blocks(&mut self) -> Vec<(String, Block)> {
        let mut out: Vec<(String, Block)> = self.blocks.drain().map(|((t, _), b)| (t, b)).collect();
        out.sort_by(|a, b| (&a.0, a.1.meta.range).cmp(&(&b.0, b.1.meta.range)));
        out
    }
}

/// A recall query ready for an index: the terms whose blocks it needs, then the ranking.
#[derive(Clone, Debug)]
pub struct Lookup {
    query: Query,
    limit: usize,
    include_context: bool,
}

impl Lookup {
    /// `query`, parsed.
    pub fn new(query: &RecallQuery) -> Lookup {
        Lookup {
            query: Query::parse(&query.text),
            limit: query.limit.clamp(1, MAX_LIMIT),
            include_context: query.include_context,
        }
    }

    /// Whether it asks for nothing (no hit, whatever the index).
    pub fn is_empty(&self) -> bool {
        self.query.is_empty()
    }

    /// Whether items of the effective context may be hits.
    pub fn include_context(&self) -> bool {
        self.include_context
    }

    /// Every term whose blocks the ranking reads.
    pub fn terms(&self) -> Vec<String> {
        let mut out: Vec<String> = self.query.terms.clone();
        for e in &self.query.exact {
            for t in &e.lookup {
                if !out.contains(t) {
                    out.push(t.clone());
                }
            }
        }
        out
    }

    /// The terms whose blocks the ranking reads whole: the lookup terms of the query's exact
    /// strings (which items hold them all is found first).
    pub fn whole_terms(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for e in &self.query.exact {
            for t in &e.lookup {
                if !out.contains(t) {
                    out.push(t.clone());
                }
            }
        }
        out
    }

    /// The terms an index that stores bounds apart from postings gives by their bounds
    /// ([`Lookup::rank_bounded`]): the query's other terms.
    pub fn bounded_terms(&self) -> Vec<String> {
        let whole = self.whole_terms();
        self.query
            .terms
            .iter()
            .filter(|t| !whole.contains(t))
            .cloned()
            .collect()
    }

    /// The items that may hold an exact string, `blocks` holding the whole terms': their
    /// [`Tiers::ranges`] are those of which [`Lookup::rank_bounded`], which takes them, needs
    /// the postings of the bounded terms from the start; none when the query has no exact
    /// string.
    ///
    /// # Errors
    /// [`Corrupt`] when a block does not decode.
    pub fn tiers(&self, blocks: &HashMap<String, Vec<Block>>) -> Result<Tiers, Corrupt> {
        if self.query.exact.is_empty() {
            return Ok(Tiers::default());
        }
        tiers_of(&self.query, blocks)
    }

    /// Ranks as [`Lookup::rank`] over an index that stores each term's bounds by range apart
    /// from its postings: `blocks` holds the [`Lookup::whole_terms`]' blocks and those of the
    /// [`Lookup::bounded_terms`] in the ranges of `tiers` (from [`Lookup::tiers`] over the
    /// same blocks), `bounds` the bounded terms' bounds in range order (none for a term no
    /// item holds). The picker then asks for the postings of the ranges it scores
    /// ([`Picker::needs`]).
    ///
    /// # Errors
    /// [`Corrupt`] when a block or bound does not decode or names an item past `stats.docs`.
    pub fn rank_bounded<'a>(
        &self,
        stats: Stats,
        blocks: &'a HashMap<String, Vec<Block>>,
        bounds: &HashMap<String, Vec<RangeBound>>,
        tiers: Tiers,
    ) -> Result<Picker<'a>, Corrupt> {
        Ok(Picker {
            best: Ranking::bounded(&self.query, stats, blocks, bounds, tiers)?,
            seen: HashSet::new(),
            picked: Vec::new(),
            want: candidates_for(self.limit),
        })
    }

    /// Ranks the items holding a term, `blocks` giving each term's blocks in range order (it
    /// scores only the ranges it must, see `rank.rs`).
    ///
    /// # Errors
    /// [`Corrupt`] when a block does not decode or names an item past `stats.docs`.
    pub fn rank<'a>(
        &self,
        stats: Stats,
        blocks: &'a HashMap<String, Vec<Block>>,
    ) -> Result<Picker<'a>, Corrupt> {
        Ok(Picker {
            best: Ranking::new(&self.query, stats, blocks)?,
            seen: HashSet::new(),
            picked: Vec::new(),
            want: candidates_for(self.limit),
        })
    }

    /// The hits: `picked` (from [`Picker::picked`]) with each item and the compaction that
    /// summarized it, ordered again by the exact strings each holds.
    pub fn hits(&self, picked: Vec<(Candidate, Item, Option<String>)>) -> Vec<Hit> {
        let mut items: HashMap<u32, (Item, Option<String>)> = HashMap::new();
        let mut candidates = Vec::new();
        for (c, item, by) in picked {
            candidates.push(c);
            items.insert(c.doc, (item, by));
        }
        finish(&self.query, candidates, self.limit, |doc| {
            items.get(&doc).map(|(i, by)| (i, by.clone()))
        })
    }
}

/// Takes the ranked items best first, leaving out the effective context's and all but the
/// earliest of items that say the same, until it has the candidates the hits are chosen from.
#[derive(Debug)]
pub struct Picker<'a> {
    best: Ranking<'a>,
    seen: HashSet<u64>,
    picked: Vec<(Candidate, DocRow)>,
    want: usize,
}

impl Picker<'_> {
    /// The ranges whose postings of the bounded terms ([`Lookup::bounded_terms`]) it needs
    /// before [`Picker::next_docs`]: the caller reads them and gives each with
    /// [`Picker::give`], then asks again until it is empty. Always empty after
    /// [`Lookup::rank`].
    pub fn needs(&mut self) -> Vec<u32> {
        if self.picked.len() >= self.want || !self.best.lazy_terms() {
            return Vec::new();
        }
        self.best.needs()
    }

    /// Gives the postings of `range` that [`Picker::needs`] asked for: each bounded term that
    /// an item of the range holds with its blocks' bytes in order, joined.
    ///
    /// # Errors
    /// [`Corrupt`] when a block does not decode or names an item past the history's.
    pub fn give(&mut self, range: u32, found: Vec<(String, Vec<u8>)>) -> Result<(), Corrupt> {
        self.best.give(range, found)
    }

    /// The next items to look at, best first: the caller reads their [`DocRow`]s and gives
    /// them to [`Picker::offer`]. Empty when it has enough or none is left. Over an index read
    /// by bounds, once [`Picker::needs`] is empty.
    pub fn next_docs(&mut self) -> Vec<u32> {
        if self.picked.len() >= self.want {
            return Vec::new();
        }
        self.best.next_chunk().iter().map(|c| c.doc).collect()
    }

    /// Offers the rows of the items [`Picker::next_docs`] gave, in its order (a row may be missing
    /// only for a corrupt index), leaving out the fingerprints of `exclude`.
    ///
    /// # Errors
    /// [`Corrupt`] when a row is missing.
    pub fn offer(&mut self, rows: &[DocRow], exclude: &HashSet<u64>) -> Result<(), Corrupt> {
        let chunk = self.best.last_chunk();
        let by_doc: HashMap<u32, &DocRow> = rows.iter().map(|r| (r.doc, r)).collect();
        for c in chunk {
            let row = by_doc.get(&c.doc).ok_or(Corrupt)?;
            if self.picked.len() >= self.want {
                break;
            }
            if !exclude.contains(&row.fingerprint) && self.seen.insert(row.fingerprint) {
                self.picked.push((c, **row));
            }
        }
        Ok(())
    }

    /// The candidates picked, best first, with their rows.
    pub fn picked(self) -> Vec<(Candidate, DocRow)> {
        self.picked
    }
}

/// The item at `block` of `entry` (at `position`), its tool named by `tool` when it is a
/// result whose call is not in the entry before it.
pub fn item_at(
    entry: &Entry,
    position: u64,
    block: u32,
    tool: impl FnOnce(&str) -> Option<String>,
) -> Option<Item> {
    let mut walk = Items::new();
    let mut item = walk
        .of(position, entry)
        .into_iter()
        .find(|i| i.block == block as usize)?;
    if item.kind == ItemKind::ToolResult
        && item.tool.is_none()
        && let Some(call) = item.call.clone()
    {
        item.tool = tool(&call);
    }
    Some(item)
}
