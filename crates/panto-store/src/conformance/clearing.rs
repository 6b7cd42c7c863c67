//! The clearing checks of the conformance suite (issue 37, point 2): a clearing is a
//! compaction entry with `strategy: "clear"` followed by marked copies of the whole
//! conversation with old tool results replaced by placeholders (docs/session.md,
//! "Clearings"). Every store must give it back byte for byte, replay it as
//! `panto_model::replay` does, ignore it when its append was cut, step back over it on an
//! undo, and keep the originals it cleared fetchable whole by their ids, also after a summary
//! chained after it.
//!
//! The session is [`SESSION`], what the compactor writes (a test of panto-compact,
//! `the_store_conformance_clearing_is_what_the_compactor_writes`, proves it is).

use panto_model::{CLEARED, ContentBlock, Entry, UndoEntry, replay};
use serde_json::Value;

use super::export;
use crate::head::Head;
use crate::record::Record;
use crate::store::{Store, fetch_by_scan};

/// Three rounds of a tool loop with bulky results (the second failed), the clearing of the
/// older two, a prompt and its answer, and a summary chained after the clearing: each append
/// one unit, the units separated by an empty line.
pub const SESSION: &str = include_str!("clearing.jsonl");

/// The units of [`SESSION`], each a list of records.
///
/// # Panics
/// On a line that is not an entry (test support).
pub fn units() -> Vec<Vec<Record>> {
    let mut line = 0;
    SESSION
        .split("\n\n")
        .map(|unit| {
            unit.lines()
                .map(|l| {
                    line += 1;
                    Record::parse(l, line).expect("a Contract 1 line")
                })
                .collect()
        })
        .collect()
}

fn entries(records: &[Record]) -> Vec<Entry> {
    records
        .iter()
        .enumerate()
        .map(|(i, r)| r.decode(i + 1).expect("decode"))
        .collect()
}

/// The clearing entry of [`SESSION`] (unit 1) and the ids of the tool results it cleared.
fn the_clearing() -> (String, Vec<String>) {
    (
        clearing_entry().id.expect("an id"),
        cleared_of("tool_result"),
    )
}

/// The clearing entry of [`SESSION`] (unit 1).
fn clearing_entry() -> panto_model::CompactionEntry {
    let Entry::Compaction(c) = entries(&units()[1])[0].clone() else {
        panic!("unit 1 starts with the clearing")
    };
    assert!(c.is_clearing(), "{c:?}");
    c
}

/// The ids of the items of `kind` the clearing of [`SESSION`] lists.
fn cleared_of(kind: &str) -> Vec<String> {
    clearing_entry().extra["cleared"]
        .as_array()
        .expect("a clearing lists what it cleared")
        .iter()
        .filter(|i| i["kind"] == kind)
        .map(|i| i["id"].as_str().expect("an id").to_owned())
        .collect()
}

async fn append_units<S: Store>(store: &S, units: &[Vec<Record>]) -> Head {
    let mut head = store.head("s.jsonl").await.expect("head");
    for unit in units {
        head = store
            .append_records("s.jsonl", head, unit)
            .await
            .expect("append");
    }
    head
}

/// The load equals a replay of `all`, the entries as appended.
async fn loads_as_replay<S: Store>(store: &S, all: &[Entry]) -> panto_model::EffectiveContext {
    let loaded = store.load("s.jsonl").await.expect("load");
    let full = replay(all.to_vec());
    assert_eq!(
        (
            &loaded.context.messages,
            &loaded.context.compaction,
            loaded.context.kept
        ),
        (&full.messages, &full.compaction, full.kept),
        "the load equals a replay of every entry"
    );
    loaded.context
}

