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
