//! The `recall` section: on each store (JSONL, SQLite, PostgreSQL when `PANTO_TEST_POSTGRES`
//! names a server), for the session of the `stores` section (1,000,000 messages), what a recall
//! costs through `Store::recall`, the path `panto recall` takes: the first recall (which builds
//! the JSONL store's sidecar index; the SQLite store's was written by the appends that filled
//! the session), the index's build from scratch, warm queries, a one-message append and the
//! recall after it (which for the JSONL store reads the sidecar the append updated), and the
//! index's size against the session's. Every query's hits are checked against what the
//! session holds.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use panto_model::{Entry, Message};
use panto_session::{JsonlStore, SessionOptions};
use panto_store::{RecallQuery, Recalled, Record, Store};
use panto_store_postgres::PostgresStore;
use panto_store_sqlite::{SqliteOptions, SqliteStore};

use super::fetch::{self, Fetches};
use super::stores::{MESSAGES, fill, records};
use super::{Flags, bench_dir, fmt_duration, time};
use crate::table::Table;

/// The queries timed warm: words, an identifier, a path, a quoted phrase; each with the id its
/// first hit must have, or `None` when any hit will do.
const QUERIES: &[(&str, Option<&str>)] = &[
    ("failing test module", None),
    ("toolu_12345", None),
    ("src/module_42.rs", None),
    ("\"compared the wrong fields\"", None),
    ("Fixed round 7777", Some("b7777#0")),
];

