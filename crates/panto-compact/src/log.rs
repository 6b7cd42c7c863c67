//! The storage boundary: a session log that takes appends, and an in-memory implementation.

use panto_model::{EffectiveContext, Entry, encode_lines, replay};

use crate::error::LogError;

/// An append-only session log.
///
/// This is the only storage operation compaction needs. With the `session` feature this crate
/// implements it over a `panto_session::Session` JSONL file (plain appends, or `CheckedLog`,
/// which refuses to append after another writer's entries); [`MemoryLog`] keeps entries in
/// memory.
pub trait SessionLog {
    /// Appends `entries`, in order, at the end of the session, as one unit.
    ///
    /// A compaction passes its entry and all its kept copies in one call. Implementations write
    /// them in one go (for a file: whole lines, one write, then a flush) so that an interruption
    /// leaves at most a prefix of them, which replay ignores.
    ///
    /// # Errors
    /// Any storage failure. The caller then treats the append as not having happened.
    fn append(&mut self, entries: &[Entry]) -> Result<(), LogError>;
}

impl<L: SessionLog + ?Sized> SessionLog for &mut L {
    fn append(&mut self, entries: &[Entry]) -> Result<(), LogError> {
        (**self).append(entries)
    }
}

impl<L: SessionLog + ?Sized> SessionLog for Box<L> {
    fn append(&mut self, entries: &[Entry]) -> Result<(), LogError> {
        (**self).append(entries)
    }
}

/// A session log in memory, for tests, examples and agents that persist elsewhere.
///
/// It counts append calls, and can be told to refuse appends, to exercise failure paths.
#[derive(Clone, Debug, Default)]
pub struct MemoryLog {
    entries: Vec<Entry>,
    appends: usize,
    refuse: Option<String>,
}

impl MemoryLog {
    /// An empty log.
    pub fn new() -> MemoryLog {
        MemoryLog::default()
    }

    /// A log that already holds `entries`.
    pub fn with_entries(entries: Vec<Entry>) -> MemoryLog {
        MemoryLog {
            entries,
            ..MemoryLog::default()
        }
    }

    /// Every entry, in order.
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// How many successful [`SessionLog::append`] calls were made.
    pub fn appends(&self) -> usize {
        self.appends
    }

    /// The effective context of the log.
    pub fn replay(&self) -> EffectiveContext {
        replay(self.entries.iter().cloned())
    }

    /// The log as JSONL text, as a session file would hold it.
    pub fn to_jsonl(&self) -> String {
        encode_lines(&self.entries)
    }

    /// Makes every following append fail with `reason` (or succeed again with `None`).
    pub fn refuse_appends(&mut self, reason: Option<String>) {
        self.refuse = reason;
    }
}

impl SessionLog for MemoryLog {
    fn append(&mut self, entries: &[Entry]) -> Result<(), LogError> {
        if let Some(reason) = &self.refuse {
            return Err(reason.clone().into());
        }
        self.entries.extend_from_slice(entries);
        self.appends += 1;
        Ok(())
    }
}
