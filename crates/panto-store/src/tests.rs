//! Unit tests: the memory store passes the conformance suite; records keep their text.

use panto_model::{Entry, Message};

use crate::{MemoryStore, Record, RecordKind, conformance};

fn block_on<F: Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime")
        .block_on(f)
}

#[test]
fn the_memory_store_passes_the_conformance_suite() {
    block_on(conformance::run_all(MemoryStore::new));
}

#[test]
fn a_record_keeps_a_foreign_line_exactly_and_knows_its_kind() {
    let line = r#"{"type":"compaction" ,"summary":"s","zz":1}"#;
    let record = Record::parse(format!("{line}\n"), 3).expect("a compaction line");
    assert_eq!(record.text, line);
    assert_eq!(record.kind, RecordKind::Compaction);
    let error = Record::parse(r#"{"type":"message","role":"robot","content":[]}"#, 7)
        .expect_err("a bad role");
    assert!(error.to_string().contains("line 7"), "{error}");
}

#[test]
fn an_encoded_record_decodes_to_its_entry() {
    let entry = Entry::Message(Message::user_text("hi\nthere"));
    let record = Record::encode(&entry);
    assert!(!record.text.ends_with('\n'));
    assert_eq!(record.decode(1).expect("decode"), entry);
    assert_eq!(RecordKind::from_code(record.kind.code()), record.kind);
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

    /// Any sequence of appends and compactions loads as a replay of what was appended.
    #[test]
    fn any_appends_and_compactions_load_as_their_replay(units in conformance::units()) {
        block_on(conformance::same_context(&MemoryStore::new(), "s", &units));
    }
}

/// Issue 39: `copy_session` copies a whole history, page after page, each record's text
/// exactly, into a new session only; a copy onto a session that exists writes nothing.
#[test]
fn copy_session_copies_every_record_exactly_into_a_new_session_only() {
    use crate::{Head, Store, StoreError, copy_session};
    block_on(async {
        let from = MemoryStore::new();
        let to = MemoryStore::new();
        // Records of a mebibyte each: the history spans several pages of `Store::read`.
        let big = "x".repeat(1 << 20);
        let texts: Vec<String> = (0..6)
            .map(|i| {
                format!(
                    r#"{{"type":"message","role":"user","content":[{{"type":"text","text":"{i}{big}"}}], "foreign" : {i}}}"#
                )
            })
            .collect();
        let records: Vec<Record> = texts
            .iter()
            .map(|t| Record::parse(t.clone(), 1).expect("a message line"))
            .collect();
        from.append_records("a", Head::EMPTY, &records)
            .await
            .unwrap();
        let first = from.read("a", Head::EMPTY, usize::MAX).await.unwrap();
        assert!(first.records.len() < texts.len(), "more than one page");

        let head = copy_session(&from, "a", &to, "b").await.unwrap();
        assert_eq!(head, Head::new(texts.len() as u64));
        let mut copied = Vec::new();
        let mut at = Head::EMPTY;
        loop {
            let page = to.read("b", at, usize::MAX).await.unwrap();
            if page.records.is_empty() {
                break;
            }
            at = page.next;
            copied.extend(page.records.into_iter().map(|r| r.text));
        }
        assert_eq!(copied, texts);
        assert_eq!(
            to.load("b").await.unwrap().context,
            from.load("a").await.unwrap().context
        );

        // Onto a session that exists: a conflict, nothing written.
        let again = copy_session(&from, "a", &to, "b").await;
        assert!(
            matches!(again, Err(StoreError::Conflict { .. })),
            "{again:?}"
        );
        assert_eq!(to.head("b").await.unwrap(), head);
        // Within one store, under another name.
        copy_session(&from, "a", &from, "c").await.unwrap();
        assert_eq!(from.head("c").await.unwrap(), head);
        // From a session that does not exist: not found, and no session made.
        let missing = copy_session(&from, "nope", &to, "d").await;
        assert!(
            matches!(missing, Err(StoreError::NotFound { .. })),
            "{missing:?}"
        );
        assert_eq!(to.list().await.unwrap(), ["b"]);
    });
}
