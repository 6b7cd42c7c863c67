//! The `stores` section: for each store (JSONL, SQLite, PostgreSQL), the effective-context
//! load of a session of 1,000,000 messages whose latest compaction is near the end, and the
//! latency of a one-message append, through the `panto_store::Store` trait; PostgreSQL through
//! its pool, plain and with TLS (which must stay within 1.5x of plain); and `panto import` of
//! the session's file into each store, with its throughput and peak memory (`imports.rs`).
//!
//! PostgreSQL is measured when `PANTO_TEST_POSTGRES` names a server (`.ci/postgres run cargo
//! xtask bench stores` starts one, and `PANTO_TEST_POSTGRES_TLS` for TLS); its tables go into a
//! schema of their own, dropped after (kept for a look with `PANTO_BENCH_KEEP=1`).

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use panto_model::{Entry, Message};
use panto_session::{JsonlStore, SessionOptions};
use panto_store::{Head, Record, Store};
use panto_store_postgres::PostgresStore;
use panto_store_sqlite::{SqliteOptions, SqliteStore};

use super::imports::{self, Import};
use super::process::Runner;
use super::{Flags, bench_dir, compaction, fmt_bytes, fmt_duration, round, time};
use crate::table::Table;

/// The messages of the generated session (with `--quick`: 100,000).
pub(super) const MESSAGES: usize = 1_000_000;

/// Rounds of four messages after the latest compaction (which keeps two rounds): 1 + 8 + 200
/// messages in the effective context, as the `session` section.
const AFTER: usize = 50;

/// The records of a session of about `messages` messages: rounds with a compaction every 200
/// rounds, then the latest compaction and [`AFTER`] rounds.
pub(super) fn records(messages: usize) -> Vec<Record> {
    let mut out = Vec::with_capacity(messages + messages / 100);
    let mut i = 0;
    let tail_messages = 9 + 4 * AFTER;
    while out.len() + tail_messages < messages {
        let r = round(i);
        out.extend(r.iter().map(Record::encode));
        if i % 200 == 199 {
            out.extend(
                compaction(&format!("old{i}"), &r)
                    .iter()
                    .map(Record::encode),
            );
        }
        i += 1;
    }
    let mut kept = round(1_000_000_000);
    kept.extend(round(1_000_000_001));
    out.extend(compaction("latest", &kept).iter().map(Record::encode));
    for j in 0..AFTER {
        out.extend(round(2_000_000_000 + j).iter().map(Record::encode));
    }
    out
}

/// One store's figures.
struct Row {
    store: String,
    entries: u64,
    fill: Duration,
    load: [Duration; 3],
    append: [Duration; 3],
    durable: &'static str,
}

/// Fills `session` of `store` with `records`, `chunk` records per append.
pub(super) async fn fill<S: Store>(
    store: &S,
    session: &str,
    records: &[Record],
    chunk: usize,
) -> Result<Head> {
    let mut head = Head::EMPTY;
    for part in records.chunks(chunk) {
        head = store.append_records(session, head, part).await?;
    }
    Ok(head)
}

/// Times the load: median, min and max of 50 after 5 warm-up runs, checking the context.
fn load_times<S: Store>(
    runtime: &tokio::runtime::Runtime,
    store: &S,
    session: &str,
) -> Result<[Duration; 3]> {
    let (median, min, max, loaded) = time(5, 50, || Ok(runtime.block_on(store.load(session))?))?;
    if loaded.context.summary().is_none() || loaded.context.messages.len() != 209 {
        bail!(
            "{}: unexpected context: {} messages",
            store.location(),
            loaded.context.messages.len()
        );
    }
    Ok([median, min, max])
}

/// Times a one-message append, conditional on the head: median, min and max of 200 after 5.
fn append_times<S: Store>(
    runtime: &tokio::runtime::Runtime,
    store: &S,
    session: &str,
) -> Result<[Duration; 3]> {
    let message = [Entry::Message(Message::user_text("one more prompt"))];
    let mut head = runtime.block_on(store.head(session))?;
    let (median, min, max, _) = time(5, 200, || {
        head = runtime.block_on(store.append(session, head, &message))?;
        Ok(())
    })?;
    Ok([median, min, max])
}

