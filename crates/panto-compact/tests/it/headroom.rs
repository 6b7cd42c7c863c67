//! Headroom after compacting ahead (issue 39, point 2): a proactive compaction aims at half the
//! threshold it crossed (`CompactRun::target_tokens`, set by the `Driver`), and the ledger's
//! rendering is budgeted from that target, not from the room the window leaves. Over 200
//! proactive compactions at 4k, 8k and 32k windows, with notes that fill the ledger (a file,
//! an error and a command each), no two consecutive sends both compact, and every compaction
//! keeps a whole earlier turn verbatim besides the prompt in flight.
//!
//! The model, the driver and the loop of proactive cycles are shared with `tiers.rs`, which
//! runs them with the tiered and clearing strategies.

use std::sync::Arc;

use panto_compact::{
    CompactionReport, CompactionStrategy, Compactor, CompactorConfig, Driver, KnownWindows,
    MemoryLog, MemoryStore, ModelRef, Window, WindowSource,
};
use panto_model::{Message, Role, SequentialIds, Usage};
use panto_provider::{EventSink, Provider, ProviderError, Request, async_trait};

/// The agent's system prompt; a request with another one is a compaction request.
pub(crate) const AGENT: &str = "You are the agent.";

/// The share of the window a request is compacted ahead above.
pub(crate) const SHARE: f64 = 0.8;

/// A model that answers a note briefly and summarizes in a few sentences (its summaries do
/// not grow with the transcript, as a model's within its output limit do not).
pub(crate) struct Model;

#[async_trait]
impl Provider for Model {
    fn name(&self) -> &str {
        "model"
    }

    async fn complete(
        &self,
        request: &Request,
        _events: EventSink<'_>,
    ) -> Result<Message, ProviderError> {
        let text = if request.system == AGENT {
            "Noted; the fix is in and the tests pass again.".to_owned()
        } else {
            // The notes the transcript holds, first and last: each summary says something new.
            let text = serde_json::to_string(&request.messages).unwrap();
            let notes: Vec<&str> = text
                .split("Note ")
                .skip(1)
                .filter_map(|rest| rest.split('.').next())
                .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
                .collect();
            format!(
                "The user reported compile errors in the parser's modules, notes {} to {}; the \
                 assistant fixed each and ran the tests. Work goes on module by module.",
                notes.first().unwrap_or(&"?"),
                notes.last().unwrap_or(&"?")
            )
        };
        Ok(Message::assistant_text(text).with_usage(Usage::new(100, 20)))
    }
}

/// Note `i`, of about `tokens` tokens: a file edited, an error met and a command run (each a
/// new ledger item), and filler.
pub(crate) fn note(i: usize, tokens: u64) -> Message {
    let head = format!(
        "Note {i}. I edited src/parser/module_{i}.rs and ran `cargo test -p parser --test t{i}`; \
         it failed with error[E0{:03}]: mismatched types in src/parser/module_{i}.rs:{}:9. ",
        i % 1000,
        10 + i
    );
    let filler = "The parser reads the grammar and keeps every token. ";
    let repeats = usize::try_from(tokens * 4 / filler.len() as u64).unwrap_or(1);
    Message::user_text(head + &filler.repeat(repeats.max(1)))
}

/// A driver over an empty session with a `window`-token window, compacting ahead at [`SHARE`]
/// with `strategy`, keeping a quarter of the window verbatim.
pub(crate) fn driver(window: u64, strategy: CompactionStrategy) -> Driver<MemoryStore> {
    driver_of(
        Compactor::new(ModelRef::new(Arc::new(Model), "model")),
        window,
        strategy,
    )
}

/// [`driver`] over `compactor` (one with an event handler, say).
pub(crate) fn driver_of(
    compactor: Compactor,
    window: u64,
    strategy: CompactionStrategy,
) -> Driver<MemoryStore> {
    let compactor = compactor
        .with_ids(Arc::new(SequentialIds::new()))
        .with_config(
            CompactorConfig::new()
                .with_keep_tokens(window / 4)
                .with_compaction_strategy(strategy),
        );
    let windows = KnownWindows::new().with(Window::new(window, WindowSource::Configured));
    Driver::new(compactor, MemoryLog::memory(), Default::default())
        .with_windows(windows)
        .with_system(AGENT)
        .with_max_output_tokens(256)
        .with_auto_compact(Some(SHARE))
}

/// Sends `turn(i)` for i = 0, 1, ... until `cycles` compactions ahead were written, failing
/// when two consecutive sends both compact ahead; `check` sees each compaction with the driver
/// after it and the send's index. Returns the sends it took and the largest request after a
/// compaction (less the send's reply), as a share of the threshold.
pub(crate) async fn proactive_cycles(
    d: &mut Driver<MemoryStore>,
    window: u64,
    cycles: usize,
    mut turn: impl FnMut(usize) -> Vec<Message>,
    mut check: impl FnMut(&Driver<MemoryStore>, &CompactionReport, usize),
) -> (usize, f64) {
    let threshold = (window as f64 * SHARE) as u64;
    let (mut compactions, mut previous, mut largest_after) = (0, false, 0.0f64);
    let mut i = 0;
    while compactions < cycles {
        let reply = d
            .send(turn(i), &mut |_| {})
            .await
            .unwrap_or_else(|e| panic!("window {window}, send {i}: {e}"));
        let compacted = reply.compacted_ahead.is_some();
        assert!(
            !(compacted && previous),
            "window {window}: sends {} and {i} both compacted ahead",
            i - 1
        );
        if let Some(report) = &reply.compacted_ahead {
            compactions += 1;
            check(d, report, i);
            let after = d.estimate().total() - panto_size::Heuristic.message(&reply.message);
            largest_after = largest_after.max(after as f64 / threshold as f64);
        }
        previous = compacted;
        i += 1;
    }
    (i, largest_after)
}

/// Sends notes until `cycles` compactions ahead were written, each keeping a whole earlier
/// turn verbatim; returns the sends it took and the largest request after a compaction, as a
/// share of the threshold.
async fn cycles(window: u64, cycles: usize) -> (usize, f64) {
    let mut d = driver(window, CompactionStrategy::Summary);
    let turn = |i| vec![note(i, window / 24)];
    proactive_cycles(&mut d, window, cycles, turn, |d, report, i| {
        // The context after the compaction (less this send's reply): the summary, then
        // kept turns verbatim. One of them is a whole earlier turn, its reply with it.
        let context = &d.context().messages;
        let kept = &context[..context.len() - 1];
        assert!(
            kept.iter()
                .any(|m| m.role == Role::Assistant && m.kept_by() == Some(&report.id[..])),
            "window {window}, send {i}: compaction {} kept no earlier turn verbatim",
            report.id
        );
    })
    .await
}

#[tokio::test]
async fn compacting_ahead_leaves_room_for_several_sends_at_4k_8k_and_32k() {
    for window in [4_096, 8_192, 32_768] {
        let (sends, after) = cycles(window, 200).await;
        println!(
            "window {window}: 200 compactions ahead in {sends} sends, the request after one at most {:.0}% of the threshold",
            after * 100.0
        );
        // Half the threshold is the target; the kept turns are whole, so a little more.
        assert!(after <= 0.75, "window {window}: {after}");
    }
}
