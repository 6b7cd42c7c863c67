//! The bridge from panto-compact's `SessionLog` trait to panto-session's locked writer.

use panto_compact::{LogError, SessionLog};
use panto_model::Entry;
use panto_session::Writer;

/// A session held under its append lock for the whole command, so no other process appends
/// between loading the context and writing the reply or the compaction.
pub struct LockedLog<'s> {
    /// The locked writer.
    pub writer: Writer<'s>,
}

impl SessionLog for LockedLog<'_> {
    fn append(&mut self, entries: &[Entry]) -> Result<(), LogError> {
        self.writer.append(entries).map(|_| ()).map_err(Into::into)
    }
}
