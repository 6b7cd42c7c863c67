//! The recall checks of the conformance suite: what every store's [`Store::recall`] and
//! [`Store::fetch`] answer, the same as the default that reads the whole history
//! ([`recall_by_scan`], [`fetch_by_scan`]), so an index a store keeps is proven to change
//! nothing but the time.

use panto_model::{ContentBlock, Entry, ItemKind, Message, Role};

use super::{CONTRACT_FILE, append_all, compaction, records_of, user};
use crate::error::StoreError;
use crate::head::Head;
use crate::recall::{RecallQuery, Recalled};
use crate::store::{Store, fetch_by_scan, recall_by_scan};

/// Queries every recall check also compares with the default's answer.
const QUERIES: &[&str] = &[
    "migration error",
    "9f8e7d6",
    "src/db/migrate.rs:88",
    "\"relation users does not exist\"",
    "port",
    "a.rs",
    "fn main",
    "héllo",
    "#4127",
];

/// The ids of the hits.
pub fn hit_ids(found: &Recalled) -> Vec<&str> {
    found.hits.iter().map(|h| h.id.as_str()).collect()
}

/// Checks that `store`'s recall of `session` gives, for every query of [`QUERIES`], the hits
/// the default gives (ids, order, exact counts, scores, snippets).
///
/// # Panics
/// When they differ (test support).
pub async fn same_as_scan<S: Store + ?Sized>(store: &S, session: &str) {
    for q in QUERIES {
        for query in [
            RecallQuery::new(*q).with_limit(10),
            RecallQuery::new(*q).with_limit(10).with_context(true),
        ] {
            let mine = store.recall(session, &query).await.expect("recall");
            let scan = recall_by_scan(store, session, &query).await.expect("scan");
            assert_eq!(mine, scan, "recall of {q:?} differs from the scan's");
        }
    }
}

/// A session with a tool loop, identifiers, a compaction and a kept copy.
fn conversation() -> Vec<Vec<Entry>> {
    let call = Entry::Message(
        Message::new(
            Role::Assistant,
            vec![ContentBlock::tool_use(
                "toolu_9",
                "bash",
                serde_json::json!({"command": "cargo run -- migrate"}),
            )],
        )
        .with_id("m2"),
    );
    let result = Entry::Message(
        Message::new(
            Role::User,
            vec![ContentBlock::tool_result(
                "toolu_9",
                "error: relation users does not exist\n  at src/db/migrate.rs:88\nmerged 9f8e7d6c5b4a3f21 in #4127",
                true,
            )],
        )
        .with_id("m3"),
    );
    let prompt = user("the port is 5432, fix the migration error", "m1");
    let answer = user("fixed the migration error by creating the table", "m4");
    vec![
        vec![prompt, call, result],
        vec![answer.clone()],
        compaction("c1", "the migration was fixed", &[answer]),
        vec![user("what port was it", "m5")],
    ]
}

pub(super) async fn recall_finds_what_was_summarized<S: Store>(store: &S) {
    append_all(store, "s.jsonl", &conversation()).await;
    let found = store
        .recall("s.jsonl", &RecallQuery::new("9f8e7d6"))
        .await
        .expect("recall");
    let hit = &found.hits[0];
    assert_eq!(hit.id, "toolu_9");
    assert_eq!(hit.entry, "m3");
    assert_eq!(hit.position, 2);
    assert_eq!(hit.kind, ItemKind::ToolResult);
    assert_eq!(hit.role, Some(Role::User));
    assert_eq!(hit.tool.as_deref(), Some("bash"));
    assert_eq!(hit.call.as_deref(), Some("toolu_9"));
    assert!(hit.error);
    assert_eq!(hit.summarized_by.as_deref(), Some("c1"));
    assert_eq!(hit.exact, 1);
    assert!(hit.snippet.contains("9f8e7d6c5b4a3f21"));
    // The kept copy and the message after the compaction are in the effective context.
    let found = store
        .recall("s.jsonl", &RecallQuery::new("table port"))
        .await
        .expect("recall");
    assert_eq!(hit_ids(&found), ["m1#0"]);
    let all = store
        .recall(
            "s.jsonl",
            &RecallQuery::new("table port").with_context(true),
        )
        .await
        .expect("recall");
    let mut ids = hit_ids(&all);
    ids.sort_unstable();
    assert_eq!(ids, ["m1#0", "m4#0", "m5#0"]);
    same_as_scan(store, "s.jsonl").await;
    let missing = store.recall("none.jsonl", &RecallQuery::new("x")).await;
    assert!(matches!(missing, Err(StoreError::NotFound { .. })));
}

pub(super) async fn fetch_gives_items_by_id<S: Store>(store: &S) {
    append_all(store, "s.jsonl", &conversation()).await;
    let by_call = store.fetch("s.jsonl", "toolu_9", 1).await.expect("fetch");
    assert_eq!(by_call.asked, ["toolu_9"]);
    let ids: Vec<&str> = by_call.items.iter().map(|i| i.id.as_str()).collect();
    assert_eq!(ids, ["m2#0", "toolu_9", "m4#0"]);
    let by_entry = store.fetch("s.jsonl", "m1", 0).await.expect("fetch");
    assert_eq!(by_entry.asked, ["m1#0"]);
    assert_eq!(by_entry.items.len(), 1);
    let summary = store.fetch("s.jsonl", "c1#0", 0).await.expect("fetch");
    assert_eq!(summary.items[0].kind, ItemKind::Summary);
    assert_eq!(summary.items[0].text, "the migration was fixed");
    for id in ["toolu_9", "m1", "m2#0", "c1", "@3"] {
        assert_eq!(
            store.fetch("s.jsonl", id, 2).await.expect("fetch"),
            fetch_by_scan(store, "s.jsonl", id, 2).await.expect("scan"),
            "fetch of {id} differs from the scan's"
        );
    }
    let missing = store.fetch("s.jsonl", "m99", 0).await;
    assert!(matches!(missing, Err(StoreError::NotFound { .. })));
}

pub(super) async fn recall_after_an_import<S: Store>(store: &S) {
    store
        .append_records("s.jsonl", Head::EMPTY, &records_of(CONTRACT_FILE))
        .await
        .expect("import");
    let found = store
        .recall("s.jsonl", &RecallQuery::new("a.rs"))
        .await
        .expect("recall");
    assert_eq!(hit_ids(&found)[0], "f4#0");
    let found = store
        .recall("s.jsonl", &RecallQuery::new("fn main"))
        .await
        .expect("recall");
    assert_eq!(found.hits[0].id, "t1");
    assert_eq!(found.hits[0].tool.as_deref(), Some("read"));
    assert_eq!(found.hits[0].summarized_by.as_deref(), Some("x9"));
    // What follows the foreign compaction is the effective context.
    let found = store
        .recall("s.jsonl", &RecallQuery::new("tabs"))
        .await
        .expect("recall");
    assert!(found.hits.is_empty(), "{:?}", found.hits);
    same_as_scan(store, "s.jsonl").await;
}
