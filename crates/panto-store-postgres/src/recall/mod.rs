//! The PostgreSQL store's recall index: the tables of migration 3 (postings per term and range
//! of items, the items' places and fingerprints, the tool calls, the compactions, each
//! session's state), brought up to date from where it stopped, a chunk of entries per
//! transaction under a transaction-level advisory lock on the session (so two hosts never add
//! the same postings twice), and read by the ranking every store shares
//! (`panto_store::recall::Lookup`).
//!
//! Terms are keyed by `md5(term)` as a `uuid`: a btree entry is bounded (about 2.7 kB) and a
//! term is any run of text, so the term itself cannot be the key. The index is derived data:
//! a block that does not decode makes the store answer by scan.

use std::collections::{HashMap, HashSet};

use panto_store::recall::{
    Block, Corrupt, DocRow, IndexState, Lookup, RangeBound, RangeMeta, Update, context_fingerprints,
};
use panto_store::{Head, Loaded, RecallQuery, Recalled, StoreError};
use tokio_postgres::Client;
use tokio_postgres::types::Type;

use crate::attempt::Fail;
use crate::pool::{Phase, Pool};
use crate::session::{to_i64, to_u64};
use crate::sql;

mod fetch;
mod items;
mod schema;
mod write;

pub(crate) use fetch::{Answer, IDS, fetch};
use items::{items, tools_of};
pub(crate) use schema::{BOUNDS, INLINE, SCHEMA};
use write::write;

/// Entries indexed per transaction.
const CHUNK: i64 = 20_000;

/// `($1 name)` → the session's id and head, and its index's state (NULLs without one).
const TARGET: &str = "SELECT s.id,
       coalesce((SELECT max(e.seq) FROM panto_entries e WHERE e.session = s.id), 0),
       r.entries, r.docs, r.total_len
FROM panto_sessions s LEFT JOIN panto_recall_state r ON r.session = s.id
WHERE md5(s.name) = md5($1::text) AND s.name = $1::text";

/// `($1 id)` → the session's head now, and its index's state (NULLs without one). Read under
/// the session's advisory lock, so the head is never older than the index.
const LOCKED: &str =
    "SELECT coalesce((SELECT max(e.seq) FROM panto_entries e WHERE e.session = $1::bigint), 0),
       r.entries, r.docs, r.total_len
FROM (SELECT 1) AS one LEFT JOIN panto_recall_state r ON r.session = $1::bigint";

const CLEAR: [&str; 7] = [
    "DELETE FROM panto_recall_ids WHERE session = $1::bigint",
    "DELETE FROM panto_recall_bounds WHERE session = $1::bigint",
    "DELETE FROM panto_recall_state WHERE session = $1::bigint",
    "DELETE FROM panto_recall_postings WHERE session = $1::bigint",
    "DELETE FROM panto_recall_docs WHERE session = $1::bigint",
    "DELETE FROM panto_recall_calls WHERE session = $1::bigint",
    "DELETE FROM panto_recall_compactions WHERE session = $1::bigint",
];

/// `($1 id, $2 terms)` → each term's bounds by range.
const BOUNDS_OF: &str = "SELECT u.t, b.part, b.count, b.front
FROM unnest($2::text[]) AS u (t)
JOIN panto_recall_bounds b ON b.session = $1::bigint AND b.term = md5(u.t)::uuid
ORDER BY u.t, b.part";

/// `($1 id, $2 terms, $3 parts)` → the postings of those terms in those ranges.
const POSTINGS_IN: &str = "SELECT u.t, p.part, p.data
FROM unnest($2::text[]) AS u (t)
JOIN panto_recall_postings p ON p.session = $1::bigint AND p.term = md5(u.t)::uuid
    AND p.part = ANY($3::int4[])";

/// `($1 id, $2 terms)` → the postings of those terms, whole.
const POSTINGS: &str = "SELECT u.t, p.part, p.data
FROM unnest($2::text[]) AS u (t)
JOIN panto_recall_postings p ON p.session = $1::bigint AND p.term = md5(u.t)::uuid
ORDER BY u.t, p.part";

