//! The recall index's ids (`panto_store::recall`'s `IdRow`): for each item's own id and each
//! entry's id, the position of the first entry holding it, so that a fetch by id reads the
//! entries around it only. Kept with the rest of the index (written by
//! [`crate::recall::write`], dropped by [`crate::recall::clear`]), in the SQLite store's
//! database and in the JSONL store's sidecar alike.

use panto_store::Head;
use panto_store::recall::{IdRow, IndexState, Named};
use rusqlite::{Connection, OptionalExtension, params};

/// The ids' table and the index of the items' rows by position (`CREATE ... IF NOT EXISTS`, so
/// a sidecar runs it at each open), with the head before each entry in it: without `at`, SQLite
/// chose the primary key for `position = ?` and walked the session's rows (6 ms at position
/// 45,000 of 100,000 entries, against 0.5 ms near the start). An id is the table's key with its kind: the first row of
/// each is kept (`INSERT OR IGNORE`), the earliest, as entries are indexed in order.
macro_rules! ids_table {
    () => {
        "CREATE TABLE IF NOT EXISTS panto_recall_ids (
    session TEXT NOT NULL,
    id TEXT NOT NULL,
    item INTEGER NOT NULL,
    position INTEGER NOT NULL,
    PRIMARY KEY (session, id, item)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS panto_recall_docs_at ON panto_recall_docs (session, position, at);
"
    };
}

/// The ids' table (see `ids_table`).
pub const IDS: &str = ids_table!();

/// The SQLite store's migration 4: the ids' table, and every index written before it dropped
/// (it has no ids; the next recall or fetch of a session builds its index again).
pub const WITH_IDS: &str = concat!(
    ids_table!(),
    "DELETE FROM panto_recall_state;
DELETE FROM panto_recall_postings;
DELETE FROM panto_recall_docs;
DELETE FROM panto_recall_calls;
DELETE FROM panto_recall_compactions;
DELETE FROM panto_recall_bounds;
"
);

/// Empties the ids' table of every session (with [`crate::recall::EMPTY`]).
pub const EMPTY_IDS: &str = "DELETE FROM panto_recall_ids;\n";

