//! The pruned ranking against the exhaustive one it replaces.

use std::collections::HashMap;

use proptest::prelude::*;

use super::super::postings::{Block, Posting, RANGE_DOCS, decode};
use super::super::query::{Exact, Query};
use super::reference::{BestFirst, score};
use super::{Candidate, Corrupt, PRESCORED, RangeBound, Ranking, Stats, join_bounds, tiers_of};

/// A small xorshift generator: the postings of thousands of items from one seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The blocks of `terms` over `docs` items: each item has a length from a short list (so
/// that scores tie often) and holds each term with its own chance, a few times at most.
fn blocks(seed: u64, docs: u32, terms: &[(&str, u64)]) -> (HashMap<String, Vec<Block>>, u64) {
    let mut rng = Rng(seed | 1);
    const LENS: [u32; 8] = [1, 2, 3, 5, 8, 13, 40, 300];
    let mut out: HashMap<String, Vec<Block>> = HashMap::new();
    let mut total = 0u64;
    let mut shortest = 0;
    for doc in 0..docs {
        if doc % RANGE_DOCS == 0 {
            // Ranges of longer items bound lower: the pruning has ranges to skip.
            shortest = rng.below(LENS.len() as u64 - 1) as usize;
        }
        let len = LENS[shortest + rng.below((LENS.len() - shortest) as u64) as usize];
        total += u64::from(len);
        for &(term, percent) in terms {
            if rng.below(100) >= percent {
                continue;
            }
            let tf = 1 + rng.below(u64::from(len.min(4))) as u32;
            let list = out.entry(term.to_owned()).or_default();
            let range = doc / RANGE_DOCS;
            if list.last().is_none_or(|b| b.meta.range != range) {
                list.push(Block::new(range));
            }
            if let Some(b) = list.last_mut() {
                b.push(Posting { doc, tf, len });
            }
        }
    }
    (out, total)
}

/// Every chunk of both rankings, until both are done: they must be the same.
fn compare(query: &Query, stats: Stats, blocks: &HashMap<String, Vec<Block>>) -> (usize, usize) {
    compare_with(query, stats, blocks, PRESCORED)
}

/// [`compare`], the items of a tier above 0 scored in the walk when they are at most
/// `prescored` (else with their ranges).
fn compare_with(
    query: &Query,
    stats: Stats,
    blocks: &HashMap<String, Vec<Block>>,
    prescored: usize,
) -> (usize, usize) {
    let reference = score(query, stats, blocks);
    let pruned = Ranking::with_prescored(query, stats, blocks, prescored);
    let (all, mut pruned) = match (reference, pruned) {
        (Ok(a), Ok(p)) => (a, p),
        (Err(Corrupt), Err(Corrupt)) => return (0, 0),
        (a, p) => panic!(
            "reference {:?}, pruned {:?}",
            a.map(|v| v.len()),
            p.map(|_| ())
        ),
    };
    let mut best = BestFirst::new(all);
    let mut first = None;
    loop {
        let want: Vec<Candidate> = best.next_chunk().to_vec();
        let got: Vec<Candidate> = pruned.next_chunk().to_vec();
        assert_eq!(got, want);
        assert_eq!(pruned.last_chunk(), best.last_chunk());
        first.get_or_insert(pruned.scored_ranges());
        if want.is_empty() {
            return first.unwrap_or_default();
        }
    }
}

fn exact_string(needle: &str, lookup: &[&str]) -> Exact {
    Exact {
        needle: needle.to_owned(),
        lookup: lookup.iter().map(|t| (*t).to_owned()).collect(),
    }
}

