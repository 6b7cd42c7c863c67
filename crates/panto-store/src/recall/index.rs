//! `RecallIndex`: the inverted index of a session's items, in memory, and its ranking.
//!
//! Every item is a document; its terms come from [`super::terms`]. Ranking has two stages. The
//! first reads postings only: an item's *tier* is how many of the query's exact strings it may
//! hold (it has their lookup terms), and within a tier BM25 orders it (k1 = 1.2, b = 0.75,
//! over the whole history's statistics). The second ([`super::finish`]) reads the texts of the
//! best candidates, counts the exact strings each really holds, and orders them again. Items
//! whose fingerprint the effective context holds are left out, and of several items that say
//! the same (a message and its kept copies) only the earliest is kept.

use std::collections::{HashMap, HashSet};

use panto_model::{Entry, Item, ItemKind, Items};

use super::postings::{Block, Posting, range_of};
use super::query::Query;
use super::rank::{Candidate, Ranking, Stats};
use super::terms::for_each_term;

/// What the index keeps of an item.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Doc {
    /// The position of its entry.
    pub(crate) position: u64,
    /// Its block in the entry.
    pub(crate) block: u32,
    /// What it is.
    pub(crate) kind: ItemKind,
    /// [`Item::fingerprint`].
    pub(crate) fingerprint: u64,
    /// How many terms it has.
    pub(crate) len: u32,
}

/// The inverted index of a session's items, built by adding entries in order.
#[derive(Debug, Default)]
pub struct RecallIndex {
    docs: Vec<Doc>,
    postings: HashMap<String, Vec<Block>>,
    total_len: u64,
    walk: Items,
    entries: u64,
    compactions: Vec<(u64, String)>,
    items: Vec<Item>,
}

impl RecallIndex {
    /// An empty index.
    pub fn new() -> RecallIndex {
        RecallIndex::default()
    }

    /// How many entries it has read.
    pub fn entries(&self) -> u64 {
        self.entries
    }

    /// How many items it holds.
    pub fn len(&self) -> usize {
        self.docs.len()
    }

    /// Whether it holds no item.
    pub fn is_empty(&self) -> bool {
        self.docs.is_empty()
    }

    /// About how many bytes of memory it holds: its postings, terms, documents and items with
    /// their texts.
    pub fn heap_bytes(&self) -> u64 {
        let postings: usize = self
            .postings
            .iter()
            .map(|(term, blocks)| {
                term.len() + blocks.iter().map(|b| b.data.capacity() + 40).sum::<usize>() + 64
            })
            .sum();
        let items: usize = self
            .items
            .iter()
            .map(|i| {
                size_of::<Item>()
                    + i.id.len()
                    + i.entry.len()
                    + i.text.len()
                    + i.tool.as_ref().map_or(0, String::len)
                    + i.call.as_ref().map_or(0, String::len)
            })
            .sum();
        (postings + items + self.docs.capacity() * size_of::<Doc>()) as u64
    }

    /// Adds the next entry of the session.
    pub fn push(&mut self, entry: &Entry) {
        let position = self.entries;
        self.entries += 1;
        if let Entry::Compaction(c) = entry {
            let name = c.id.clone().unwrap_or_else(|| format!("@{position}"));
            self.compactions.push((position, name));
        }
        for item in self.walk.of(position, entry) {
            self.add(item);
        }
    }

    fn add(&mut self, item: Item) {
        let doc = u32::try_from(self.docs.len()).unwrap_or(u32::MAX);
        let (counts, len) = term_counts(&item.text);
        for (term, tf) in counts {
            let blocks = self.postings.entry(term).or_default();
            let range = range_of(doc);
            if blocks.last().is_none_or(|b| b.meta.range != range) {
                blocks.push(Block::new(range));
            }
            if let Some(b) = blocks.last_mut() {
                b.push(Posting { doc, tf, len });
            }
        }
        self.total_len += u64::from(len);
        self.docs.push(Doc {
            position: item.position,
            block: u32::try_from(item.block).unwrap_or(u32::MAX),
            kind: item.kind,
            fingerprint: item.fingerprint(),
            len,
        });
        self.items.push(item);
    }

    /// The item of document `doc`.
    pub(crate) fn item(&self, doc: u32) -> Option<&Item> {
        self.items.get(doc as usize)
    }

    /// Every item, in order.
    pub fn items(&self) -> &[Item] {
        &self.items
    }

    /// The id of the first compaction after `position`: the one that summarized it.
    pub(crate) fn summarized_by(&self, position: u64) -> Option<&str> {
        let i = self.compactions.partition_point(|(p, _)| *p <= position);
        self.compactions.get(i).map(|(_, id)| id.as_str())
    }

    /// The best `want` candidates for `query`, best first, leaving out the items whose
    /// fingerprints are in `exclude` and all but the earliest of items that say the same (they
    /// score alike, so the earliest comes first).
    pub(crate) fn candidates(
        &self,
        query: &Query,
        exclude: &HashSet<u64>,
        want: usize,
    ) -> Vec<Candidate> {
        let stats = Stats {
            docs: u32::try_from(self.docs.len()).unwrap_or(u32::MAX),
            total_len: self.total_len,
        };
        // Blocks this index built itself always decode.
        let Ok(mut best) = Ranking::new(query, stats, &self.postings) else {
            return Vec::new();
        };
        let mut seen = HashSet::new();
        let mut out = Vec::new();
        loop {
            let chunk = best.next_chunk();
            if chunk.is_empty() {
                return out;
            }
            for c in chunk {
                let f = self.docs[c.doc as usize].fingerprint;
                if !exclude.contains(&f) && seen.insert(f) {
                    out.push(*c);
                    if out.len() >= want {
                        return out;
                    }
                }
            }
        }
    }
}

/// The terms of `text` with how often each occurs, and how many terms it has in all.
pub(crate) fn term_counts(text: &str) -> (HashMap<String, u32>, u32) {
    let mut counts: HashMap<String, u32> = HashMap::new();
    let mut len = 0u32;
    for_each_term(text, |t| {
        len = len.saturating_add(1);
        if let Some(n) = counts.get_mut(t) {
            *n += 1;
        } else {
            counts.insert(t.to_owned(), 1);
        }
    });
    (counts, len)
}
