//! The JSONL store behind the `Store` trait: the conformance suite, exact lines, a name's
//! file, conflicts between processes' views, and the blocking pool.

use std::fs;

use panto_model::{Entry, Message};
use panto_session::JsonlStore;
use panto_store::{Head, Record, Store, StoreError, conformance};

use crate::opts;

fn block_on<F: Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(f)
}

#[test]
fn the_jsonl_store_passes_the_conformance_suite() {
    let dirs = std::cell::RefCell::new(Vec::new());
    block_on(conformance::run_all(|| {
        let dir = tempfile::tempdir().unwrap();
        let store = JsonlStore::new(dir.path(), opts());
        dirs.borrow_mut().push(dir);
        store
    }));
}

#[test]
fn the_file_holds_the_records_exactly_and_its_length_is_the_head() {
    let dir = tempfile::tempdir().unwrap();
    let store = JsonlStore::new(dir.path(), opts());
    let records: Vec<Record> = conformance::FOREIGN_LINES
        .iter()
        .map(|l| Record::parse(*l, 1).unwrap())
        .collect();
    let head = block_on(store.append_records("a.jsonl", Head::EMPTY, &records)).unwrap();
    let text = fs::read_to_string(dir.path().join("a.jsonl")).unwrap();
    let expected: String = conformance::FOREIGN_LINES
        .iter()
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(text, expected);
    assert_eq!(head, Head::new(text.len() as u64));
}

#[test]
fn a_read_after_a_torn_tail_and_debris_gives_only_entries() {
    let dir = tempfile::tempdir().unwrap();
    let store = JsonlStore::new(dir.path(), opts());
    let path = dir.path().join("s.jsonl");
    let one =
        r#"{"type":"message","id":"m1","role":"user","content":[{"type":"text","text":"one"}]}"#;
    fs::write(&path, format!("{one}\n{{\"type\":\"mess")).unwrap();
    // The torn tail is not an entry; the next append starts on a fresh line after it.
    let head = block_on(store.head("s.jsonl")).unwrap();
    let entry = Entry::Message(Message::user_text("two"));
    block_on(store.append("s.jsonl", head, &[entry])).unwrap();
    let page = block_on(store.read("s.jsonl", Head::EMPTY, 10)).unwrap();
    let texts: Vec<&str> = page.records.iter().map(|r| r.text.as_str()).collect();
    assert_eq!(texts.len(), 2, "{texts:?}");
    assert_eq!(texts[0], one);
}

#[test]
fn a_malformed_line_is_named_by_its_line_in_the_file_whatever_page_found_it() {
    let dir = tempfile::tempdir().unwrap();
    let store = JsonlStore::new(dir.path(), opts());
    let path = dir.path().join("s.jsonl");
    let good = r#"{"type":"message","role":"user","content":[{"type":"text","text":"x"}]}"#;
    let bad = r#"{"type":"message","role":"robot","content":[]}"#;
    fs::write(&path, format!("{good}\n{good}\n{good}\n{bad}\n{good}\n")).unwrap();
    let first = block_on(store.read("s.jsonl", Head::EMPTY, 2)).unwrap();
    assert_eq!(first.records.len(), 2);
    let error = block_on(store.read("s.jsonl", first.next, 10)).unwrap_err();
    assert!(matches!(error, StoreError::Invalid { .. }), "{error:?}");
    assert!(error.to_string().contains("line 4"), "{error}");
}

#[test]
fn a_stale_view_of_the_file_is_a_conflict_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let store = JsonlStore::new(dir.path(), opts());
    let first = block_on(store.append(
        "s.jsonl",
        Head::EMPTY,
        &[Entry::Message(Message::user_text("a"))],
    ))
    .unwrap();
    block_on(store.append("s.jsonl", first, &[Entry::Message(Message::user_text("b"))])).unwrap();
    let error =
        block_on(store.append("s.jsonl", first, &[Entry::Message(Message::user_text("c"))]))
            .unwrap_err();
    assert!(error.is_conflict());
    assert!(error.to_string().contains("s.jsonl"), "{error}");
}

#[test]
fn the_store_works_from_a_spawned_task_on_the_multi_thread_runtime() {
    let dir = tempfile::tempdir().unwrap();
    let store = JsonlStore::new(dir.path(), opts());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    let loaded = runtime
        .block_on(async move {
            tokio::spawn(async move {
                let head = store
                    .append(
                        "s.jsonl",
                        Head::EMPTY,
                        &[Entry::Message(Message::user_text("hi"))],
                    )
                    .await?;
                let loaded = store.load("s.jsonl").await?;
                assert_eq!(loaded.head, head);
                Ok::<_, StoreError>(loaded)
            })
            .await
        })
        .unwrap()
        .unwrap();
    assert_eq!(loaded.context.messages[0].text(), "hi");
}

#[test]
fn the_sessions_listed_are_the_jsonl_files_of_the_root() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("b.jsonl"), "").unwrap();
    fs::write(dir.path().join("a.jsonl"), "").unwrap();
    fs::write(dir.path().join("notes.txt"), "").unwrap();
    fs::create_dir(dir.path().join("dir.jsonl")).unwrap();
    let store = JsonlStore::new(dir.path(), opts());
    assert_eq!(block_on(store.list()).unwrap(), ["a.jsonl", "b.jsonl"]);
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]

    /// Any sequence of appends and compactions loads as a replay of what was appended, as on
    /// every store.
    #[test]
    fn any_appends_and_compactions_load_as_their_replay(units in conformance::units()) {
        let dir = tempfile::tempdir().unwrap();
        let store = JsonlStore::new(dir.path(), opts());
        block_on(conformance::same_context(&store, "s.jsonl", &units));
    }
}