fn int(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn nat(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

/// Adds `ids` to `session`'s, keeping the first row of each id and kind.
///
/// # Errors
/// SQLite's.
pub fn write(conn: &Connection, session: &str, ids: &[IdRow]) -> rusqlite::Result<()> {
    let mut put = conn.prepare_cached(
        "INSERT OR IGNORE INTO panto_recall_ids (session, id, item, position)
         VALUES (?1, ?2, ?3, ?4)",
    )?;
    for r in ids {
        put.execute(params![session, r.id, r.item, int(r.position)])?;
    }
    Ok(())
}

/// Where a fetch reads: what the id names, and the entries with items around it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Window {
    /// What the id names.
    pub named: Named,
    /// The positions of the entries with items to read: up to `context` before, the one named,
    /// up to `context` after.
    pub expect: Vec<u64>,
    /// The store's head before the first of them (where the read starts).
    pub at: Head,
}

/// What the index says of a fetch of `id` with `context` neighbours from `session` (whose index
/// is at `state`): `Ok(None)` when the id names nothing, `Err(Stale)` when the index cannot
/// tell (it has items but no ids: the store then reads the history).
///
/// # Errors
/// SQLite's, within `Ok(Err(..))` never: SQLite's errors are the outer `Err`.
pub fn window(
    conn: &Connection,
    session: &str,
    id: &str,
    context: usize,
    state: IndexState,
) -> rusqlite::Result<Result<Option<Window>, Stale>> {
    let wanted = panto_model::ItemRef::new(id);
    let wanted = wanted.as_str();
    let mut get = conn.prepare_cached(
        "SELECT position FROM panto_recall_ids WHERE session = ?1 AND id = ?2 AND item = ?3",
    )?;
    let mut row = |item: bool| -> rusqlite::Result<Option<u64>> {
        get.query_row(params![session, wanted, item], |r| r.get(0))
            .optional()
            .map(|p| p.map(nat))
    };
    let (item, entry) = (row(true)?, row(false)?);
    if item.is_none() && state.docs > 0 {
        let any: Option<i64> = conn
            .prepare_cached("SELECT 1 FROM panto_recall_ids WHERE session = ?1 LIMIT 1")?
            .query_row(params![session], |r| r.get(0))
            .optional()?;
        if any.is_none() {
            return Ok(Err(Stale));
        }
    }
    let mut has = conn.prepare_cached(
        "SELECT at FROM panto_recall_docs WHERE session = ?1 AND position = ?2 LIMIT 1",
    )?;
    let mut at_of = |p: u64| -> rusqlite::Result<Option<u64>> {
        has.query_row(params![session, int(p)], |r| r.get(0))
            .optional()
            .map(|a: Option<i64>| a.map(nat))
    };
    let mut failed = None;
    let named = Named::find(wanted, item, entry, |p| match at_of(p) {
        Ok(found) => found.is_some(),
        Err(e) => {
            failed = Some(e);
            false
        }
    });
    if let Some(e) = failed {
        return Err(e);
    }
    let Some(named) = named else {
        return Ok(Ok(None));
    };
    let p = int(named.position());
    let n = int(context as u64);
    let side = |sql: &str| -> rusqlite::Result<Vec<u64>> {
        conn.prepare_cached(sql)?
            .query_map(params![session, p, n], |r| r.get::<_, i64>(0))?
            .map(|r| r.map(nat))
            .collect()
    };
    let mut before = side(
        "SELECT DISTINCT position FROM panto_recall_docs WHERE session = ?1 AND position < ?2
         ORDER BY position DESC LIMIT ?3",
    )?;
    let after = side(
        "SELECT DISTINCT position FROM panto_recall_docs WHERE session = ?1 AND position > ?2
         ORDER BY position LIMIT ?3",
    )?;
    before.reverse();
    let mut expect = before;
    expect.push(named.position());
    expect.extend(after);
    let Some(at) = at_of(expect[0])? else {
        return Ok(Err(Stale));
    };
    Ok(Ok(Some(Window {
        named,
        expect,
        at: Head::new(at),
    })))
}

/// An index that cannot tell where an id is: the store reads the history instead.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stale;

/// The tool of the latest call `call` of `session` before `block` of the entry at `position`.
///
/// # Errors
/// SQLite's.
pub fn tool(
    conn: &Connection,
    session: &str,
    call: &str,
    position: u64,
    block: u32,
) -> rusqlite::Result<Option<String>> {
    conn.prepare_cached(
        "SELECT tool FROM panto_recall_calls WHERE session = ?1 AND call = ?2
         AND (position < ?3 OR (position = ?3 AND block < ?4))
         ORDER BY position DESC, block DESC LIMIT 1",
    )?
    .query_row(params![session, call, int(position), block], |r| r.get(0))
    .optional()
}

/// The fetch of `id` with `context` neighbours from `entries`, the entries of `window` read
/// from its first position on; `None` when they do not hold what the index said.
///
/// # Errors
/// SQLite's (looking up the tool of a result whose call is before the window).
pub fn fetch_from(
    conn: &Connection,
    session: &str,
    id: &str,
    context: usize,
    window: &Window,
    entries: &[panto_model::Entry],
) -> rusqlite::Result<Option<panto_store::Fetched>> {
    let mut failed = None;
    let fetched = panto_store::recall::fetch_window(
        window.expect[0],
        entries,
        &window.expect,
        id,
        context,
        window.named,
        |call, position, block| {
            tool(conn, session, call, position, block).unwrap_or_else(|e| {
                failed = Some(e);
                None
            })
        },
    );
    match failed {
        Some(e) => Err(e),
        None => Ok(fetched),
    }
}
