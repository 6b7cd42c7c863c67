//! The SQLite store's fetch by id: the index's ids (`crate::ids`) say where the id is and
//! which entries around it hold the neighbours; only those entries are read.

use panto_model::Entry;
use panto_store::recall::no_such_id;
use panto_store::{Fetched, StoreError};
use rusqlite::{Connection, params};

use super::recall::catch_up;
use crate::error::unavailable;
use crate::ids::{self, Stale};
use crate::session::{exists, malformed, position, to_i64};

/// Fetches `id` with `context` neighbours from `session` with its index, caught up first;
/// `None` when the index cannot tell (the caller reads the history).
pub(super) fn fetch(
    conn: &mut Connection,
    session: &str,
    location: &str,
    id: &str,
    context: usize,
) -> Result<Option<Fetched>, StoreError> {
    if !exists(conn, session, location)? {
        return Ok(None);
    }
    let state = catch_up(conn, session, location)?;
    let fail = unavailable(session, location, "cannot read the index");
    let tx = conn.transaction().map_err(fail)?;
    let fail = |e| unavailable(session, location, "cannot read the index")(e);
    let window = match ids::window(&tx, session, id, context, state).map_err(fail)? {
        Err(Stale) => return Ok(None),
        Ok(None) => return Err(no_such_id(location, session, id)),
        Ok(Some(w)) => w,
    };
    let (first, last) = (window.expect[0], window.expect[window.expect.len() - 1]);
    let rows: Vec<(i64, String)> = tx
        .prepare_cached(
            "SELECT seq, text FROM panto_entries WHERE session = ?1 AND seq BETWEEN ?2 AND ?3
             ORDER BY seq",
        )
        .and_then(|mut s| {
            super::rows(
                &mut s,
                params![session, to_i64(first + 1), to_i64(last + 1)],
            )
        })
        .map_err(unavailable(session, location, "cannot read the session"))?;
    let mut entries: Vec<Entry> = Vec::with_capacity(rows.len());
    for (i, (seq, text)) in rows.iter().enumerate() {
        if *seq != to_i64(first + 1 + i as u64) {
            return Ok(None);
        }
        let entry = panto_model::decode_line(text.as_bytes(), position(*seq))
            .map_err(|source| malformed(session, location, source))?;
        entries.push(entry);
    }
    ids::fetch_from(&tx, session, id, context, &window, &entries).map_err(fail)
}