const DOCS: &str = "SELECT doc, position, block, fingerprint FROM panto_recall_docs
WHERE session = $1::bigint AND doc = ANY($2::int4[])";

const SIZE: &str = "SELECT (
  (SELECT coalesce(sum(pg_column_size(t.*)), 0) FROM panto_recall_state t WHERE session = $1::bigint)
+ (SELECT coalesce(sum(pg_column_size(t.*)), 0) FROM panto_recall_postings t WHERE session = $1::bigint)
+ (SELECT coalesce(sum(pg_column_size(t.*)), 0) FROM panto_recall_docs t WHERE session = $1::bigint)
+ (SELECT coalesce(sum(pg_column_size(t.*)), 0) FROM panto_recall_calls t WHERE session = $1::bigint)
+ (SELECT coalesce(sum(pg_column_size(t.*)), 0) FROM panto_recall_compactions t WHERE session = $1::bigint)
+ (SELECT coalesce(sum(pg_column_size(t.*)), 0) FROM panto_recall_ids t WHERE session = $1::bigint)
)::bigint";

/// The index's state in columns `at..at + 3` of `r` (entries, docs, total length, from a left
/// join of `panto_recall_state`): `None` when they are NULL, the session having no index.
fn state_at(r: &tokio_postgres::Row, at: usize) -> Result<Option<IndexState>, Fail> {
    let (entries, docs, total_len): (Option<i64>, Option<i64>, Option<i64>) =
        (r.try_get(at)?, r.try_get(at + 1)?, r.try_get(at + 2)?);
    Ok(match (entries, docs, total_len) {
        (Some(entries), Some(docs), Some(total_len)) => Some(index_state(entries, docs, total_len)),
        _ => None,
    })
}

/// The state of a row of `panto_recall_state` (entries, docs, total length).
fn index_state(entries: i64, docs: i64, total_len: i64) -> IndexState {
    IndexState {
        entries: to_u64(entries),
        head: Head::new(to_u64(entries)),
        docs: u32::try_from(docs).unwrap_or(u32::MAX),
        total_len: to_u64(total_len),
    }
}

/// Brings the index of session `id` up to the session's end; returns its state.
async fn catch_up(pool: &Pool, c: &Client, id: i64) -> Result<IndexState, Fail> {
    loop {
        pool.begin(c, Phase::Normal).await?;
        let done = chunk(pool, c, id).await;
        match done {
            Ok(Some(state)) => {
                c.batch_execute("COMMIT").await?;
                return Ok(state);
            }
            Ok(None) => c.batch_execute("COMMIT").await?,
            Err(e) => {
                let _ = c.batch_execute("ROLLBACK").await;
                return Err(e);
            }
        }
    }
}

/// One transaction of [`catch_up`]: the state when the index is up to date, or `None` after
/// indexing a chunk.
///
/// The session's end is read under the lock, never before it: a head read earlier may be
/// older than the index another writer has brought further since, and an index further than
/// the session is one to build again. With an older head, two writers catching up at once
/// (each append's own catch-up) took turns at the lock for ever: the one with the older head
/// found the index past it and built it again from the start, the other brought it past that
/// head once more, and neither found it where it stopped.
async fn chunk(pool: &Pool, c: &Client, id: i64) -> Result<Option<IndexState>, Fail> {
    c.query_typed(
        "SELECT pg_advisory_xact_lock(7061, hashtext($1::bigint::text))",
        &[(&id, Type::INT8)],
    )
    .await?;
    let rows = c.query_typed(LOCKED, &[(&id, Type::INT8)]).await?;
    // One row always (`FROM (SELECT 1)`).
    let (head, found): (i64, _) = match rows.first() {
        Some(r) => (r.try_get(0)?, state_at(r, 1)?),
        None => (0, None),
    };
    let state = match found {
        Some(s) if to_i64(s.entries) <= head => s,
        _ => {
            for sql in CLEAR {
                c.query_typed(sql, &[(&id, Type::INT8)]).await?;
            }
            IndexState::default()
        }
    };
    if to_i64(state.entries) == head && found.is_some() {
        return Ok(Some(state));
    }
    let from = to_i64(state.entries) + 1;
    let to = (from + CHUNK - 1).min(head);
    let rows = c
        .query_typed(
            sql::RANGE,
            &[(&id, Type::INT8), (&from, Type::INT8), (&to, Type::INT8)],
        )
        .await?;
    let mut update = Update::new(state);
    for r in &rows {
        let (seq, body): (i64, &[u8]) = (r.try_get(0)?, r.try_get(1)?);
        let line = usize::try_from(seq).unwrap_or(usize::MAX);
        let entry = panto_model::decode_line(body, line).map_err(|e| {
            Fail::Store(StoreError::invalid(
                "",
                format!("{}: entry {seq} of session {id}: {e}", pool.location()),
            ))
        })?;
        let p = to_u64(seq - 1);
        update.push(&entry, Head::new(p), Head::new(p + 1));
    }
    write(c, id, &mut update).await?;
    Ok(None)
}

