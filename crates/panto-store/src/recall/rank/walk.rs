//! The one walk of a query's blocks that a ranking starts with: each term's idf and blocks
//! by range, the fronts of its postings by range (or, for a term an index gives by its
//! bounds, those bounds), and what the items of a tier above 0 need.

use std::borrow::Cow;
use std::collections::HashMap;

use super::super::postings::{Block, RANGE_DOCS, walk};
use super::super::query::Query;
use super::front::{Front, RangeBound};
use super::{Corrupt, Stats, Term, idf};

/// A posting of an item of a tier above 0: the item, the query term's index (among those items
/// hold), its occurrences and the item's length.
pub(super) type Hit = (u32, usize, u32, u32);

/// Each range's fronts: the index of a query term (among those items hold) and its front.
pub(super) type Fronts = HashMap<u32, Vec<(usize, Front)>>;

/// What one walk of the query's blocks finds.
pub(super) struct Walked<'a> {
    /// Each term's idf and blocks by range.
    pub(super) terms: Vec<Term<'a>>,
    /// The fronts of each range's postings.
    pub(super) fronts: Fronts,
    /// The fronts of the postings of each range's items of its highest tier (when not
    /// prescored).
    pub(super) top: Fronts,
    /// The postings of the items of a tier above 0 in the order walked (when prescored).
    pub(super) hits: Vec<Hit>,
}

/// Adds `front`, of the term of index `index`, to a range's fronts `at`.
pub(super) fn add_front(at: &mut Vec<(usize, Front)>, index: usize, front: Front) {
    match at.last_mut() {
        Some((i, f)) if *i == index => {
            for &(tf, len) in &front.0 {
                f.add(tf, len);
            }
        }
        _ => at.push((index, front)),
    }
}

/// Walks every block of `query`'s terms once: each term's idf and blocks by range, the fronts
/// of its postings by range, and for the items of `tiered` (by range, in order) either their
/// postings (`prescore`) or the fronts of the postings of each range's items of its highest
/// tier.
pub(super) fn walk_terms<'a>(
    query: &Query,
    stats: Stats,
    blocks: &'a HashMap<String, Vec<Block>>,
    bounds: &HashMap<String, Vec<RangeBound>>,
    tiered: &HashMap<u32, Vec<(u32, u32)>>,
    prescore: bool,
) -> Result<Walked<'a>, Corrupt> {
    let n = f64::from(stats.docs);
    let mut out = Walked {
        terms: Vec::new(),
        fronts: HashMap::new(),
        top: HashMap::new(),
        hits: Vec::new(),
    };
    let tops: HashMap<u32, u32> = tiered
        .iter()
        .map(|(&r, docs)| (r, docs.iter().map(|d| d.1).max().unwrap_or(0)))
        .collect();
    for term in &query.terms {
        let stored = bounds.get(term).filter(|b| !b.is_empty());
        let list = match (blocks.get(term), stored) {
            (Some(list), _) => list.as_slice(),
            (None, Some(_)) => &[],
            (None, None) => continue,
        };
        let index = out.terms.len();
        let mut df = 0u64;
        if let Some(stored) = stored {
            // Its idf and fronts from its bounds; `list` holds the ranges of tiered items only.
            for b in stored {
                if b.count == 0 {
                    continue;
                }
                let mut front = Front::default();
                front.add_encoded(&b.front).ok_or(Corrupt)?;
                if front.0.is_empty() || range_of_past(b.range, stats.docs) {
                    return Err(Corrupt);
                }
                df += u64::from(b.count);
                add_front(out.fronts.entry(b.range).or_default(), index, front);
            }
        }
        let mut by_range: HashMap<u32, Vec<Cow<'a, [u8]>>> = HashMap::new();
        for b in list {
            let range = b.meta.range;
            let mut front = Front::default();
            let mut high = Front::default();
            let mut past = false;
            let marks = tiered.get(&range).map_or(&[][..], Vec::as_slice);
            let top = tops.get(&range).copied().unwrap_or(0);
            let mut j = 0;
            let hits = &mut out.hits;
            let whole = stored.is_none();
            let count = walk(range, &b.data, |p| {
                past |= p.doc >= stats.docs;
                if whole {
                    // (A term read by its bounds has its fronts.)
                    front.add(p.tf, p.len);
                }
                while j < marks.len() && marks[j].0 < p.doc {
                    j += 1;
                }
                if let Some(m) = marks.get(j).filter(|m| m.0 == p.doc) {
                    if prescore {
                        hits.push((p.doc, index, p.tf, p.len));
                    } else if m.1 == top {
                        high.add(p.tf, p.len);
                    }
                }
            })
            .ok_or(Corrupt)?;
            if past {
                return Err(Corrupt);
            }
            if count == 0 {
                continue;
            }
            by_range
                .entry(range)
                .or_default()
                .push(Cow::Borrowed(&b.data));
            if whole {
                df += u64::from(count);
                add_front(out.fronts.entry(range).or_default(), index, front);
            }
            if !high.0.is_empty() {
                add_front(out.top.entry(range).or_default(), index, high);
            }
        }
        out.terms.push(Term {
            name: term.clone(),
            idf: idf(n, df as f64),
            blocks: by_range,
        });
    }
    Ok(out)
}

