//! The SQLite store: the conformance suite, its property test, exact text in the database,
//! the file's mode and who may create it, several processes appending to one session, and
//! `kill -9` in the middle of an append.

// Tests fail loudly and pace their child processes: unwrapping and sleeping on a test thread
// are what they are for.
#![allow(
    clippy::unwrap_used,
    clippy::disallowed_methods,
    reason = "test code: fails loudly, paces its child processes"
)]

mod fetch;
mod files;
mod processes;
mod recall;

use panto_store::{Head, Store, StoreError, conformance};
use panto_store_sqlite::{SqliteOptions, SqliteStore};
use proptest::prelude::*;

pub(crate) fn block_on<F: Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(f)
}

fn fresh(dir: &tempfile::TempDir, name: &str) -> SqliteStore {
    let options = SqliteOptions::default().with_fsync(false);
    SqliteStore::open_blocking(dir.path().join(name), options).unwrap()
}

#[test]
fn the_sqlite_store_passes_the_conformance_suite() {
    let dir = tempfile::tempdir().unwrap();
    let mut n = 0;
    block_on(conformance::run_all(|| {
        n += 1;
        fresh(&dir, &format!("c{n}.sqlite3"))
    }));
}

#[test]
fn the_suite_passes_on_the_multi_thread_runtime_too() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    let path = dir.path().join("m.sqlite3");
    runtime.block_on(async {
        let store = SqliteStore::open(&path).await.unwrap();
        let task = tokio::spawn(async move {
            conformance::same_context(&store, "s", &[conformance::Unit::Compaction(0)]).await;
        });
        task.await.unwrap();
    });
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Any sequence of appends and compactions loads as a replay of what was appended, as on
    /// every store.
    #[test]
    fn any_appends_and_compactions_load_as_their_replay(units in conformance::units()) {
        let dir = tempfile::tempdir().unwrap();
        let store = fresh(&dir, "p.sqlite3");
        block_on(conformance::same_context(&store, "s", &units));
    }
}

#[test]
fn rows_hold_the_exact_text_and_the_compactions_are_indexed() {
    let dir = tempfile::tempdir().unwrap();
    let store = fresh(&dir, "x.sqlite3");
    let records = conformance::records_of(conformance::CONTRACT_FILE);
    block_on(store.append_records("s", Head::EMPTY, &records)).unwrap();
    let conn = rusqlite::Connection::open(dir.path().join("x.sqlite3")).unwrap();
    let texts: Vec<String> = conn
        .prepare("SELECT text FROM panto_entries WHERE session = 's' ORDER BY seq")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let lines: Vec<&str> = conformance::CONTRACT_FILE.lines().collect();
    assert_eq!(texts, lines);
    // The load's first query finds the latest compaction through the partial index.
    let plan: Vec<String> = conn
        .prepare(
            "EXPLAIN QUERY PLAN SELECT MAX(seq) FROM panto_entries WHERE session = 's' AND kind = 1",
        )
        .unwrap()
        .query_map([], |r| r.get(3))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert!(
        plan.iter().any(|p| p.contains("panto_entries_compactions")),
        "{plan:?}"
    );
}

#[test]
fn a_changed_row_is_invalid_naming_its_position_and_names_are_checked() {
    let dir = tempfile::tempdir().unwrap();
    let store = fresh(&dir, "y.sqlite3");
    let records = conformance::records_of(conformance::CONTRACT_FILE);
    block_on(store.append_records("s", Head::EMPTY, &records)).unwrap();
    let conn = rusqlite::Connection::open(dir.path().join("y.sqlite3")).unwrap();
    conn.execute(
        "UPDATE panto_entries SET text = '{\"type\":\"message\",\"role\":\"robot\",\"content\":[]}' WHERE seq = 10",
        [],
    )
    .unwrap();
    let error = block_on(store.load("s")).unwrap_err();
    assert!(matches!(error, StoreError::Invalid { .. }), "{error:?}");
    let text = error.to_string();
    assert!(text.contains("session s: line 10"), "{text}");
    assert!(text.starts_with("sqlite:"), "{text}");
    let error = block_on(store.read("s", Head::new(5), 10)).unwrap_err();
    assert!(error.to_string().contains("line 10"), "{error}");
    let error = block_on(store.load("")).unwrap_err();
    assert!(matches!(error, StoreError::Invalid { .. }), "{error:?}");
}

#[test]
fn a_writer_holding_the_database_makes_an_append_wait_then_fail_unavailable() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("busy.sqlite3");
    let options = SqliteOptions::default()
        .with_busy_timeout(std::time::Duration::from_millis(200))
        .with_fsync(false);
    let store = block_on(SqliteStore::open_with(&path, options)).unwrap();
    let mut other = rusqlite::Connection::open(&path).unwrap();
    let tx = other
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .unwrap();
    let started = std::time::Instant::now();
    let entry = panto_model::Entry::Message(panto_model::Message::user_text("hi"));
    let error = block_on(store.append("s", Head::EMPTY, &[entry])).unwrap_err();
    assert!(started.elapsed() >= std::time::Duration::from_millis(150));
    assert!(matches!(error, StoreError::Unavailable { .. }), "{error:?}");
    assert!(
        error.to_string().contains("cannot start the append"),
        "{error}"
    );
    drop(tx);
    assert_eq!(block_on(store.head("s")).unwrap(), Head::EMPTY);
}
