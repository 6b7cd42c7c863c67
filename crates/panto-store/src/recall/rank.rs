//! The first stage of ranking, over postings in [`Block`]s: one implementation for the index in
//! memory ([`super::RecallIndex`]) and for every index a store keeps, so that they score alike
//! to the last bit.
//!
//! The candidates come out best first (tier, BM25 score, the earlier item), a chunk at a time,
//! exactly as a ranking that scored every posting and sorted them all would give them, but
//! without scoring most postings of a common term ([`Ranking`], block-max pruning):
//!
//! 1. every block is walked once without being kept (which checks it decodes, and counts a
//!    term's items for its inverse document frequency), keeping for each term and range the
//!    (occurrences, length) pairs of its postings that no other one of them dominates;
//!    The items that may hold an exact string (a tier above 0, which rank before all others)
//!    are found first (the intersection of each exact string's lookup terms). When they are
//!    few ([`PRESCORED`]) they get their scores in the walk, so they are candidates before any
//!    range is scored; when they are many (a quoted phrase of common words, in every range),
//!    the walk keeps for each range a second front, over the postings of its items of the
//!    range's highest tier only, and they are scored with their range;
//! 2. each range gets an upper bound, the sum over the query's terms of the best score one of
//!    those pairs gives (computed by the very function that scores a posting, added in the
//!    same order as an item's score); a range with items of a tier above 0 that are not
//!    scored yet is bounded by its highest tier and the best score of that tier's items (its
//!    items of lower tiers rank after any item of that tier);
//! 3. ranges are scored whole, the best bound first, until the candidates wanted all rank
//!    before the next range's bound: no item of a range not scored can then come before them.
//!
//! Why the bound holds to the last bit: floating-point rounding is monotonic, so an item whose
//! length is at least a pair's and whose occurrences equal it scores at most the pair's score,
//! computed the same way; fewer occurrences score less by a margin (at least 3e-13 relative
//! for counts up to [`TF_ORDERED`]) far above the few roundings of the formula, and above that
//! count a pair dominates only pairs of the same count. Sums of larger parts in the same order
//! round to at least as much. Ties are kept exact too: a range whose bound equals the last
//! wanted candidate's score is skipped only when all its items come after that candidate.
//! The property test `pruned_equals_exhaustive` compares it with the exhaustive ranking,
//! which the tests keep as the reference.

use std::borrow::Cow;
use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap, HashSet};

use super::postings::{Block, RANGE_DOCS, walk};
use super::query::Query;

mod front;
mod walk;

use front::Front;
pub use front::{RangeBound, join_bounds};
pub use walk::Tiers;
pub(crate) use walk::tiers_of;
use walk::{tiers, walk_terms};

/// BM25's term-frequency saturation.
const K1: f64 = 1.2;
/// BM25's length normalisation.
const B: f64 = 0.75;

/// A first-stage candidate: an item's number, its tier and its BM25 score.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Candidate {
    pub(crate) doc: u32,
    pub(crate) tier: u32,
    pub(crate) score: f64,
}

/// Tier first, then score, then the earlier item.
pub(crate) fn order(a: &Candidate, b: &Candidate) -> Ordering {
    b.tier
        .cmp(&a.tier)
        .then_with(|| b.score.total_cmp(&a.score))
        .then_with(|| a.doc.cmp(&b.doc))
}

/// The statistics of a whole history that BM25 needs: how many items, and their terms in all.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// How many items the history holds.
    pub docs: u32,
    /// The sum of the items' lengths in terms.
    pub total_len: u64,
}

/// The index's blocks could not be read: the index is corrupt (a store then answers by scan).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Corrupt;

/// Occurrences of a term in one item up to which fewer occurrences at the same length are
/// sure to score less once rounded (see the module docs).
const TF_ORDERED: u32 = 1_000_000;

/// BM25's contribution of a term of inverse document frequency `idf` to an item holding it
/// `tf` times among `len` terms, the history's items having `avg` terms on average: the one
/// formula every score and every bound is computed with.
fn contribution(idf: f64, tf: u32, len: u32, avg: f64) -> f64 {
    let len = f64::from(len);
    let tf = f64::from(tf);
    idf * tf * (K1 + 1.0) / (tf + K1 * (1.0 - B + B * len / avg))
}

/// BM25's inverse document frequency of a term `df` of `n` items hold.
fn idf(n: f64, df: f64) -> f64 {
    (1.0 + (n - df + 0.5) / (df + 0.5)).ln()
}