pub(super) async fn a_clearing_round_trips_and_replays<S: Store>(store: &S) {
    let units = units();
    let mut all = Vec::new();
    let mut head = Head::EMPTY;
    for (n, unit) in units.iter().enumerate() {
        head = store
            .append_records("s.jsonl", head, unit)
            .await
            .expect("append");
        all.extend(entries(unit));
        let context = loads_as_replay(store, &all).await;
        if n == 1 {
            let c = context.compaction.expect("the clearing is active");
            assert!(c.is_clearing());
            // Results and, for the written file's content, a call (its keys kept) are
            // placeholders, as many as the clearing lists.
            let marked = |call: bool| {
                (context.messages.iter().flat_map(|m| &m.content))
                    .filter(|b| match b {
                        ContentBlock::ToolResult(r) if !call => r.extra.contains_key(CLEARED),
                        ContentBlock::ToolUse(u) if call => u.extra.contains_key(CLEARED),
                        _ => false,
                    })
                    .count()
            };
            assert_eq!(marked(false), the_clearing().1.len());
            assert_eq!(marked(true), cleared_of("tool_input").len());
        }
    }
    assert_eq!(
        export(store, "s.jsonl", 5).await,
        SESSION.replace("\n\n", "\n"),
        "the store gives back every line byte for byte"
    );
    assert_eq!(store.head("s.jsonl").await.expect("head"), head);
}

pub(super) async fn an_interrupted_clearing_is_ignored<S: Store>(store: &S) {
    // Cut after every record of the clearing's append but the last: a store that is not
    // transactional keeps such a prefix after a crash, and replay must read the old context.
    let units = units();
    let clearing = &units[1];
    for cut in 1..clearing.len() {
        let session = format!("cut{cut}.jsonl");
        let mut head = Head::EMPTY;
        let mut all = Vec::new();
        for unit in [&units[0][..], &clearing[..cut]] {
            head = store
                .append_records(&session, head, unit)
                .await
                .expect("append");
            all.extend(entries(unit));
        }
        let loaded = store.load(&session).await.expect("load");
        let old = replay(entries(&units[0]));
        assert_eq!(loaded.context.messages, old.messages, "cut after {cut}");
        assert!(loaded.context.compaction.is_none(), "cut after {cut}");
        assert!(!loaded.warnings.is_empty(), "the cut clearing is reported");
        // What comes after the cut goes on from the old context.
        let next = super::user("after the crash", "m-after");
        store
            .append(&session, head, std::slice::from_ref(&next))
            .await
            .expect("append after the cut");
        all.push(next);
        let loaded = store.load(&session).await.expect("load");
        assert_eq!(loaded.context.messages, replay(all).messages);
        assert_eq!(loaded.context.messages.len(), old.messages.len() + 1);
    }
}

pub(super) async fn undo_steps_back_over_a_clearing<S: Store>(store: &S) {
    // Undo the summary: the clearing is the context again; undo it: the originals are.
    let units = units();
    append_units(store, &units).await;
    let mut all: Vec<Entry> = units.iter().flat_map(|u| entries(u)).collect();
    let Entry::Compaction(summary) = entries(&units[3])[0].clone() else {
        panic!("unit 3 starts with the summary")
    };
    let (clearing, _) = the_clearing();
    let mut head = store.head("s.jsonl").await.expect("head");
    let mut contexts = Vec::new();
    for (n, undoes) in [summary.id.clone().expect("an id"), clearing.clone()]
        .into_iter()
        .enumerate()
    {
        let undo = Entry::Undo(UndoEntry::new(undoes).with_id(format!("u{n}")));
        head = store
            .append("s.jsonl", head, std::slice::from_ref(&undo))
            .await
            .expect("append");
        all.push(undo);
        contexts.push(loads_as_replay(store, &all).await);
    }
    let active = contexts[0].compaction.as_ref().and_then(|c| c.id.clone());
    assert_eq!(active.as_deref(), Some(clearing.as_str()));
    assert!(contexts[1].compaction.is_none());
    // The original results are the context again, with what came after the clearing.
    let originals = replay(entries(&units[0])).messages;
    assert_eq!(contexts[1].messages[..originals.len()], originals[..]);
    assert_eq!(
        contexts[1].messages.len(),
        originals.len() + entries(&units[2]).len()
    );
}

