//! Issue 39, point 4: an agent that compacts with panto's summary (`Driver::compact_with`)
//! between a tool call and its results goes on, on every protocol that binds thinking to the
//! request that produced it: the call's thinking goes back valid, or with Anthropic's
//! `drop_block` so that the API drops it instead of refusing the request. Each runs against the
//! emulator of its provider's rule (`emulate`), with panto's summary written in between.

use std::sync::Arc;

use panto_compact::model::ContentBlock;
use panto_compact::{CompactOutcome, CompactRun, MemoryLog, Provider};
use serde_json::json;

use crate::common::config;
use crate::emulate::Seen;
use crate::emulate::claude::Claude;
use crate::emulate::gemini::Gemini;
use crate::emulate::responses::Responses;
use crate::preserved::{driver, note, results};

/// The window of every emulator, in tokens (a quarter of a request's bytes): no overflow here.
const WINDOW: u64 = 20_000;

/// Two notes, a third that asks for a tool, `/compact` while the call waits for its results,
/// the results, then one more tool loop. Returns how many thinking blocks the kept call
/// carries in the session (the session keeps them all).
async fn compact_between_call_and_result(provider: Arc<dyn Provider>, model: &str) {
    let mut agent = driver(provider, model, MemoryLog::memory());
    for n in 1..=2 {
        agent
            .send(vec![note(n, 900, false)], &mut |_| {})
            .await
            .unwrap_or_else(|e| panic!("note {n}: {e}"));
    }
    let call = agent
        .send(vec![note(3, 300, true)], &mut |_| {})
        .await
        .unwrap()
        .message;
    assert!(
        call.tool_use_ids().next().is_some(),
        "the model called a tool"
    );
    let outcome = agent
        .compact_with(CompactRun::manual(None).with_force(true))
        .await
        .unwrap();
    assert!(
        matches!(outcome, CompactOutcome::Compacted(_)),
        "{outcome:?}"
    );
    let kept = agent.context().messages.last().unwrap();
    assert!(
        kept.kept_by().is_some(),
        "the call is kept after the summary"
    );
    assert!(
        kept.content
            .iter()
            .any(|b| !matches!(b, ContentBlock::Text(_) | ContentBlock::ToolUse(_))),
        "the session keeps the call's thinking: {kept:?}"
    );
    let answer = agent
        .send(vec![results(&call, 40)], &mut |_| {})
        .await
        .unwrap_or_else(|e| panic!("the results after the compaction: {e}"));
    assert!(
        answer.compaction.is_none(),
        "no overflow, no second compaction"
    );
    let next = agent
        .send(vec![note(4, 200, true)], &mut |_| {})
        .await
        .unwrap()
        .message;
    agent
        .send(vec![results(&next, 40)], &mut |_| {})
        .await
        .unwrap_or_else(|e| panic!("the next tool loop: {e}"));
}

/// Every request was answered, and one of them was panto's summary.
fn all_answered(seen: &[Seen]) {
    let refused: Vec<&Option<String>> = seen
        .iter()
        .filter(|s| s.status != 200)
        .map(|s| &s.refusal)
        .collect();
    assert!(refused.is_empty(), "refused: {refused:#?}");
    assert_eq!(seen.iter().filter(|s| s.kind == "summary").count(), 1);
}

#[tokio::test]
async fn anthropic_keeps_a_calls_thinking_valid_across_compact_with() {
    let (server, claude) = Claude::start(WINDOW).await;
    let provider: Arc<dyn Provider> =
        Arc::new(panto_providers::AnthropicProvider::new(config(&server.uri())).unwrap());
    compact_between_call_and_result(provider, "claude-emulated").await;
    let state = claude.state();
    all_answered(&state.seen);
    // The request that carried the results sent the kept call's thinking with `drop_block`.
    let summary = state.seen.iter().position(|s| s.kind == "summary").unwrap();
    let results = state.seen[summary + 1..]
        .iter()
        .find(|s| s.kind == "chat")
        .unwrap();
    assert_eq!(
        results
            .body
            .pointer("/thinking/block_binding/prefix_mismatch_behavior"),
        Some(&json!("drop_block")),
        "{}",
        results.raw
    );
    assert!(results.raw.contains("\"type\":\"thinking\""));
    assert!(
        state.dropped >= 1,
        "the stale thinking was dropped by the API"
    );
    assert!(
        state.accepted > 0,
        "thinking written after it went back valid"
    );
}

#[tokio::test]
async fn gemini_keeps_a_calls_thought_signature_across_compact_with() {
    let (server, gemini) = Gemini::start(WINDOW).await;
    let provider: Arc<dyn Provider> =
        Arc::new(panto_providers::GeminiProvider::new(config(&server.uri())).unwrap());
    compact_between_call_and_result(provider, "gemini-emulated").await;
    let state = gemini.state();
    all_answered(&state.seen);
    assert!(state.accepted >= 2, "{}", state.accepted);
}

#[tokio::test]
async fn responses_keeps_a_calls_reasoning_across_compact_with() {
    let (server, responses) = Responses::start(WINDOW).await;
    let provider: Arc<dyn Provider> = Arc::new(
        panto_providers::OpenAiResponsesProvider::new(config(&format!("{}/v1", server.uri())))
            .unwrap()
            .with_encrypted_reasoning(true),
    );
    compact_between_call_and_result(provider, "gpt-emulated").await;
    let state = responses.state();
    all_answered(&state.seen);
    assert!(
        state.accepted > 0,
        "reasoning items went back and were verified"
    );
}