/// The average length BM25 normalises by.
fn average(stats: Stats) -> f64 {
    if stats.docs == 0 {
        1.0
    } else {
        (stats.total_len as f64 / f64::from(stats.docs)).max(1.0)
    }
}

/// A query term that some item holds: its idf and its blocks' bytes by range (of a term
/// read by its bounds, only the ranges read so far).
#[derive(Debug)]
struct Term<'a> {
    name: String,
    idf: f64,
    blocks: HashMap<u32, Vec<Cow<'a, [u8]>>>,
}

/// A range to score, with what no item of it can rank above: `tier` exact strings, a score
/// of `bound`, and the range's first item.
#[derive(Clone, Copy, Debug)]
struct Plan {
    range: u32,
    tier: u32,
    bound: f64,
}

impl Plan {
    /// Whether `c` ranks before every item of the range.
    fn behind(&self, c: &Candidate) -> bool {
        let first = Candidate {
            doc: self.range.saturating_mul(RANGE_DOCS),
            tier: self.tier,
            score: self.bound,
        };
        order(c, &first) == Ordering::Less
    }
}

/// A candidate in a heap whose top is the worst.
#[derive(Debug)]
struct Worst(Candidate);

impl PartialEq for Worst {
    fn eq(&self, other: &Worst) -> bool {
        order(&self.0, &other.0) == Ordering::Equal
    }
}
impl Eq for Worst {}
impl PartialOrd for Worst {
    fn partial_cmp(&self, other: &Worst) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Worst {
    fn cmp(&self, other: &Worst) -> Ordering {
        order(&self.0, &other.0)
    }
}

/// Items of a tier above 0 up to which their scores are taken in the walk of the blocks and
/// they are candidates from the start; past it (a quoted phrase of common words, in every
/// range), each range is bounded by its items of the highest tier instead and they are scored
/// with their range.
const PRESCORED: usize = 4096;

/// Every item that holds one of a query's terms or the lookup terms of one of its exact
/// strings, with its tier and BM25 score, taken best first a chunk at a time (64, then 256,
/// ...): the chunks an exhaustive ranking would give, scoring only the ranges it must (see the
/// module docs).
#[derive(Debug)]
pub(crate) struct Ranking<'a> {
    terms: Vec<Term<'a>>,
    avg: f64,
    /// The ranges, the best bound first; those before `next` are scored.
    plans: Vec<Plan>,
    next: usize,
    /// The items of a tier above 0 by range, in order, with their tiers.
    tiered: HashMap<u32, Vec<(u32, u32)>>,
    /// Whether the items of `tiered` are in the pool from the start (else a range's scoring
    /// gives them).
    prescored: bool,
    /// The candidates of the ranges scored that may be among the best `cap` (with every one
    /// of them); the first `at` are the ones given, in order.
    pool: Vec<Candidate>,
    /// The candidates before any range is scored (the items of a tier above 0 when
    /// prescored), which a scoring from the start begins with.
    first: Vec<Candidate>,
    /// How many of the best candidates the pool keeps: past twice as many, it keeps only
    /// those, and `floor`, the last of them, turns away every later candidate that does not
    /// rank before it. A chunk that wants more than `cap` after that scores its ranges again.
    cap: usize,
    floor: Option<Candidate>,
    start: usize,
    at: usize,
    chunk: usize,
    /// Whether some term was read by its bounds, its postings to be read by range
    /// ([`Ranking::needs`]); the ranges whose postings are in, and how many to ask next.
    lazy: bool,
    loaded: HashSet<u32>,
    /// The scores of the ranges given ([`Ranking::give`]), in item order, kept for their
    /// scoring instead of their postings.
    given: HashMap<u32, Vec<(u32, f64)>>,
    batch: usize,
    docs: u32,
}

/// How many candidates the pool keeps at first: the first two chunks' (64 and 256), so that
/// a ranking asked for them scores each range once.
const CAP: usize = 320;

/// Ranges whose postings are asked for at first when a term was read by its bounds; each ask
/// after it asks for four times more.
const FIRST_BATCH: usize = 4;

