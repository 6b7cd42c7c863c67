//! The recall index: one kept current append by append holds exactly what one rebuilt from
//! scratch holds, and recall answers the same with it, without it and after it was dropped.

use panto_store::{RecallQuery, Store, conformance};
use proptest::prelude::*;

use super::{block_on, fresh};

/// Every row of every index table of session `s`, as text, in key order.
fn rows(path: &std::path::Path) -> Vec<String> {
    let conn = rusqlite::Connection::open(path).unwrap();
    let mut out = Vec::new();
    for (table, key) in [
        ("panto_recall_state", "session"),
        ("panto_recall_postings", "term, part"),
        ("panto_recall_docs", "doc"),
        ("panto_recall_calls", "call, position, block"),
        ("panto_recall_compactions", "position"),
        ("panto_recall_bounds", "term, part"),
        ("panto_recall_ids", "id, item"),
    ] {
        let mut stmt = conn
            .prepare(&format!(
                "SELECT * FROM {table} WHERE session = 's' ORDER BY {key}"
            ))
            .unwrap();
        let n = stmt.column_count();
        let mut q = stmt.query([]).unwrap();
        while let Some(r) = q.next().unwrap() {
            let mut line = table.to_owned();
            for i in 0..n {
                let v: rusqlite::types::Value = r.get(i).unwrap();
                line.push_str(&format!(" {v:?}"));
            }
            out.push(line);
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    /// An index kept current on each append equals one rebuilt from scratch, row for row, and
    /// a recall after the rebuild answers as the scan does.
    #[test]
    fn an_index_rebuilt_from_scratch_equals_one_kept_current(units in conformance::units()) {
        let dir = tempfile::tempdir().unwrap();
        let store = fresh(&dir, "r.sqlite3");
        block_on(conformance::same_context(&store, "s", &units));
        let path = dir.path().join("r.sqlite3");
        let kept = rows(&path);
        prop_assert!(!kept.is_empty());
        block_on(store.rebuild_recall_index("s")).unwrap();
        prop_assert_eq!(&kept, &rows(&path));
        block_on(conformance::recall::same_as_scan(&store, "s"));
    }
}

/// A session whose index was dropped (written by a panto without one, say) is indexed on its
/// first recall, and answers as before.
#[test]
fn a_dropped_index_is_built_at_the_next_recall() {
    let dir = tempfile::tempdir().unwrap();
    let store = fresh(&dir, "d.sqlite3");
    let records = conformance::records_of(conformance::CONTRACT_FILE);
    block_on(store.append_records("s", panto_store::Head::EMPTY, &records)).unwrap();
    let path = dir.path().join("d.sqlite3");
    let kept = rows(&path);
    let query = RecallQuery::new("fn main");
    let before = block_on(store.recall("s", &query)).unwrap();
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute("DELETE FROM panto_recall_state", []).unwrap();
    conn.execute("DELETE FROM panto_recall_postings", [])
        .unwrap();
    assert_eq!(block_on(store.recall("s", &query)).unwrap(), before);
    assert_eq!(rows(&path), kept);
    // A block that does not decode: the store answers by scan, the same.
    conn.execute("UPDATE panto_recall_postings SET data = x'ffffffffff'", [])
        .unwrap();
    assert_eq!(block_on(store.recall("s", &query)).unwrap(), before);
}

/// A database whose index has the format before the terms' bounds (migration 3) has it
/// dropped when opened, and built again at the next recall, never read without its bounds.
#[test]
fn an_index_of_the_format_before_bounds_is_built_again() {
    let dir = tempfile::tempdir().unwrap();
    let store = fresh(&dir, "o.sqlite3");
    let records = conformance::records_of(conformance::CONTRACT_FILE);
    block_on(store.append_records("s", panto_store::Head::EMPTY, &records)).unwrap();
    let path = dir.path().join("o.sqlite3");
    let kept = rows(&path);
    let query = RecallQuery::new("fn main");
    let before = block_on(store.recall("s", &query)).unwrap();
    assert!(!before.hits.is_empty());
    drop(store);
    // What a panto of schema 2 left: the postings, no bounds.
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch("DROP TABLE panto_recall_bounds; PRAGMA user_version = 2;")
        .unwrap();
    drop(conn);
    let store = fresh(&dir, "o.sqlite3");
    let conn = rusqlite::Connection::open(&path).unwrap();
    let states: i64 = conn
        .query_row("SELECT count(*) FROM panto_recall_state", [], |r| r.get(0))
        .unwrap();
    assert_eq!(states, 0, "the old index was dropped");
    assert_eq!(block_on(store.recall("s", &query)).unwrap(), before);
    assert_eq!(rows(&path), kept);
    block_on(conformance::recall::same_as_scan(&store, "s"));
}

/// Two words never in one item: no range's bound (the best of each word added up) is reached
/// by an item, so the ranking scores every range. The ranges of the highest bounds (both words
/// in items of 5 terms) are not those of the best items (`alpha` alone in items of 2 terms,
/// `beta` in long ones): those are in the second batch of ranges asked for, which is more
/// than a quarter of them and read by one walk of each word's rows. The answer is the scan's.
#[test]
fn a_query_that_scores_every_range_reads_them_all_and_answers_as_the_scan() {
    let dir = tempfile::tempdir().unwrap();
    let store = fresh(&dir, "w.sqlite3");
    let long = "w ".repeat(60);
    let entries: Vec<panto_model::Entry> = (0..24 * 1024)
        .map(|i| {
            let range = i / 1024;
            let text = match (i % 4, range) {
                (0, 0..4) => format!("alpha {i} w w w"),
                (1, 0..4) => format!("beta {i} w w w"),
                (0, 4..20) => format!("alpha {i}"),
                (0, _) => format!("alpha {i} {long}"),
                (1, _) => format!("beta {i} {long}"),
                _ => format!("neither {i}"),
            };
            panto_model::Entry::Message(panto_model::Message::user_text(text))
        })
        .collect();
    block_on(store.append("s", panto_store::Head::EMPTY, &entries)).unwrap();
    let q = RecallQuery::new("alpha beta")
        .with_limit(20)
        .with_context(true);
    let mine = block_on(store.recall("s", &q)).unwrap();
    let scan = block_on(panto_store::recall_by_scan(&store, "s", &q)).unwrap();
    assert_eq!(mine, scan);
    // The best are `alpha` alone in the short items of ranges 4 to 19.
    assert_eq!(mine.hits.len(), 20);
    assert_eq!(mine.hits[0].text, "alpha 4096");
}
