//! `SqliteError`: the store's own error, carried as the source of a `StoreError`; and the
//! helpers that word a failed SQLite call.

use panto_store::StoreError;

/// What went wrong in the SQLite store, worded with the database file and the session. It is
/// the [`source`](std::error::Error::source) of the [`panto_store::StoreError`] a caller gets.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SqliteError {
    /// SQLite failed (the file cannot be opened, the disk is full, another process held the
    /// write lock longer than the busy timeout).
    #[error("{location}: {what}: {source}")]
    Sqlite {
        /// The database (`sqlite:PATH`).
        location: String,
        /// What the store was doing.
        what: String,
        /// SQLite's error.
        source: rusqlite::Error,
    },
    /// A stored entry is not a Contract 1 entry (something other than panto changed the row).
    #[error("{location}: session {session}: {source}")]
    Malformed {
        /// The database.
        location: String,
        /// The session.
        session: String,
        /// The decoding error, naming the entry's position as its line.
        source: panto_model::DecodeError,
    },
    /// Anything else the store refuses (an empty session name, a newer schema than this
    /// version of panto knows).
    #[error("{location}: {message}")]
    Refused {
        /// The database.
        location: String,
        /// Why.
        message: String,
    },
}
/// A failed SQLite call, worded with the database and what the store was doing.
pub(crate) fn sqlite(
    location: &str,
    what: &str,
) -> impl FnOnce(rusqlite::Error) -> SqliteError + use<> {
    let (location, what) = (location.to_owned(), what.to_owned());
    move |source| SqliteError::Sqlite {
        location,
        what,
        source,
    }
}

/// [`sqlite`], as the store error of `session`: `Invalid` (the user's to fix) for a file that
/// cannot be opened or written (a folder that is not there, a permission, a file that is not a
/// database), `Unavailable` otherwise.
pub(crate) fn unavailable(
    session: &str,
    location: &str,
    what: &str,
) -> impl FnOnce(rusqlite::Error) -> StoreError + use<> {
    let session = session.to_owned();
    let wrap = sqlite(location, what);
    move |e| {
        use rusqlite::ErrorCode::{CannotOpen, NotADatabase, PermissionDenied, ReadOnly};
        match e.sqlite_error_code() {
            Some(CannotOpen | NotADatabase | PermissionDenied | ReadOnly) => {
                StoreError::invalid(session, wrap(e))
            }
            _ => StoreError::unavailable(session, wrap(e)),
        }
    }
}
