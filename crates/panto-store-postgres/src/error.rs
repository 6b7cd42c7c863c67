//! `PostgresError`: the store's own error, carried as the source of a `StoreError`, its text
//! scrubbed of the password.

/// What went wrong in the PostgreSQL store, worded with the database (its URL without the
/// password) and the session. It is the [`source`](std::error::Error::source) of the
/// [`panto_store::StoreError`] a caller gets. It keeps the server's words, scrubbed of the
/// password, and the SQLSTATE code, not the client's error value.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PostgresError {
    /// The database or the connection failed (cannot connect, refused login, connection lost,
    /// a statement failed).
    #[error("{location}: {what}: {message}")]
    Database {
        /// The database, `postgres://user@host:port/database`.
        location: String,
        /// What the store was doing.
        what: String,
        /// The client's or the server's message, scrubbed of the password.
        message: String,
        /// The SQLSTATE code, when the server sent one (`23505` unique violation, ...).
        code: Option<String>,
    },
    /// A stored entry is not a Contract 1 entry (something other than panto changed the row).
    #[error("{location}: session {session}: {message}")]
    Malformed {
        /// The database.
        location: String,
        /// The session.
        session: String,
        /// The decoding error, naming the entry's position as its line.
        message: String,
    },
    /// Anything else the store refuses (an empty session name, a URL that is not one, a schema
    /// newer than this version of panto knows).
    #[error("{location}: {message}")]
    Refused {
        /// The database, or the URL without its password.
        location: String,
        /// Why.
        message: String,
    },
}
