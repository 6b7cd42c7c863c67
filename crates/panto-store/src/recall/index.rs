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

use super::query::Query;
use super::terms::for_each_term;

/// BM25's term-frequency saturation.
const K1: f64 = 1.2;
/// BM25's length normalisation.
const B: f64 = 0.75;

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

/// A first-stage candidate: a document, its tier and its BM25 score.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Candidate {
    pub(crate) doc: u32,
    pub(crate) tier: u32,
    pub(crate) score: f64,
}

/// The inverted index of a session's items, built by adding entries in order.
#[derive(Debug, Default)]
pub struct RecallIndex {
    docs: Vec<Doc>,
    postings: HashMap<String, Vec<(u32, u32)>>,
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
            .map(|(term, list)| term.len() + list.capacity() * 8 + 64)
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
        let mut counts: HashMap<String, u32> = HashMap::new();
        let mut len = 0u32;
        for_each_term(&item.text, |t| {
            len = len.saturating_add(1);
            if let Some(n) = counts.get_mut(t) {
                *n += 1;
            } else {
                counts.insert(t.to_owned(), 1);
            }
        });
        for (term, tf) in counts {
            self.postings.entry(term).or_default().push((doc, tf));
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
    /// fingerprints are in `exclude` and all but the earliest of items that say the same.
    pub(crate) fn candidates(
        &self,
        query: &Query,
        exclude: &HashSet<u64>,
        want: usize,
    ) -> Vec<Candidate> {
        let mut scores: HashMap<u32, (u32, f64)> = HashMap::new();
        let n = self.docs.len() as f64;
        let avg = if self.docs.is_empty() {
            1.0
        } else {
            (self.total_len as f64 / n).max(1.0)
        };
        for term in &query.terms {
            let Some(list) = self.postings.get(term) else {
                continue;
            };
            let df = list.len() as f64;
            let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
            for &(doc, tf) in list {
                let len = f64::from(self.docs[doc as usize].len);
                let tf = f64::from(tf);
                let s = idf * tf * (K1 + 1.0) / (tf + K1 * (1.0 - B + B * len / avg));
                scores.entry(doc).or_default().1 += s;
            }
        }
        for exact in &query.exact {
            for doc in self.holding_all(&exact.lookup) {
                scores.entry(doc).or_default().0 += 1;
            }
        }
        let mut ranked: Vec<Candidate> = scores
            .into_iter()
            .map(|(doc, (tier, score))| Candidate { doc, tier, score })
            .collect();
        ranked.sort_by(order);
        let mut seen = HashSet::new();
        let mut firsts: HashMap<u64, u32> = HashMap::new();
        for c in &ranked {
            let f = self.docs[c.doc as usize].fingerprint;
            let first = firsts.entry(f).or_insert(c.doc);
            *first = (*first).min(c.doc);
        }
        ranked
            .into_iter()
            .filter_map(|mut c| {
                let f = self.docs[c.doc as usize].fingerprint;
                if exclude.contains(&f) || !seen.insert(f) {
                    return None;
                }
                c.doc = firsts[&f];
                Some(c)
            })
            .take(want)
            .collect()
    }

    /// The documents that have every term of `lookup`.
    fn holding_all(&self, lookup: &[String]) -> Vec<u32> {
        let mut lists: Vec<&Vec<(u32, u32)>> = Vec::new();
        for t in lookup {
            match self.postings.get(t) {
                Some(l) => lists.push(l),
                None => return Vec::new(),
            }
        }
        lists.sort_by_key(|l| l.len());
        let Some((first, rest)) = lists.split_first() else {
            return Vec::new();
        };
        let sets: Vec<HashSet<u32>> = rest
            .iter()
            .map(|l| l.iter().map(|p| p.0).collect())
            .collect();
        first
            .iter()
            .map(|p| p.0)
            .filter(|d| sets.iter().all(|s| s.contains(d)))
            .collect()
    }
}

/// Tier first, then score, then the earlier item.
pub(crate) fn order(a: &Candidate, b: &Candidate) -> std::cmp::Ordering {
    b.tier
        .cmp(&a.tier)
        .then(b.score.total_cmp(&a.score))
        .then(a.doc.cmp(&b.doc))
}
