//! The PostgreSQL store's fetch by id: migration 6's ids (for each item's own id and each
//! entry's id, the position of the first entry holding it) say where the id is, the items'
//! rows by position which entries around it hold the neighbours; only those entries are read.

use std::collections::HashMap;

use panto_model::{Entry, ItemKind, ItemRef, Items};
use panto_store::Fetched;
use panto_store::recall::{IdRow, Named, fetch_window};
use tokio_postgres::Client;
use tokio_postgres::types::Type;

use super::{STATE, TOOLS, catch_up, state_of, target};
use crate::attempt::Fail;
use crate::pool::Pool;
use crate::session::{to_i64, to_u64};
use crate::sql;

/// Migration 6: the ids, keyed by `md5(id)` (an id is any text, a btree entry is bounded) with
/// the id itself to compare; the items' rows by position; every index written before it
/// dropped (it has no ids; the next recall or fetch of a session builds it again).
pub(crate) const IDS: &str = "-- 6: the recall index's ids (see recall/fetch.rs)
CREATE TABLE panto_recall_ids (
    session bigint NOT NULL,
    key uuid NOT NULL,
    item boolean NOT NULL,
    id text NOT NULL,
    position bigint NOT NULL,
    PRIMARY KEY (session, key, item)
);
CREATE INDEX panto_recall_docs_position ON panto_recall_docs (session, position);
TRUNCATE panto_recall_state, panto_recall_postings, panto_recall_docs, panto_recall_calls,
    panto_recall_compactions, panto_recall_bounds;
";

/// `($1 id, $2 ids, $3 kinds, $4 positions)`: the first row of each id and kind is kept.
const PUT_IDS: &str = "INSERT INTO panto_recall_ids (session, key, item, id, position)
SELECT $1::bigint, md5(u.i)::uuid, u.k, u.i, u.p
FROM unnest($2::text[], $3::bool[], $4::int8[]) AS u (i, k, p)
ON CONFLICT DO NOTHING";

/// `($1 id, $2 the id)` → `(item, position)` of its rows.
const FIND: &str = "SELECT item, position FROM panto_recall_ids
WHERE session = $1::bigint AND key = md5($2::text)::uuid AND id = $2::text";

/// `($1 id)` → a row when the session has ids.
const ANY: &str = "SELECT 1 FROM panto_recall_ids WHERE session = $1::bigint LIMIT 1";

/// `($1 id, $2 position, $3 n)` → the positions with items: the one given when it has items,
/// the `n` before it and the `n` after it.
const AROUND: &str = "(SELECT DISTINCT position FROM panto_recall_docs
  WHERE session = $1::bigint AND position < $2::bigint ORDER BY position DESC LIMIT $3::bigint)
UNION ALL
(SELECT position FROM panto_recall_docs
  WHERE session = $1::bigint AND position = $2::bigint LIMIT 1)
UNION ALL
(SELECT DISTINCT position FROM panto_recall_docs
  WHERE session = $1::bigint AND position > $2::bigint ORDER BY position LIMIT $3::bigint)";

/// Adds `ids` to session `id`'s, keeping the first row of each id and kind.
pub(super) async fn write_ids(c: &Client, id: i64, ids: &[IdRow]) -> Result<(), Fail> {
    let mut seen = std::collections::HashSet::new();
    let first: Vec<&IdRow> = ids
        .iter()
        .filter(|r| seen.insert((r.id.as_str(), r.item)))
        .collect();
    let names: Vec<&str> = first.iter().map(|r| r.id.as_str()).collect();
    let kinds: Vec<bool> = first.iter().map(|r| r.item).collect();
    let positions: Vec<i64> = first.iter().map(|r| to_i64(r.position)).collect();
    c.query_typed(
        PUT_IDS,
        &[
            (&id, Type::INT8),
            (&names, Type::TEXT_ARRAY),
            (&kinds, Type::BOOL_ARRAY),
            (&positions, Type::INT8_ARRAY),
        ],
    )
    .await?;
    Ok(())
}

/// What the index answers of a fetch.
pub(crate) enum Answer {
    /// The items.
    Found(Fetched),
    /// Nothing has that id.
    None,
}