const TERMS: [&str; 5] = ["a", "b", "c", "d", "x"];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// The pruned ranking gives the exhaustive ranking's chunks, to the last bit, for any
    /// query terms in any order, exact strings or none, and statistics the postings fit.
    #[test]
    fn pruned_equals_exhaustive(
        seed in any::<u64>(),
        docs in 1u32..4_000,
        chances in proptest::collection::vec(0u64..100, 5),
        order in proptest::sample::subsequence(vec![0usize, 1, 2, 3, 4], 0..=5),
        shuffle in any::<u64>(),
        exacts in proptest::collection::vec(proptest::sample::subsequence(vec![0usize, 1, 2, 3, 4], 1..=2), 0..3),
        extra_docs in 0u32..3,
    ) {
        let terms: Vec<(&str, u64)> = TERMS.iter().copied().zip(chances).collect();
        let (blocks, total) = blocks(seed, docs, &terms);
        let mut names: Vec<String> = order.iter().map(|&i| TERMS[i].to_owned()).collect();
        let mut rng = Rng(shuffle | 1);
        for i in (1..names.len()).rev() {
            names.swap(i, rng.below(i as u64 + 1) as usize);
        }
        let exact = exacts
            .iter()
            .enumerate()
            .map(|(i, l)| {
                let lookup: Vec<&str> = l.iter().map(|&j| TERMS[j]).collect();
                exact_string(&format!("e{i}"), &lookup)
            })
            .collect();
        let query = Query { terms: names, exact };
        let stats = Stats { docs: docs + extra_docs, total_len: total };
        // Both ways of ranking the items of a tier above 0: scored in the walk, and with
        // their ranges.
        compare(&query, stats, &blocks);
        compare_with(&query, stats, &blocks, 0);
        // Read as an index that stores bounds apart from postings gives them.
        compare_bounded(&query, stats, &blocks, PRESCORED);
        compare_bounded(&query, stats, &blocks, 0);
    }
}

/// [`compare_with`] for the ranking of an index that stores bounds: the terms that are no
/// exact string's lookup term given by their bounds and the postings of their tiered ranges,
/// the others read by range as it asks. Every chunk must be the exhaustive ranking's.
fn compare_bounded(
    query: &Query,
    stats: Stats,
    blocks: &HashMap<String, Vec<Block>>,
    prescored: usize,
) {
    let whole: Vec<&String> = query.exact.iter().flat_map(|e| &e.lookup).collect();
    let bounded: Vec<&String> = query.terms.iter().filter(|t| !whole.contains(t)).collect();
    let mut given: HashMap<String, Vec<Block>> = HashMap::new();
    for t in &whole {
        if let Some(list) = blocks.get(*t) {
            given.insert((*t).clone(), list.clone());
        }
    }
    // Blocks the test encoded itself are never corrupt: an error here is a bug, not a skip.
    let tiers = tiers_of(query, &given).expect("not corrupt");
    let tiered = tiers.ranges();
    let mut bounds: HashMap<String, Vec<RangeBound>> = HashMap::new();
    for t in &bounded {
        let Some(list) = blocks.get(*t) else {
            continue;
        };
        // Two halves joined, as two appends to a range store them.
        let mut out = Vec::new();
        for b in list {
            let postings = decode(b.meta.range, &b.data).expect("decodes");
            let (mut first, mut second) = (Block::new(b.meta.range), Block::new(b.meta.range));
            for (i, p) in postings.iter().enumerate() {
                if i < postings.len() / 2 {
                    first.push(*p);
                } else {
                    second.push(*p);
                }
            }
            let front = join_bounds(&[], &first).expect("bounds");
            let front = join_bounds(&front, &second).expect("bounds");
            out.push(RangeBound {
                range: b.meta.range,
                count: b.meta.count,
                front,
            });
        }
        bounds.insert((*t).clone(), out);
        let part: Vec<Block> = list
            .iter()
            .filter(|b| tiered.contains(&b.meta.range))
            .cloned()
            .collect();
        given.insert((*t).clone(), part);
    }
    let reference = score(query, stats, blocks).expect("not corrupt");
    let Ok(mut pruned) = Ranking::build(query, stats, &given, &bounds, Some(tiers), prescored)
    else {
        panic!("the bounded ranking is corrupt where the reference is not");
    };
    let mut best = BestFirst::new(reference);
    loop {
        loop {
            let need = pruned.needs();
            if need.is_empty() {
                break;
            }
            for range in need {
                let found = bounded
                    .iter()
                    .filter_map(|t| {
                        let b = blocks.get(*t)?.iter().find(|b| b.meta.range == range)?;
                        Some(((*t).clone(), b.data.clone()))
                    })
                    .collect();
                pruned.give(range, found).expect("decodes");
            }
        }
        let want: Vec<Candidate> = best.next_chunk().to_vec();
        let got: Vec<Candidate> = pruned.next_chunk().to_vec();
        assert_eq!(got, want);
        if want.is_empty() {
            return;
        }
    }
}

