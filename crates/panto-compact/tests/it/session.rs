//! The `session` feature: a compaction written to a real JSONL file through `SessionLog for
//! Session` loads back as the context the compactor returned.

use panto_compact::{CompactOutcome, CompactRun, SessionLog};
use panto_model::Entry;
use panto_session::{Session, SessionOptions};

use crate::{compactor, model, rounds};

#[tokio::test]
async fn a_compaction_appended_to_a_session_file_loads_back_as_the_new_context() {
    let dir = tempfile::tempdir().unwrap();
    let mut session =
        Session::create(dir.path().join("chat.jsonl"), SessionOptions::default()).unwrap();
    let history: Vec<Entry> = rounds(0, 3).into_iter().map(Entry::Message).collect();
    SessionLog::append(&mut session, &history).unwrap();
    let before = session.load_context().unwrap().context;

    let (provider, active) = model("fake", "m1");
    provider.push_text("the summary");
    let mut compactor = compactor(active, 200);
    let outcome = compactor
        .compact(&before, &mut session, CompactRun::manual(None))
        .await
        .unwrap();
    let CompactOutcome::Compacted(compacted) = outcome else {
        panic!("expected a compaction")
    };

    let after = session.load_context().unwrap().context;
    // The model's summary, then the ledger panto records beside it.
    let summary = after.summary().unwrap();
    assert!(summary.starts_with("the summary\n\n## Ledger"), "{summary}");
    assert_eq!(after.messages, compacted.context.messages);
    assert!(after.messages.len() < before.messages.len());
}