/// One store's figures.
#[derive(Debug)]
struct Row {
    store: &'static str,
    first: Duration,
    build: Option<Duration>,
    warm: [Duration; 3],
    worst: (&'static str, Duration),
    /// Each query's median, fastest and slowest, in the order of [`QUERIES`].
    queries: Vec<[Duration; 3]>,
    append: [Duration; 3],
    after: [Duration; 3],
    index_bytes: Option<u64>,
    /// Fetches by id and the recall tool's answers (`super::fetch`).
    fetch: Fetches,
}

/// What the store's index can say of itself: rebuild it, and its size.
trait Indexed: Store {
    async fn rebuild(&self, session: &str) -> Result<Option<Duration>>;
    async fn index_bytes(&self, session: &str) -> Result<Option<u64>>;
}

impl Indexed for JsonlStore {
    async fn rebuild(&self, session: &str) -> Result<Option<Duration>> {
        let started = Instant::now();
        self.rebuild_recall_index(session).await?;
        Ok(Some(started.elapsed()))
    }
    async fn index_bytes(&self, session: &str) -> Result<Option<u64>> {
        Ok(Some(self.recall_index_bytes(session)))
    }
}

impl Indexed for SqliteStore {
    async fn rebuild(&self, session: &str) -> Result<Option<Duration>> {
        let started = Instant::now();
        self.rebuild_recall_index(session).await?;
        Ok(Some(started.elapsed()))
    }
    async fn index_bytes(&self, session: &str) -> Result<Option<u64>> {
        Ok(Some(self.recall_index_bytes(session).await?))
    }
}

impl Indexed for PostgresStore {
    async fn rebuild(&self, session: &str) -> Result<Option<Duration>> {
        let started = Instant::now();
        self.rebuild_recall_index(session).await?;
        Ok(Some(started.elapsed()))
    }
    async fn index_bytes(&self, session: &str) -> Result<Option<u64>> {
        Ok(Some(self.recall_index_bytes(session).await?))
    }
}

/// Checks a query's hits.
fn check(name: &str, query: &str, want: Option<&str>, found: &Recalled) -> Result<()> {
    let Some(first) = found.hits.first() else {
        bail!("{name}: recall of {query:?} found nothing");
    };
    if let Some(want) = want
        && first.id != want
    {
        bail!(
            "{name}: recall of {query:?} found {} first, not {want}",
            first.id
        );
    }
    Ok(())
}

/// Measures recall on `session` of `store`.
fn measure<S: Indexed>(
    runtime: &tokio::runtime::Runtime,
    store: &S,
    session: &str,
    name: &'static str,
    rounds: usize,
) -> Result<Row> {
    let started = Instant::now();
    let found = runtime.block_on(store.recall(session, &RecallQuery::new(QUERIES[0].0)))?;
    let first = started.elapsed();
    check(name, QUERIES[0].0, None, &found)?;
    let build = runtime.block_on(store.rebuild(session))?;
    let mut worst = ("", Duration::ZERO);
    let mut all = Vec::new();
    let mut queries = Vec::new();
    for &(q, want) in QUERIES {
        let (median, min, max, found) = time(2, 10, || {
            Ok(runtime.block_on(store.recall(session, &RecallQuery::new(q)))?)
        })?;
        check(name, q, want, &found)?;
        if median > worst.1 {
            worst = (q, median);
        }
        all.push(median);
        queries.push([median, min, max]);
    }
    all.sort();
    let warm = [all[all.len() / 2], all[0], all[all.len() - 1]];
    let message = [Entry::Message(Message::user_text(
        "one more prompt about module 7 and the quokka",
    ))];
    let mut at = runtime.block_on(store.head(session))?;
    let mut appends = Vec::new();
    let mut afters = Vec::new();
    for _ in 0..10 {
        let started = Instant::now();
        at = runtime.block_on(store.append(session, at, &message))?;
        appends.push(started.elapsed());
        let started = Instant::now();
        // The message just appended is in the effective context.
        let query = RecallQuery::new("quokka").with_context(true);
        let found = runtime.block_on(store.recall(session, &query))?;
        afters.push(started.elapsed());
        check(name, "quokka", None, &found)?;
    }
    let texts: Vec<&str> = QUERIES.iter().map(|q| q.0).collect();
    let fetch = fetch::measure(runtime, store, session, rounds, &texts)?;
    let spread = |mut v: Vec<Duration>| {
        v.sort();
        [v[v.len() / 2], v[0], v[v.len() - 1]]
    };
    Ok(Row {
        store: name,
        first,
        build,
        warm,
        worst,
        queries,
        append: spread(appends),
        after: spread(afters),
        index_bytes: runtime.block_on(store.index_bytes(session))?,
        fetch,
    })
}

fn three(d: [Duration; 3]) -> String {
    format!(
        "{} ({}–{})",
        fmt_duration(d[0]),
        fmt_duration(d[1]),
        fmt_duration(d[2])
    )
}

pub(super) fn recall(root: &Path, flags: &Flags) -> Result<()> {
    let messages = if flags.quick { MESSAGES / 10 } else { MESSAGES };
    let dir = bench_dir(root, "recall")?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let records: Vec<Record> = records(messages);
    // The generated session's rounds of four messages (a compaction of 5 records every 200).
    let rounds = messages / 4 * 200 / 201;
    let session_bytes: u64 = records.iter().map(|r| r.text.len() as u64 + 1).sum();
    println!(
        "The session of the `stores` section ({} entries, {:.0} MiB of JSONL), through \
         `Store::recall` (what `panto recall` runs: the effective context loaded, the store's \
         index caught up and read). First: the first recall after the session was filled (the \
         JSONL store builds its sidecar then; the SQLite store's index was written by the \
         appends). Build: the index dropped and built again from the history. Warm: the median \
         of 10 recalls (after 2) of each query of {QUERIES:?}, then the median, fastest and \
         slowest of those medians, and the slowest query. Append: a one-message append, which \
         the store indexes at once; after: the recall that follows it (median, min, max of \
         10). Index: its bytes (the JSONL sidecar's file; the SQLite tables' columns, page \
         overhead aside) against the session's JSONL bytes.\n",
        records.len(),
        session_bytes as f64 / (1 << 20) as f64
    );
    let mut rows = Vec::new();
    let jsonl = JsonlStore::new(&dir, SessionOptions::default().fsync(false));
    let remove = || {
        for f in [
            "session.jsonl",
            "session.jsonl.recall.sqlite3",
            "session.jsonl.recall.sqlite3-wal",
            "session.jsonl.recall.sqlite3-shm",
        ] {
            let _ = std::fs::remove_file(dir.join(f));
        }
    };
    remove();
    runtime.block_on(fill(&jsonl, "session.jsonl", &records, 100_000))?;
    rows.push(measure(&runtime, &jsonl, "session.jsonl", "JSONL", rounds)?);
    // Each store's figures as they come, so a later store's failure loses none.
    eprintln!("{:?}", rows.last());
    if !flags.keep {
        remove();
    }
    let db = dir.join("session.sqlite3");
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", db.display()));
    }
    let sqlite = SqliteStore::open_blocking(&db, SqliteOptions::default().with_fsync(false))?;
    runtime.block_on(fill(&sqlite, "session", &records, 10_000))?;
    rows.push(measure(&runtime, &sqlite, "session", "SQLite", rounds)?);
    eprintln!("{:?}", rows.last());
    drop(sqlite);
    if !flags.keep {
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", db.display()));
        }
    }
    if let Ok(url) = std::env::var(panto_store_postgres::testing::ENV)
        && !url.is_empty()
    {
        let store = runtime.block_on(PostgresStore::connect(&url))?;
        let session = format!("bench-recall-{}", std::process::id());
        runtime.block_on(fill(&store, &session, &records, 5_000))?;
        rows.push(measure(&runtime, &store, &session, "PostgreSQL", rounds)?);
    }
    print_tables(rows, session_bytes);
    Ok(())
}

