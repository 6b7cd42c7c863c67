//! [`SessionLog`] over a `panto_session::Session` JSONL file (the `session` feature): plain
//! appends under the file's lock, or appends that check the tail first ([`CheckedLog`]).

use panto_model::Entry;
use panto_session::{Session, SessionError};

use crate::error::LogError;
use crate::log::SessionLog;

/// Each append is whole lines in one write under the file's lock, then fsync (as the session's
/// options say). Another writer's entries may come between two appends; use [`CheckedLog`] to
/// refuse that.
impl SessionLog for Session {
    fn append(&mut self, entries: &[Entry]) -> Result<(), LogError> {
        Session::append(self, entries)?;
        Ok(())
    }
}

/// A session that a command appends to without holding its lock in between: each append
/// takes the lock only to check that the file still ends where this command last saw it (its
/// load, or its own previous append) and to write. Another writer's append in between makes
/// the next append fail with [`SessionError::Conflict`] rather than interleave turns, so a
/// model call never holds up other writers.
///
/// ```
/// use panto_compact::{CheckedLog, SessionLog, model::{Entry, Message}};
/// use panto_session::{Session, SessionError, SessionOptions};
///
/// let dir = tempfile::tempdir()?;
/// let session = Session::create(dir.path().join("chat.jsonl"), SessionOptions::default())?;
/// let mut log = CheckedLog::new(&session, session.end()?);
/// log.append(&[Entry::Message(Message::user_text("mine"))])?;
/// // Another writer appends; this log's next append is refused, and nothing is lost.
/// session.append(&[Entry::Message(Message::user_text("theirs"))])?;
/// assert!(log.append(&[Entry::Message(Message::user_text("late"))]).is_err());
/// assert!(log.conflicted());
/// assert_eq!(session.load_context()?.context.messages.len(), 2);
/// # Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
/// ```
#[derive(Debug)]
pub struct CheckedLog<'s> {
    session: &'s Session,
    end: u64,
    conflicted: bool,
}

impl<'s> CheckedLog<'s> {
    /// A log over `session` whose file was `end` bytes long when this command read it.
    pub fn new(session: &'s Session, end: u64) -> CheckedLog<'s> {
        CheckedLog {
            session,
            end,
            conflicted: false,
        }
    }

    /// Where the file ended after this log's last append (or at its load).
    pub fn end(&self) -> u64 {
        self.end
    }

    /// Whether the last append failed because another writer had appended.
    pub fn conflicted(&self) -> bool {
        self.conflicted
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
        let result = self.session.append_at(self.end, entries);
        self.conflicted = matches!(result, Err(SessionError::Conflict { .. }));
        self.end = result?.end;
        Ok(())
    }
}
