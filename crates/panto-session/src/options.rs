//! `SessionOptions`: fsync, the lock timeout, the id source and the read step of a session.

use std::sync::Arc;
use std::time::Duration;

use panto_model::{IdSource, UniqueIds};

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
    /// fsync on, a 10 second lock timeout, [`UniqueIds`], 64 KiB read chunks.
    fn default() -> SessionOptions {
        SessionOptions {
            fsync: true,
            lock_timeout: Duration::from_secs(10),
            ids: Arc::new(UniqueIds),
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
