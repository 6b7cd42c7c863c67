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

use panto_model::{Entry, Item};
use panto_store::recall::{
    Block, Candidate, Corrupt, DocRow, IndexState, Lookup, RangeBound, RangeMeta, Update,
    context_fingerprints, item_at,
};
use panto_store::{Head, Loaded, RecallQuery, Recalled, StoreError};
use tokio_postgres::Client;
use tokio_postgres::types::Type;

use crate::attempt::Fail;
use crate::pool::{Phase, Pool};
use crate::session::{to_i64, to_u64};
use crate::sql;

mod fetch;
mod schema;
mod write;

pub(crate) use fetch::{Answer, IDS, fetch};
pub(crate) use schema::{BOUNDS, INLINE, SCHEMA};
use write::write;

/// Entries indexed per transaction.
const CHUNK: i64 = 20_000;

/// `($1 name)` → the session's id and head.
const TARGET: &str = "SELECT s.id,
       coalesce((SELECT max(e.seq) FROM panto_entries e WHERE e.session = s.id), 0)
FROM panto_sessions s WHERE md5(s.name) = md5($1::text) AND s.name = $1::text";

const STATE: &str =
    "SELECT entries, docs, total_len FROM panto_recall_state WHERE session = $1::bigint";

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

const POSTINGS: &str = "SELECT u.t, p.part, p.data
FROM unnest($2::text[]) AS u (t)
JOIN panto_recall_postings p ON p.session = $1::bigint AND p.term = md5(u.t)::uuid
ORDER BY u.t, p.part";

const DOCS: &str = "SELECT doc, position, block, fingerprint FROM panto_recall_docs
WHERE session = $1::bigint AND doc = ANY($2::int4[])";

/// `($1 id, $2 seqs)` → the entries of the candidates picked, in one round trip.
const ENTRIES: &str = "SELECT seq, body FROM panto_entries
WHERE session = $1::bigint AND seq = ANY($2::int8[])";

/// `($1 id, $2 calls, $3 positions, $4 blocks, $5 indices)` → each index with the tool of
/// the latest call with its id before its item (a tool result whose entry lacks its call).
const TOOLS: &str = "SELECT u.i, (SELECT k.tool FROM panto_recall_calls k
    WHERE k.session = $1::bigint AND k.call = u.c
      AND (k.position < u.p OR (k.position = u.p AND k.block < u.b))
    ORDER BY k.position DESC, k.block DESC LIMIT 1)
FROM unnest($2::text[], $3::int8[], $4::int4[], $5::int4[]) AS u (c, p, b, i)";

const SIZE: &str = "SELECT (
  (SELECT coalesce(sum(pg_column_size(t.*)), 0) FROM panto_recall_state t WHERE session = $1::bigint)
+ (SELECT coalesce(sum(pg_column_size(t.*)), 0) FROM panto_recall_postings t WHERE session = $1::bigint)
+ (SELECT coalesce(sum(pg_column_size(t.*)), 0) FROM panto_recall_docs t WHERE session = $1::bigint)
+ (SELECT coalesce(sum(pg_column_size(t.*)), 0) FROM panto_recall_calls t WHERE session = $1::bigint)
+ (SELECT coalesce(sum(pg_column_size(t.*)), 0) FROM panto_recall_compactions t WHERE session = $1::bigint)
+ (SELECT coalesce(sum(pg_column_size(t.*)), 0) FROM panto_recall_ids t WHERE session = $1::bigint)
)::bigint";

/// `($1 id, $2 positions)` → each position with the first compaction after it, or NULL.
const SUMMARIZED_BY: &str = "SELECT u.p, (SELECT c.name FROM panto_recall_compactions c
    WHERE c.session = $1::bigint AND c.position > u.p ORDER BY c.position LIMIT 1)
FROM unnest($2::int8[]) AS u (p)";

