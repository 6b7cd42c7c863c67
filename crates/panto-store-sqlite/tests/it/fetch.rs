//! Fetch by id with the index of ids: only the entries around the id are read, and an index
//! dropped, emptied of its ids or of an older schema answers as the scan.

use panto_store::{Head, Store, conformance};

use super::{block_on, fresh};

/// An entry far from the id that does not decode fails the scan, not the indexed fetch: it
/// reads the entries around the id only, and answers what the scan answered before.
#[test]
fn a_fetch_reads_only_the_entries_around_the_id() {
    let dir = tempfile::tempdir().unwrap();
    let store = fresh(&dir, "f.sqlite3");
    let entries = conformance::recall::tool_rounds(100);
    block_on(store.append("s", Head::EMPTY, &entries)).unwrap();
    let expected = block_on(conformance::recall::late_fetches(&store, "s", true)).unwrap();
    // The result of toolu_80 is three rounds after its call: its tool comes from the index.
    assert_eq!(expected[0].items[0].tool.as_deref(), Some("bash"));
    let conn = rusqlite::Connection::open(dir.path().join("f.sqlite3")).unwrap();
    conn.execute(
        "UPDATE panto_entries SET text = '{' WHERE session = 's' AND seq = 1",
        [],
    )
    .unwrap();
    assert!(block_on(conformance::recall::late_fetches(&store, "s", true)).is_err());
    let fetched = block_on(conformance::recall::late_fetches(&store, "s", false)).unwrap();
    assert_eq!(fetched, expected);
}

/// An index without its ids answers by scan; one dropped whole is built again by the fetch;
/// a database of schema 3 (before the ids) has its index dropped at open and built again.
#[test]
fn a_dropped_or_stale_index_of_ids_answers_as_the_scan() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("d.sqlite3");
    let store = fresh(&dir, "d.sqlite3");
    let entries = conformance::recall::tool_rounds(30);
    block_on(store.append("s", Head::EMPTY, &entries)).unwrap();
    let count = |table: &str| -> i64 {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0))
            .unwrap()
    };
    let ids = count("panto_recall_ids");
    assert!(ids > 0);
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute("DELETE FROM panto_recall_ids", []).unwrap();
    block_on(conformance::recall::same_fetch_as_scan(&store, "s"));
    assert_eq!(
        count("panto_recall_ids"),
        0,
        "a fetch does not rebuild a current index"
    );
    conn.execute_batch(panto_store_sqlite::recall::EMPTY)
        .unwrap();
    block_on(conformance::recall::same_fetch_as_scan(&store, "s"));
    assert_eq!(
        count("panto_recall_ids"),
        ids,
        "the fetch built the index again"
    );
    drop(store);
    conn.execute_batch("DROP TABLE panto_recall_ids; PRAGMA user_version = 3;")
        .unwrap();
    drop(conn);
    let store = fresh(&dir, "d.sqlite3");
    assert_eq!(count("panto_recall_state"), 0, "the old index was dropped");
    block_on(conformance::recall::same_fetch_as_scan(&store, "s"));
    assert_eq!(count("panto_recall_ids"), ids);
}
