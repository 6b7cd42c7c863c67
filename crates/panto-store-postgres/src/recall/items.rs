//! Reading the items a recall picked back from the session's entries: each with the
//! compaction that summarized it and, for a tool result whose entry lacks its call, the tool
//! of the latest call with its id before it (which a fetch asks too).

use std::collections::HashMap;

use panto_model::{Entry, Item};
use panto_store::recall::{Candidate, DocRow, item_at};
use tokio_postgres::Client;
use tokio_postgres::types::{ToSql, Type};

use crate::attempt::Fail;
use crate::pool::Pool;
use crate::session::to_i64;

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

/// `($1 id, $2 positions)` → each position with the first compaction after it, or NULL.
const SUMMARIZED_BY: &str = "SELECT u.p, (SELECT c.name FROM panto_recall_compactions c
    WHERE c.session = $1::bigint AND c.position > u.p ORDER BY c.position LIMIT 1)
FROM unnest($2::int8[]) AS u (p)";

/// The tool of each `(call, position, block)` asked, by its index in `asked`: the tool of the
/// latest call with that id before that item (a tool result whose entry lacks its call), in
/// one round trip (none when nothing is asked).
pub(super) async fn tools_of(
    pool: &Pool,
    c: &Client,
    id: i64,
    asked: &[(String, u64, u32)],
) -> Result<HashMap<usize, String>, Fail> {
    let mut out = HashMap::new();
    if asked.is_empty() {
        return Ok(out);
    }
    let int4 = |n: usize| i32::try_from(n).unwrap_or(i32::MAX);
    let calls: Vec<&str> = asked.iter().map(|a| a.0.as_str()).collect();
    let at: Vec<i64> = asked.iter().map(|a| to_i64(a.1)).collect();
    let blocks: Vec<i32> = asked
        .iter()
        .map(|a| int4(usize::try_from(a.2).unwrap_or(usize::MAX)))
        .collect();
    let which: Vec<i32> = (0..asked.len()).map(int4).collect();
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
        if let (Some(tool), Ok(i)) = (tool, usize::try_from(i))
            && i < asked.len()
        {
            out.insert(i, tool);
        }
    }
    Ok(out)
}

/// The items of the candidates `picked`, each with the compaction that summarized it, read in
/// three round trips whatever their number (the entries, the compactions, the tools of
/// results whose entry lacks their call); `None` when the index names an item that is not
/// there.
pub(super) async fn items(
    pool: &Pool,
    c: &Client,
    id: i64,
    picked: Vec<(Candidate, DocRow)>,
) -> Result<Option<Vec<(Candidate, Item, Option<String>)>>, Fail> {
    let seqs: Vec<i64> = picked.iter().map(|(_, r)| to_i64(r.position + 1)).collect();
    let positions: Vec<i64> = picked.iter().map(|(_, r)| to_i64(r.position)).collect();
    // The entries and the compactions in one round trip (pipelined).
    let by_seq: [(&(dyn ToSql + Sync), Type); 2] = [(&id, Type::INT8), (&seqs, Type::INT8_ARRAY)];
    let by_position: [(&(dyn ToSql + Sync), Type); 2] =
        [(&id, Type::INT8), (&positions, Type::INT8_ARRAY)];
    let (rows, summarized) = tokio::join!(
        pool.query(c, ENTRIES, &by_seq),
        pool.query(c, SUMMARIZED_BY, &by_position)
    );
    let (rows, summarized) = (rows?, summarized?);
    let mut entries: HashMap<i64, Entry> = HashMap::new();
    for r in &rows {
        let (seq, body): (i64, &[u8]) = (r.try_get(0)?, r.try_get(1)?);
        let line = usize::try_from(seq).unwrap_or(usize::MAX);
        let Ok(entry) = panto_model::decode_line(body, line) else {
            return Ok(None);
        };
        entries.insert(seq, entry);
    }
    let mut by: HashMap<i64, String> = HashMap::new();
    for r in &summarized {
        let (position, name): (i64, Option<String>) = (r.try_get(0)?, r.try_get(1)?);
        if let Some(name) = name {
            by.insert(position, name);
        }
    }
    let mut asked = Vec::new();
    let mut which = Vec::new();
    for (i, (_, row)) in picked.iter().enumerate() {
        let Some(entry) = entries.get(&to_i64(row.position + 1)) else {
            return Ok(None);
        };
        if let Some(call) = item_at(entry, row.position, row.block, |_| None)
            .and_then(|i| (i.tool.is_none()).then_some(i.call).flatten())
        {
            asked.push((call, row.position, row.block));
            which.push(i);
        }
    }
    let mut tools: HashMap<usize, String> = tools_of(pool, c, id, &asked)
        .await?
        .into_iter()
        .map(|(k, tool)| (which[k], tool))
        .collect();
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