/// A session as [`target`] finds it.
struct Target {
    id: i64,
    /// Its last entry's seq.
    head: i64,
    /// Its index's state, if it has one.
    state: Option<IndexState>,
}

impl Target {
    /// The index's state when it covers the whole session.
    fn current(&self) -> Option<IndexState> {
        self.state.filter(|s| to_i64(s.entries) == self.head)
    }
}

/// The id, head and index state of `session`, if it exists: one round trip.
async fn target(pool: &Pool, c: &Client, session: &str) -> Result<Option<Target>, Fail> {
    let rows = pool.query(c, TARGET, &[(&session, Type::TEXT)]).await?;
    let Some(r) = rows.first() else {
        return Ok(None);
    };
    Ok(Some(Target {
        id: r.try_get(0)?,
        head: r.try_get(1)?,
        state: state_at(r, 2)?,
    }))
}

/// The state of the index of the session `t`, caught up first when it is behind.
async fn current(pool: &Pool, c: &Client, t: &Target) -> Result<IndexState, Fail> {
    match t.current() {
        Some(s) => Ok(s),
        None => catch_up(pool, c, t.id).await,
    }
}

/// Drops `session`'s index (the next [`step`]s build it again).
pub(crate) async fn clear(pool: &Pool, c: &Client, session: &str) -> Result<(), Fail> {
    let Some(Target { id, .. }) = target(pool, c, session).await? else {
        return Ok(());
    };
    pool.begin(c, Phase::Normal).await?;
    let cleared = async {
        c.query_typed(
            "SELECT pg_advisory_xact_lock(7061, hashtext($1::bigint::text))",
            &[(&id, Type::INT8)],
        )
        .await?;
        for sql in CLEAR {
            c.query_typed(sql, &[(&id, Type::INT8)]).await?;
        }
        Ok::<_, Fail>(())
    }
    .await;
    match cleared {
        Ok(()) => c.batch_execute("COMMIT").await?,
        Err(e) => {
            let _ = c.batch_execute("ROLLBACK").await;
            return Err(e);
        }
    }
    Ok(())
}

/// One transaction of bringing `session`'s index up to date (a chunk of entries): how many
/// items it holds once it is, `None` while entries are left. A store runs each step as a try
/// of its own, so a long backlog (a session imported, or written before the index) is never
/// one try past the statement timeout.
pub(crate) async fn step(pool: &Pool, c: &Client, session: &str) -> Result<Option<u32>, Fail> {
    let Some(t) = target(pool, c, session).await? else {
        return Ok(Some(0));
    };
    // Current already (the common case of a recall): no transaction, no lock.
    if let Some(s) = t.current() {
        return Ok(Some(s.docs));
    }
    pool.begin(c, Phase::Normal).await?;
    match chunk(pool, c, t.id).await {
        Ok(done) => {
            c.batch_execute("COMMIT").await?;
            Ok(done.map(|s| s.docs))
        }
        Err(e) => {
            let _ = c.batch_execute("ROLLBACK").await;
            Err(e)
        }
    }
}

