//! Integration tests of panto-compact: every compaction and overflow path with scripted
//! providers, the crash-safety of the append, request snapshots, and property tests of the
//! seed's eight correctness rules.

// Tests fail loudly and handle their own fixture files: unwrapping, reading and writing files
// directly, and sleeping in a helper thread are what they are for.
#![allow(
    clippy::unwrap_used,
    clippy::disallowed_methods,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "test code: fails loudly, handles its own fixtures"
)]

mod ahead;
mod causes;
mod chained;
mod clear;
mod clear_props;
mod compaction;
mod cost;
mod crash;
mod driver;
mod example_session;
mod exports;
mod fold;
mod headroom;
mod ledger;
mod pressure;
mod props;
mod recall;
mod send;
mod session;
mod shared;
mod smallwin;
mod snapshots;
mod thinking_loops;
mod tiers;
mod undo;
mod unstated_together;
mod window;
mod writers;

use std::sync::Arc;

use panto_compact::testing::ScriptedProvider;
use panto_compact::{CompactionPrompt, Compactor, CompactorConfig, MemoryLog, ModelRef};
use panto_model::{ContentBlock, Entry, Message, Role, SequentialIds};
use panto_size::Sizer;
use serde_json::json;

/// Sizes every message at 100 tokens, so budgets count whole messages in tests that must not
/// depend on the real heuristic.
#[derive(Clone, Copy, Debug)]
pub struct Hundred;

impl Sizer for Hundred {
    fn message_sizes(&self, messages: &[Message]) -> Vec<u64> {
        vec![100; messages.len()]
    }
}

/// A user prompt.
pub fn user(text: &str) -> Message {
    Message::user_text(text)
}

/// An assistant answer without tools.
pub fn assistant(text: &str) -> Message {
    Message::assistant_text(text)
}

/// An assistant message that calls tool `id`.
pub fn call(text: &str, id: &str) -> Message {
    Message::new(
        Role::Assistant,
        vec![
            ContentBlock::text(text),
            ContentBlock::tool_use(id, "read", json!({"path": format!("src/{id}.rs")})),
        ],
    )
}

/// The result of tool call `id`.
pub fn result(id: &str, output: &str) -> Message {
    Message::new(
        Role::User,
        vec![ContentBlock::tool_result(id, output, false)],
    )
}

/// A conversation of `rounds` rounds, each `[prompt, tool call, tool result, answer]` (three
/// turns), every message carrying a unique marker `r<round>-<k>`.
pub fn rounds(from: usize, to: usize) -> Vec<Message> {
    let mut out = Vec::new();
    for r in from..to {
        out.push(user(&format!("r{r}-0 please look at file {r}")));
        out.push(call(&format!("r{r}-1 reading"), &format!("tool{r}")));
        out.push(result(
            &format!("tool{r}"),
            &format!("r{r}-2 contents of file {r}"),
        ));
        out.push(assistant(&format!("r{r}-3 done with file {r}")));
    }
    out
}

/// A log holding `messages`, with ids `h1`, `h2`, ...
pub fn log_of(messages: &[Message]) -> MemoryLog {
    MemoryLog::with_entries(
        messages
            .iter()
            .enumerate()
            .map(|(i, m)| {
                let mut m = m.clone();
                m.id = Some(format!("h{}", i + 1).into());
                Entry::Message(m)
            })
            .collect(),
    )
}

/// A scripted provider behind an `Arc`, and a [`ModelRef`] to `model` on it.
pub fn model(name: &str, model: &str) -> (Arc<ScriptedProvider>, ModelRef) {
    let p = Arc::new(ScriptedProvider::new(name));
    let r = ModelRef::new(p.clone(), model);
    (p, r)
}

/// A compactor over `active` with deterministic ids, [`Hundred`] sizes and `keep` tokens.
pub fn compactor(active: ModelRef, keep: u64) -> Compactor {
    Compactor::new(active)
        .with_ids(Arc::new(SequentialIds::new()))
        .with_sizer(Hundred)
        .with_config(CompactorConfig::new().with_keep_tokens(keep))
}

/// A short compaction prompt, so that the small conversations of these tests leave the fold
/// room in the windows their scripted overflows report (the built-in prompt alone is larger).
pub fn short_prompt() -> CompactionPrompt {
    CompactionPrompt::from_text("Summarize the transcript for the next model.").unwrap()
}

/// Drops the `kept_by` marker and the id, to compare a kept copy with its original.
pub fn strip(m: &Message) -> Message {
    let mut m = m.clone();
    m.extra.remove(panto_model::KEPT_BY);
    m.id = None;
    m
}

/// Runs a future to completion on a fresh current-thread runtime (for proptest bodies).
pub fn block_on<F: Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime")
        .block_on(f)
}

/// The total of the ruler's estimate of a request of `system` and `messages`, without tools.
pub(crate) fn estimate_request(system: &str, messages: &[Message]) -> u64 {
    panto_size::estimate(system, "", messages).total()
}