/// A common term once in every item of 20 ranges, the items of one range shorter: the first
/// chunk comes from that range alone.
#[test]
fn the_best_range_alone_gives_the_first_chunk() {
    let mut list = Vec::new();
    for range in 0..20u32 {
        let mut b = Block::new(range);
        for i in 0..RANGE_DOCS {
            let len = if range == 7 { 3 } else { 10 };
            b.push(Posting {
                doc: range * RANGE_DOCS + i,
                tf: 1,
                len,
            });
        }
        list.push(b);
    }
    let blocks = HashMap::from([("word".to_owned(), list)]);
    let query = Query {
        terms: vec!["word".to_owned()],
        exact: Vec::new(),
    };
    let stats = Stats {
        docs: 20 * RANGE_DOCS,
        total_len: u64::from(19 * 10 * RANGE_DOCS + 3 * RANGE_DOCS),
    };
    assert_eq!(compare(&query, stats, &blocks), (1, 20));
}

/// Every item scores the same: ties go to the earlier item, so the first range gives the
/// first chunk and the ranges after it, bounded by the same score, are not scored.
#[test]
fn ties_stop_at_the_first_range() {
    let mut list = Vec::new();
    for range in 0..20u32 {
        let mut b = Block::new(range);
        for i in 0..RANGE_DOCS {
            b.push(Posting {
                doc: range * RANGE_DOCS + i,
                tf: 1,
                len: 10,
            });
        }
        list.push(b);
    }
    let blocks = HashMap::from([("word".to_owned(), list)]);
    let query = Query {
        terms: vec!["word".to_owned()],
        exact: Vec::new(),
    };
    let stats = Stats {
        docs: 20 * RANGE_DOCS,
        total_len: u64::from(20 * 10 * RANGE_DOCS),
    };
    assert_eq!(compare(&query, stats, &blocks), (1, 20));
}

/// A block that does not decode makes the ranking fail even in a range it would not score.
#[test]
fn a_corrupt_block_anywhere_is_corrupt() {
    let mut good = Block::new(0);
    good.push(Posting {
        doc: 0,
        tf: 1,
        len: 1,
    });
    let bad = Block {
        data: vec![0x80],
        ..Block::new(5)
    };
    let blocks = HashMap::from([("word".to_owned(), vec![good, bad])]);
    let query = Query {
        terms: vec!["word".to_owned()],
        exact: Vec::new(),
    };
    let stats = Stats {
        docs: 6 * RANGE_DOCS,
        total_len: 6 * u64::from(RANGE_DOCS),
    };
    assert!(Ranking::new(&query, stats, &blocks).is_err());
    compare(&query, stats, &blocks);
}

/// Pairs of the same length with fewer occurrences never bound a range above the pair with
/// more, and the bound of a range is at least each of its items' scores, at any length.
#[test]
fn the_front_keeps_what_can_score_best() {
    let mut f = super::Front::default();
    for (tf, len) in [(1, 10), (1, 5), (2, 50), (3, 50), (1, 4), (3, 40)] {
        f.add(tf, len);
    }
    let mut pairs = f.0.clone();
    pairs.sort_unstable();
    assert_eq!(pairs, [(1, 4), (3, 40)]);
    for avg in [1.0, 7.5, 40.0, 1e6] {
        let best = f.best(2.0, avg);
        for (tf, len) in [(1, 10), (1, 5), (2, 50), (3, 50), (1, 4), (3, 40)] {
            assert!(super::contribution(2.0, tf, len, avg) <= best);
        }
    }
}