/// The bytes of `session`'s index rows as stored (`pg_column_size` of each row).
pub(crate) async fn size(pool: &Pool, c: &Client, session: &str) -> Result<u64, Fail> {
    let Some(Target { id, .. }) = target(pool, c, session).await? else {
        return Ok(0);
    };
    let rows = pool.query(c, SIZE, &[(&id, Type::INT8)]).await?;
    let total: i64 = rows.first().map_or(Ok(0), |r| r.try_get(0))?;
    Ok(to_u64(total))
}

/// Brings `session`'s index up to date after an append this store made at `at`: when the
/// index covers exactly the entries before `at`, or when the append was the session's first
/// (`at` 0, which starts the index: a new session has no state row yet). Never builds the
/// index of a session written before it (the next recall does, a chunk per try).
pub(crate) async fn after_append(
    pool: &Pool,
    c: &Client,
    session: &str,
    at: u64,
) -> Result<(), Fail> {
    let Some(t) = target(pool, c, session).await? else {
        return Ok(());
    };
    let follows = match t.state {
        Some(s) => s.entries == at || at == 0,
        None => at == 0,
    };
    if follows {
        catch_up(pool, c, t.id).await?;
    }
    Ok(())
}

// Why long: the five steps of one recall (postings, ranking, item rows, entries, hits) in
// order over one connection, each using what the one before found; the shared steps are
// `Lookup` and `Picker` (panto_store::recall).
/// Recalls `query` from `session` (whose effective context is `loaded`) with its index, caught
/// up first; `None` when the index does not read back.
pub(crate) async fn recall(
    pool: &Pool,
    c: &Client,
    session: &str,
    loaded: &Loaded,
    query: &RecallQuery,
) -> Result<Option<Recalled>, Fail> {
    let Some(t) = target(pool, c, session).await? else {
        return Ok(None);
    };
    // Current already (the store caught it up before this try): no transaction, no lock.
    let state = current(pool, c, &t).await?;
    let id = t.id;
    let lookup = Lookup::new(query);
    if lookup.is_empty() {
        return Ok(Some(Recalled::new(Vec::new(), u64::from(state.docs))));
    }
    let terms = lookup.whole_terms();
    let bounded = lookup.bounded_terms();
    // The whole terms' postings and the bounded terms' bounds in one round trip (pipelined).
    let (whole, bound_rows) = tokio::join!(
        of_terms(pool, c, POSTINGS, id, &terms),
        of_terms(pool, c, BOUNDS_OF, id, &bounded),
    );
    let mut blocks: HashMap<String, Vec<Block>> = HashMap::new();
    add_blocks(&mut blocks, &whole?)?;
    let Ok(tiers) = lookup.tiers(&blocks) else {
        return Ok(None);
    };
    let mut bounds: HashMap<String, Vec<RangeBound>> = HashMap::new();
    if !bounded.is_empty() {
        for r in &bound_rows? {
            let (term, part, count, front): (String, i32, i32, Vec<u8>) =
                (r.try_get(0)?, r.try_get(1)?, r.try_get(2)?, r.try_get(3)?);
            bounds.entry(term).or_default().push(RangeBound {
                range: u32::try_from(part).unwrap_or(u32::MAX),
                count: u32::try_from(count).unwrap_or(0),
                front,
            });
        }
        for t in bounds.keys() {
            blocks.entry(t.clone()).or_default();
        }
        if !tiers.ranges().is_empty() {
            let rows = postings_in(pool, c, id, &bounded, tiers.ranges()).await?;
            add_blocks(&mut blocks, &rows)?;
            for list in blocks.values_mut() {
                list.sort_by_key(|b| b.meta.range);
            }
        }
    }
    let Ok(mut picker) = lookup.rank_bounded(state.stats(), &blocks, &bounds, tiers) else {
        return Ok(None);
    };
    let exclude = if lookup.include_context() {
        HashSet::new()
    } else {
        context_fingerprints(&loaded.context)
    };
    loop {
        loop {
            let need = picker.needs();
            if need.is_empty() {
                break;
            }
            // One round trip for the batch of ranges.
            let rows = postings_in(pool, c, id, &bounded, &need).await?;
            let mut found: HashMap<u32, Vec<(String, Vec<u8>)>> = HashMap::new();
            for r in &rows {
                let (term, part, data): (String, i32, Vec<u8>) =
                    (r.try_get(0)?, r.try_get(1)?, r.try_get(2)?);
                found
                    .entry(u32::try_from(part).unwrap_or(u32::MAX))
                    .or_default()
                    .push((term, data));
            }
            for range in need {
                let these = found.remove(&range).unwrap_or_default();
                if picker.give(range, these) == Err(Corrupt) {
                    return Ok(None);
                }
            }
        }
        let docs = picker.next_docs();
        if docs.is_empty() {
            break;
        }
        let asked: Vec<i32> = docs
            .iter()
            .map(|d| i32::try_from(*d).unwrap_or(i32::MAX))
            .collect();
        let rows = pool
            .query(c, DOCS, &[(&id, Type::INT8), (&asked, Type::INT4_ARRAY)])
            .await?;
        let mut found = Vec::with_capacity(rows.len());
        for r in &rows {
            let (doc, position, block, print): (i32, i64, i32, i64) =
                (r.try_get(0)?, r.try_get(1)?, r.try_get(2)?, r.try_get(3)?);
            found.push(DocRow {
                doc: u32::try_from(doc).unwrap_or(u32::MAX),
                position: to_u64(position),
                at: Head::new(to_u64(position)),
                block: u32::try_from(block).unwrap_or(u32::MAX),
                fingerprint: print.cast_unsigned(),
            });
        }
        if picker.offer(&found, &exclude) == Err(Corrupt) {
            return Ok(None);
        }
    }
    let Some(picked) = items(pool, c, id, picker.picked()).await? else {
        return Ok(None);
    };
    Ok(Some(Recalled::new(
        lookup.hits(picked),
        u64::from(state.docs),
    )))
}

