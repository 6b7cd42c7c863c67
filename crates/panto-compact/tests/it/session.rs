//! A compaction written to a real JSONL file through the JSONL store loads back as the
//! context the compactor returned, with the marker replay relies on written by the compactor.

use panto_compact::KnownWindows;
use panto_compact::{CompactOutcome, CompactRun, SessionLog, Store};
use panto_model::{COPIES_MARKED, Entry};
use panto_session::{JsonlStore, SessionOptions};

use crate::{compactor, model, rounds};

#[tokio::test]
async fn a_compaction_appended_to_a_session_file_loads_back_as_the_new_context() {
    let dir = tempfile::tempdir().unwrap();
    let store = JsonlStore::new(dir.path(), SessionOptions::default());
    let history: Vec<Entry> = rounds(0, 3).into_iter().map(Entry::Message).collect();
    let (mut log, _) = SessionLog::open(&store, "chat.jsonl").await.unwrap();
    log.append(&history).await.unwrap();
    let before = store.load("chat.jsonl").await.unwrap().context;

    let (provider, active) = model("fake", "m1");
    provider.push_text("the summary");
    let mut compactor = compactor(active, 200);
    let outcome = compactor
        .compact(
            &before,
            &mut log,
            CompactRun::manual(None),
            &mut KnownWindows::new(),
        )
        .await
        .unwrap();
    let CompactOutcome::Compacted(compacted) = outcome else {
        panic!("expected a compaction")
    };

    let after = store.load("chat.jsonl").await.unwrap().context;
    // The model's summary, then the ledger panto records beside it.
    let summary = after.summary().unwrap();
    assert!(summary.starts_with("the summary\n\n## Ledger"), "{summary}");
    assert_eq!(after.messages, compacted.context.messages);
    assert!(after.messages.len() < before.messages.len());
    // The compactor, not the store, marked the entry whose copies follow it.
    assert!(after.compaction.as_ref().unwrap().copies_marked());
    assert!(after.compaction.unwrap().extra.contains_key(COPIES_MARKED));
}
