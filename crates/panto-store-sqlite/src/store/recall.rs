//! The SQLite store's recall: its index (`crate::recall`) kept in the append's transaction,
//! caught up (or built) at a recall for a session it does not cover, and read by the ranking
//! every store shares.

use panto_model::Entry;
use panto_store::recall::{IndexState, Lookup, Update, context_fingerprints};
use panto_store::{Head, RecallQuery, Recalled, Record, StoreError};
use rusqlite::{Connection, TransactionBehavior, params};

use super::{SqliteStore, load};
use crate::error::unavailable;
use crate::recall::{self as index, Failed, Found};
use crate::session::{head_of, malformed, position, to_i64, to_u64};

/// Entries indexed per transaction when an index is built or caught up.
const CHUNK: i64 = 20_000;

/// Indexes `records`, appended at `at` in the transaction `tx`, when the session's index covers
/// exactly the entries before them (a new session starts one); otherwise leaves the index to be
/// caught up at the next recall.
pub(super) fn on_append(
    tx: &Connection,
    session: &str,
    location: &str,
    at: Head,
    records: &[Record],
) -> Result<(), StoreError> {
    let fail = |what: &str| unavailable(session, location, what);
    let state = if at == Head::EMPTY {
        index::clear(tx, session).map_err(fail("cannot index the append"))?;
        IndexState::default()
    } else {
        match index::state(tx, session).map_err(fail("cannot index the append"))? {
            Some(s) if s.entries == at.get() => s,
            _ => return Ok(()),
        }
    };
    let mut update = Update::new(state);
    for (i, r) in records.iter().enumerate() {
        let p = at.get() + i as u64;
        let Ok(entry) = r.decode(position(to_i64(p + 1))) else {
            // An entry this version cannot index: the recall reads it by scan.
            return index::clear(tx, session).map_err(fail("cannot index the append"));
        };
        update.push(&entry, Head::new(p), Head::new(p + 1));
    }
    index::write(tx, session, &mut update).map_err(fail("cannot index the append"))
}

/// Brings `session`'s index up to the end of the session, a chunk of entries per write
/// transaction (another process may be doing the same: each chunk starts from the state it
/// finds); builds it from the start when it has none or covers more than the session holds.
pub(super) fn catch_up(
    conn: &mut Connection,
    session: &str,
    location: &str,
) -> Result<IndexState, StoreError> {
    let fail = |what: &str| unavailable(session, location, what);
    // Usually the appends kept it current: a read tells, without the write lock.
    {
        let tx = conn.transaction().map_err(fail("cannot start a read"))?;
        let head = head_of(&tx, session, location)?;
        if let Some(s) = index::state(&tx, session).map_err(fail("cannot read the index"))?
            && s.entries == head.get()
        {
            return Ok(s);
        }
    }
    loop {
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(fail("cannot start indexing"))?;
        let head = head_of(&tx, session, location)?;
        let found = index::state(&tx, session).map_err(fail("cannot read the index"))?;
        let state = match found {
            Some(s) if s.entries <= head.get() => s,
            _ => {
                index::clear(&tx, session).map_err(fail("cannot clear the index"))?;
                IndexState::default()
            }
        };
        if state.entries == head.get() && found.is_some() {
            return Ok(state);
        }
        let rows: Vec<(i64, String)> = tx
            .prepare_cached(
                "SELECT seq, text FROM panto_entries WHERE session = ?1 AND seq > ?2
                 ORDER BY seq LIMIT ?3",
            )
            .and_then(|mut s| super::rows(&mut s, params![session, to_i64(state.entries), CHUNK]))
            .map_err(fail("cannot read the session"))?;
        let mut update = Update::new(state);
        for (seq, text) in rows {
            let entry = panto_model::decode_line(text.as_bytes(), position(seq))
                .map_err(|source| malformed(session, location, source))?;
            let p = to_u64(seq - 1);
            update.push(&entry, Head::new(p), Head::new(p + 1));
        }
        index::write(&tx, session, &mut update).map_err(fail("cannot write the index"))?;
        tx.commit().map_err(fail("cannot commit the index"))?;
    }
}

/// Drops `session`'s index and builds it again; returns its state.
pub(super) fn rebuild(
    conn: &mut Connection,
    session: &str,
    location: &str,
) -> Result<IndexState, StoreError> {
    index::clear(conn, session).map_err(unavailable(
        session,
        location,
        "cannot clear the index",
    ))?;
    catch_up(conn, session, location)
}

/// Recalls `query` from `session` with its index; `None` when the index did not read back
/// (the caller answers by scan).
pub(super) fn recall(
    conn: &mut Connection,
    session: &str,
    location: &str,
    query: &RecallQuery,
) -> Result<Option<Recalled>, StoreError> {
    let loaded = load(conn, session, location)?;
    let state = catch_up(conn, session, location)?;
    let exclude = context_fingerprints(&loaded.context);
    let lookup = Lookup::new(query);
    let fail = unavailable(session, location, "cannot read the index");
    let tx = conn.transaction().map_err(fail)?;
    let found = index::recall(&tx, session, &lookup, state, &exclude, |row| {
        let text: String = tx
            .prepare_cached("SELECT text FROM panto_entries WHERE session = ?1 AND seq = ?2")
            .and_then(|mut s| s.query_row(params![session, to_i64(row.position + 1)], |r| r.get(0)))
            .map_err(unavailable(session, location, "cannot read the session"))?;
        panto_model::decode_line(text.as_bytes(), position(to_i64(row.position + 1)))
            .map_err(|source| malformed(session, location, source))
            .map(|e: Entry| e)
    });
    match found {
        Ok(Found::Hits(hits)) => Ok(Some(Recalled::new(hits, u64::from(state.docs)))),
        Ok(Found::Corrupt) => Ok(None),
        Err(Failed::Sqlite(e)) => Err(unavailable(session, location, "cannot read the index")(e)),
        Err(Failed::Entry(e)) => Err(e),
    }
}

/// The bytes of `session`'s index.
pub(super) fn size(conn: &Connection, session: &str, location: &str) -> Result<u64, StoreError> {
    index::size(conn, session).map_err(unavailable(session, location, "cannot read the index"))
}

impl SqliteStore {
    /// Drops `session`'s recall index and builds it again from its entries (what a first recall
    /// of a session an older panto wrote does); returns how many items it holds.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`], or [`StoreError::Invalid`] for an entry that does not decode.
    pub async fn rebuild_recall_index(&self, session: &str) -> Result<u32, StoreError> {
        let session = session.to_owned();
        self.with_conn(move |conn, location| rebuild(conn, &session, location).map(|s| s.docs))
            .await
    }

    /// The bytes `session`'s recall index holds in its columns (SQLite's page overhead aside).
    ///
    /// # Errors
    /// [`StoreError::Unavailable`].
    pub async fn recall_index_bytes(&self, session: &str) -> Result<u64, StoreError> {
        let session = session.to_owned();
        self.with_conn(move |conn, location| size(conn, &session, location))
            .await
    }
}