/// The rows of `sql` (of [`POSTINGS`] and [`BOUNDS_OF`]) for `terms` of session `id`: none
/// without a term, with no round trip.
async fn of_terms(
    pool: &Pool,
    c: &Client,
    sql: &str,
    id: i64,
    terms: &[String],
) -> Result<Vec<tokio_postgres::Row>, Fail> {
    if terms.is_empty() {
        return Ok(Vec::new());
    }
    Ok(pool
        .query(c, sql, &[(&id, Type::INT8), (&terms, Type::TEXT_ARRAY)])
        .await?)
}

/// Adds to `blocks` the rows of [`POSTINGS`] or [`POSTINGS_IN`] (term, part, data).
fn add_blocks(
    blocks: &mut HashMap<String, Vec<Block>>,
    rows: &[tokio_postgres::Row],
) -> Result<(), Fail> {
    for r in rows {
        let (term, part, data): (String, i32, Vec<u8>) =
            (r.try_get(0)?, r.try_get(1)?, r.try_get(2)?);
        blocks.entry(term).or_default().push(Block {
            meta: RangeMeta {
                range: u32::try_from(part).unwrap_or(u32::MAX),
                ..RangeMeta::default()
            },
            data,
        });
    }
    Ok(())
}

/// The postings of `terms` in `ranges`, in one round trip.
async fn postings_in(
    pool: &Pool,
    c: &Client,
    id: i64,
    terms: &[String],
    ranges: &[u32],
) -> Result<Vec<tokio_postgres::Row>, Fail> {
    let parts: Vec<i32> = ranges
        .iter()
        .map(|r| i32::try_from(*r).unwrap_or(i32::MAX))
        .collect();
    Ok(pool
        .query(
            c,
            POSTINGS_IN,
            &[
                (&id, Type::INT8),
                (&terms, Type::TEXT_ARRAY),
                (&parts, Type::INT4_ARRAY),
            ],
        )
        .await?)
}