impl<'a> Ranking<'a> {
    /// The ranking of `query` over `blocks`, each term's blocks in range order (none for a term
    /// no item has), for a history with `stats`.
    ///
    /// # Errors
    /// [`Corrupt`] when a block does not decode or one of a query term names an item past
    /// `stats.docs`.
    pub(crate) fn new(
        query: &Query,
        stats: Stats,
        blocks: &'a HashMap<String, Vec<Block>>,
    ) -> Result<Ranking<'a>, Corrupt> {
        Ranking::with_prescored(query, stats, blocks, PRESCORED)
    }

    /// [`Ranking::new`], the items of a tier above 0 scored in the walk when they are at most
    /// `prescored`.
    pub(crate) fn with_prescored(
        query: &Query,
        stats: Stats,
        blocks: &'a HashMap<String, Vec<Block>>,
        prescored: usize,
    ) -> Result<Ranking<'a>, Corrupt> {
        Ranking::build(query, stats, blocks, &HashMap::new(), None, prescored)
    }

    /// [`Ranking::new`] over an index that stores each term's bounds by range apart from its
    /// postings: the terms of `bounds` are read by them, `blocks` holding only those of their
    /// ranges that have items of a tier above 0 (`tiers`, see [`tiers_of`]), the others read when
    /// a range is to be scored ([`Ranking::needs`], [`Ranking::give`]); `blocks` holds the
    /// other terms' whole.
    ///
    /// # Errors
    /// As [`Ranking::new`], and when a bound does not decode.
    pub(crate) fn bounded(
        query: &Query,
        stats: Stats,
        blocks: &'a HashMap<String, Vec<Block>>,
        bounds: &HashMap<String, Vec<RangeBound>>,
        tiers: Tiers,
    ) -> Result<Ranking<'a>, Corrupt> {
        Ranking::build(query, stats, blocks, bounds, Some(tiers), PRESCORED)
    }

    // Why long: the setup of a ranking in order (the tiers, the one walk, the candidates of a
    // tier above 0, each range's plan), each step using what the one before found.
    /// The ranking, `found` the [`Tiers`] of `query` over `blocks` when they are known.
    fn build(
        query: &Query,
        stats: Stats,
        blocks: &'a HashMap<String, Vec<Block>>,
        bounds: &HashMap<String, Vec<RangeBound>>,
        found: Option<Tiers>,
        prescored: usize,
    ) -> Result<Ranking<'a>, Corrupt> {
        let avg = average(stats);
        let all = found.map_or_else(|| tiers(query, blocks), |t| Ok(t.items))?;
        let prescore = all.len() <= prescored;
        let mut tiered: HashMap<u32, Vec<(u32, u32)>> = HashMap::new();
        // In item order: each range's items one run.
        for run in all.chunk_by(|a, b| a.0 / RANGE_DOCS == b.0 / RANGE_DOCS) {
            tiered.insert(run[0].0 / RANGE_DOCS, run.to_vec());
        }
        let walked = walk_terms(query, stats, blocks, bounds, &tiered, prescore)?;
        let terms = walked.terms;
        let lazy = terms.iter().any(|t| bounds.contains_key(&t.name));
        // The ranges with items of a tier above 0 are in whole (Tiers::ranges).
        let loaded: HashSet<u32> = if lazy {
            tiered.keys().copied().collect()
        } else {
            HashSet::new()
        };
        let mut pool = Vec::new();
        if prescore {
            // The items of a tier above 0 rank before all others: their scores are taken
            // in the walk, in its order (the query's terms in order, as an item's score adds
            // them up), and no range needs scoring for them.
            let mut scores: HashMap<u32, f64> = HashMap::new();
            for (doc, term, tf, len) in walked.hits {
                *scores.entry(doc).or_insert(0.0) += contribution(terms[term].idf, tf, len, avg);
            }
            for docs in tiered.values() {
                for &(doc, tier) in docs {
                    pool.push(Candidate {
                        doc,
                        tier,
                        score: scores.get(&doc).copied().unwrap_or(0.0),
                    });
                }
            }
        }
        let bound = |parts: &[(usize, Front)]| {
            // In the order of the query's terms, as an item's score adds them up.
            let mut bound = 0.0;
            for (i, front) in parts {
                bound += front.best(terms[*i].idf, avg);
            }
            bound
        };
        let mut plans: Vec<Plan> = Vec::new();
        for (&range, parts) in &walked.fronts {
            if !prescore && tiered.contains_key(&range) {
                continue;
            }
            plans.push(Plan {
                range,
                tier: 0,
                bound: bound(parts),
            });
        }
        if !prescore {
            // A range with items of a tier above 0: none of its items ranks above its best
            // tier with the best score of that tier's items.
            for (&range, docs) in &tiered {
                let top = docs.iter().map(|d| d.1).max().unwrap_or(0);
                let parts = walked.top.get(&range).map_or(&[][..], Vec::as_slice);
                plans.push(Plan {
                    range,
                    tier: top,
                    bound: bound(parts),
                });
            }
        }
        plans.sort_by(|a, b| {
            b.tier
                .cmp(&a.tier)
                .then(b.bound.total_cmp(&a.bound))
                .then(a.range.cmp(&b.range))
        });
        Ok(Ranking {
            terms,
            avg,
            plans,
            next: 0,
            tiered,
            prescored: prescore,
            first: pool.clone(),
            pool,
            cap: CAP,
            floor: None,
            start: 0,
            at: 0,
            chunk: 64,
            lazy,
            loaded,
            given: HashMap::new(),
            batch: FIRST_BATCH,
            docs: stats.docs,
        })
    }

    /// The terms read by their bounds (whose postings [`Ranking::give`] takes by range).
    pub(crate) fn lazy_terms(&self) -> bool {
        self.lazy
    }

    /// The ranges whose postings (of the terms read by their bounds) the next chunk needs
    /// before [`Ranking::next_chunk`] can give it, the best bound first; empty when none.
    /// Each ask names more ranges than the one before (4, 16, 64, ...), those that may still
    /// be scored.
    pub(crate) fn needs(&mut self) -> Vec<u32> {
        let want = self.at + self.chunk;
        self.fill(want)
    }

    /// Takes the postings of `range` of the terms read by their bounds: for each, its name
    /// and its blocks' bytes (none for a term no item of the range holds).
    ///
    /// # Errors
    /// [`Corrupt`] when a block does not decode or names an item past the history's.
    pub(crate) fn give(
        &mut self,
        range: u32,
        found: Vec<(String, Vec<u8>)>,
    ) -> Result<(), Corrupt> {
        for (name, data) in found {
            if let Some(term) = self.terms.iter_mut().find(|t| t.name == name) {
                term.blocks.entry(range).or_default().push(Cow::Owned(data));
            } else {
                let mut past = false;
                walk(range, &data, |p| past |= p.doc >= self.docs).ok_or(Corrupt)?;
                if past {
                    return Err(Corrupt);
                }
            }
        }
        // One walk both checks the postings and scores the range, whose scores are kept
        // instead of its bytes.
        let scores = self.range_scores(range).ok_or(Corrupt)?;
        for term in &mut self.terms {
            term.blocks.remove(&range);
        }
        self.given.insert(range, scores);
        self.loaded.insert(range);
        Ok(())
    }

    /// The scores of the items of `range` that hold a term (each the sum of its terms'
    /// contributions in the query's order), in item order; `None` when a block of the range
    /// does not decode or names an item past the history's.
    fn range_scores(&self, range: u32) -> Option<Vec<(u32, f64)>> {
        let base = range.checked_mul(RANGE_DOCS)?;
        let mut cells = [0.0f64; RANGE_DOCS as usize];
        let mut past = false;
        for term in &self.terms {
            let Some(parts) = term.blocks.get(&range) else {
                continue;
            };
            for data in parts {
                walk(range, data, |p| {
                    past |= p.doc >= self.docs;
                    cells[(p.doc - base) as usize] += contribution(term.idf, p.tf, p.len, self.avg);
                })?;
            }
        }
        if past {
            return None;
        }
        let mut out = Vec::new();
        for (doc, &score) in (base..).zip(&cells) {
            // A contribution is above 0: a cell at 0 is an item that holds no term.
            if score != 0.0 {
                out.push((doc, score));
            }
        }
        Some(out)
    }

    /// Scores every item of `range` that holds a term or is of a tier above 0, into the pool
    /// (but those of a tier above 0 when they are there already).
    fn score_range(&mut self, range: u32, heap: &mut BinaryHeap<Worst>, want: usize) {
        let computed = if self.given.contains_key(&range) {
            Vec::new()
        } else {
            // Walked once already: it decodes.
            self.range_scores(range).unwrap_or_default()
        };
        let scores = self.given.get(&range).map_or(&computed[..], Vec::as_slice);
        let tiered = self.tiered.get(&range).map_or(&[][..], Vec::as_slice);
        let (cap, floor) = (self.cap, &mut self.floor);
        let mut add = |c: Candidate, pool: &mut Vec<Candidate>| {
            if floor.is_some_and(|f| order(&c, &f) != Ordering::Less) {
                // At least `cap` candidates rank before it, so `want` of the heap's too.
                return;
            }
            keep(heap, c, want);
            pool.push(c);
            if pool.len() >= cap.saturating_mul(2) {
                pool.select_nth_unstable_by(cap - 1, order);
                pool.truncate(cap);
                *floor = pool.get(cap - 1).copied();
            }
        };
        // Both in item order: the items of a tier above 0 merged in.
        let mut j = 0;
        for &(doc, score) in scores {
            while let Some(&(other, tier)) = tiered.get(j).filter(|t| t.0 < doc) {
                j += 1;
                if !self.prescored {
                    // It holds no term of the query (an exact string's lookup terms only).
                    let c = Candidate {
                        doc: other,
                        tier,
                        score: 0.0,
                    };
                    add(c, &mut self.pool);
                }
            }
            let tier = match tiered.get(j).filter(|t| t.0 == doc) {
                Some(&(_, tier)) => {
                    j += 1;
                    if self.prescored {
                        continue;
                    }
                    tier
                }
                None => 0,
            };
            add(Candidate { doc, tier, score }, &mut self.pool);
        }
        if !self.prescored {
            for &(doc, tier) in &tiered[j..] {
                let c = Candidate {
                    doc,
                    tier,
                    score: 0.0,
                };
                add(c, &mut self.pool);
            }
        }
    }

    /// Scores ranges until the best `want` candidates are known, or until a range to score
    /// lacks its postings: then the ranges to read (that one and the next ones that may be
    /// scored, up to the batch), which it returns.
    fn fill(&mut self, want: usize) -> Vec<u32> {
        if want > self.cap {
            if self.floor.is_some() {
                // The pool let candidates go that this chunk may want: score again from
                // the start (the ranges scored have their postings in).
                self.pool.clone_from(&self.first);
                self.floor = None;
                self.next = 0;
            }
            // This chunk and the next one (four times larger).
            self.cap = want.saturating_mul(5);
        }
        let mut heap = BinaryHeap::with_capacity(want + 1);
        for c in &self.pool {
            keep(&mut heap, *c, want);
        }
        let stop = |heap: &BinaryHeap<Worst>, plan: &Plan| {
            heap.len() >= want && heap.peek().is_some_and(|w| plan.behind(&w.0))
        };
        while let Some(plan) = self.plans.get(self.next).copied() {
            if stop(&heap, &plan) {
                break;
            }
            if self.lazy && !self.loaded.contains(&plan.range) {
                let need: Vec<u32> = self.plans[self.next..]
                    .iter()
                    .take_while(|p| !stop(&heap, p))
                    .filter(|p| !self.loaded.contains(&p.range))
                    .map(|p| p.range)
                    .take(self.batch)
                    .collect();
                self.batch = self.batch.saturating_mul(4);
                return need;
            }
            self.next += 1;
            self.score_range(plan.range, &mut heap, want);
        }
        Vec::new()
    }

    /// The next best candidates (empty when none is left); over an index read by bounds,
    /// once [`Ranking::needs`] is empty.
    pub(crate) fn next_chunk(&mut self) -> &[Candidate] {
        let want = self.at + self.chunk;
        let need = self.fill(want);
        debug_assert!(need.is_empty(), "next_chunk before its postings: {need:?}");
        let k = want.min(self.pool.len());
        if k < self.pool.len() && k > 0 {
            self.pool.select_nth_unstable_by(k - 1, order);
        }
        self.pool[..k].sort_by(order);
        self.start = self.at;
        self.at = k;
        self.chunk *= 4;
        &self.pool[self.start..self.at]
    }

    /// The chunk [`Ranking::next_chunk`] gave last.
    pub(crate) fn last_chunk(&self) -> Vec<Candidate> {
        self.pool[self.start..self.at].to_vec()
    }

    /// How many ranges it has scored, of how many.
    #[cfg(test)]
    pub(crate) fn scored_ranges(&self) -> (usize, usize) {
        (self.next, self.plans.len())
    }
}

/// Keeps `c` in `heap` if it is among the best `want`.
fn keep(heap: &mut BinaryHeap<Worst>, c: Candidate, want: usize) {
    if heap.len() < want {
        heap.push(Worst(c));
    } else if heap
        .peek()
        .is_some_and(|w| order(&c, &w.0) == Ordering::Less)
    {
        heap.pop();
        heap.push(Worst(c));
    }
}

#[cfg(test)]
mod reference;

#[cfg(test)]
mod tests;
