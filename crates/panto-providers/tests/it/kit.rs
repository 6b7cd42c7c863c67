//! The pieces offered to custom providers (`panto_providers::wire`): the rule of which
//! thinking goes back to a protocol that binds it, and the wire preparation; and the request
//! options' escape hatch on every adapter.

use panto_model::{
    ContentBlock, KEPT_BY, Message, OtherBlock, Role, THINKING_KEPT, THINKING_RESET, ThinkingBlock,
};
use panto_provider::{Request, RequestOptions};
use panto_providers::wire::{prepare_conversation, thinking_replay};
use serde_json::{Value, json};
use wiremock::MockServer;

use crate::common;
use crate::protocols::protocols;

fn user(text: &str) -> Message {
    Message::user_text(text)
}

fn thought(text: &str) -> Message {
    Message::new(
        Role::Assistant,
        vec![
            ContentBlock::Thinking(ThinkingBlock::new(text, Some("sig".into()))),
            ContentBlock::text(text),
        ],
    )
}

fn call(id: &str) -> Message {
    Message::new(
        Role::Assistant,
        vec![
            ContentBlock::Thinking(ThinkingBlock::new("call", Some("sig".into()))),
            ContentBlock::Other(OtherBlock::new(
                "redacted_thinking",
                [("data".to_owned(), json!("x"))].into_iter().collect(),
            )),
            ContentBlock::tool_use(id, "read", json!({})),
        ],
    )
}

fn result(id: &str) -> Message {
    Message::new(Role::User, vec![ContentBlock::tool_result(id, "ok", false)])
}

fn copy(mut m: Message, by: &str) -> Message {
    m.extra.insert(KEPT_BY.into(), json!(by));
    m
}

#[test]
fn kept_copies_lose_their_thinking_fresh_turns_keep_it() {
    let messages = vec![
        Message::compaction("summary"),
        copy(user("q1"), "c1"),
        copy(thought("a1"), "c1"),
        user("q2"),
        thought("a2"),
    ];
    let replay = thinking_replay(&messages, true);
    assert_eq!(replay.left_out, [(2, 0)].into_iter().collect());
    assert!(!replay.drop_block);
    // The messages as sent: the copy's text without its thinking, the fresh reply whole.
    let sent = replay.apply(&messages);
    assert_eq!(sent[2].content.len(), 1);
    assert_eq!(sent[4].content.len(), 2);
}

#[test]
fn a_copy_a_native_compaction_kept_valid_keeps_its_thinking() {
    let mut valid = copy(thought("a1"), "c2");
    valid.extra.insert(THINKING_KEPT.into(), json!("c2"));
    let mut again = copy(thought("a0"), "c2");
    again.extra.insert(THINKING_KEPT.into(), json!("c1"));
    let messages = vec![
        Message::compaction("s"),
        again,
        copy(user("q"), "c2"),
        valid,
        user("q2"),
    ];
    let replay = thinking_replay(&messages, true);
    assert_eq!(
        replay.left_out,
        [(1, 0)].into_iter().collect(),
        "only the copy kept again"
    );
}

#[test]
fn the_interrupted_tool_loop_keeps_its_thinking_with_drop_block_while_thinking_is_on() {
    // An overflow in the middle of a loop: the kept copies end with the results.
    let messages = vec![
        Message::compaction("s"),
        copy(user("do it"), "c1"),
        copy(call("t1"), "c1"),
        copy(result("t1"), "c1"),
        thought("done"),
        user("next"),
    ];
    let on = thinking_replay(&messages, true);
    assert!(on.drop_block);
    assert!(
        on.left_out.is_empty(),
        "the loop's thinking and redacted thinking go back"
    );
    let off = thinking_replay(&messages, false);
    assert!(!off.drop_block);
    assert_eq!(off.left_out, [(2, 0), (2, 1)].into_iter().collect());
}

#[test]
fn a_refusal_marks_everything_before_it_stale() {
    let mut reply = thought("after");
    reply.extra.insert(THINKING_RESET.into(), Value::Bool(true));
    let messages = vec![user("q1"), thought("a1"), user("q2"), reply, user("q3")];
    let replay = thinking_replay(&messages, true);
    assert_eq!(replay.left_out, [(1, 0)].into_iter().collect());
    // The request sent again after the refusal carries the mark on its own results: the loop
    // it answers keeps its thinking, with drop_block.
    let mut results = result("t1");
    results
        .extra
        .insert(THINKING_RESET.into(), Value::Bool(true));
    let messages = vec![user("q1"), thought("a1"), user("go"), call("t1"), results];
    let replay = thinking_replay(&messages, true);
    assert!(replay.drop_block);
    assert_eq!(replay.left_out, [(1, 0)].into_iter().collect());
}

