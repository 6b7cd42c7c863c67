//! Issue 37's property test of clearing: after any sequence of appends, clearings, tiered
//! runs, summaries and undos over a generated conversation (thinking, tool loops with results
//! spread over messages, images, failed and bulky results, calls with bulky arguments), every
//! tool call has its result (a call the conversation still waits on aside), a call whose
//! arguments were cleared keeps their keys, the effective context is the replay of what was
//! appended, it loads the same from the JSONL and the SQLite stores, and every result and
//! every call's arguments a clearing replaced are fetched whole by the id the clearing names,
//! from the driver and from each store.

use std::collections::HashMap;
use std::sync::Arc;

use panto_compact::{
    CompactError, CompactOutcome, CompactionStrategy, Compactor, CompactorConfig, Driver,
    MemoryStore, Store,
};
use panto_model::{
    CLEARED, ContentBlock, Entry, Message, Problem, RawJson, SequentialIds, ToolResultContent,
    replay, validate,
};
use panto_session::{JsonlStore, SessionOptions};
use panto_store::{Head, Record};
use panto_store_sqlite::SqliteStore;
use proptest::prelude::*;

use crate::{log_of, model};

/// What is done after each chunk of the conversation is appended.
#[derive(Clone, Copy, Debug)]
enum Op {
    Nothing,
    Compact(CompactionStrategy),
    Undo,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        2 => Just(Op::Nothing),
        3 => Just(Op::Compact(CompactionStrategy::Clear)),
        2 => Just(Op::Compact(CompactionStrategy::Tiered)),
        1 => Just(Op::Compact(CompactionStrategy::Summary)),
        1 => Just(Op::Undo),
    ]
}

/// A tool output of about 1.5 KB whose first line names `k`.
fn bulky(k: usize) -> String {
    let mut out = format!("output {k}: the first line\n");
    for i in 0..40 {
        out.push_str(&format!("line {i} of output {k}, some words\n"));
    }
    out
}

/// The arguments of a call that writes a file of about 1.5 KB, `k`'s.
fn bulky_input(k: usize) -> RawJson {
    RawJson::from(serde_json::json!({"path": format!("src/f{k}.rs"), "content": bulky(k)}))
}

/// The generated conversation with the results and the calls `flags` marks made bulky, every
/// message with an id, and the chunks it is appended in (never between the results of one
/// step).
fn conversation(
    session: panto_model::arbitrary::Session,
    flags: &[bool],
    cuts: &[prop::sample::Index],
) -> (Vec<Message>, Vec<usize>) {
    let mut messages = session.messages;
    let mut k = 0;
    for (i, m) in messages.iter_mut().enumerate() {
        m.id = Some(format!("g{i}").into());
        for b in &mut m.content {
            match b {
                ContentBlock::ToolResult(r) => {
                    k += 1;
                    if flags[k % flags.len()] {
                        r.content = ToolResultContent::Text(bulky(k));
                    }
                }
                ContentBlock::ToolUse(u) => {
                    k += 1;
                    if flags[k % flags.len()] {
                        u.input = bulky_input(k);
                    }
                }
                _ => {}
            }
        }
    }
    let is_results = |m: &Message| {
        m.content
            .iter()
            .any(|b| matches!(b, ContentBlock::ToolResult(_)))
    };
    let mut ends: Vec<usize> = cuts
        .iter()
        .map(|c| 1 + c.index(messages.len()))
        .filter(|&e| !messages.get(e).is_some_and(is_results))
        .collect();
    ends.push(messages.len());
    ends.sort_unstable();
    ends.dedup();
    (messages, ends)
}

/// Every problem of `messages` but a call the last message makes, which waits for its results.
fn problems(messages: &[Message]) -> Vec<Problem> {
    let last = messages.len().saturating_sub(1);
    validate(messages)
        .into_iter()
        .filter(|p| !matches!(p, Problem::UnansweredCall { message, .. } if *message == last))
        .collect()
}

/// The original text of every tool result of `messages`, by call id.
fn originals(messages: &[Message]) -> HashMap<String, String> {
    crate::clear::results(messages).into_iter().collect()
}

/// The original of every tool call of `messages` by call id: its text as an item
/// (`panto_model::Item`: the name and the arguments' JSON) and the keys of its arguments.
fn original_calls(messages: &[Message]) -> HashMap<String, (String, Vec<String>)> {
    messages
        .iter()
        .flat_map(|m| &m.content)
        .filter_map(|b| match b {
            ContentBlock::ToolUse(u) => Some((
                u.id.clone(),
                (format!("{} {}", u.name, u.input.json()), keys(&u.input)),
            )),
            _ => None,
        })
        .collect()
}

/// The keys of a call's arguments, when they are an object.
fn keys(input: &RawJson) -> Vec<String> {
    input
        .as_object()
        .map(|o| o.keys().cloned().collect())
        .unwrap_or_default()
}

/// The call id of each call of `messages` by its item id (`MESSAGE#BLOCK`).
fn calls_by_item(messages: &[Message]) -> HashMap<String, String> {
    let mut out = HashMap::new();
    for m in messages {
        for (block, b) in m.content.iter().enumerate() {
            if let (Some(id), ContentBlock::ToolUse(u)) = (&m.id, b) {
                out.insert(format!("{id}#{block}"), u.id.clone());
            }
        }
    }
    out
}

