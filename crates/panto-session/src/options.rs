//! `SessionOptions` and the id sources that name appended entries.

use std::collections::hash_map::RandomState;
use std::fmt;
use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use panto_model::Entry;

/// Gives ids to appended entries that have none.
///
/// Invariant expected of an implementation: ids are unique within a session file.
pub trait IdSource: Send + Sync + fmt::Debug {
    /// A fresh id for `entry` (which has no id yet).
    fn next_id(&self, entry: &Entry) -> String;
}

/// The default [`IdSource`]: a kind letter (`m` message, `c` compaction, `e` anything else),
/// 12 hex digits of Unix time in milliseconds, then 16 hex digits of randomness, like
/// `m0193a1b2c3d48f3a9c1e2b4d6f70`.
///
/// Ids sort by creation time across processes to the millisecond; the random part comes from
/// the standard library's per-process random hash keys mixed with the process id, the clock and
/// a counter, so two processes appending in the same millisecond still differ (a collision needs
/// 64 random bits to agree).
#[derive(Debug, Default, Clone, Copy)]
pub struct RandomIds;

impl IdSource for RandomIds {
    fn next_id(&self, entry: &Entry) -> String {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let mut h = RandomState::new().build_hasher();
        h.write_u32(std::process::id());
        h.write_u128(now.as_nanos());
        h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
        let millis = now.as_millis() as u64 & 0xffff_ffff_ffff;
        format!("{}{millis:012x}{:016x}", kind_letter(entry), h.finish())
    }
}

/// A deterministic [`IdSource`] for tests: the kind letter then a counter shared by all kinds,
/// starting at 1 (`m1`, `m2`, `c3`, ...). Unique only within one `SequentialIds` value.
#[derive(Debug, Default)]
pub struct SequentialIds {
    next: AtomicU64,
}

impl SequentialIds {
    /// A counter starting at 1.
    pub fn new() -> SequentialIds {
        SequentialIds::default()
    }
}

impl IdSource for SequentialIds {
    fn next_id(&self, entry: &Entry) -> String {
        let n = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        format!("{}{n}", kind_letter(entry))
    }
}

fn kind_letter(entry: &Entry) -> char {
    match entry {
        Entry::Message(_) => 'm',
        Entry::Compaction(_) => 'c',
        Entry::Unknown(_) => 'e',
    }
}

/// How a [`crate::Session`] reads and writes. Built with the chained setters:
///
/// ```
/// use std::time::Duration;
/// let options = panto_session::SessionOptions::default()
///     .fsync(false)
///     .lock_timeout(Duration::from_millis(200));
/// assert!(!options.fsync_enabled());
/// ```
#[derive(Clone, Debug)]
pub struct SessionOptions {
    fsync: bool,
    lock_timeout: Duration,
    ids: Arc<dyn IdSource>,
    read_chunk: usize,
}

impl Default for SessionOptions {
    /// fsync on, a 10 second lock timeout, [`RandomIds`], 64 KiB read chunks.
    fn default() -> SessionOptions {
        SessionOptions {
            fsync: true,
            lock_timeout: Duration::from_secs(10),
            ids: Arc::new(RandomIds),
            read_chunk: 64 * 1024,
        }
    }
}

impl SessionOptions {
    /// Whether an append flushes the file to disk (`fsync`) before it reports success. On by
    /// default; turning it off trades durability across power loss for speed (tests, benches).
    #[must_use]
    pub fn fsync(mut self, on: bool) -> SessionOptions {
        self.fsync = on;
        self
    }

    /// How long an append waits for another process's lock before failing.
    #[must_use]
    pub fn lock_timeout(mut self, timeout: Duration) -> SessionOptions {
        self.lock_timeout = timeout;
        self
    }

    /// The id source for entries appended without an id.
    #[must_use]
    pub fn ids(mut self, ids: Arc<dyn IdSource>) -> SessionOptions {
        self.ids = ids;
        self
    }

    /// Bytes read per step when reading the file backwards (at least 1; default 64 KiB). A line
    /// longer than this is read in growing steps.
    #[must_use]
    pub fn read_chunk(mut self, bytes: usize) -> SessionOptions {
        self.read_chunk = bytes.max(1);
        self
    }

    /// Whether appends fsync.
    pub fn fsync_enabled(&self) -> bool {
        self.fsync
    }

    /// The lock timeout.
    pub fn lock_timeout_value(&self) -> Duration {
        self.lock_timeout
    }

    /// The id source.
    pub fn id_source(&self) -> &dyn IdSource {
        &*self.ids
    }

    /// The backwards read step in bytes.
    pub fn read_chunk_value(&self) -> usize {
        self.read_chunk
    }
}
