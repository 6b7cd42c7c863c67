//! The JSONL store's recall index, a sidecar beside the session: built on the first recall,
//! kept current by this store's appends, caught up after another program's, rebuilt when the
//! file under it is replaced, and never different from reading the file.

use std::fs;

use panto_model::{Entry, Message};
use panto_session::JsonlStore;
use panto_store::{Head, RecallQuery, Store, conformance, recall_by_scan};

use crate::opts;

fn block_on<F: Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(f)
}

fn same(store: &JsonlStore, query: &str) -> Vec<String> {
    let q = RecallQuery::new(query).with_limit(10).with_context(true);
    let mine = block_on(store.recall("s.jsonl", &q)).unwrap();
    let scan = block_on(recall_by_scan(store, "s.jsonl", &q)).unwrap();
    assert_eq!(mine, scan, "{query}");
    mine.hits.into_iter().map(|h| h.id).collect()
}

#[test]
fn the_sidecar_is_built_kept_caught_up_and_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let store = JsonlStore::new(dir.path(), opts());
    let sidecar = dir.path().join("s.jsonl.recall.sqlite3");
    let records = conformance::records_of(conformance::CONTRACT_FILE);
    let head = block_on(store.append_records("s.jsonl", Head::EMPTY, &records)).unwrap();
    assert!(!sidecar.exists(), "an append alone makes no sidecar");
    assert_eq!(same(&store, "fn main")[0], "t1");
    assert!(sidecar.exists());
    // This store's append updates it at once.
    let entry =
        Entry::Message(Message::user_text("the quokka moved to src/zoo.rs:12").with_id("z1"));
    let covered = || -> i64 {
        let conn = rusqlite::Connection::open(&sidecar).unwrap();
        conn.query_row("SELECT entries FROM panto_recall_state", [], |r| r.get(0))
            .unwrap()
    };
    let entries = covered();
    block_on(store.append("s.jsonl", head, &[entry])).unwrap();
    assert_eq!(covered(), entries + 1, "the append went into the sidecar");
    assert!(store.recall_index_bytes("s.jsonl") > 0);
    assert_eq!(same(&store, "quokka"), ["z1#0"]);
    // Another program's line: caught up at the next recall.
    let line = r#"{"type":"message","id":"o1","role":"user","content":[{"type":"text","text":"a wombat at zoo.rs:12"}]}"#;
    let mut text = fs::read_to_string(dir.path().join("s.jsonl")).unwrap();
    text.push_str(line);
    text.push('\n');
    fs::write(dir.path().join("s.jsonl"), &text).unwrap();
    assert_eq!(same(&store, "wombat"), ["o1#0"]);
    let both = same(&store, "zoo.rs:12");
    assert!(both[..2].contains(&"z1#0".to_owned()) && both[..2].contains(&"o1#0".to_owned()));
    // The file replaced by another one, longer: the sidecar is not its index any more.
    let other = format!("{}\n", r#"{"type":"message","id":"n1","role":"user","content":[{"type":"text","text":"a platypus"}]}"#).repeat(40);
    fs::write(dir.path().join("s.jsonl"), &other).unwrap();
    assert!(same(&store, "quokka").is_empty());
    assert_eq!(same(&store, "platypus").len(), 1);
    // A sidecar that is not a database: recall reads the file.
    fs::write(
        &sidecar,
        b"not a database at all, and long enough to be read as one",
    )
    .unwrap();
    assert_eq!(same(&store, "platypus").len(), 1);
}

/// The store keeps the sidecar's connection open between calls; a sidecar deleted under it is
/// seen (another file, or none, at its path), and the next recall builds a new one on disk
/// that the next append keeps current.
#[test]
fn a_sidecar_deleted_under_a_kept_connection_is_built_again() {
    let dir = tempfile::tempdir().unwrap();
    let store = JsonlStore::new(dir.path(), opts());
    let sidecar = dir.path().join("s.jsonl.recall.sqlite3");
    let records = conformance::records_of(conformance::CONTRACT_FILE);
    let head = block_on(store.append_records("s.jsonl", Head::EMPTY, &records)).unwrap();
    assert_eq!(same(&store, "fn main")[0], "t1");
    for suffix in ["", "-wal", "-shm"] {
        let _ = fs::remove_file(format!("{}{suffix}", sidecar.display()));
    }
    assert!(!sidecar.exists());
    assert_eq!(same(&store, "fn main")[0], "t1");
    assert!(sidecar.exists(), "the recall built the sidecar again");
    let entry = Entry::Message(Message::user_text("a quokka at last").with_id("z1"));
    block_on(store.append("s.jsonl", head, &[entry])).unwrap();
    let conn = rusqlite::Connection::open(&sidecar).unwrap();
    let text: i64 = conn
        .query_row(
            "SELECT count(*) FROM panto_recall_postings WHERE term = 'quokka'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(text, 1, "the append went into the new sidecar");
    assert_eq!(same(&store, "quokka"), ["z1#0"]);
}

/// A sidecar of the format before the terms' bounds (no `user_version`, postings without
/// bounds) is emptied when opened and built again, never read as it is.
#[test]
fn a_sidecar_of_an_older_format_is_built_again() {
    let dir = tempfile::tempdir().unwrap();
    let store = JsonlStore::new(dir.path(), opts());
    let sidecar = dir.path().join("s.jsonl.recall.sqlite3");
    let records = conformance::records_of(conformance::CONTRACT_FILE);
    block_on(store.append_records("s.jsonl", Head::EMPTY, &records)).unwrap();
    let before = same(&store, "fn main");
    assert_eq!(before[0], "t1");
    drop(store);
    let conn = rusqlite::Connection::open(&sidecar).unwrap();
    conn.execute_batch("DROP TABLE panto_recall_bounds; PRAGMA user_version = 0;")
        .unwrap();
    drop(conn);
    let store = JsonlStore::new(dir.path(), opts());
    assert_eq!(same(&store, "fn main"), before);
    let conn = rusqlite::Connection::open(&sidecar).unwrap();
    let (format, bounds): (i64, i64) = (
        conn.query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap(),
        conn.query_row("SELECT count(*) FROM panto_recall_bounds", [], |r| r.get(0))
            .unwrap(),
    );
    assert_eq!(format, 2);
    assert!(bounds > 0, "built again, with its bounds");
}
