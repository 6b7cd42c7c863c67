//! Compile-time proof that the futures of a turn are `Send`, and a turn run inside
//! `tokio::spawn` on the multi-thread runtime, as an axum handler or a worker task would.

use panto_compact::KnownWindows;
use std::future::Future;

use panto_compact::testing::ScriptedProvider;
use panto_compact::{CompactRun, Compactor, Driver, MemoryLog, SessionLog, Store};
use panto_model::{EffectiveContext, Message};
use panto_provider::StreamEvent;

use crate::{log_of, model, rounds};

/// Fails to compile unless `future` is `Send` (and so may be spawned on a multi-thread runtime).
fn assert_send<F: Future + Send>(future: F) -> F {
    future
}

/// Fails to compile unless the value may move to another thread.
fn assert_send_value<T: Send>(_: &T) {}

// The functions below are never called: they exist so that the compiler checks the futures'
// `Send` bounds for any store (a `Store` is `Send + Sync`).

#[allow(dead_code)]
fn driver_send_is_send<S: Store>(driver: &mut Driver<S>) {
    let mut sink = |_: StreamEvent<'_>| {};
    drop(assert_send(
        driver.send(vec![Message::user_text("hi")], &mut sink),
    ));
}

#[allow(dead_code)]
fn driver_compact_is_send<S: Store>(driver: &mut Driver<S>) {
    drop(assert_send(driver.compact(None)));
    drop(assert_send(driver.undo()));
}

#[allow(dead_code)]
fn compactor_compact_is_send<S: Store>(
    compactor: &mut Compactor,
    context: &EffectiveContext,
    log: &mut SessionLog<S>,
) {
    drop(assert_send(compactor.compact(
        context,
        log,
        CompactRun::manual(None),
        &mut KnownWindows::new(),
    )));
    drop(assert_send(compactor.dry_run(
        context,
        CompactRun::manual(None),
        &mut KnownWindows::new(),
    )));
}

#[test]
fn a_driver_and_its_parts_may_move_between_threads() {
    let (_, active) = model("fake", "m1");
    let driver = Driver::new(
        Compactor::new(active),
        MemoryLog::memory(),
        EffectiveContext::default(),
    );
    assert_send_value(&driver);
    assert_send_value(&ScriptedProvider::new("fake"));
}

#[test]
fn a_driver_turn_with_overflow_recovery_runs_in_tokio_spawn_on_the_multi_thread_runtime() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .expect("runtime");
    let history = rounds(0, 16);
    let log = log_of(&history);
    let (provider, active) = model("fake", "m1");
    provider.push(Err(panto_compact::testing::overflow(None, Some(1_600))));
    // The fold fits each compaction request, with the output floor, in the window the overflow
    // reported: two of them.
    provider.push_text("the summary");
    provider.push_text("the whole summary");
    provider.push_text("the answer");
    let compactor = crate::compactor(active, 20_000).with_prompt(crate::short_prompt());
    let driver = Driver::new(compactor, log.clone(), log.replay())
        .with_system("You are a careful coding agent.");

    let handle = runtime.spawn(async move {
        let mut driver = driver;
        let mut streamed = String::new();
        let mut sink = |event: StreamEvent<'_>| {
            if let StreamEvent::Text(t) = event {
                streamed.push_str(t);
            }
        };
        let reply = driver
            .send(vec![Message::user_text("and now?")], &mut sink)
            .await;
        (reply, streamed, driver.log().clone())
    });
    let (reply, streamed, log) = runtime.block_on(handle).expect("the task did not panic");

    let reply = reply.expect("the turn succeeds after one compaction");
    assert_eq!(reply.message.text(), "the answer");
    assert!(
        reply.compaction.is_some(),
        "overflow recovery compacted once"
    );
    // Only the conversation request streams to the turn's sink; compaction requests do not.
    assert_eq!(streamed, "the answer");
    assert_eq!(provider.calls(), 4);
    assert_eq!(
        log.replay().messages.last().map(Message::text),
        Some("the answer".into())
    );
}
