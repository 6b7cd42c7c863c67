//! Postings: which items hold a term, kept in *ranges* of [`RANGE_DOCS`] consecutive items,
//! each range of a term with the bounds ranking needs to skip it ([`RangeMeta`]).
//!
//! An item's document number is its place among the session's items (0 for the first), so a
//! session's appends only ever add postings at the end of a term's list: the last range of a
//! term grows, and the earlier ones never change. A range's bounds (the most occurrences of the
//! term in one of its items, the fewest terms an item of it has) do not depend on the
//! session's statistics, so they stay true however the history grows, and BM25's contribution
//! of the term to any item of the range is at most the one of an item with both bounds.
//!
//! A block's bytes are its postings in document order, each three LEB128 numbers: the
//! document's offset in its range, how often the term occurs in it, and how many terms it has.
//! Offsets are from the range's start, not from the previous posting, so two blocks of one
//! range join by concatenation (a database appends with `||`).

/// Items per range.
pub const RANGE_DOCS: u32 = 1024;

/// One item holding a term: its document number, how often the term occurs in it (`tf`), and
/// how many terms it has (`len`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Posting {
    /// The item's document number.
    pub doc: u32,
    /// Occurrences of the term in the item.
    pub tf: u32,
    /// The item's length in terms.
    pub len: u32,
}

/// What an index keeps of one term in one range besides its postings: the bounds of ranking.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RangeMeta {
    /// The range: documents `range * RANGE_DOCS ..` up to the next range.
    pub range: u32,
    /// The most occurrences of the term in one item of the range.
    pub max_tf: u32,
    /// The fewest terms of an item of the range that holds the term.
    pub min_len: u32,
    /// How many items of the range hold the term.
    pub count: u32,
}

impl RangeMeta {
    /// The bounds of both `self` and `other` (two parts of one range).
    #[must_use]
    pub fn join(self, other: RangeMeta) -> RangeMeta {
        if self.count == 0 {
            return other;
        }
        if other.count == 0 {
            return self;
        }
        RangeMeta {
            range: self.range,
            max_tf: self.max_tf.max(other.max_tf),
            min_len: self.min_len.min(other.min_len),
            count: self.count + other.count,
        }
    }
}

/// A term's postings in one range, encoded, with its bounds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Block {
    /// The range and its bounds.
    pub meta: RangeMeta,
    /// The encoded postings (see the module docs).
    pub data: Vec<u8>,
}

impl Block {
    /// An empty block of `range`.
    pub fn new(range: u32) -> Block {
        Block {
            meta: RangeMeta {
                range,
                ..RangeMeta::default()
            },
            data: Vec::new(),
        }
    }

    /// Adds `p`, which must lie in the block's range after its postings.
    pub fn push(&mut self, p: Posting) {
        let offset = p.doc - self.meta.range * RANGE_DOCS;
        for n in [offset, p.tf, p.len] {
            put(&mut self.data, n);
        }
        self.meta = self.meta.join(RangeMeta {
            range: self.meta.range,
            max_tf: p.tf,
            min_len: p.len,
            count: 1,
        });
    }

    /// Adds the postings of `later`, a block of the same range whose postings follow.
    pub fn extend(&mut self, later: &Block) {
        self.data.extend_from_slice(&later.data);
        self.meta = self.meta.join(later.meta);
    }
}

/// The range of document `doc`.
pub fn range_of(doc: u32) -> u32 {
    doc / RANGE_DOCS
}

pub(crate) fn put(out: &mut Vec<u8>, mut n: u32) {
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

#[inline]
pub(crate) fn get(data: &[u8], at: &mut usize) -> Option<u32> {
    let first = *data.get(*at)?;
    *at += 1;
    if first < 0x80 {
        // Most numbers of a block (occurrences, lengths, many offsets) take one byte.
        return Some(u32::from(first));
    }
    let mut n = u32::from(first & 0x7f);
    for shift in [7, 14, 21, 28] {
        let b = *data.get(*at)?;
        *at += 1;
        n |= u32::from(b & 0x7f).checked_shl(shift)?;
        if b & 0x80 == 0 {
            return Some(n);
        }
    }
    None
}

/// The postings of a block of `range`, or `None` when its bytes are not postings (a corrupt
/// index): a number cut short or too long, an offset outside the range, offsets not rising, a
/// term count of zero, or more occurrences than terms.
pub fn decode(range: u32, data: &[u8]) -> Option<Vec<Posting>> {
    let mut out = Vec::with_capacity(data.len() / 3);
    walk(range, data, |p| out.push(p))?;
    Some(out)
}

/// Gives `each` the postings of a block of `range` in order, without collecting them; how
/// many, or `None` where [`decode`] gives `None` (`each` may have seen some before).
pub(crate) fn walk(range: u32, data: &[u8], mut each: impl FnMut(Posting)) -> Option<u32> {
    let base = range.checked_mul(RANGE_DOCS)?;
    let mut at = 0;
    let mut next = 0;
    let mut count = 0u32;
    while at < data.len() {
        let offset = get(data, &mut at)?;
        let tf = get(data, &mut at)?;
        let len = get(data, &mut at)?;
        if offset < next || offset >= RANGE_DOCS || tf == 0 || tf > len {
            return None;
        }
        next = offset + 1;
        each(Posting {
            doc: base.checked_add(offset)?,
            tf,
            len,
        });
        count += 1;
    }
    Some(count)
}
