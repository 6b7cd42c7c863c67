//! `StoreError`: how a store operation failed, in four kinds a caller can act on.

use crate::head::Head;

/// A store's own error, carried whole so that its message (which names the file, line and
/// field, or the database) reaches the user unchanged.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Why a store operation failed. Each kind carries the session it concerned and the store's
/// own error as its [`source`](std::error::Error::source); the message is that error's, which
/// names the file or database and never holds a password.
///
/// The kinds are what a caller decides on: [`StoreError::Conflict`] (load again and go on),
/// [`StoreError::NotFound`] and [`StoreError::Invalid`] (the user must fix a name or what is
/// stored), [`StoreError::Unavailable`] (try again later).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// No session of that name exists in the store.
    #[error("{source}")]
    NotFound {
        /// The session asked for.
        session: String,
        /// The store's error.
        source: BoxError,
    },
    /// A conditional append found the session changed since the writer last read it: another
    /// writer appended in between. Nothing was written.
    #[error("{source}")]
    Conflict {
        /// The session.
        session: String,
        /// Where the writer expected the session to end.
        expected: Head,
        /// Where it ends now.
        found: Head,
        /// The store's error.
        source: BoxError,
    },
    /// What is stored, or what was given to store, cannot be used as it is: a malformed entry,
    /// a session name or path the store refuses. The user must fix it; nothing was written.
    #[error("{source}")]
    Invalid {
        /// The session.
        session: String,
        /// The store's error.
        source: BoxError,
    },
    /// The store could not do the operation now: an I/O error, a lock held too long, a
    /// database that cannot be reached. Nothing was written, or (for an append interrupted
    /// by a crash) only what replay ignores.
    #[error("{source}")]
    Unavailable {
        /// The session, when the operation concerned one.
        session: String,
        /// The store's error.
        source: BoxError,
    },
}

impl StoreError {
    /// [`StoreError::NotFound`] with the store's error.
    pub fn not_found(session: impl Into<String>, source: impl Into<BoxError>) -> StoreError {
        StoreError::NotFound {
            session: session.into(),
            source: source.into(),
        }
    }

    /// [`StoreError::Conflict`] worded for a store at `location`.
    pub fn conflict(location: &str, session: &str, expected: Head, found: Head) -> StoreError {
        StoreError::Conflict {
            session: session.to_owned(),
            expected,
            found,
            source: format!(
                "{location}: session {session} changed since this writer last read it (it ended at {expected}, now at {found}): another writer appended to it; nothing was written"
            )
            .into(),
        }
    }

    /// [`StoreError::Invalid`] with the store's error.
    pub fn invalid(session: impl Into<String>, source: impl Into<BoxError>) -> StoreError {
        StoreError::Invalid {
            session: session.into(),
            source: source.into(),
        }
    }

    /// [`StoreError::Unavailable`] with the store's error.
    pub fn unavailable(session: impl Into<String>, source: impl Into<BoxError>) -> StoreError {
        StoreError::Unavailable {
            session: session.into(),
            source: source.into(),
        }
    }

    /// The session the operation concerned (empty for one that concerned none, like a list).
    pub fn session(&self) -> &str {
        match self {
            StoreError::NotFound { session, .. }
            | StoreError::Conflict { session, .. }
            | StoreError::Invalid { session, .. }
            | StoreError::Unavailable { session, .. } => session,
        }
    }

    /// Whether another writer's append made this one fail.
    pub fn is_conflict(&self) -> bool {
        matches!(self, StoreError::Conflict { .. })
    }
}