pub(super) fn stores(root: &Path, flags: &Flags) -> Result<()> {
    let messages = if flags.quick { MESSAGES / 10 } else { MESSAGES };
    let dir = bench_dir(root, "stores")?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let records = records(messages);
    let count = records.len() as u64;
    let compactions = records
        .iter()
        .filter(|r| r.kind == panto_store::RecordKind::Compaction)
        .count();
    println!(
        "A session of {count} entries ({} messages and {compactions} compactions; the latest \
         compaction keeps 8 messages and 200 follow it, so the effective context is 209 \
         messages), written through `Store::append_records` in chunks, then loaded through \
         `Store::load`: median, min and max of 50 loads after 5 warm-up runs (files in the page \
         cache, the database warm). Append: one message, conditional on the head, median of \
         200 after 5.\n",
        records.len() - compactions
    );
    let mut rows = Vec::new();

    // JSONL: the session file, written the way an import writes it.
    let path = dir.join("session.jsonl");
    let _ = std::fs::remove_file(&path);
    let jsonl = JsonlStore::new(&dir, SessionOptions::default().fsync(false));
    let started = std::time::Instant::now();
    runtime.block_on(fill(&jsonl, "session.jsonl", &records, 100_000))?;
    let filled = started.elapsed();
    let load = load_times(&runtime, &jsonl, "session.jsonl")?;
    for fsync in [false, true] {
        let jsonl = JsonlStore::new(&dir, SessionOptions::default().fsync(fsync));
        rows.push(Row {
            store: "JSONL".to_owned(),
            entries: count,
            fill: if fsync { Duration::ZERO } else { filled },
            load,
            append: append_times(&runtime, &jsonl, "session.jsonl")?,
            durable: if fsync { "fsync" } else { "no fsync" },
        });
    }
    std::fs::remove_file(dir.join("session.jsonl.lock")).ok();

    // SQLite: one file, WAL.
    let db = dir.join("session.sqlite3");
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", db.display()));
    }
    let sqlite = SqliteStore::open_blocking(&db, SqliteOptions::default().with_fsync(false))?;
    let started = std::time::Instant::now();
    runtime.block_on(fill(&sqlite, "session", &records, 10_000))?;
    let filled = started.elapsed();
    let load = load_times(&runtime, &sqlite, "session")?;
    drop(sqlite);
    for fsync in [false, true] {
        let options = SqliteOptions::default().with_fsync(fsync);
        let sqlite = SqliteStore::open_blocking(&db, options)?;
        rows.push(Row {
            store: "SQLite".to_owned(),
            entries: count,
            fill: if fsync { Duration::ZERO } else { filled },
            load,
            append: append_times(&runtime, &sqlite, "session")?,
            durable: if fsync {
                "synchronous = FULL"
            } else {
                "synchronous = NORMAL"
            },
        });
    }
    let size = std::fs::metadata(&db).map_or(0, |m| m.len())
        + std::fs::metadata(format!("{}-wal", db.display())).map_or(0, |m| m.len());
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", db.display()));
    }

    // PostgreSQL, when a server is named: plain, then with TLS on the same data.
    let tls = std::env::var(panto_store_postgres::testing::TLS_ENV)
        .ok()
        .filter(|u| !u.is_empty());
    match std::env::var(panto_store_postgres::testing::ENV) {
        Ok(url) if !url.is_empty() => {
            for (i, row) in runtime
                .block_on(postgres(&url, tls.as_deref(), &records))?
                .into_iter()
                .enumerate()
            {
                rows.push(Row {
                    store: if i == 0 {
                        "PostgreSQL".to_owned()
                    } else {
                        "PostgreSQL, TLS".to_owned()
                    },
                    entries: count,
                    fill: if i == 0 { row.0 } else { Duration::ZERO },
                    load: row.1,
                    append: row.2,
                    durable: "server default (synchronous_commit on), through the pool",
                });
            }
        }
        _ => println!(
            "PostgreSQL: not measured ({} is not set; `.ci/postgres run cargo xtask bench stores` starts a server).\n",
            panto_store_postgres::testing::ENV
        ),
    }

    let mut t = Table::new([
        "store",
        "entries",
        "written in",
        "load median",
        "load min",
        "load max",
        "append median",
        "append min",
        "append max",
        "durability",
    ])
    .right(1..9);
    for r in &rows {
        let [lm, ln, lx] = r.load.map(fmt_duration);
        let [am, an, ax] = r.append.map(fmt_duration);
        let fill = if r.fill.is_zero() {
            "(same)".to_owned()
        } else {
            fmt_duration(r.fill)
        };
        t.row([
            r.store.clone(),
            r.entries.to_string(),
            fill,
            lm,
            ln,
            lx,
            am,
            an,
            ax,
            r.durable.to_owned(),
        ]);
    }
    print!("{t}");
    println!(
        "\nThe SQLite file held {:.1} MiB.",
        size as f64 / (1024.0 * 1024.0)
    );

    let imported = import_rows(root, &dir, &path, count, &runtime)?;
    std::fs::remove_file(&path).ok();
    println!(
        "\n`panto import` (release) of the session's JSONL file{} into each store, one process \
         each; peak memory is the process's resident high-water mark:\n",
        match std::env::var("PANTO_BENCH_IMPORT_GIB") {
            Ok(gib) => format!(" (replaced by a generated file of {gib} GiB)"),
            Err(_) => String::new(),
        }
    );
    imports::print(&imported);

    let jsonl = rows
        .iter()
        .filter(|r| r.store == "JSONL")
        .map(|r| r.load[0])
        .min()
        .context("no JSONL row")?;
    println!("\nTargets:\n");
    for r in rows
        .iter()
        .filter(|r| r.store != "JSONL" && !r.fill.is_zero())
    {
        let median = r.load[0];
        super::scale::verdict(
            median <= jsonl * 10 && median < Duration::from_millis(50),
            &format!(
                "{} load of the {count}-entry session within 10x of JSONL's ({}) and under 50 ms: {} ({:.1}x)",
                r.store,
                fmt_duration(jsonl),
                fmt_duration(median),
                median.as_secs_f64() / jsonl.as_secs_f64()
            ),
        );
    }
    verdicts(&rows, &imported);
    Ok(())
}

