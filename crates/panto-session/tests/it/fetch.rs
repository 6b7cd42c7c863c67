//! The JSONL store's fetch by id with its sidecar's ids: only the lines around the id are
//! read, and a sidecar removed, emptied of its ids or of the format before them answers as
//! reading the file.

use std::fs;
use std::io::{Seek, SeekFrom, Write};

use panto_session::JsonlStore;
use panto_store::{Head, Store, conformance};

use crate::opts;

fn block_on<F: Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(f)
}

/// A first line that does not decode fails the scan, not the indexed fetch: it reads the lines
/// around the id only (from the byte the sidecar keeps), and answers what the scan answered.
#[test]
fn a_fetch_reads_only_the_lines_around_the_id() {
    let dir = tempfile::tempdir().unwrap();
    let store = JsonlStore::new(dir.path(), opts());
    let entries = conformance::recall::tool_rounds(100);
    block_on(store.append("s.jsonl", Head::EMPTY, &entries)).unwrap();
    // The first fetch builds the sidecar.
    let expected = block_on(conformance::recall::late_fetches(&store, "s.jsonl", false)).unwrap();
    assert_eq!(
        block_on(conformance::recall::late_fetches(&store, "s.jsonl", true)).unwrap(),
        expected
    );
    assert_eq!(expected[0].items[0].tool.as_deref(), Some("bash"));
    // The first line made garbage of the same length, in place.
    let path = dir.path().join("s.jsonl");
    let text = fs::read_to_string(&path).unwrap();
    let first = text.find('\n').unwrap();
    let mut file = fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.seek(SeekFrom::Start(0)).unwrap();
    file.write_all("{".repeat(first).as_bytes()).unwrap();
    drop(file);
    assert!(block_on(conformance::recall::late_fetches(&store, "s.jsonl", true)).is_err());
    let fetched = block_on(conformance::recall::late_fetches(&store, "s.jsonl", false)).unwrap();
    assert_eq!(fetched, expected);
}

/// A sidecar removed is built again by the next fetch; one emptied of its ids answers by
/// reading the file; one of format 1 (before the ids) is emptied at open and built again.
#[test]
fn a_removed_or_stale_sidecar_answers_as_the_scan() {
    let dir = tempfile::tempdir().unwrap();
    let store = JsonlStore::new(dir.path(), opts());
    let sidecar = dir.path().join("s.jsonl.recall.sqlite3");
    let entries = conformance::recall::tool_rounds(30);
    block_on(store.append("s.jsonl", Head::EMPTY, &entries)).unwrap();
    block_on(conformance::recall::same_fetch_as_scan(&store, "s.jsonl"));
    let ids = || -> i64 {
        let conn = rusqlite::Connection::open(&sidecar).unwrap();
        conn.query_row("SELECT count(*) FROM panto_recall_ids", [], |r| r.get(0))
            .unwrap()
    };
    let built = ids();
    assert!(built > 0, "the fetch built the sidecar");
    for suffix in ["", "-wal", "-shm"] {
        let _ = fs::remove_file(format!("{}{suffix}", sidecar.display()));
    }
    block_on(conformance::recall::same_fetch_as_scan(&store, "s.jsonl"));
    assert_eq!(ids(), built, "built again");
    let conn = rusqlite::Connection::open(&sidecar).unwrap();
    conn.execute("DELETE FROM panto_recall_ids", []).unwrap();
    block_on(conformance::recall::same_fetch_as_scan(&store, "s.jsonl"));
    drop(store);
    conn.execute_batch("DROP TABLE panto_recall_ids; PRAGMA user_version = 1;")
        .unwrap();
    drop(conn);
    let store = JsonlStore::new(dir.path(), opts());
    block_on(conformance::recall::same_fetch_as_scan(&store, "s.jsonl"));
    assert_eq!(ids(), built, "emptied at open and built again");
}
