//! Writing the rows an append adds to the recall index (`panto_store::recall::Update`).

use std::collections::HashMap;

use panto_store::recall::{Block, Update, join_bounds};
use tokio_postgres::Client;
use tokio_postgres::types::Type;

use crate::attempt::Fail;
use crate::session::to_i64;

const PUT_POSTINGS: &str = "INSERT INTO panto_recall_postings (session, term, part, data)
SELECT $1::bigint, md5(u.t)::uuid, u.p, u.d
FROM unnest($2::text[], $3::int4[], $4::bytea[]) AS u (t, p, d)
ON CONFLICT (session, term, part)
DO UPDATE SET data = panto_recall_postings.data || excluded.data";

/// `($1 id, $2 terms, $3 parts)` → the bounds the index holds of those terms and ranges.
const GET_BOUNDS: &str = "SELECT u.i, b.count, b.front
FROM unnest($2::text[], $3::int4[], $4::int4[]) AS u (t, p, i)
JOIN panto_recall_bounds b ON b.session = $1::bigint AND b.term = md5(u.t)::uuid AND b.part = u.p";

const PUT_BOUNDS: &str = "INSERT INTO panto_recall_bounds (session, term, part, count, front)
SELECT $1::bigint, md5(u.t)::uuid, u.p, u.n, u.f
FROM unnest($2::text[], $3::int4[], $4::int4[], $5::bytea[]) AS u (t, p, n, f)
ON CONFLICT (session, term, part)
DO UPDATE SET count = excluded.count, front = excluded.front";

const PUT_DOCS: &str = "INSERT INTO panto_recall_docs (session, doc, position, block, fingerprint)
SELECT $1::bigint, u.d, u.p, u.b, u.f
FROM unnest($2::int4[], $3::int8[], $4::int4[], $5::int8[]) AS u (d, p, b, f)";

const PUT_CALLS: &str = "INSERT INTO panto_recall_calls (session, call, position, block, tool)
SELECT $1::bigint, u.c, u.p, u.b, u.t
FROM unnest($2::text[], $3::int8[], $4::int4[], $5::text[]) AS u (c, p, b, t)
ON CONFLICT DO NOTHING";

const PUT_COMPACTIONS: &str = "INSERT INTO panto_recall_compactions (session, position, name)
SELECT $1::bigint, u.p, u.n FROM unnest($2::int8[], $3::text[]) AS u (p, n)
ON CONFLICT DO NOTHING";

const PUT_STATE: &str = "INSERT INTO panto_recall_state (session, entries, docs, total_len)
VALUES ($1::bigint, $2::bigint, $3::bigint, $4::bigint)
ON CONFLICT (session) DO UPDATE
SET entries = excluded.entries, docs = excluded.docs, total_len = excluded.total_len";

