//! Entry ids: the one trait that names entries, its kind letters and its two implementations.
//!
//! Every id panto writes is a kind letter followed by letters and digits: `m` for a message,
//! `c` for a compaction (a clearing too), `u` for an undo, `e` for any other entry.
//! [`SequentialIds`] counts (`m1`, `c2`), the format Contract 1's examples use; [`UniqueIds`]
//! adds the time and randomness that keep ids from different runs appending to one session file
//! apart.
//!
//! [`UniqueIds`] is the only item of this crate whose output depends on the world (the wall
//! clock, the process id and the standard library's random hash keys); it reads no file and
//! opens nothing, and nothing else in the crate calls it, so replay, decoding and turns stay
//! deterministic. Everything that names entries takes an [`IdSource`], so tests inject
//! [`SequentialIds`].

use std::collections::hash_map::RandomState;
use std::fmt;
use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::Entry;

/// What an id is for; its [`letter`](IdKind::letter) starts the id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum IdKind {
    /// A message entry (`m`), including the kept copies a compaction appends.
    Message,
    /// A compaction entry (`c`), a clearing's included.
    Compaction,
    /// An undo entry (`u`).
    Undo,
    /// An entry of a type this version does not know (`e`).
    Other,
}

impl IdKind {
    /// The kind of `entry`.
    pub fn of(entry: &Entry) -> IdKind {
        match entry {
            Entry::Message(_) => IdKind::Message,
            Entry::Compaction(_) => IdKind::Compaction,
            Entry::Undo(_) => IdKind::Undo,
            Entry::Unknown(_) => IdKind::Other,
        }
    }

    /// The letter every id of this kind starts with: `m`, `c`, `u` or `e`.
    pub fn letter(self) -> char {
        match self {
            IdKind::Message => 'm',
            IdKind::Compaction => 'c',
            IdKind::Undo => 'u',
            IdKind::Other => 'e',
        }
    }
}

/// Names entries that have no id yet.
///
/// Invariant expected of an implementation: ids are unique within a session file, and each
/// starts with its kind's [`IdKind::letter`]. Shared by reference (`&self`), so one source can
/// serve a session and a compactor at once.
pub trait IdSource: Send + Sync + fmt::Debug {
    /// A fresh id for an entry of `kind`.
    fn next_id(&self, kind: IdKind) -> String;
}

impl<T: IdSource + ?Sized> IdSource for Arc<T> {
    fn next_id(&self, kind: IdKind) -> String {
        (**self).next_id(kind)
    }
}

impl<T: IdSource + ?Sized> IdSource for Box<T> {
    fn next_id(&self, kind: IdKind) -> String {
        (**self).next_id(kind)
    }
}

/// The kind letter then a counter shared by all kinds: `m1`, `m2`, `c3`, ... Deterministic,
/// for tests and examples; unique only within one `SequentialIds` value (two started at once
/// give the same ids).
#[derive(Debug, Default)]
pub struct SequentialIds {
    issued: AtomicU64,
}

impl SequentialIds {
    /// A counter whose first id has number 1.
    pub fn new() -> SequentialIds {
        SequentialIds::default()
    }

    /// A counter whose first id has number `next` (0 counts as 1).
    pub fn starting_at(next: u64) -> SequentialIds {
        SequentialIds {
            issued: AtomicU64::new(next.saturating_sub(1)),
        }
    }
}

impl IdSource for SequentialIds {
    fn next_id(&self, kind: IdKind) -> String {
        let n = self.issued.fetch_add(1, Ordering::Relaxed) + 1;
        format!("{}{n}", kind.letter())
    }
}

/// The default source: the kind letter, 12 hex digits of Unix time in milliseconds, then 16 hex
/// digits of randomness, like `m0193a1b2c3d48f3a9c1e2b4d6f70` (29 characters).
///
/// Ids sort by creation time across processes to the millisecond. The random part hashes the
/// process id, the clock in nanoseconds and a process-wide counter with the standard library's
/// per-process random keys, so two processes appending in the same millisecond still differ (a
/// collision needs 64 random bits to agree) and one process never repeats itself.
#[derive(Clone, Copy, Debug, Default)]
pub struct UniqueIds;

impl UniqueIds {
    /// The source (it has no state of its own).
    pub fn new() -> UniqueIds {
        UniqueIds
    }
}

impl IdSource for UniqueIds {
    fn next_id(&self, kind: IdKind) -> String {
        static ISSUED: AtomicU64 = AtomicU64::new(0);
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let mut h = RandomState::new().build_hasher();
        h.write_u32(std::process::id());
        h.write_u128(now.as_nanos());
        h.write_u64(ISSUED.fetch_add(1, Ordering::Relaxed));
        unique_id(kind, now.as_millis() as u64, h.finish())
    }
}

/// The [`UniqueIds`] format, apart from where its inputs come from.
pub(crate) fn unique_id(kind: IdKind, millis: u64, random: u64) -> String {
    format!(
        "{}{:012x}{random:016x}",
        kind.letter(),
        millis & 0xffff_ffff_ffff
    )
}