/// `__recall STORE DIR QUERY REPS`: one warm-up recall of `QUERY` and `REPS` more on the session
/// a `--keep` run of this section left in `DIR` (`target/bench/recall`), on `jsonl` or
/// `sqlite`, for a profiler (run the release build directly; the count of a recall is the
/// difference between `REPS` 1 and 0).
pub(super) fn profile(args: &[String]) -> Result<()> {
    let [store, dir, query, rest @ ..] = args else {
        bail!("usage: xtask bench __recall jsonl|sqlite DIR QUERY [REPS]");
    };
    let reps: usize = rest.first().map_or(Ok(1), |r| r.parse())?;
    let dir = Path::new(dir);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let query = RecallQuery::new(query.as_str());
    let run = |store: &dyn Fn() -> Result<Recalled>| -> Result<()> {
        for _ in 0..=reps {
            std::hint::black_box(store()?);
        }
        Ok(())
    };
    match store.as_str() {
        "jsonl" => {
            let jsonl = JsonlStore::new(dir, SessionOptions::default().fsync(false));
            run(&|| Ok(runtime.block_on(jsonl.recall("session.jsonl", &query))?))
        }
        "sqlite" => {
            let sqlite = SqliteStore::open_blocking(
                dir.join("session.sqlite3"),
                SqliteOptions::default().with_fsync(false),
            )?;
            run(&|| Ok(runtime.block_on(sqlite.recall("session", &query))?))
        }
        other => bail!("no store `{other}` (jsonl or sqlite)"),
    }
}

/// Prints the stores' figures and each query's warm times.
fn print_tables(rows: Vec<Row>, session_bytes: u64) {
    let fetches: Vec<(&str, &Fetches)> = rows.iter().map(|r| (r.store, &r.fetch)).collect();
    let fetches = fetch::rows(&fetches);
    let mut by_query = Table::new(
        std::iter::once("query".to_owned())
            .chain(
                rows.iter()
                    .map(|r| format!("{} (median, min–max)", r.store)),
            )
            .collect::<Vec<_>>(),
    );
    for (i, (q, _)) in QUERIES.iter().enumerate() {
        by_query.row(
            std::iter::once(format!("`{q}`"))
                .chain(rows.iter().map(|r| three(r.queries[i])))
                .collect::<Vec<_>>(),
        );
    }
    let mut table = Table::new([
        "store",
        "first recall",
        "index build",
        "warm recall (median, min–max)",
        "slowest query",
        "append (median, min–max)",
        "recall after it",
        "index",
        "index / session",
    ]);
    for r in rows {
        table.row([
            r.store.to_owned(),
            fmt_duration(r.first),
            r.build
                .map_or_else(|| "none (scan)".to_owned(), fmt_duration),
            three(r.warm),
            format!("{} ({})", fmt_duration(r.worst.1), r.worst.0),
            three(r.append),
            three(r.after),
            r.index_bytes.map_or_else(
                || "none".to_owned(),
                |b| format!("{:.0} MiB", b as f64 / (1 << 20) as f64),
            ),
            r.index_bytes.map_or_else(
                || "–".to_owned(),
                |b| format!("{:.2}×", b as f64 / session_bytes as f64),
            ),
        ]);
    }
    println!("{table}");
    println!("Warm recall of each query:\n");
    println!("{by_query}");
    println!("{}", fetch::table(&fetches));
}