/// TLS within 1.5x of plain; imports in bounded memory.
fn verdicts(rows: &[Row], imported: &[Import]) {
    let plain = rows.iter().find(|r| r.store == "PostgreSQL");
    let tls = rows.iter().find(|r| r.store == "PostgreSQL, TLS");
    if let (Some(plain), Some(tls)) = (plain, tls) {
        for (what, p, t) in [
            ("append", plain.append[0], tls.append[0]),
            ("load", plain.load[0], tls.load[0]),
        ] {
            super::scale::verdict(
                t.as_secs_f64() <= p.as_secs_f64() * 1.5,
                &format!(
                    "PostgreSQL {what} with TLS within 1.5x of plain: {} against {} ({:.2}x)",
                    fmt_duration(t),
                    fmt_duration(p),
                    t.as_secs_f64() / p.as_secs_f64()
                ),
            );
        }
    }
    for i in imported {
        super::scale::verdict(
            i.peak < 64 << 20,
            &format!(
                "{} import of {} in bounded memory (under 64 MiB): {}",
                i.store,
                fmt_bytes(i.bytes),
                fmt_bytes(i.peak)
            ),
        );
    }
}

/// `panto import` of the session's file (or of a generated one) into each store.
fn import_rows(
    root: &Path,
    dir: &Path,
    session: &Path,
    entries: u64,
    runtime: &tokio::runtime::Runtime,
) -> Result<Vec<Import>> {
    let runner = Runner::new(root, dir)?;
    let (file, entries) = match std::env::var("PANTO_BENCH_IMPORT_GIB") {
        Ok(gib) => {
            let file = dir.join("import.jsonl");
            let gib: u64 = gib
                .parse()
                .context("PANTO_BENCH_IMPORT_GIB is a number of GiB")?;
            let n = imports::generate(&file, gib)?;
            (file, n)
        }
        Err(_) => (session.to_path_buf(), usize::try_from(entries).unwrap_or(0)),
    };
    let folder = dir.join("imported");
    let _ = std::fs::remove_dir_all(&folder);
    std::fs::create_dir_all(&folder)?;
    let db = dir.join("imported.sqlite3");
    let mut stores = vec![
        ("JSONL", format!("jsonl:{}", folder.display())),
        ("SQLite", format!("sqlite:{}", db.display())),
    ];
    let postgres = std::env::var(panto_store_postgres::testing::ENV)
        .ok()
        .filter(|u| !u.is_empty());
    let schema = format!("panto_bench_import_{}", std::process::id());
    if let Some(url) = &postgres {
        runtime.block_on(async {
            panto_store_postgres::testing::client(url)
                .await
                .batch_execute(&format!("CREATE SCHEMA {schema}"))
                .await
        })?;
        stores.push(("PostgreSQL", scoped(url, &schema)));
    }
    let result = imports::run(&runner, &file, entries, &stores);
    let _ = std::fs::remove_dir_all(&folder);
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", db.display()));
    }
    if file != session {
        let _ = std::fs::remove_file(&file);
    }
    if let Some(url) = &postgres {
        runtime.block_on(async {
            panto_store_postgres::testing::client(url)
                .await
                .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
                .await
        })?;
    }
    result
}

