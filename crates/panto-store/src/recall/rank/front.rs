//! A term's *front* in one range: the (occurrences, length) pairs of its postings that no
//! other one of them dominates, which bound the score any item of the range can reach; and
//! how an index stores it apart from the postings ([`join_bounds`], [`RangeBound`]).

use super::super::postings::{Block, get, put, walk};
use super::{TF_ORDERED, contribution};

/// The (occurrences, length) pairs of a term's postings in one range that no other of them
/// scores at least as high as, whatever the statistics: a term in every item of a range,
/// once in each, keeps one pair, its shortest item's.
#[derive(Debug, Default)]
pub(super) struct Front(pub(super) Vec<(u32, u32)>);

impl Front {
    pub(super) fn add(&mut self, tf: u32, len: u32) {
        if self.0.iter().any(|&q| dominates(q, (tf, len))) {
            return;
        }
        self.0.retain(|&q| !dominates((tf, len), q));
        self.0.push((tf, len));
    }

    /// The best contribution of its pairs.
    pub(super) fn best(&self, idf: f64, avg: f64) -> f64 {
        let mut best = 0.0;
        for &(tf, len) in &self.0 {
            let c = contribution(idf, tf, len, avg);
            if c > best {
                best = c;
            }
        }
        best
    }
}

impl Front {
    /// Its pairs as bytes, in order (so that a front's bytes do not depend on the order its
    /// pairs came in): LEB128 numbers, occurrences then length.
    fn encode(&self) -> Vec<u8> {
        let mut pairs = self.0.clone();
        pairs.sort_unstable();
        let mut out = Vec::with_capacity(pairs.len() * 3);
        for (tf, len) in pairs {
            put(&mut out, tf);
            put(&mut out, len);
        }
        out
    }

    /// Adds the pairs of `data` ([`Front::encode`]'s); `None` when they are not pairs.
    pub(super) fn add_encoded(&mut self, data: &[u8]) -> Option<()> {
        let mut at = 0;
        while at < data.len() {
            let tf = get(data, &mut at)?;
            let len = get(data, &mut at)?;
            if tf == 0 || tf > len {
                return None;
            }
            self.add(tf, len);
        }
        Some(())
    }
}

/// The bounds of a term in one range as an index stores them apart from its postings: the
/// pairs (occurrences, length) of its postings that no other one of them dominates, encoded,
/// of `before` (bytes this function gave, or empty) and of the postings of `block`; `None`
/// when `before` or the block does not decode.
pub fn join_bounds(before: &[u8], block: &Block) -> Option<Vec<u8>> {
    let mut front = Front::default();
    front.add_encoded(before)?;
    walk(block.meta.range, &block.data, |p| front.add(p.tf, p.len))?;
    Some(front.encode())
}

/// A term's bounds in one range, read from an index that stores them apart from its
/// postings: the range, how many of its items hold the term, and the encoded front
/// ([`join_bounds`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RangeBound {
    /// The range.
    pub range: u32,
    /// How many of its items hold the term.
    pub count: u32,
    /// [`join_bounds`]' bytes.
    pub front: Vec<u8>,
}

/// Whether the pair `a` (occurrences, length) scores at least as high as `b` once rounded,
/// whatever the idf and average length (see the module docs).
fn dominates(a: (u32, u32), b: (u32, u32)) -> bool {
    a.1 <= b.1 && (a.0 == b.0 || (a.0 > b.0 && a.0 <= TF_ORDERED))
}
