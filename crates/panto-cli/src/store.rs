//! The bridge from panto-compact's `SessionLog` trait to panto-session's expected-tail appends.

use panto_compact::{LogError, SessionLog};
use panto_model::Entry;
use panto_session::{Session, SessionError};

/// A session that a command appends to without holding its lock in between: each append
/// takes the lock only to check that the file still ends where this command last saw it (its
/// load, or its own previous append) and to write. Another writer's append in between makes
/// the next append fail with [`SessionError::Conflict`] rather than interleave turns, so a
/// model call never holds up other writers.
pub struct CheckedLog<'s> {
    session: &'s Session,
    end: u64,
}

impl<'s> CheckedLog<'s> {
    /// A log over `session` whose file was `end` bytes long when this command read it.
    pub fn new(session: &'s Session, end: u64) -> CheckedLog<'s> {
        CheckedLog { session, end }
    }

    /// The session.
    pub fn session(&self) -> &'s Session {
        self.session
    }

    /// Whether another writer appended since this log last saw the file.
    ///
    /// # Errors
    /// When the file cannot be examined.
    pub fn changed(&self) -> Result<bool, SessionError> {
        Ok(self.session.end()? != self.end)
    }
}

impl SessionLog for CheckedLog<'_> {
    fn append(&mut self, entries: &[Entry]) -> Result<(), LogError> {
        let appended = self.session.append_at(self.end, entries)?;
        self.end = appended.end;
        Ok(())
    }
}