fn state_of(row: Option<&tokio_postgres::Row>) -> Result<Option<IndexState>, Fail> {
    let Some(r) = row else {
        return Ok(None);
    };
    let (entries, docs, total_len): (i64, i64, i64) = (r.try_get(0)?, r.try_get(1)?, r.try_get(2)?);
    Ok(Some(IndexState {
        entries: to_u64(entries),
        head: Head::new(to_u64(entries)),
        docs: u32::try_from(docs).unwrap_or(u32::MAX),
        total_len: to_u64(total_len),
    }))
}

/// Brings the index of session `id` (which ends at `head`) up to date; returns its state.
async fn catch_up(pool: &Pool, c: &Client, id: i64, head: i64) -> Result<IndexState, Fail> {
    loop {
        pool.begin(c, Phase::Normal).await?;
        let done = chunk(pool, c, id, head).await;
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
async fn chunk(pool: &Pool, c: &Client, id: i64, head: i64) -> Result<Option<IndexState>, Fail> {
    c.query_typed(
        "SELECT pg_advisory_xact_lock(7061, hashtext($1::bigint::text))",
        &[(&id, Type::INT8)],
    )
    .await?;
    let rows = c.query_typed(STATE, &[(&id, Type::INT8)]).await?;
    let found = state_of(rows.first())?;
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

/// The id and head of `session`, if it exists.
async fn target(pool: &Pool, c: &Client, session: &str) -> Result<Option<(i64, i64)>, Fail> {
    let rows = pool.query(c, TARGET, &[(&session, Type::TEXT)]).await?;
    Ok(match rows.first() {
        Some(r) => Some((r.try_get(0)?, r.try_get(1)?)),
        None => None,
    })
}

/// Drops `session`'s index (the next [`step`]s build it again).
pub(crate) async fn clear(pool: &Pool, c: &Client, session: &str) -> Result<(), Fail> {
    let Some((id, _)) = target(pool, c, session).await? else {
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
    let Some((id, head)) = target(pool, c, session).await? else {
        return Ok(Some(0));
    };
    pool.begin(c, Phase::Normal).await?;
    match chunk(pool, c, id, head).await {
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
    let Some((id, _)) = target(pool, c, session).await? else {
        return Ok(0);
    };
    let rows = pool.query(c, SIZE, &[(&id, Type::INT8)]).await?;
    let total: i64 = rows.first().map_or(Ok(0), |r| r.try_get(0))?;
    Ok(to_u64(total))
}

/// Brings `session`'s index up to date when it covers exactly the entries before `at` (after
/// an append this store made); never builds one.
pub(crate) async fn after_append(
    pool: &Pool,
    c: &Client,
    session: &str,
    at: u64,
) -> Result<(), Fail> {
    let Some((id, head)) = target(pool, c, session).await? else {
        return Ok(());
    };
    let rows = pool.query(c, STATE, &[(&id, Type::INT8)]).await?;
    match state_of(rows.first())? {
        Some(s) if s.entries == at || at == 0 => {
            catch_up(pool, c, id, head).await?;
        }
        _ => {}
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
    let Some((id, head)) = target(pool, c, session).await? else {
        return Ok(None);
    };
    // Current already (the store caught it up before this try): no transaction, no lock.
    let rows = pool.query(c, STATE, &[(&id, Type::INT8)]).await?;
    let state = match state_of(rows.first())? {
        Some(s) if to_i64(s.entries) == head => s,
        _ => catch_up(pool, c, id, head).await?,
    };
    let lookup = Lookup::new(query);
    if lookup.is_empty() {
        return Ok(Some(Recalled::new(Vec::new(), u64::from(state.docs))));
    }
    let terms = lookup.whole_terms();
    let rows = pool
        .query(
            c,
            POSTINGS,
            &[(&id, Type::INT8), (&terms, Type::TEXT_ARRAY)],
        )
        .await?;
    let mut blocks: HashMap<String, Vec<Block>> = HashMap::new();
    add_blocks(&mut blocks, &rows)?;
    let Ok(tiers) = lookup.tiers(&blocks) else {
        return Ok(None);
    };
    let bounded = lookup.bounded_terms();
    let mut bounds: HashMap<String, Vec<RangeBound>> = HashMap::new();
    if !bounded.is_empty() {
        let rows = pool
            .query(
                c,
                BOUNDS_OF,
                &[(&id, Type::INT8), (&bounded, Type::TEXT_ARRAY)],
            )
            .await?;
        for r in &rows {
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

/// The items of the candidates `picked`, each with the compaction that summarized it, read in
/// three round trips whatever their number (the entries, the compactions, the tools of
/// results whose entry lacks their call); `None` when the index names an item that is not
/// there.
async fn items(
    pool: &Pool,
    c: &Client,
    id: i64,
    picked: Vec<(Candidate, DocRow)>,
) -> Result<Option<Vec<(Candidate, Item, Option<String>)>>, Fail> {
    let seqs: Vec<i64> = picked.iter().map(|(_, r)| to_i64(r.position + 1)).collect();
    let rows = pool
        .query(c, ENTRIES, &[(&id, Type::INT8), (&seqs, Type::INT8_ARRAY)])
        .await?;
    let mut entries: HashMap<i64, Entry> = HashMap::new();
    for r in &rows {
        let (seq, body): (i64, &[u8]) = (r.try_get(0)?, r.try_get(1)?);
        let line = usize::try_from(seq).unwrap_or(usize::MAX);
        let Ok(entry) = panto_model::decode_line(body, line) else {
            return Ok(None);
        };
        entries.insert(seq, entry);
    }
    let positions: Vec<i64> = picked.iter().map(|(_, r)| to_i64(r.position)).collect();
    let rows = pool
        .query(
            c,
            SUMMARIZED_BY,
            &[(&id, Type::INT8), (&positions, Type::INT8_ARRAY)],
        )
        .await?;
    let mut by: HashMap<i64, String> = HashMap::new();
    for r in &rows {
        let (position, name): (i64, Option<String>) = (r.try_get(0)?, r.try_get(1)?);
        if let Some(name) = name {
            by.insert(position, name);
        }
    }
    let int4 = |n: u32| i32::try_from(n).unwrap_or(i32::MAX);
    let (mut calls, mut at, mut blocks, mut which) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for (i, (_, row)) in picked.iter().enumerate() {
        let Some(entry) = entries.get(&to_i64(row.position + 1)) else {
            return Ok(None);
        };
        if let Some(call) = item_at(entry, row.position, row.block, |_| None)
            .and_then(|i| (i.tool.is_none()).then_some(i.call).flatten())
        {
            calls.push(call);
            at.push(to_i64(row.position));
            blocks.push(int4(row.block));
            which.push(i32::try_from(i).unwrap_or(i32::MAX));
        }
    }
    let mut tools: HashMap<usize, String> = HashMap::new();
    if !calls.is_empty() {
        let rows = pool
            .query(
                c,
                TOOLS,
                &[
                    (&id, Type::INT8),
                    (&calls, Type::TEXT_ARRAY),
                    (&at, Type::INT8_ARRAY),
                    (&blocks, Type::INT4_ARRAY),
                    (&which, Type::INT4_ARRAY),
                ],
            )
            .await?;
        for r in &rows {
            let (i, tool): (i32, Option<String>) = (r.try_get(0)?, r.try_get(1)?);
            if let Some(tool) = tool {
                tools.insert(usize::try_from(i).unwrap_or(usize::MAX), tool);
            }
        }
    }
    let mut out = Vec::with_capacity(picked.len());
    for (i, (cand, row)) in picked.into_iter().enumerate() {
        let Some(entry) = entries.get(&to_i64(row.position + 1)) else {
            return Ok(None);
        };
        let tool = tools.remove(&i);
        let Some(item) = item_at(entry, row.position, row.block, |_| tool) else {
            return Ok(None);
        };
        out.push((cand, item, by.get(&to_i64(row.position)).cloned()));
    }
    Ok(Some(out))
}