/// Whether `range` starts past a history of `docs` items.
fn range_of_past(range: u32, docs: u32) -> bool {
    u64::from(range) * u64::from(RANGE_DOCS) >= u64::from(docs)
}

/// The items that may hold an exact string of a query, found once from the lookup terms'
/// blocks for both the store (which reads the postings of their ranges whole, whatever the
/// terms' bounds) and the ranking.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tiers {
    /// Each such item with its tier, in item order.
    pub(super) items: Vec<(u32, u32)>,
    ranges: Vec<u32>,
}

impl Tiers {
    /// The ranges with items of a tier above 0, in order.
    pub fn ranges(&self) -> &[u32] {
        &self.ranges
    }
}

/// The [`Tiers`] of `query`, `blocks` holding the lookup terms of its exact strings whole.
///
/// # Errors
/// [`Corrupt`] when a block does not decode.
pub(crate) fn tiers_of(
    query: &Query,
    blocks: &HashMap<String, Vec<Block>>,
) -> Result<Tiers, Corrupt> {
    let items = tiers(query, blocks)?;
    let mut ranges: Vec<u32> = items.iter().map(|(doc, _)| doc / RANGE_DOCS).collect();
    ranges.dedup();
    Ok(Tiers { items, ranges })
}

/// For each exact string of `query`, the items that have all its lookup terms: how many of
/// them each item may hold (its tier), for the items with one at least, in item order.
pub(super) fn tiers(
    query: &Query,
    blocks: &HashMap<String, Vec<Block>>,
) -> Result<Vec<(u32, u32)>, Corrupt> {
    let mut all: Vec<u32> = Vec::new();
    for exact in &query.exact {
        let mut lists: Vec<Vec<u32>> = Vec::new();
        for t in &exact.lookup {
            let mut docs: Vec<u32> = Vec::new();
            for b in blocks.get(t).map_or(&[][..], Vec::as_slice) {
                walk(b.meta.range, &b.data, |p| docs.push(p.doc)).ok_or(Corrupt)?;
            }
            lists.push(docs);
        }
        all.extend(intersect(lists));
    }
    all.sort_unstable();
    let mut out: Vec<(u32, u32)> = Vec::new();
    for doc in all {
        match out.last_mut() {
            Some((d, n)) if *d == doc => *n += 1,
            _ => out.push((doc, 1)),
        }
    }
    Ok(out)
}

/// The documents in every one of `lists` (each sorted); none when there is no list.
pub(super) fn intersect(mut lists: Vec<Vec<u32>>) -> Vec<u32> {
    lists.sort_by_key(Vec::len);
    let mut it = lists.into_iter();
    let Some(mut acc) = it.next() else {
        return Vec::new();
    };
    for list in it {
        let mut j = 0;
        acc.retain(|&d| {
            while j < list.len() && list[j] < d {
                j += 1;
            }
            j < list.len() && list[j] == d
        });
    }
    acc
}