/// A later range holds the best item; the first wanted candidates end with one scoring as
/// much as an earlier range's bound: that range must be scored, since its items come first at
/// equal scores.
#[test]
fn an_earlier_range_at_the_same_score_is_scored() {
    let mut early = Block::new(0);
    for i in 0..RANGE_DOCS {
        early.push(Posting {
            doc: i,
            tf: 1,
            len: 10,
        });
    }
    let mut late = Block::new(1);
    for i in 0..RANGE_DOCS {
        let len = if i == 500 { 3 } else { 10 };
        late.push(Posting {
            doc: RANGE_DOCS + i,
            tf: 1,
            len,
        });
    }
    let blocks = HashMap::from([("word".to_owned(), vec![early, late])]);
    let query = Query {
        terms: vec!["word".to_owned()],
        exact: Vec::new(),
    };
    let stats = Stats {
        docs: 2 * RANGE_DOCS,
        total_len: 20 * u64::from(RANGE_DOCS),
    };
    assert_eq!(compare(&query, stats, &blocks), (2, 2));
}

/// An identifier in items of every range: those items rank first, their scores are taken in
/// the walk of the blocks, and no range needs scoring for the first chunk.
#[test]
fn items_holding_an_exact_string_need_no_range_scored() {
    let mut words = Vec::new();
    let mut ids = Vec::new();
    for range in 0..20u32 {
        let mut w = Block::new(range);
        let mut i = Block::new(range);
        for n in 0..RANGE_DOCS {
            let doc = range * RANGE_DOCS + n;
            w.push(Posting {
                doc,
                tf: 1 + n % 3,
                len: 10 + n % 7,
            });
            if n % 100 == 0 {
                i.push(Posting {
                    doc,
                    tf: 1,
                    len: 10 + n % 7,
                });
            }
        }
        words.push(w);
        ids.push(i);
    }
    let blocks = HashMap::from([("word".to_owned(), words), ("id".to_owned(), ids)]);
    let query = Query {
        terms: vec!["word".to_owned(), "id".to_owned()],
        exact: vec![exact_string("id", &["id"])],
    };
    let stats = Stats {
        docs: 20 * RANGE_DOCS,
        total_len: 13 * 20 * u64::from(RANGE_DOCS),
    };
    assert_eq!(compare(&query, stats, &blocks), (0, 20));
}

/// A quoted phrase of words every item of 20 ranges holds (past the items scored in the walk):
/// every item is of tier 1, each range is bounded by its own, and the ties stop the scoring at
/// the first range.
#[test]
fn an_exact_string_in_every_item_scores_one_range() {
    let mut words = Vec::new();
    for range in 0..20u32 {
        let mut w = Block::new(range);
        for n in 0..RANGE_DOCS {
            w.push(Posting {
                doc: range * RANGE_DOCS + n,
                tf: 1,
                len: 12,
            });
        }
        words.push(w);
    }
    let blocks = HashMap::from([("word".to_owned(), words)]);
    let query = Query {
        terms: vec!["word".to_owned()],
        exact: vec![exact_string("word", &["word"])],
    };
    let stats = Stats {
        docs: 20 * RANGE_DOCS,
        total_len: 12 * 20 * u64::from(RANGE_DOCS),
    };
    assert_eq!(compare(&query, stats, &blocks), (1, 20));
    // Scored in the walk, no range is.
    assert_eq!(compare_with(&query, stats, &blocks, usize::MAX), (0, 20));
}

/// Far more candidates than the pool keeps (4,000 items holding the word, every score
/// different): every chunk is still the exhaustive ranking's, the later ones (past the
/// pool's first 320) from ranges scored again.
#[test]
fn chunks_past_the_pool_are_the_exhaustive_ones() {
    let mut list = Vec::new();
    for doc in 0..4_000u32 {
        let range = doc / RANGE_DOCS;
        if list.last().is_none_or(|b: &Block| b.meta.range != range) {
            list.push(Block::new(range));
        }
        if let Some(b) = list.last_mut() {
            b.push(Posting {
                doc,
                tf: 1 + doc % 3,
                len: 5 + (doc * 7) % 50,
            });
        }
    }
    let blocks = HashMap::from([("w".to_owned(), list)]);
    let query = Query {
        terms: vec!["w".to_owned()],
        exact: Vec::new(),
    };
    let stats = Stats {
        docs: 4_000,
        total_len: 4_000 * 30,
    };
    compare(&query, stats, &blocks);
    compare_bounded(&query, stats, &blocks, PRESCORED);
}
