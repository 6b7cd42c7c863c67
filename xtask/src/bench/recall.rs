//! The `recall` section: on each store (JSONL, SQLite, PostgreSQL when `PANTO_TEST_POSTGRES`
//! names a server), for the session of the `stores` section (1,000,000 messages), what a recall
//! costs: cold (`Store::recall`, which every store answers today by reading the whole history
//! and indexing it in memory), the index's build, a warm query on the index kept in memory (as
//! the `Driver` keeps it), the update after a one-message append (the entries after the index's
//! head read and indexed), and the index's size in memory against the session's.

use std::collections::HashSet;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use panto_model::{Entry, Message};
use panto_session::{JsonlStore, SessionOptions};
use panto_store::recall::{RecallIndex, recall_in};
use panto_store::{Head, RecallQuery, Record, Store, index_from};
use panto_store_postgres::PostgresStore;
use panto_store_sqlite::{SqliteOptions, SqliteStore};

use super::stores::{MESSAGES, fill, records};
use super::{Flags, bench_dir, fmt_duration, time};
use crate::table::Table;

/// The queries timed warm: words, an identifier, a quoted phrase.
const QUERIES: &[&str] = &[
    "failing test module",
    "toolu_123456",
    "src/module_42.rs",
    "\"compared the wrong fields\"",
];

/// One store's figures.
struct Row {
    store: &'static str,
    cold: Duration,
    build: Duration,
    warm: [Duration; 3],
    update: [Duration; 3],
    index_bytes: u64,
}

/// Measures recall on `session` of `store`.
fn measure<S: Store>(
    runtime: &tokio::runtime::Runtime,
    store: &S,
    session: &str,
    name: &'static str,
) -> Result<Row> {
    let started = Instant::now();
    let cold = runtime.block_on(store.recall(session, &RecallQuery::new(QUERIES[0])))?;
    let cold_time = started.elapsed();
    if cold.hits.is_empty() {
        bail!("{name}: the cold recall found nothing");
    }
    let started = Instant::now();
    let mut index = RecallIndex::new();
    let mut head = runtime.block_on(index_from(store, session, &mut index, Head::EMPTY))?;
    let build = started.elapsed();
    let none = HashSet::new();
    let mut q = 0;
    let (median, min, max, _) = time(3, 40, || {
        q += 1;
        let query = RecallQuery::new(QUERIES[q % QUERIES.len()]).with_context(true);
        Ok(recall_in(&index, &query, &none))
    })?;
    let warm = [median, min, max];
    let message = [Entry::Message(Message::user_text(
        "one more prompt about module 7",
    ))];
    let mut at = runtime.block_on(store.head(session))?;
    let mut updates = Vec::new();
    for _ in 0..20 {
        at = runtime.block_on(store.append(session, at, &message))?;
        let started = Instant::now();
        head = runtime.block_on(index_from(store, session, &mut index, head))?;
        updates.push(started.elapsed());
    }
    updates.sort();
    Ok(Row {
        store: name,
        cold: cold_time,
        build,
        warm,
        update: [
            updates[updates.len() / 2],
            updates[0],
            updates[updates.len() - 1],
        ],
        index_bytes: index.heap_bytes(),
    })
}

pub(super) fn recall(root: &Path, flags: &Flags) -> Result<()> {
    let messages = if flags.quick { MESSAGES / 10 } else { MESSAGES };
    let dir = bench_dir(root, "recall")?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let records: Vec<Record> = records(messages);
    let session_bytes: u64 = records.iter().map(|r| r.text.len() as u64 + 1).sum();
    println!(
        "The session of the `stores` section ({} entries, {:.0} MiB of JSONL). Cold: one \
         `Store::recall` (the default: the whole history read through `Store::read` and indexed \
         in memory). Build: the same index alone. Warm: a query on the index kept in memory \
         (median, min and max of 40 after 3; the queries rotate over {QUERIES:?}). Update: the \
         index brought up to date after a one-message append (median, min, max of 20). Index: \
         its size in memory (approximate: postings, terms, items and their texts).\n",
        records.len(),
        session_bytes as f64 / (1 << 20) as f64
    );
    let mut rows = Vec::new();
    let jsonl = JsonlStore::new(&dir, SessionOptions::default().fsync(false));
    let _ = std::fs::remove_file(dir.join("session.jsonl"));
    runtime.block_on(fill(&jsonl, "session.jsonl", &records, 100_000))?;
    rows.push(measure(&runtime, &jsonl, "session.jsonl", "JSONL")?);
    let _ = std::fs::remove_file(dir.join("session.jsonl"));
    let db = dir.join("session.sqlite3");
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", db.display()));
    }
    let sqlite = SqliteStore::open_blocking(&db, SqliteOptions::default().with_fsync(false))?;
    runtime.block_on(fill(&sqlite, "session", &records, 10_000))?;
    rows.push(measure(&runtime, &sqlite, "session", "SQLite")?);
    drop(sqlite);
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", db.display()));
    }
    if let Ok(url) = std::env::var(panto_store_postgres::testing::ENV)
        && !url.is_empty()
    {
        let store = runtime.block_on(PostgresStore::connect(&url))?;
        let session = format!("bench-recall-{}", std::process::id());
        runtime.block_on(fill(&store, &session, &records, 5_000))?;
        rows.push(measure(&runtime, &store, &session, "PostgreSQL")?);
    }
    let mut table = Table::new([
        "store",
        "cold recall",
        "index build",
        "warm query (median, min–max)",
        "update after an append (median, min–max)",
        "index in memory",
        "index / session",
    ]);
    for r in rows {
        table.row([
            r.store.to_owned(),
            fmt_duration(r.cold),
            fmt_duration(r.build),
            format!(
                "{} ({}–{})",
                fmt_duration(r.warm[0]),
                fmt_duration(r.warm[1]),
                fmt_duration(r.warm[2])
            ),
            format!(
                "{} ({}–{})",
                fmt_duration(r.update[0]),
                fmt_duration(r.update[1]),
                fmt_duration(r.update[2])
            ),
            format!("{:.0} MiB", r.index_bytes as f64 / (1 << 20) as f64),
            format!("{:.2}×", r.index_bytes as f64 / session_bytes as f64),
        ]);
    }
    println!("{table}");
    Ok(())
}
