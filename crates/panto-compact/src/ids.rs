//! Entry ids: unique by default, deterministic when a test injects a sequence.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// What an id is for, so generators can give readable prefixes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum IdKind {
    /// A compaction entry.
    Compaction,
    /// A message entry (a kept copy, or a message the driver appends without an id).
    Message,
}

impl IdKind {
    fn prefix(self) -> &'static str {
        match self {
            IdKind::Compaction => "c",
            IdKind::Message => "m",
        }
    }
}

/// Makes entry ids.
///
/// Invariant: ids from one generator never repeat, and ids from generators of different runs
/// appending to the same session do not collide either ([`UniqueIds`]).
pub trait IdGenerator: Send {
    /// The next id.
    fn next_id(&mut self, kind: IdKind) -> String;
}

impl<F: FnMut(IdKind) -> String + Send> IdGenerator for F {
    fn next_id(&mut self, kind: IdKind) -> String {
        self(kind)
    }
}

/// `c1`, `m2`, `m3`, `c4`, ...: one counter, a prefix per kind. Deterministic, for tests and
/// examples; two generators started at once produce the same ids.
#[derive(Clone, Debug, Default)]
pub struct SequentialIds {
    next: u64,
}

impl SequentialIds {
    /// A sequence starting at 1.
    pub fn new() -> SequentialIds {
        SequentialIds::default()
    }

    /// A sequence whose next id has number `next`.
    pub fn starting_at(next: u64) -> SequentialIds {
        SequentialIds {
            next: next.saturating_sub(1),
        }
    }
}

impl IdGenerator for SequentialIds {
    fn next_id(&mut self, kind: IdKind) -> String {
        self.next += 1;
        format!("{}{}", kind.prefix(), self.next)
    }
}

/// Ids unique across runs: the kind's prefix, a per-generator stamp from the clock, the process
/// id and a process-wide counter, then a sequence number, like `c-18c2f0a9b3d41e07-1`.
#[derive(Clone, Debug)]
pub struct UniqueIds {
    stamp: u64,
    next: u64,
}

impl Default for UniqueIds {
    fn default() -> UniqueIds {
        UniqueIds::new()
    }
}

impl UniqueIds {
    /// A generator with a fresh stamp.
    pub fn new() -> UniqueIds {
        static GENERATORS: AtomicU64 = AtomicU64::new(0);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let pid = u64::from(std::process::id());
        let n = GENERATORS.fetch_add(1, Ordering::Relaxed);
        // Mix so that two generators made in the same nanosecond by one process still differ.
        let stamp = nanos ^ pid.rotate_left(40) ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        UniqueIds { stamp, next: 0 }
    }
}

impl IdGenerator for UniqueIds {
    fn next_id(&mut self, kind: IdKind) -> String {
        self.next += 1;
        format!("{}-{:016x}-{}", kind.prefix(), self.stamp, self.next)
    }
}