pub(super) async fn cleared_results_are_fetched_whole_by_id<S: Store>(store: &S) {
    let units = units();
    let (_, cleared) = the_clearing();
    assert!(!cleared.is_empty());
    let inputs = cleared_of("tool_input");
    assert!(
        !inputs.is_empty(),
        "the clearing cleared a call's arguments"
    );
    let originals = replay(entries(&units[0])).messages;
    let original = |id: &str| -> String {
        originals
            .iter()
            .flat_map(|m| &m.content)
            .find_map(|b| match b {
                ContentBlock::ToolResult(r) if r.tool_use_id == id => Some(r.content.text()),
                _ => None,
            })
            .expect("the original result")
    };
    // After the clearing, and after the summary chained after it.
    for upto in [2, units.len()] {
        let session = format!("upto{upto}.jsonl");
        let mut head = Head::EMPTY;
        for unit in &units[..upto] {
            head = store
                .append_records(&session, head, unit)
                .await
                .expect("append");
        }
        for id in &cleared {
            let fetched = store.fetch(&session, id, 0).await.expect("fetch");
            let whole = original(id);
            assert!(whole.len() > 1_024, "{id} was bulky");
            assert!(
                fetched.items.iter().any(|i| i.text == whole),
                "{id} is fetched whole: {:?}",
                fetched.items
            );
            assert_eq!(
                fetched,
                fetch_by_scan(store, &session, id, 0).await.expect("scan"),
                "fetch of {id} differs from the scan's"
            );
        }
        // A cleared argument is fetched by its call's item id: the call as it was written.
        for item in &inputs {
            let (message, block) = item.split_once('#').expect("MESSAGE#BLOCK");
            let call = originals
                .iter()
                .find(|m| m.id.as_deref() == Some(message))
                .and_then(|m| m.content.get(block.parse::<usize>().expect("a block")))
                .and_then(|b| match b {
                    ContentBlock::ToolUse(u) => Some(u),
                    _ => None,
                })
                .expect("the original call");
            assert!(call.input.json().len() > 1_024, "{item} was bulky");
            let fetched = store.fetch(&session, item, 0).await.expect("fetch");
            assert_eq!(
                fetched
                    .items
                    .iter()
                    .map(|i| i.text.as_str())
                    .collect::<Vec<_>>(),
                [format!("{} {}", call.name, call.input.json())],
                "{item} is fetched whole"
            );
            assert_eq!(
                fetched,
                fetch_by_scan(store, &session, item, 0).await.expect("scan"),
                "fetch of {item} differs from the scan's"
            );
        }
    }
}

pub(super) async fn a_summary_after_a_clearing_keeps_its_ledger<S: Store>(store: &S) {
    let units = units();
    append_units(store, &units).await;
    let loaded = store.load("s.jsonl").await.expect("load");
    let summary = loaded.context.compaction.expect("the summary is active");
    assert!(!summary.is_clearing());
    let Entry::Compaction(clearing) = entries(&units[1])[0].clone() else {
        panic!("unit 1 starts with the clearing")
    };
    // Every file the clearing's ledger read is in the summary's ledger, as stored.
    let files = |ledger: &Value| -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        collect_paths(ledger, &mut out);
        out
    };
    let cleared = files(&clearing.extra["ledger"]);
    assert!(!cleared.is_empty(), "{:?}", clearing.extra["ledger"]);
    let merged = files(&summary.extra["ledger"]);
    for f in &cleared {
        assert!(merged.contains(f), "{f} is in {merged:?}");
    }
}

/// Every string of `value` that names a source file.
fn collect_paths(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::String(s) if s.starts_with("src/") => out.push(s.clone()),
        Value::Array(items) => items.iter().for_each(|v| collect_paths(v, out)),
        Value::Object(map) => map.values().for_each(|v| collect_paths(v, out)),
        _ => {}
    }
}