#[test]
fn wire_preparation_reads_a_foreign_native_block_by_its_summary() {
    let anthropic: OtherBlock = serde_json::from_value(
        json!({"type": "compaction", "content": "earlier work", "signature": "s"}),
    )
    .map(|b: ContentBlock| match b {
        ContentBlock::Other(o) => o,
        other => panic!("{other:?}"),
    })
    .unwrap();
    let openai: OtherBlock =
        serde_json::from_value(json!({"type": "compaction", "encrypted_content": "e"}))
            .map(|b: ContentBlock| match b {
                ContentBlock::Other(o) => o,
                other => panic!("{other:?}"),
            })
            .unwrap();
    let messages = vec![
        user("hello"),
        Message::new(
            Role::Assistant,
            vec![
                ContentBlock::Other(anthropic),
                ContentBlock::Other(openai),
                ContentBlock::text("on we go"),
            ],
        ),
    ];
    let elsewhere = prepare_conversation(&messages, None);
    let text = serde_json::to_string(&elsewhere).unwrap();
    assert!(text.contains("earlier work"));
    assert!(!text.contains("\"signature\""));
    assert!(!text.contains("encrypted_content"));
    let same = prepare_conversation(&messages, Some("anthropic"));
    assert!(
        serde_json::to_string(&same)
            .unwrap()
            .contains("\"signature\"")
    );
}

/// Every adapter sends the request options' extra body fields and headers.
#[tokio::test]
async fn extra_fields_and_headers_reach_every_protocol() {
    for p in protocols() {
        let server = MockServer::start().await;
        p.answer(&server, p.text_answer("ok", false)).await;
        let request = Request::new("test-model", "", vec![user("hi")], 64).with_options(
            RequestOptions::new()
                .with_body_field("service_tier", json!("flex"))
                .with_header("x-custom-flag", "on"),
        );
        let (result, _) = common::run(&p.provider(&server, false), &request).await;
        result.unwrap();
        let requests = server.received_requests().await.unwrap();
        let body: Value = serde_json::from_slice(&requests[0].body).unwrap();
        assert_eq!(body["service_tier"], json!("flex"), "{}", p.name);
        assert_eq!(
            requests[0].headers.get("x-custom-flag").unwrap(),
            "on",
            "{}",
            p.name
        );
    }
}

/// The caller's `anthropic-beta` values join the adapter's own.
#[cfg(feature = "anthropic")]
#[tokio::test]
async fn anthropic_beta_values_are_joined() {
    let p = protocols()
        .into_iter()
        .find(|p| p.name == "anthropic")
        .unwrap();
    let server = MockServer::start().await;
    p.answer(&server, p.text_answer("ok", false)).await;
    let mut kept = call("t1");
    kept.extra.insert(KEPT_BY.into(), json!("c1"));
    let mut results = result("t1");
    results.extra.insert(KEPT_BY.into(), json!("c1"));
    let request = Request::new(
        "test-model",
        "",
        vec![
            Message::compaction("s"),
            copy(user("go"), "c1"),
            kept,
            results,
        ],
        4_096,
    )
    .with_options(
        RequestOptions::new()
            .with_reasoning_effort(panto_provider::ReasoningEffort::Low)
            .with_header("anthropic-beta", "context-1m-2025-08-07"),
    );
    let (result, _) = common::run(&p.provider(&server, false), &request).await;
    result.unwrap();
    let requests = server.received_requests().await.unwrap();
    let beta = requests[0]
        .headers
        .get("anthropic-beta")
        .unwrap()
        .to_str()
        .unwrap();
    assert_eq!(
        beta,
        "thinking-binding-controls-2026-08-01,context-1m-2025-08-07"
    );
    let body: Value = serde_json::from_slice(&requests[0].body).unwrap();
    assert_eq!(
        body["thinking"]["block_binding"]["prefix_mismatch_behavior"],
        json!("drop_block")
    );
    assert_eq!(body["thinking"]["type"], json!("enabled"));
}

/// Issue 39, point 4: a compaction written between a tool call and its results (the agent's
/// `compact_with` mid loop) keeps the call as a copy, and the results come after it fresh. The
/// loop is in flight: its call's thinking is sent with `drop_block` when thinking is on, not
/// left out (Anthropic refuses an answered call whose message does not start with thinking).
#[test]
fn a_compaction_between_a_call_and_its_results_carries_the_calls_thinking() {
    let messages = vec![
        Message::compaction("summary"),
        copy(user("q"), "c1"),
        copy(call("t1"), "c1"),
        result("t1"),
    ];
    let replay = thinking_replay(&messages, true);
    assert!(replay.drop_block, "{replay:?}");
    assert!(replay.left_out.is_empty(), "{replay:?}");
    assert_eq!(replay.apply(&messages)[2].content.len(), 3);
    // Without thinking on nothing requires it: left out like any stale block.
    let off = thinking_replay(&messages, false);
    assert!(!off.drop_block);
    assert_eq!(off.left_out, [(2, 0), (2, 1)].into_iter().collect());
}