/// Runs `measure` on a store connected through `url`, on a thread and a runtime of its own
/// (`measure` blocks on the runtime).
fn on_thread<T: Send>(
    url: &str,
    measure: impl FnOnce(&tokio::runtime::Runtime, &PostgresStore) -> Result<T> + Send,
) -> Result<T> {
    std::thread::scope(|s| {
        s.spawn(|| {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let store = runtime.block_on(PostgresStore::connect(url))?;
            measure(&runtime, &store)
        })
        .join()
        .map_err(|_| anyhow::anyhow!("the PostgreSQL measurement panicked"))?
    })
}

/// `url` with panto's tables in `schema`.
fn scoped(url: &str, schema: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}options=-csearch_path%3D{schema}")
}

/// Fills, loads and appends on PostgreSQL in a schema of its own, dropped afterwards: through
/// `url`, then (the same data) through `tls` when given. Returns the fill time (of the first)
/// and each one's load and append times.
async fn postgres(
    url: &str,
    tls: Option<&str>,
    records: &[Record],
) -> Result<Vec<(Duration, [Duration; 3], [Duration; 3])>> {
    let schema = format!("panto_bench_{}", std::process::id());
    let client = panto_store_postgres::testing::client(url).await;
    client
        .batch_execute(&format!(
            "DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}"
        ))
        .await?;
    let store = PostgresStore::connect(&scoped(url, &schema)).await?;
    let started = std::time::Instant::now();
    fill(&store, "session", records, 5_000).await?;
    let filled = started.elapsed();
    drop(store);
    client
        .batch_execute(&format!("ANALYZE {schema}.panto_entries"))
        .await?;
    let urls: Vec<String> = std::iter::once(url)
        .chain(tls)
        .map(|u| scoped(u, &schema))
        .collect();
    // Every load first, then every append: an append lengthens the context a later load checks.
    let mut loads = Vec::new();
    for url in &urls {
        loads.push(on_thread(url, |runtime, store| {
            load_times(runtime, store, "session")
        })?);
    }
    let mut out = Vec::new();
    for (url, load) in urls.iter().zip(loads) {
        let append = on_thread(url, |runtime, store| {
            append_times(runtime, store, "session")
        })?;
        out.push((filled, load, append));
    }
    if std::env::var_os("PANTO_BENCH_KEEP").is_none() {
        client
            .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
            .await?;
    }
    Ok(out)
}
