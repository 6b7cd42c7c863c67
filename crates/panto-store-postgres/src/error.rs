//! `PostgresError`: the store's own error, carried as the source of a `StoreError`, its text
//! scrubbed of the password.

use std::fmt;
use std::time::Duration;

/// Which limit ran out, so that a program (the `panto` binary's hints) can name the setting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Limit {
    /// Making a connection took longer than the connect timeout; `from_url` when the URL's
    /// `connect_timeout` (or `PGCONNECT_TIMEOUT`) set it.
    Connect {
        /// The limit.
        limit: Duration,
        /// Whether the URL gave it.
        from_url: bool,
    },
    /// A statement ran longer than the statement timeout, or the server did not answer.
    Statement(Duration),
    /// A statement waited longer than the lock timeout for a lock another session held.
    Lock(Duration),
    /// The connection was lost and no new one could be made within the reconnect time.
    Reconnect(Duration),
    /// Every connection of the pool (`size` of them) stayed in use for the pool wait.
    PoolWait {
        /// The limit.
        limit: Duration,
        /// The pool's size.
        size: usize,
    },
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Limit::Connect {
                limit,
                from_url: true,
            } => write!(
                f,
                "no connection within the URL's connect_timeout ({} s)",
                limit.as_secs()
            ),
            Limit::Connect { limit, .. } => write!(
                f,
                "no connection within the connect timeout ({} s)",
                limit.as_secs()
            ),
            Limit::Statement(limit) => write!(
                f,
                "no answer within the statement timeout ({} s)",
                limit.as_secs()
            ),
            Limit::Lock(limit) => write!(
                f,
                "a lock another session holds was not granted within the lock timeout ({} s)",
                limit.as_secs()
            ),
            Limit::Reconnect(limit) => write!(
                f,
                "the connection was lost and no new one could be made within the reconnect time ({} s)",
                limit.as_secs()
            ),
            Limit::PoolWait { limit, size } => write!(
                f,
                "every connection of the pool ({size}) stayed in use for the pool wait ({} s)",
                limit.as_secs()
            ),
        }
    }
}

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
    /// A limit ran out: the operation was given up (and, for a statement, cancelled).
    #[error("{location}: {what}: {limit}{detail}")]
    Timeout {
        /// The database.
        location: String,
        /// What the store was doing.
        what: String,
        /// Which limit.
        limit: Limit,
        /// More of what happened (the last error before the reconnect time ran out, whether an
        /// append took effect), scrubbed of the password; empty or starting with `; `.
        detail: String,
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
    /// Anything else the store refuses (an empty session name, a URL that is not one, TLS
    /// settings that cannot be used, a schema newer than this version of panto knows).
    #[error("{location}: {message}")]
    Refused {
        /// The database, or the URL without its password.
        location: String,
        /// Why.
        message: String,
    },
}

impl PostgresError {
    /// The limit that ran out, if this is a timeout.
    pub fn limit(&self) -> Option<Limit> {
        match self {
            PostgresError::Timeout { limit, .. } => Some(*limit),
            _ => None,
        }
    }
}
