//! The recall checks of the conformance suite: what every store's [`Store::recall`] and
//! [`Store::fetch`] answer, the same as the default that reads the whole history
//! ([`recall_by_scan`], [`fetch_by_scan`]), so an index a store keeps is proven to change
//! nothing but the time.

use panto_model::{ContentBlock, Entry, ItemKind, Items, Message, Role};

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
/// the default gives (ids, order, exact counts, scores, snippets), and that its fetch gives
/// what the default gives ([`same_fetch_as_scan`]).
///
/// # Panics
/// When they differ (test support).
pub async fn same_as_scan<S: Store + ?Sized>(store: &S, session: &str) {
    same_fetch_as_scan(store, session).await;
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

/// The ids a fetch check asks for in `session`: every item's own id and every entry's (as
/// [`Items`] names them, `@N` for an entry without one), `@N` of every position and the next,
/// an id with spaces around it, and ids nothing has; spread over at most 48 when there are more.
async fn ids_of<S: Store + ?Sized>(store: &S, session: &str) -> Vec<String> {
    let text = super::export(store, session, 256).await;
    let mut walk = Items::new();
    let mut ids: Vec<String> = Vec::new();
    let mut entries = 0u64;
    for (position, record) in records_of(&text).iter().enumerate() {
        let position = position as u64;
        entries = position + 1;
        let entry = record.decode(1).expect("a stored record decodes");
        ids.push(format!("@{position}"));
        if let Some(id) = entry.id() {
            ids.push(id.to_owned());
        }
        for item in walk.of(position, &entry) {
            ids.push(item.id);
        }
    }
    let mut seen = std::collections::HashSet::new();
    ids.retain(|i| seen.insert(i.clone()));
    if ids.len() > 48 {
        let step = ids.len().div_ceil(48);
        ids = ids.into_iter().step_by(step).collect();
    }
    if let Some(first) = ids.iter().find(|i| !i.starts_with('@')).cloned() {
        ids.push(format!("  {first} "));
    }
    ids.extend([
        format!("@{entries}"),
        "@007".to_owned(),
        "no-such-id".to_owned(),
    ]);
    ids
}

/// Checks that `store`'s fetch of every id of `session` ([`ids_of`]) with 0, 1 and 2 entries
/// of context gives what the default gives: the same items, or not found for both.
///
/// # Panics
/// When they differ (test support).
pub async fn same_fetch_as_scan<S: Store + ?Sized>(store: &S, session: &str) {
    if store.read(session, Head::EMPTY, 1).await.is_err() {
        return;
    }
    for id in ids_of(store, session).await {
        for context in [0, 1, 2] {
            let mine = store.fetch(session, &id, context).await;
            let scan = fetch_by_scan(store, session, &id, context).await;
            match (mine, scan) {
                (Ok(mine), Ok(scan)) => assert_eq!(
                    mine, scan,
                    "fetch of {id:?} with context {context} differs from the scan's"
                ),
                (
                    Err(mine @ StoreError::NotFound { .. }),
                    Err(scan @ StoreError::NotFound { .. }),
                ) => {
                    assert_eq!(mine.to_string(), scan.to_string(), "fetch of {id:?}");
                }
                (mine, scan) => {
                    panic!("fetch of {id:?} with context {context}: {mine:?}, the scan's {scan:?}")
                }
            }
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

/// A session where ids collide: an entry `dup` at 0 and the result of call `dup` at 7 (an
/// item's own id wins over the entry's), call `t1` answered twice, at 2 and at 6 (the
/// earliest), an entry whose id is `@5` at 1 (the entry `@5` names is the earlier of it and
/// position 5), an undo at 4 (no items: `@4` names nothing), results whose calls are entries
/// before them (a tool call's own id is its entry's and block, `k3#0`).
fn colliding() -> Vec<Vec<Entry>> {
    let call = |id: &str, tool: &str, entry: &str| {
        Entry::Message(
            Message::new(
                Role::Assistant,
                vec![ContentBlock::tool_use(
                    id,
                    tool,
                    serde_json::json!({"n": entry}),
                )],
            )
            .with_id(entry),
        )
    };
    let result = |id: &str, text: &str, entry: &str| {
        Entry::Message(
            Message::new(Role::User, vec![ContentBlock::tool_result(id, text, false)])
                .with_id(entry),
        )
    };
    vec![
        vec![user("first", "dup"), user("second", "@5")],
        vec![
            result("t1", "early answer", "r2"),
            call("dup", "grep", "k3"),
        ],
        vec![Entry::Undo(
            panto_model::UndoEntry::new("c-none").with_id("u4"),
        )],
        vec![call("t1", "read", "k5"), result("t1", "late answer", "r6")],
        vec![result("dup", "dup answer", "r7"), user("last", "m8")],
    ]
}

pub(super) async fn fetch_follows_the_id_rules<S: Store>(store: &S) {
    append_all(store, "s.jsonl", &colliding()).await;
    let ids = |f: &crate::recall::Fetched| -> Vec<String> {
        f.items.iter().map(|i| i.id.clone()).collect()
    };
    // The result's own id `dup` (at 7) wins over the entry `dup` (at 0); its tool is the call's
    // at 3, before what is read.
    let dup = store.fetch("s.jsonl", "dup", 0).await.expect("fetch");
    assert_eq!(dup.asked, ["dup"]);
    assert_eq!(dup.items[0].position, 7);
    assert_eq!(dup.items[0].kind, ItemKind::ToolResult);
    assert_eq!(dup.items[0].tool.as_deref(), Some("grep"));
    // Of the two results of `t1`, the earliest; its neighbours skip the undo (no items).
    let t1 = store.fetch("s.jsonl", "t1", 1).await.expect("fetch");
    assert_eq!(t1.asked, ["t1"]);
    assert_eq!(ids(&t1), ["@5#0", "t1", "k3#0"]);
    assert_eq!(t1.items[1].text, "early answer");
    assert_eq!(t1.items[1].tool, None, "no call of t1 before it");
    // The late result alone: its tool is its call's, at 5, an entry before it.
    let late = store.fetch("s.jsonl", "r6", 0).await.expect("fetch");
    assert_eq!(late.items[0].tool.as_deref(), Some("read"));
    let around = store.fetch("s.jsonl", "r6", 2).await.expect("fetch");
    assert_eq!(ids(&around), ["k3#0", "k5#0", "t1", "dup", "m8#0"]);
    // An entry's id names its items.
    let k3 = store.fetch("s.jsonl", "k3", 0).await.expect("fetch");
    assert_eq!(k3.asked, ["k3#0"]);
    // `@5` names the entry with that id (at 1) before the entry at position 5.
    let at5 = store.fetch("s.jsonl", "@5", 0).await.expect("fetch");
    assert_eq!(at5.items[0].text, "second");
    // `@4` is an undo: nothing to fetch; nor `@04`, `@9` or the undo's id.
    for missing in ["@4", "@04", "@9", "u4"] {
        let found = store.fetch("s.jsonl", missing, 0).await;
        assert!(
            matches!(found, Err(StoreError::NotFound { .. })),
            "{missing}: {found:?}"
        );
    }
    same_fetch_as_scan(store, "s.jsonl").await;
}

pub(super) async fn fetch_after_an_import_and_a_copy<S: Store>(store: &S) {
    let mut source = crate::source::Records::new(records_of(CONTRACT_FILE), 3);
    store.import("i.jsonl", &mut source).await.expect("import");
    same_fetch_as_scan(store, "i.jsonl").await;
    append_all(store, "s.jsonl", &colliding()).await;
    crate::copy::copy_session(store, "s.jsonl", store, "t.jsonl")
        .await
        .expect("copy");
    same_fetch_as_scan(store, "t.jsonl").await;
    assert_eq!(
        store.fetch("t.jsonl", "r6", 2).await.expect("fetch"),
        store.fetch("s.jsonl", "r6", 2).await.expect("fetch"),
    );
}

/// `rounds` rounds of a tool loop: a prompt (`u{i}`), a call (`a{i}`, call id `toolu_{i}`, tool
/// `bash`), and from the fourth round on the result (`r{i}`) of the call three rounds before, so
/// that a fetch around a result reads entries after its call. For tests of an index of ids that
/// must read only the entries around an id.
pub fn tool_rounds(rounds: usize) -> Vec<Entry> {
    let mut out = Vec::new();
    for i in 0..rounds {
        out.push(user(&format!("round {i}: run the tests"), &format!("u{i}")));
        out.push(Entry::Message(
            Message::new(
                Role::Assistant,
                vec![ContentBlock::tool_use(
                    format!("toolu_{i}"),
                    "bash",
                    serde_json::json!({"command": format!("cargo test round_{i}")}),
                )],
            )
            .with_id(format!("a{i}")),
        ));
        if i >= 3 {
            out.push(Entry::Message(
                Message::new(
                    Role::User,
                    vec![ContentBlock::tool_result(
                        format!("toolu_{}", i - 3),
                        format!("test result of round {}: ok", i - 3),
                        false,
                    )],
                )
                .with_id(format!("r{i}")),
            ));
        }
    }
    out
}

/// What a store's test of reading only the entries around an id fetches from a session of
/// [`tool_rounds`]`(100)`: ids of items, results and positions late in it, with 0 to 2 entries
/// of context, from the store's fetch or by scan (`scan`).
///
/// # Errors
/// The first fetch's that fails.
pub async fn late_fetches<S: Store + ?Sized>(
    store: &S,
    session: &str,
    scan: bool,
) -> Result<Vec<crate::recall::Fetched>, StoreError> {
    let mut out = Vec::new();
    for (id, n) in [
        ("toolu_80", 0),
        ("toolu_80", 2),
        ("r83", 2),
        ("u80#0", 1),
        ("@250", 2),
    ] {
        out.push(if scan {
            fetch_by_scan(store, session, id, n).await?
        } else {
            store.fetch(session, id, n).await?
        });
    }
    Ok(out)
}
