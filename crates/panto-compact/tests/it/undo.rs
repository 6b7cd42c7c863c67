//! Undo (issue 37, point 7): the context before the latest compaction comes back by one
//! appended entry, undoing twice goes one step further back, and nothing is rewritten.

use panto_compact::{CompactError, CompactOutcome, Driver, MemoryStore, SessionLog, Store};
use panto_model::{Entry, Message, replay};
use std::sync::Arc;

use crate::*;

fn texts(messages: &[Message]) -> Vec<String> {
    messages.iter().map(Message::text).collect()
}

fn driver(messages: &[Message]) -> (Driver<MemoryStore>, Arc<ScriptedProvider>) {
    let (provider, active) = model("p", "m");
    let log = log_of(messages);
    let context = log.replay();
    let driver = Driver::new(
        compactor(active, 200).with_prompt(short_prompt()),
        log,
        context,
    );
    (driver, provider)
}

#[tokio::test]
async fn undoing_twice_goes_back_two_compactions_and_a_third_finds_nothing() {
    let history = rounds(0, 4);
    let (mut driver, provider) = driver(&history);
    let original = driver.context().clone();
    provider.push_text("first summary");
    assert!(matches!(
        driver.compact(None).await.unwrap(),
        CompactOutcome::Compacted(_)
    ));
    let first = driver.context().clone();
    driver
        .append(vec![user("r9-0 a new prompt"), assistant("r9-3 answered")])
        .await
        .unwrap();
    let with_new = driver.context().clone();
    provider.push_text("second summary");
    assert!(matches!(
        driver.compact(None).await.unwrap(),
        CompactOutcome::Compacted(_)
    ));
    let written = driver.log().entries();
    let second = driver.context().compaction.clone().unwrap().id.unwrap();

    let undone = driver.undo().await.unwrap();
    assert_eq!(undone.undid, second);
    assert!(undone.id.starts_with('u'), "{}", undone.id);
    assert_eq!(
        driver.context(),
        &with_new,
        "the context before the second compaction"
    );
    assert!(undone.tokens_after > undone.tokens_before);
    let entries = driver.log().entries();
    assert_eq!(
        entries[..written.len()],
        written[..],
        "nothing is rewritten"
    );
    assert_eq!(entries.len(), written.len() + 1);
    assert!(matches!(&entries[written.len()], Entry::Undo(u) if u.undoes == undone.undid));

    let again = driver.undo().await.unwrap();
    assert_ne!(again.undid, undone.undid);
    // The first compaction is undone too: the original history, then what came after it.
    let mut expected = texts(&original.messages);
    expected.extend(["r9-0 a new prompt".to_owned(), "r9-3 answered".to_owned()]);
    assert_eq!(texts(&driver.context().messages), expected);
    assert!(driver.context().compaction.is_none());
    assert_ne!(first, *driver.context());
    // The store's load and a replay of every entry agree.
    assert_eq!(driver.log().replay(), *driver.context());
    assert_eq!(replay(driver.log().entries()), *driver.context());

    let nothing = driver.undo().await.unwrap_err();
    assert!(
        matches!(nothing, CompactError::NothingToUndo(_)),
        "{nothing}"
    );
    assert!(
        nothing.to_string().starts_with("nothing to undo: "),
        "{nothing}"
    );
}

#[tokio::test]
async fn an_undo_after_another_writer_appended_writes_nothing() {
    let (mut driver, provider) = driver(&rounds(0, 3));
    provider.push_text("summary");
    driver.compact(None).await.unwrap();
    let (store, session) = (
        driver.log().store().clone(),
        driver.log().session().to_owned(),
    );
    // Another writer appends to the session behind the driver's back.
    let mut other = SessionLog::new(store.clone(), session.as_str(), driver.log().head());
    other
        .append(&[Entry::Message(user("another writer"))])
        .await
        .unwrap();
    let before = store.entries(&session);
    let error = driver.undo().await.unwrap_err();
    assert!(matches!(error, CompactError::Store(_)), "{error}");
    assert_eq!(store.entries(&session), before, "nothing was written");
    assert!(driver.context().compaction.is_some());
    assert_eq!(
        store.head(&session).await.unwrap().get(),
        before.len() as u64
    );
}
