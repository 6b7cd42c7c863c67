//! Unit tests: the schema's migrations are recorded, and a newer schema is refused.

use crate::{MIGRATIONS, SqliteStore};

fn block_on<F: Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime")
        .block_on(f)
}

#[test]
fn opening_twice_migrates_once_and_a_newer_schema_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.sqlite3");
    block_on(SqliteStore::open(&path)).unwrap();
    block_on(SqliteStore::open(&path)).unwrap();
    let conn = rusqlite::Connection::open(&path).unwrap();
    let version: u32 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, MIGRATIONS.last().unwrap().0);
    let mode: String = conn
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    conn.pragma_update(None, "user_version", 99).unwrap();
    drop(conn);
    let error = block_on(SqliteStore::open(&path)).unwrap_err();
    assert!(
        error.to_string().contains("schema version 99, newer than"),
        "{error}"
    );
}
