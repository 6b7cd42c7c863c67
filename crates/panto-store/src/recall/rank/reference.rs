//! The exhaustive ranking the pruned one must equal: every posting scored into an array with a
//! cell per item, then the candidates taken best first a chunk at a time (a partial selection,
//! then a sort of the chunk). It was the ranking before the pruning, kept as the reference.

use std::collections::HashMap;

use super::super::postings::{Block, Posting, decode};
use super::super::query::Query;
use super::walk::intersect;
use super::{Candidate, Corrupt, Stats, order};

const K1: f64 = 1.2;
const B: f64 = 0.75;

/// The postings of a term, its blocks decoded in range order.
fn postings_of(blocks: &[Block]) -> Result<Vec<Posting>, Corrupt> {
    let mut out = Vec::new();
    for b in blocks {
        out.extend(decode(b.meta.range, &b.data).ok_or(Corrupt)?);
    }
    Ok(out)
}

/// Every item that holds one of `query`'s terms or the lookup terms of one of its exact
/// strings, with its tier and BM25 score, in no order. `blocks` holds each term's blocks in
/// range order (none for a term no item has).
pub(crate) fn score(
    query: &Query,
    stats: Stats,
    blocks: &HashMap<String, Vec<Block>>,
) -> Result<Vec<Candidate>, Corrupt> {
    let n = f64::from(stats.docs);
    let avg = if stats.docs == 0 {
        1.0
    } else {
        (stats.total_len as f64 / n).max(1.0)
    };
    let size = stats.docs as usize;
    let mut scores: Vec<f64> = Vec::new();
    let mut touched: Vec<u32> = Vec::new();
    let mut decoded: HashMap<&str, Vec<Posting>> = HashMap::new();
    for term in &query.terms {
        let list = match blocks.get(term) {
            Some(b) => postings_of(b)?,
            None => continue,
        };
        if scores.is_empty() {
            scores = vec![0.0; size];
        }
        let df = list.len() as f64;
        let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
        for p in &list {
            let cell = scores.get_mut(p.doc as usize).ok_or(Corrupt)?;
            if *cell == 0.0 {
                touched.push(p.doc);
            }
            let len = f64::from(p.len);
            let tf = f64::from(p.tf);
            *cell += idf * tf * (K1 + 1.0) / (tf + K1 * (1.0 - B + B * len / avg));
        }
        decoded.insert(term.as_str(), list);
    }
    let mut tiers: HashMap<u32, u32> = HashMap::new();
    for exact in &query.exact {
        let mut lists: Vec<Vec<u32>> = Vec::new();
        for t in &exact.lookup {
            let docs: Vec<u32> = match decoded.get(t.as_str()) {
                Some(l) => l.iter().map(|p| p.doc).collect(),
                None => match blocks.get(t) {
                    Some(b) => postings_of(b)?.iter().map(|p| p.doc).collect(),
                    None => Vec::new(),
                },
            };
            lists.push(docs);
        }
        for doc in intersect(lists) {
            *tiers.entry(doc).or_default() += 1;
        }
    }
    let mut out: Vec<Candidate> = touched
        .into_iter()
        .map(|doc| Candidate {
            doc,
            tier: tiers.remove(&doc).unwrap_or(0),
            score: scores[doc as usize],
        })
        .collect();
    out.extend(tiers.into_iter().map(|(doc, tier)| Candidate {
        doc,
        tier,
        score: scores.get(doc as usize).copied().unwrap_or(0.0),
    }));
    Ok(out)
}

/// Candidates taken best first (tier, score, the earlier item), a chunk at a time: a partial
/// selection of the chunk, then a sort of it, so the rest is never sorted.
#[derive(Debug)]
pub(crate) struct BestFirst {
    all: Vec<Candidate>,
    start: usize,
    at: usize,
    chunk: usize,
}

impl BestFirst {
    pub(crate) fn new(all: Vec<Candidate>) -> BestFirst {
        BestFirst {
            all,
            start: 0,
            at: 0,
            chunk: 64,
        }
    }

    /// The next best candidates (empty when none is left).
    pub(crate) fn next_chunk(&mut self) -> &[Candidate] {
        let rest = &mut self.all[self.at..];
        let k = self.chunk.min(rest.len());
        if k < rest.len() && k > 0 {
            rest.select_nth_unstable_by(k - 1, order);
        }
        rest[..k].sort_by(order);
        self.start = self.at;
        self.at += k;
        self.chunk *= 4;
        &self.all[self.start..self.at]
    }

    /// The chunk [`BestFirst::next_chunk`] gave last.
    pub(crate) fn last_chunk(&self) -> Vec<Candidate> {
        self.all[self.start..self.at].to_vec()
    }
}