// Why long: the steps of one fetch (the id, the window, the entries, the tools of results
// whose call is before the window) in order over one connection, each using what the one
// before found; the shared step is `fetch_window` (panto_store::recall).
/// Fetches `wanted` with `context` neighbours from `session` with its index, caught up first;
/// `None` when the index cannot tell (the caller reads the history).
pub(crate) async fn fetch(
    pool: &Pool,
    c: &Client,
    session: &str,
    wanted: &str,
    context: usize,
) -> Result<Option<Answer>, Fail> {
    let Some((id, head)) = target(pool, c, session).await? else {
        return Ok(None);
    };
    let rows = pool.query(c, STATE, &[(&id, Type::INT8)]).await?;
    let state = match state_of(rows.first())? {
        Some(s) if to_i64(s.entries) == head => s,
        _ => catch_up(pool, c, id, head).await?,
    };
    let name = ItemRef::new(wanted);
    let name = name.as_str();
    let rows = pool
        .query(c, FIND, &[(&id, Type::INT8), (&name, Type::TEXT)])
        .await?;
    let (mut item, mut entry) = (None, None);
    for r in &rows {
        let (own, position): (bool, i64) = (r.try_get(0)?, r.try_get(1)?);
        *(if own { &mut item } else { &mut entry }) = Some(to_u64(position));
    }
    if item.is_none()
        && state.docs > 0
        && pool.query(c, ANY, &[(&id, Type::INT8)]).await?.is_empty()
    {
        return Ok(None);
    }
    let n = i64::try_from(context).unwrap_or(i64::MAX);
    let around = |p: u64| {
        let p = to_i64(p);
        async move {
            let rows = pool
                .query(
                    c,
                    AROUND,
                    &[(&id, Type::INT8), (&p, Type::INT8), (&n, Type::INT8)],
                )
                .await?;
            let mut out = Vec::with_capacity(rows.len());
            for r in &rows {
                out.push(to_u64(r.try_get::<_, i64>(0)?));
            }
            out.sort_unstable();
            Ok::<_, Fail>(out)
        }
    };
    // `@N` names the entry at N when it has items: its window tells.
    let at = panto_store::recall::at_position(name);
    let window_at = match at {
        Some(p) if item.is_none() => Some((p, around(p).await?)),
        _ => None,
    };
    let has_items = |p: u64| {
        window_at
            .as_ref()
            .is_some_and(|(q, w)| *q == p && w.contains(&p))
    };
    let Some(named) = Named::find(name, item, entry, has_items) else {
        return Ok(Some(Answer::None));
    };
    let expect = match window_at {
        Some((p, w)) if p == named.position() => w,
        _ => around(named.position()).await?,
    };
    if !expect.contains(&named.position()) {
        return Ok(None);
    }
    let (first, last) = (expect[0], expect[expect.len() - 1]);
    let (from, to) = (to_i64(first + 1), to_i64(last + 1));
    let rows = pool
        .query(
            c,
            sql::RANGE,
            &[(&id, Type::INT8), (&from, Type::INT8), (&to, Type::INT8)],
        )
        .await?;
    let mut entries: Vec<Entry> = Vec::with_capacity(rows.len());
    for (i, r) in rows.iter().enumerate() {
        let (seq, body): (i64, &[u8]) = (r.try_get(0)?, r.try_get(1)?);
        if seq != from + i as i64 {
            return Ok(None);
        }
        let line = usize::try_from(seq).unwrap_or(usize::MAX);
        let Ok(entry) = panto_model::decode_line(body, line) else {
            return Ok(None);
        };
        entries.push(entry);
    }
    let tools = tools_before(pool, c, id, first, &entries).await?;
    Ok(fetch_window(
        first,
        &entries,
        &expect,
        wanted,
        context,
        named,
        |call, p, b| tools.get(&(call.to_owned(), p, b)).cloned(),
    )
    .map(Answer::Found))
}

/// The tool of each result among `entries` (from position `first`) whose call is not among
/// them before it, by call id, position and block: one round trip.
async fn tools_before(
    pool: &Pool,
    c: &Client,
    id: i64,
    first: u64,
    entries: &[Entry],
) -> Result<HashMap<(String, u64, u32), String>, Fail> {
    let mut walk = Items::new();
    let (mut calls, mut at, mut blocks, mut which) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut keys = Vec::new();
    for (i, entry) in entries.iter().enumerate() {
        let position = first + i as u64;
        for item in walk.of(position, entry) {
            if item.kind == ItemKind::ToolResult
                && item.tool.is_none()
                && let Some(call) = item.call
            {
                let block = u32::try_from(item.block).unwrap_or(u32::MAX);
                which.push(i32::try_from(keys.len()).unwrap_or(i32::MAX));
                calls.push(call.clone());
                at.push(to_i64(position));
                blocks.push(i32::try_from(block).unwrap_or(i32::MAX));
                keys.push((call, position, block));
            }
        }
    }
    let mut out = HashMap::new();
    if keys.is_empty() {
        return Ok(out);
    }
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
        if let (Some(tool), Some(key)) = (tool, keys.get(usize::try_from(i).unwrap_or(usize::MAX)))
        {
            out.insert(key.clone(), tool);
        }
    }
    Ok(out)
}