/// `store` holds `entries` as session `name`, one append, and loads as their replay, and its
/// fetch of each of `cleared` gives the original whole.
async fn same_on<S: Store>(
    store: &S,
    name: &str,
    entries: &[Entry],
    cleared: &[String],
    whole: &HashMap<String, String>,
) -> Result<(), TestCaseError> {
    let records: Vec<Record> = entries.iter().map(Record::encode).collect();
    store
        .append_records(name, Head::EMPTY, &records)
        .await
        .unwrap();
    let loaded = store.load(name).await.unwrap().context;
    let expected = replay(entries.to_vec());
    prop_assert_eq!(&loaded.messages, &expected.messages);
    prop_assert_eq!(&loaded.compaction, &expected.compaction);
    for id in cleared {
        let fetched = store.fetch(name, id, 0).await.unwrap();
        prop_assert!(
            fetched.items.iter().any(|i| i.text == whole[id]),
            "{} from the store: {:?}",
            id,
            fetched.items
        );
    }
    Ok(())
}

async fn check(
    messages: Vec<Message>,
    ends: Vec<usize>,
    ops: Vec<Op>,
    keep: u64,
) -> Result<(), TestCaseError> {
    let mut whole = originals(&messages);
    let calls = original_calls(&messages);
    let (provider, active) = model("p", "m");
    let compactor = Compactor::new(active)
        .with_ids(Arc::new(SequentialIds::starting_at(1_000)))
        .with_config(CompactorConfig::new().with_keep_tokens(keep));
    let log = log_of(&[]);
    let context = log.replay();
    let mut driver: Driver<MemoryStore> = Driver::new(compactor, log, context);
    let mut cleared: Vec<String> = Vec::new();
    let mut from = 0;
    for (end, op) in ends.into_iter().zip(ops.into_iter().cycle()) {
        driver.append(messages[from..end].to_vec()).await.unwrap();
        from = end;
        match op {
            Op::Nothing => {}
            Op::Undo => match driver.undo().await {
                Ok(_) | Err(CompactError::NothingToUndo(_)) => {}
                Err(e) => prop_assert!(false, "undo: {e}"),
            },
            Op::Compact(strategy) => {
                let (c, log, context) = driver.into_parts();
                let config = c.config().with_compaction_strategy(strategy);
                driver = Driver::new(c.with_config(config), log, context);
                provider.push_text("the summary so far");
                let by_item = calls_by_item(&driver.context().messages);
                match driver.compact(None).await {
                    Ok(CompactOutcome::Compacted(out)) => {
                        for c in &out.report.cleared {
                            match c.kind {
                                "tool_result" => cleared.push(c.id.clone()),
                                // Named by the call's item id; what it fetches is the call
                                // as it was written.
                                "tool_input" => {
                                    let call = &by_item[&c.id];
                                    whole.insert(c.id.clone(), calls[call].0.clone());
                                    cleared.push(c.id.clone());
                                }
                                _ => {}
                            }
                        }
                    }
                    Ok(_)
                    | Err(
                        CompactError::NothingToClear { .. }
                        | CompactError::NotSmaller(_)
                        | CompactError::NothingToCompact(_),
                    ) => {}
                    Err(e) => prop_assert!(false, "{strategy:?}: {e}"),
                }
            }
        }
        let context = driver.context().clone();
        prop_assert_eq!(problems(&context.messages), vec![]);
        for b in context.messages.iter().flat_map(|m| &m.content) {
            if let ContentBlock::ToolUse(u) = b
                && u.extra.contains_key(CLEARED)
            {
                prop_assert_eq!(keys(&u.input), calls[&u.id].1.clone(), "{}", u.input.json());
            }
        }
        let entries = driver.log().entries();
        let replayed = replay(entries.clone());
        prop_assert_eq!(&replayed.messages, &context.messages);
        prop_assert_eq!(&replayed.compaction, &context.compaction);
        for id in &cleared {
            let fetched = driver.fetch(id, 0).await.unwrap();
            prop_assert!(
                fetched.items.iter().any(|i| i.text == whole[id]),
                "{} is fetched whole: {:?}",
                id,
                fetched.items
            );
        }
    }
    let entries = driver.log().entries();
    let dir = tempfile::tempdir().unwrap();
    let jsonl = JsonlStore::new(dir.path(), SessionOptions::default());
    same_on(&jsonl, "s.jsonl", &entries, &cleared, &whole).await?;
    let sqlite = SqliteStore::open(dir.path().join("s.db")).await.unwrap();
    same_on(&sqlite, "s", &entries, &cleared, &whole).await?;
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    #[test]
    fn clearings_keep_pairs_replay_the_same_on_every_store_and_fetch_whole(
        session in panto_model::arbitrary::session(5),
        flags in proptest::collection::vec(prop::bool::weighted(0.6), 5),
        cuts in proptest::collection::vec(any::<prop::sample::Index>(), 1..6),
        ops in proptest::collection::vec(op(), 1..6),
        keep in 20u64..1_500,
    ) {
        let (messages, ends) = conversation(session, &flags, &cuts);
        crate::block_on(check(messages, ends, ops, keep))?;
    }
}
