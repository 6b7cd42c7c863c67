//! What the store's operations share: session names, positions, the head, and the store's
//! answers for a missing session or a row that is not an entry.

use panto_model::{DecodeError, Entry};
use panto_store::{Head, StoreError};
use rusqlite::{Connection, OptionalExtension, params};

use crate::error::{SqliteError, unavailable};

pub(crate) fn check_name(session: &str, location: &str) -> Result<(), StoreError> {
    if session.is_empty() {
        return Err(StoreError::invalid(
            session,
            SqliteError::Refused {
                location: location.to_owned(),
                message: "a session name cannot be empty".to_owned(),
            },
        ));
    }
    Ok(())
}

pub(crate) fn to_u64(seq: i64) -> u64 {
    u64::try_from(seq).unwrap_or(0)
}

pub(crate) fn to_i64(position: u64) -> i64 {
    i64::try_from(position).unwrap_or(i64::MAX)
}

/// The entries of rows `(seq, text)`, decoded, each named by its position.
pub(crate) fn decode(
    rows: Vec<(i64, String)>,
    session: &str,
    location: &str,
) -> Result<Vec<Entry>, StoreError> {
    rows.into_iter()
        .map(|(seq, text)| {
            panto_model::decode_line(text.as_bytes(), position(seq))
                .map_err(|source| malformed(session, location, source))
        })
        .collect()
}

/// A row's sequence number as the position a decoding error names.
pub(crate) fn position(seq: i64) -> usize {
    usize::try_from(seq).unwrap_or(usize::MAX)
}

/// A row whose text is not an entry: the user's to fix.
pub(crate) fn malformed(session: &str, location: &str, source: DecodeError) -> StoreError {
    StoreError::invalid(
        session,
        SqliteError::Malformed {
            location: location.to_owned(),
            session: session.to_owned(),
            source,
        },
    )
}

pub(crate) fn head_of(
    conn: &Connection,
    session: &str,
    location: &str,
) -> Result<Head, StoreError> {
    let seq: Option<i64> = conn
        .prepare_cached("SELECT MAX(seq) FROM panto_entries WHERE session = ?1")
        .and_then(|mut s| s.query_row(params![session], |r| r.get(0)))
        .map_err(unavailable(session, location, "cannot read the head"))?;
    Ok(Head::new(seq.map_or(0, to_u64)))
}

pub(crate) fn exists(conn: &Connection, session: &str, location: &str) -> Result<bool, StoreError> {
    conn.prepare_cached("SELECT 1 FROM panto_sessions WHERE name = ?1")
        .and_then(|mut s| {
            s.query_row(params![session], |_| Ok(()))
                .optional()
                .map(|o| o.is_some())
        })
        .map_err(unavailable(session, location, "cannot look the session up"))
}

pub(crate) fn not_found(session: &str, location: &str) -> StoreError {
    StoreError::not_found(
        session,
        SqliteError::Refused {
            location: location.to_owned(),
            message: format!("no session named {session}"),
        },
    )
}