/// Writes `update`'s rows after what session `id`'s index holds, and its state.
pub(super) async fn write(c: &Client, id: i64, update: &mut Update) -> Result<(), Fail> {
    let blocks = update.blocks();
    let terms: Vec<&str> = blocks.iter().map(|b| b.0.as_str()).collect();
    let parts: Vec<i32> = blocks
        .iter()
        .map(|b| i32::try_from(b.1.meta.range).unwrap_or(i32::MAX))
        .collect();
    let data: Vec<&[u8]> = blocks.iter().map(|b| b.1.data.as_slice()).collect();
    write_bounds(c, id, &blocks, &terms, &parts).await?;
    c.query_typed(
        PUT_POSTINGS,
        &[
            (&id, Type::INT8),
            (&terms, Type::TEXT_ARRAY),
            (&parts, Type::INT4_ARRAY),
            (&data, Type::BYTEA_ARRAY),
        ],
    )
    .await?;
    let int4 = |n: u32| i32::try_from(n).unwrap_or(i32::MAX);
    let docs: Vec<i32> = update.docs.iter().map(|d| int4(d.doc)).collect();
    let positions: Vec<i64> = update.docs.iter().map(|d| to_i64(d.position)).collect();
    let doc_blocks: Vec<i32> = update.docs.iter().map(|d| int4(d.block)).collect();
    let prints: Vec<i64> = update
        .docs
        .iter()
        .map(|d| d.fingerprint.cast_signed())
        .collect();
    c.query_typed(
        PUT_DOCS,
        &[
            (&id, Type::INT8),
            (&docs, Type::INT4_ARRAY),
            (&positions, Type::INT8_ARRAY),
            (&doc_blocks, Type::INT4_ARRAY),
            (&prints, Type::INT8_ARRAY),
        ],
    )
    .await?;
    let calls: Vec<&str> = update.calls.iter().map(|c| c.call.as_str()).collect();
    let call_positions: Vec<i64> = update.calls.iter().map(|c| to_i64(c.position)).collect();
    let call_blocks: Vec<i32> = update.calls.iter().map(|c| int4(c.block)).collect();
    let tools: Vec<&str> = update.calls.iter().map(|c| c.tool.as_str()).collect();
    c.query_typed(
        PUT_CALLS,
        &[
            (&id, Type::INT8),
            (&calls, Type::TEXT_ARRAY),
            (&call_positions, Type::INT8_ARRAY),
            (&call_blocks, Type::INT4_ARRAY),
            (&tools, Type::TEXT_ARRAY),
        ],
    )
    .await?;
    let cpos: Vec<i64> = update.compactions.iter().map(|c| to_i64(c.0)).collect();
    let names: Vec<&str> = update.compactions.iter().map(|c| c.1.as_str()).collect();
    c.query_typed(
        PUT_COMPACTIONS,
        &[
            (&id, Type::INT8),
            (&cpos, Type::INT8_ARRAY),
            (&names, Type::TEXT_ARRAY),
        ],
    )
    .await?;
    let s = update.state;
    let (entries, n, total) = (to_i64(s.entries), i64::from(s.docs), to_i64(s.total_len));
    c.query_typed(
        PUT_STATE,
        &[
            (&id, Type::INT8),
            (&entries, Type::INT8),
            (&n, Type::INT8),
            (&total, Type::INT8),
        ],
    )
    .await?;
    super::fetch::write_ids(c, id, &update.ids).await?;
    update.docs.clear();
    update.calls.clear();
    update.compactions.clear();
    update.ids.clear();
    Ok(())
}

/// Writes the bounds of `blocks` (of `terms` and `parts`, the same order): what the index
/// holds of each term and range, joined with the new postings, in two round trips.
async fn write_bounds(
    c: &Client,
    id: i64,
    blocks: &[(String, Block)],
    terms: &[&str],
    parts: &[i32],
) -> Result<(), Fail> {
    // The bounds: what the index holds of each term and range, joined with the new postings.
    let which: Vec<i32> = (0..blocks.len())
        .map(|i| i32::try_from(i).unwrap_or(i32::MAX))
        .collect();
    let rows = c
        .query_typed(
            GET_BOUNDS,
            &[
                (&id, Type::INT8),
                (&terms, Type::TEXT_ARRAY),
                (&parts, Type::INT4_ARRAY),
                (&which, Type::INT4_ARRAY),
            ],
        )
        .await?;
    let mut before: HashMap<usize, (i32, Vec<u8>)> = HashMap::new();
    for r in &rows {
        let (i, count, front): (i32, i32, Vec<u8>) = (r.try_get(0)?, r.try_get(1)?, r.try_get(2)?);
        before.insert(usize::try_from(i).unwrap_or(usize::MAX), (count, front));
    }
    let (mut counts, mut fronts) = (Vec::with_capacity(blocks.len()), Vec::new());
    for (i, (_, block)) in blocks.iter().enumerate() {
        let (count, front) = before.remove(&i).unwrap_or_default();
        let added = i32::try_from(block.meta.count).unwrap_or(i32::MAX);
        counts.push(count.saturating_add(added));
        // Bytes the index wrote itself: they decode (else the next recall finds it corrupt).
        fronts.push(join_bounds(&front, block).unwrap_or_default());
    }
    c.query_typed(
        PUT_BOUNDS,
        &[
            (&id, Type::INT8),
            (&terms, Type::TEXT_ARRAY),
            (&parts, Type::INT4_ARRAY),
            (&counts, Type::INT4_ARRAY),
            (&fronts, Type::BYTEA_ARRAY),
        ],
    )
    .await?;
    Ok(())
}
