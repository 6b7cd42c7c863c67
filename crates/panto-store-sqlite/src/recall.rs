//! The recall index in SQLite tables: postings per term and range of items, the items' places
//! and fingerprints, the tool calls and the compactions, and each session's state
//! (`panto_store::recall`'s `Update` and `Lookup` say what they hold and how they rank).
//!
//! [`crate::SqliteStore`] keeps these tables in its database, written in the same transaction
//! as the entries they index; the JSONL store keeps them in a sidecar file beside a session
//! (`panto-session`), with the session's name empty. Either way they are derived data: a
//! session without a state row is indexed on its first recall, and an index that does not read
//! back (a block that does not decode) makes the store answer by scan.

use std::collections::{HashMap, HashSet};

use panto_model::Entry;
use panto_store::recall::{
    Block, Corrupt, DocRow, IndexState, Lookup, RangeBound, RangeMeta, Update, item_at, join_bounds,
};
use panto_store::{Head, Hit};
use rusqlite::{Connection, OptionalExtension, params};

/// The index's tables (`CREATE ... IF NOT EXISTS`, so a sidecar runs it at each open).
pub const SCHEMA: &str =
    "-- recall: each session's index (derived from its entries; may be dropped)
CREATE TABLE IF NOT EXISTS panto_recall_state (
    session TEXT NOT NULL PRIMARY KEY,
    entries INTEGER NOT NULL,
    head INTEGER NOT NULL,
    docs INTEGER NOT NULL,
    total_len INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS panto_recall_postings (
    session TEXT NOT NULL,
    term TEXT NOT NULL,
    part INTEGER NOT NULL,
    data BLOB NOT NULL,
    PRIMARY KEY (session, term, part)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS panto_recall_docs (
    session TEXT NOT NULL,
    doc INTEGER NOT NULL,
    position INTEGER NOT NULL,
    at INTEGER NOT NULL,
    block INTEGER NOT NULL,
    fingerprint INTEGER NOT NULL,
    PRIMARY KEY (session, doc)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS panto_recall_calls (
    session TEXT NOT NULL,
    call TEXT NOT NULL,
    position INTEGER NOT NULL,
    block INTEGER NOT NULL,
    tool TEXT NOT NULL,
    PRIMARY KEY (session, call, position, block)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS panto_recall_compactions (
    session TEXT NOT NULL,
    position INTEGER NOT NULL,
    name TEXT NOT NULL,
    PRIMARY KEY (session, position)
) WITHOUT ROWID;
";

fn int(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn nat(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

/// The table of each term's bounds by range, apart from its postings (so that a recall reads
/// the bounds of its terms, then the postings of the ranges it scores only): how many items
/// of the range hold the term, and the front of its postings
/// (`panto_store::recall::join_bounds`). `CREATE ... IF NOT EXISTS`, as [`SCHEMA`].
macro_rules! bounds_table {
    () => {
        "CREATE TABLE IF NOT EXISTS panto_recall_bounds (
    session TEXT NOT NULL,
    term TEXT NOT NULL,
    part INTEGER NOT NULL,
    count INTEGER NOT NULL,
    front BLOB NOT NULL,
    PRIMARY KEY (session, term, part)
) WITHOUT ROWID;
"
    };
}

/// The bounds' table (see `bounds_table`).
pub const BOUNDS: &str = bounds_table!();

/// Empties every recall table (see [`EMPTY`]).
macro_rules! empty_tables {
    () => {
        "DELETE FROM panto_recall_state;
DELETE FROM panto_recall_postings;
DELETE FROM panto_recall_docs;
DELETE FROM panto_recall_calls;
DELETE FROM panto_recall_compactions;
DELETE FROM panto_recall_bounds;
"
    };
}

/// The recall tables, each emptied: an index of an older format is dropped, and the next
/// recall builds it again.
pub const EMPTY: &str = empty_tables!();

/// The SQLite store's migration 3: the bounds' table, and every index written before it
/// dropped (it has no bounds; the next recall of a session builds its index again).
pub const WITH_BOUNDS: &str = concat!(bounds_table!(), empty_tables!());

/// The state of `session`'s index, if it has one.
///
/// # Errors
/// SQLite's.
pub fn state(conn: &Connection, session: &str) -> rusqlite::Result<Option<IndexState>> {
    conn.prepare_cached(
        "SELECT entries, head, docs, total_len FROM panto_recall_state WHERE session = ?1",
    )?
    .query_row(params![session], |r| {
        Ok(IndexState {
            entries: nat(r.get(0)?),
            head: Head::new(nat(r.get(1)?)),
            docs: u32::try_from(r.get::<_, i64>(2)?).unwrap_or(u32::MAX),
            total_len: nat(r.get(3)?),
        })
    })
    .optional()
}

/// Drops `session`'s index.
///
/// # Errors
/// SQLite's.
pub fn clear(conn: &Connection, session: &str) -> rusqlite::Result<()> {
    for table in [
        "panto_recall_state",
        "panto_recall_postings",
        "panto_recall_docs",
        "panto_recall_calls",
        "panto_recall_compactions",
        "panto_recall_bounds",
        "panto_recall_ids",
    ] {
        conn.prepare_cached(&format!("DELETE FROM {table} WHERE session = ?1"))?
            .execute(params![session])?;
    }
    Ok(())
}

/// Writes `update`'s rows after what `session`'s index holds, and its state.
///
/// # Errors
/// SQLite's.
pub fn write(conn: &Connection, session: &str, update: &mut Update) -> rusqlite::Result<()> {
    {
        // The new postings go after the range's (SQLite's `||` would make text of blobs).
        let mut get = conn.prepare_cached(
            "SELECT data FROM panto_recall_postings WHERE session = ?1 AND term = ?2 AND part = ?3",
        )?;
        let mut put = conn.prepare_cached(
            "INSERT OR REPLACE INTO panto_recall_postings (session, term, part, data)
             VALUES (?1, ?2, ?3, ?4)",
        )?;
        let mut get_bounds = conn.prepare_cached(
            "SELECT count, front FROM panto_recall_bounds
             WHERE session = ?1 AND term = ?2 AND part = ?3",
        )?;
        let mut put_bounds = conn.prepare_cached(
            "INSERT OR REPLACE INTO panto_recall_bounds (session, term, part, count, front)
             VALUES (?1, ?2, ?3, ?4, ?5)",
        )?;
        for (term, block) in update.blocks() {
            let range = block.meta.range;
            let (count, front): (u32, Vec<u8>) = get_bounds
                .query_row(params![session, term, range], |r| {
                    Ok((r.get(0)?, r.get(1)?))
                })
                .optional()?
                .unwrap_or_default();
            // The index built these bytes itself: they decode.
            let front = join_bounds(&front, &block).unwrap_or_default();
            put_bounds.execute(params![
                session,
                term,
                range,
                count.saturating_add(block.meta.count),
                front
            ])?;
            let before: Option<Vec<u8>> = get
                .query_row(params![session, term, range], |r| r.get(0))
                .optional()?;
            let data = match before {
                Some(mut data) => {
                    data.extend_from_slice(&block.data);
                    data
                }
                None => block.data,
            };
            put.execute(params![session, term, range, data])?;
        }
    }
    {
        let mut put = conn.prepare_cached(
            "INSERT INTO panto_recall_docs (session, doc, position, at, block, fingerprint)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )?;
        for d in &update.docs {
            put.execute(params![
                session,
                d.doc,
                int(d.position),
                int(d.at.get()),
                d.block,
                d.fingerprint.cast_signed()
            ])?;
        }
    }
    {
        let mut put = conn.prepare_cached(
            "INSERT OR REPLACE INTO panto_recall_calls (session, call, position, block, tool)
             VALUES (?1, ?2, ?3, ?4, ?5)",
        )?;
        for c in &update.calls {
            put.execute(params![session, c.call, int(c.position), c.block, c.tool])?;
        }
    }
    {
        let mut put = conn.prepare_cached(
            "INSERT OR REPLACE INTO panto_recall_compactions (session, position, name)
             VALUES (?1, ?2, ?3)",
        )?;
        for (position, name) in &update.compactions {
            put.execute(params![session, int(*position), name])?;
        }
    }
    crate::ids::write(conn, session, &update.ids)?;
    update.docs.clear();
    update.calls.clear();
    update.compactions.clear();
    update.ids.clear();
    let s = update.state;
    conn.prepare_cached(
        "INSERT OR REPLACE INTO panto_recall_state (session, entries, head, docs, total_len)
         VALUES (?1, ?2, ?3, ?4, ?5)",
    )?
    .execute(params![
        session,
        int(s.entries),
        int(s.head.get()),
        s.docs,
        int(s.total_len)
    ])?;
    Ok(())
}

/// What a recall on the index found: the hits, or that the index is corrupt (the store then
/// answers by scan).
pub enum Found {
    /// The hits, best first.
    Hits(Vec<Hit>),
    /// The index did not read back.
    Corrupt,
}

/// A failure of a recall on the index: SQLite's, or the store's reading an entry.
#[derive(Debug)]
pub enum Failed<E> {
    /// SQLite failed.
    Sqlite(rusqlite::Error),
    /// Reading an entry failed.
    Entry(E),
}

impl<E> From<rusqlite::Error> for Failed<E> {
    fn from(e: rusqlite::Error) -> Failed<E> {
        Failed::Sqlite(e)
    }
}

// Why long: the five steps of one recall (postings, ranking, item rows, entries, hits) in
// order over one connection, each using what the one before found; the shared steps are
// `Lookup` and `Picker` (panto_store::recall).
/// Recalls `lookup` from `session`'s index (in `state`), leaving out the fingerprints of
/// `exclude`; `entry` reads the entry an item is in.
///
/// # Errors
/// SQLite's, or `entry`'s.
pub fn recall<E>(
    conn: &Connection,
    session: &str,
    lookup: &Lookup,
    state: IndexState,
    exclude: &HashSet<u64>,
    mut entry: impl FnMut(&DocRow) -> Result<Entry, E>,
) -> Result<Found, Failed<E>> {
    if lookup.is_empty() {
        return Ok(Found::Hits(Vec::new()));
    }
    let mut whole = conn.prepare_cached(
        "SELECT part, data FROM panto_recall_postings WHERE session = ?1 AND term = ?2
         ORDER BY part",
    )?;
    let mut blocks: HashMap<String, Vec<Block>> = HashMap::new();
    for term in lookup.whole_terms() {
        let list = whole
            .query_map(params![session, term], |r| {
                Ok(Block {
                    meta: RangeMeta {
                        range: r.get(0)?,
                        ..RangeMeta::default()
                    },
                    data: r.get(1)?,
                })
            })?
            .collect::<rusqlite::Result<Vec<Block>>>()?;
        if !list.is_empty() {
            blocks.insert(term, list);
        }
    }
    let Ok(tiers) = lookup.tiers(&blocks) else {
        return Ok(Found::Corrupt);
    };
    let tiered = tiers.ranges();
    let bounded = lookup.bounded_terms();
    let mut get_range = conn.prepare_cached(
        "SELECT data FROM panto_recall_postings WHERE session = ?1 AND term = ?2 AND part = ?3",
    )?;
    let mut range_of = |term: &str, range: u32| -> rusqlite::Result<Option<Vec<u8>>> {
        get_range
            .query_row(params![session, term, range], |r| r.get(0))
            .optional()
    };
    let mut bounds: HashMap<String, Vec<RangeBound>> = HashMap::new();
    {
        let mut get = conn.prepare_cached(
            "SELECT part, count, front FROM panto_recall_bounds WHERE session = ?1 AND term = ?2
             ORDER BY part",
        )?;
        for term in &bounded {
            let list = get
                .query_map(params![session, term], |r| {
                    Ok(RangeBound {
                        range: r.get(0)?,
                        count: r.get(1)?,
                        front: r.get(2)?,
                    })
                })?
                .collect::<rusqlite::Result<Vec<RangeBound>>>()?;
            if list.is_empty() {
                continue;
            }
            let block = |range: u32, data: Vec<u8>| Block {
                meta: RangeMeta {
                    range,
                    ..RangeMeta::default()
                },
                data,
            };
            let mut part = Vec::new();
            if tiered.len().saturating_mul(4) >= list.len() {
                // A quarter of the term's ranges or more (an exact string in every range):
                // one walk of its rows, as for a batch of as many.
                let wanted: HashSet<u32> = tiered.iter().copied().collect();
                let mut rows = whole.query(params![session, term])?;
                while let Some(r) = rows.next()? {
                    let range: u32 = r.get(0)?;
                    if wanted.contains(&range) {
                        part.push(block(range, r.get(1)?));
                    }
                }
            } else {
                for &range in tiered {
                    if let Some(data) = range_of(term, range)? {
                        part.push(block(range, data));
                    }
                }
            }
            blocks.insert(term.clone(), part);
            bounds.insert(term.clone(), list);
        }
    }
    let Ok(mut picker) = lookup.rank_bounded(state.stats(), &blocks, &bounds, tiers) else {
        return Ok(Found::Corrupt);
    };
    // How many ranges a bounded term has at most.
    let ranges = bounds.values().map(Vec::len).max().unwrap_or(0);
    let none = HashSet::new();
    let exclude = if lookup.include_context() {
        &none
    } else {
        exclude
    };
    {
        let mut get = conn.prepare_cached(
            "SELECT position, at, block, fingerprint FROM panto_recall_docs
             WHERE session = ?1 AND doc = ?2",
        )?;
        loop {
            loop {
                let need = picker.needs();
                if need.is_empty() {
                    break;
                }
                let mut found: HashMap<u32, Vec<(String, Vec<u8>)>> = HashMap::new();
                if need.len().saturating_mul(4) >= ranges {
                    // A quarter of the ranges or more: one walk of each term's rows beats a
                    // lookup per range.
                    let wanted: HashSet<u32> = need.iter().copied().collect();
                    for term in &bounded {
                        let mut rows = whole.query(params![session, term])?;
                        while let Some(r) = rows.next()? {
                            let range: u32 = r.get(0)?;
                            if wanted.contains(&range) {
                                found
                                    .entry(range)
                                    .or_default()
                                    .push((term.clone(), r.get(1)?));
                            }
                        }
                    }
                } else {
                    for &range in &need {
                        for term in &bounded {
                            if let Some(data) = range_of(term, range)? {
                                found.entry(range).or_default().push((term.clone(), data));
                            }
                        }
                    }
                }
                for range in need {
                    let these = found.remove(&range).unwrap_or_default();
                    if picker.give(range, these) == Err(Corrupt) {
                        return Ok(Found::Corrupt);
                    }
                }
            }
            let docs = picker.next_docs();
            if docs.is_empty() {
                break;
            }
            let mut rows = Vec::with_capacity(docs.len());
            for doc in docs {
                let row = get
                    .query_row(params![session, doc], |r| {
                        Ok(DocRow {
                            doc,
                            position: nat(r.get(0)?),
                            at: Head::new(nat(r.get(1)?)),
                            block: r.get(2)?,
                            fingerprint: r.get::<_, i64>(3)?.cast_unsigned(),
                        })
                    })
                    .optional()?;
                rows.extend(row);
            }
            if picker.offer(&rows, exclude) == Err(Corrupt) {
                return Ok(Found::Corrupt);
            }
        }
    }
    let mut tool = conn.prepare_cached(
        "SELECT tool FROM panto_recall_calls WHERE session = ?1 AND call = ?2
         AND (position < ?3 OR (position = ?3 AND block < ?4))
         ORDER BY position DESC, block DESC LIMIT 1",
    )?;
    let mut by = conn.prepare_cached(
        "SELECT name FROM panto_recall_compactions WHERE session = ?1 AND position > ?2
         ORDER BY position LIMIT 1",
    )?;
    let mut picked = Vec::new();
    for (c, row) in picker.picked() {
        let e = entry(&row).map_err(Failed::Entry)?;
        let mut failed = None;
        let item = item_at(&e, row.position, row.block, |call| {
            tool.query_row(params![session, call, int(row.position), row.block], |r| {
                r.get(0)
            })
            .optional()
            .unwrap_or_else(|e| {
                failed = Some(e);
                None
            })
        });
        if let Some(e) = failed {
            return Err(Failed::Sqlite(e));
        }
        let Some(item) = item else {
            return Ok(Found::Corrupt);
        };
        let summarized_by: Option<String> = by
            .query_row(params![session, int(row.position)], |r| r.get(0))
            .optional()?;
        picked.push((c, item, summarized_by));
    }
    Ok(Found::Hits(lookup.hits(picked)))
}

/// The bytes `session`'s index holds in its tables' columns (keys, postings, rows; SQLite's
/// page overhead aside).
///
/// # Errors
/// SQLite's.
pub fn size(conn: &Connection, session: &str) -> rusqlite::Result<u64> {
    let mut total = 0i64;
    for sql in [
        "SELECT COALESCE(SUM(length(session) + length(term) + length(data) + 4), 0)
         FROM panto_recall_postings WHERE session = ?1",
        "SELECT COALESCE(SUM(length(session) + 28), 0) FROM panto_recall_docs WHERE session = ?1",
        "SELECT COALESCE(SUM(length(session) + length(term) + length(front) + 8), 0)
         FROM panto_recall_bounds WHERE session = ?1",
        "SELECT COALESCE(SUM(length(session) + length(call) + length(tool) + 12), 0)
         FROM panto_recall_calls WHERE session = ?1",
        "SELECT COALESCE(SUM(length(session) + length(name) + 8), 0)
         FROM panto_recall_compactions WHERE session = ?1",
        "SELECT COALESCE(SUM(length(session) + length(id) + 10), 0)
         FROM panto_recall_ids WHERE session = ?1",
    ] {
        let n: i64 = conn.query_row(sql, params![session], |r| r.get(0))?;
        total += n;
    }
    Ok(nat(total))
}
