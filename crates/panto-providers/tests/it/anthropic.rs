//! The Anthropic Messages adapter: its fixtures for the shared scenarios, and what only it
//! does (request shape, thinking and server blocks, citations, error events).

use panto_model::{ContentBlock, Message, OtherBlock, Role, ThinkingBlock, Usage};
use panto_provider::{ProviderError, ToolChoice};
use panto_providers::AnthropicProvider;
use serde_json::{Value, json};
use wiremock::{MockServer, ResponseTemplate};

use crate::common::{
    self, Protocol, assert_malformed, conversation, hello, json_answer, run, sse, sse_answer,
};

/// The Messages protocol for the shared scenarios of `protocols.rs`.
pub(crate) static PROTOCOL: Protocol = Protocol {
    name: "anthropic",
    make: |config| Ok(Box::new(AnthropicProvider::new(config)?)),
    base: |uri| uri.to_owned(),
    path: |_| "/v1/messages",
    key_header: ("x-api-key", ""),
    fixed_headers: &[("anthropic-version", "2023-06-01")],
    text_whole: |text| {
        json!({"model": "claude-x", "content": [{"type": "text", "text": text}], "stop_reason": "end_turn",
               "usage": {"input_tokens": 200, "output_tokens": 30, "cache_read_input_tokens": 1000}})
    },
    text_stream: |text| {
        let (a, b) = common::halves(text);
        let mut events = opening(&[a, b]);
        events.extend(closing("end_turn"));
        sse(&events)
    },
    cut_stream: |text| sse(&opening(&[text])),
    end_marker: "message_stop",
    tool_whole: || {
        json!({"model": "claude-x", "stop_reason": "tool_use",
               "content": [{"type": "tool_use", "id": "call_1", "name": "read", "input": {"path": "a.rs"}}],
               "usage": {"input_tokens": 200, "output_tokens": 30, "cache_read_input_tokens": 1000}})
    },
    tool_stream: || {
        let block = json!({"type": "tool_use", "id": "call_1", "name": "read", "input": {}});
        let deltas = ["{\"path\":", "\"a.rs\"}"]
            .map(|piece| json!({"type": "input_json_delta", "partial_json": piece}));
        let mut events = vec![start_event()];
        events.extend(streamed_block(block, &deltas));
        events.extend(closing("tool_use"));
        sse(&events)
    },
    // Anthropic's reasons are the session file's: they pass through unchanged.
    stop_cases: || {
        [
            "end_turn",
            "max_tokens",
            "tool_use",
            "refusal",
            "pause_turn",
        ]
        .into_iter()
        .map(|reason| {
            (
                json!({"content": [{"type": "text", "text": "x"}], "stop_reason": reason}),
                reason,
            )
        })
        .collect()
    },
    // Overloaded: as an error event opening the stream, or as HTTP 529.
    transient: |streaming| {
        let error = json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}});
        if streaming {
            sse_answer(sse(&[("error", error)]))
        } else {
            ResponseTemplate::new(529).set_body_json(error)
        }
    },
    options_wire: || {
        vec![
            ("/temperature", json!(0.5)),
            ("/top_p", json!(0.9)),
            (
                "/thinking",
                json!({"type": "enabled", "budget_tokens": 1024}),
            ),
            ("/tool_choice", json!({"type": "tool", "name": "read"})),
        ]
    },
    choice_wire: ("/tool_choice", || {
        vec![
            (ToolChoice::Auto, json!({"type": "auto"})),
            (ToolChoice::None, json!({"type": "none"})),
            (ToolChoice::Required, json!({"type": "any"})),
        ]
    }),
};

/// `message_start` with the input side of the usage.
fn start_event() -> (&'static str, Value) {
    (
        "message_start",
        json!({"type": "message_start", "message": {"model": "claude-x",
            "usage": {"input_tokens": 200, "output_tokens": 1, "cache_read_input_tokens": 1000}}}),
    )
}

/// `message_start`, then one text block streamed in `deltas`, stopped.
fn opening(deltas: &[&str]) -> Vec<(&'static str, Value)> {
    let deltas: Vec<Value> = deltas
        .iter()
        .map(|text| json!({"type": "text_delta", "text": text}))
        .collect();
    let mut events = vec![start_event()];
    events.extend(streamed_block(json!({"type": "text", "text": ""}), &deltas));
    events
}

/// Block 0: its start with `block`, one delta event per `deltas`, its stop.
fn streamed_block(block: Value, deltas: &[Value]) -> Vec<(&'static str, Value)> {
    let mut events = vec![(
        "content_block_start",
        json!({"type": "content_block_start", "index": 0, "content_block": block}),
    )];
    for delta in deltas {
        events.push((
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": delta}),
        ));
    }
    events.push((
        "content_block_stop",
        json!({"type": "content_block_stop", "index": 0}),
    ));
    events
}

/// `message_delta` with the stop reason and the output total, then `message_stop`.
fn closing(reason: &str) -> Vec<(&'static str, Value)> {
    vec![
        (
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": reason}, "usage": {"output_tokens": 30}}),
        ),
        ("message_stop", json!({"type": "message_stop"})),
    ]
}

fn simple_stream() -> String {
    sse(&[
        (
            "message_start",
            json!({"type": "message_start", "message": {"model": "claude-x", "usage": {"input_tokens": 5, "output_tokens": 1}}}),
        ),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hi"}}),
        ),
        (
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 0}),
        ),
        (
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 2}}),
        ),
        ("message_stop", json!({"type": "message_stop"})),
    ])
}

#[tokio::test]
async fn request_shape() {
    let server = MockServer::start().await;
    PROTOCOL.answer(&server, sse_answer(simple_stream())).await;
    let (result, _) = run(&PROTOCOL.provider(&server, true), &conversation()).await;
    result.unwrap();
    let requests = server.received_requests().await.unwrap();
    insta::assert_json_snapshot!("anthropic_request", common::request_snapshot(&requests[0]));
}

#[tokio::test]
async fn whole_answer_with_thinking_text_tool_use_unknown_blocks_and_cache_usage() {
    let server = MockServer::start().await;
    PROTOCOL
        .answer(
            &server,
            json_answer(json!({
                "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-x",
                "content": [
                    {"type": "thinking", "thinking": "Let me look.", "signature": "sig-1"},
                    {"type": "redacted_thinking", "data": "opaque"},
                    {"type": "text", "text": "Checking."},
                    {"type": "tool_use", "id": "toolu_9", "name": "read", "input": {"path": "a.rs"}}
                ],
                "stop_reason": "tool_use", "stop_sequence": null,
                "usage": {"input_tokens": 12, "output_tokens": 30, "cache_read_input_tokens": 1000,
                          "cache_creation_input_tokens": 50, "service_tier": "standard"}
            })),
        )
        .await;
    let (result, events) = run(&PROTOCOL.provider(&server, false), &hello()).await;
    let message = result.unwrap();
    assert_eq!(message.role, Role::Assistant);
    assert_eq!(message.model.as_deref(), Some("claude-x"));
    assert_eq!(message.stop_reason.as_deref(), Some("tool_use"));
    let usage = message.usage.clone().unwrap();
    assert_eq!((usage.input_tokens, usage.output_tokens), (12, 30));
    assert_eq!(usage.cache_read_input_tokens, Some(1000));
    assert_eq!(usage.cache_creation_input_tokens, Some(50));
    assert_eq!(usage.extra.get("service_tier"), Some(&json!("standard")));
    assert_eq!(usage.input_total(), 1062);
    assert_eq!(
        message.content,
        vec![
            ContentBlock::Thinking(ThinkingBlock::new("Let me look.", Some("sig-1".into()))),
            ContentBlock::Other(OtherBlock::new(
                "redacted_thinking",
                [("data".to_owned(), json!("opaque"))].into_iter().collect()
            )),
            ContentBlock::text("Checking."),
            ContentBlock::tool_use("toolu_9", "read", json!({"path": "a.rs"})),
        ]
    );
    assert_eq!(
        events,
        ["thinking:Let me look.", "text:Checking.", "tool:read"]
    );
    // Non-streaming requests carry no `stream` field.
    assert_eq!(common::bodies(&server).await[0].get("stream"), None);
}

/// The streamed form of the answer above, with deltas split at awkward places.
fn full_stream() -> String {
    sse(&[
        (
            "message_start",
            json!({"type": "message_start", "message": {"id": "msg_1", "model": "claude-x", "content": [],
            "usage": {"input_tokens": 12, "output_tokens": 1, "cache_read_input_tokens": 1000, "cache_creation_input_tokens": 50}}}),
        ),
        ("ping", json!({"type": "ping"})),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "Let me "}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "look."}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "sig-1"}}),
        ),
        (
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 0}),
        ),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 1, "content_block": {"type": "redacted_thinking", "data": "opaque"}}),
        ),
        (
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 1}),
        ),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 2, "content_block": {"type": "text", "text": ""}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 2, "delta": {"type": "text_delta", "text": "Check"}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 2, "delta": {"type": "text_delta", "text": "ing."}}),
        ),
        (
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 2}),
        ),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 3, "content_block": {"type": "tool_use", "id": "toolu_9", "name": "read", "input": {}}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 3, "delta": {"type": "input_json_delta", "partial_json": ""}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 3, "delta": {"type": "input_json_delta", "partial_json": "{\"pa"}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 3, "delta": {"type": "input_json_delta", "partial_json": "th\": \"a.rs\"}"}}),
        ),
        (
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 3}),
        ),
        (
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": null}, "usage": {"output_tokens": 30}}),
        ),
        ("message_stop", json!({"type": "message_stop"})),
    ])
}

#[tokio::test]
async fn streamed_answer_equals_the_whole_one_and_reaches_the_sink_as_it_arrives() {
    let server = MockServer::start().await;
    PROTOCOL.answer(&server, sse_answer(full_stream())).await;
    let (result, events) = run(&PROTOCOL.provider(&server, true), &hello()).await;
    let message = result.unwrap();
    assert_eq!(
        events,
        [
            "thinking:Let me ",
            "thinking:look.",
            // The key scrubber holds back a last byte that also occurs in the key ("k")
            // until the next event shows that no piece of the key begins there.
            "text:Chec",
            "text:king.",
            "tool:read"
        ]
    );
    let mut expected = Message::new(
        Role::Assistant,
        vec![
            ContentBlock::Thinking(ThinkingBlock::new("Let me look.", Some("sig-1".into()))),
            ContentBlock::Other(OtherBlock::new(
                "redacted_thinking",
                [("data".to_owned(), json!("opaque"))].into_iter().collect(),
            )),
            ContentBlock::text("Checking."),
            ContentBlock::tool_use("toolu_9", "read", json!({"path": "a.rs"})),
        ],
    );
    expected.model = Some("claude-x".into());
    expected.stop_reason = Some("tool_use".into());
    let mut usage = Usage::new(12, 30);
    usage.cache_read_input_tokens = Some(1000);
    usage.cache_creation_input_tokens = Some(50);
    expected.usage = Some(usage);
    assert_eq!(message, expected);
    let body = &common::bodies(&server).await[0];
    assert_eq!(body["stream"], json!(true));
}

#[tokio::test]
async fn a_truncated_event_payload_is_malformed() {
    let full = simple_stream();
    let cut = &full[..full.find("\"Hi\"").unwrap()];
    let server = MockServer::start().await;
    PROTOCOL.answer(&server, sse_answer(cut.to_owned())).await;
    let (result, _) = run(&PROTOCOL.provider(&server, true), &hello()).await;
    assert_malformed(&result);
}

#[tokio::test]
async fn malformed_json_and_missing_content_are_malformed() {
    for body in [
        "{\"content\": [",
        "{\"type\": \"message\"}",
        "<html>oops</html>",
    ] {
        let server = MockServer::start().await;
        PROTOCOL
            .answer(
                &server,
                ResponseTemplate::new(200).set_body_raw(body, "application/json"),
            )
            .await;
        let (result, _) = run(&PROTOCOL.provider(&server, false), &hello()).await;
        assert_malformed(&result);
        assert_eq!(server.received_requests().await.unwrap().len(), 1, "{body}");
    }
}

#[tokio::test]
async fn overflow_and_its_look_alike_go_through_the_classifier() {
    let overflow = json!({"type": "error", "error": {"type": "invalid_request_error",
        "message": "prompt is too long: 219898 tokens > 200000 maximum"}, "request_id": "req_1"});
    let output_cap = json!({"type": "error", "error": {"type": "invalid_request_error",
        "message": "max_tokens: 128001 > 64000, which is the maximum allowed number of output tokens for claude-opus-4-5-20251101"}});
    for (body, is_overflow) in [(overflow, true), (output_cap, false)] {
        let server = MockServer::start().await;
        PROTOCOL
            .answer(&server, ResponseTemplate::new(400).set_body_json(body))
            .await;
        let (result, _) = run(&PROTOCOL.provider(&server, true), &hello()).await;
        let error = result.unwrap_err();
        assert_eq!(error.is_context_overflow(), is_overflow, "{error}");
        assert!(matches!(
            error,
            ProviderError::ContextOverflow { .. }
                | ProviderError::InvalidRequest { status: 400, .. }
        ));
        assert_eq!(
            server.received_requests().await.unwrap().len(),
            1,
            "4xx is never retried"
        );
    }
}

#[tokio::test]
async fn an_error_event_in_the_stream_is_classified() {
    let stream = sse(&[
        (
            "message_start",
            json!({"type": "message_start", "message": {"model": "claude-x", "usage": {"input_tokens": 5, "output_tokens": 1}}}),
        ),
        (
            "error",
            json!({"type": "error", "error": {"type": "invalid_request_error", "message": "prompt is too long: 210000 tokens > 200000 maximum"}}),
        ),
    ]);
    let server = MockServer::start().await;
    PROTOCOL.answer(&server, sse_answer(stream)).await;
    let (result, _) = run(&PROTOCOL.provider(&server, true), &hello()).await;
    assert!(result.unwrap_err().is_context_overflow());
}

#[tokio::test]
async fn overloaded_mid_stream_after_text_is_surfaced_not_retried() {
    let mut stream = simple_stream();
    stream.truncate(stream.find("event: content_block_stop").unwrap());
    stream.push_str(&sse(&[(
        "error",
        json!({"type": "error", "error": {"details": null, "type": "overloaded_error", "message": "Overloaded"}}),
    )]));
    let server = MockServer::start().await;
    PROTOCOL.answer(&server, sse_answer(stream)).await;
    let (result, events) = run(&PROTOCOL.provider(&server, true), &hello()).await;
    // Transient (overloaded), yet surfaced: text was already shown.
    let error = result.unwrap_err();
    assert!(
        error.is_transient() && !error.is_context_overflow(),
        "{error}"
    );
    assert_eq!(events, ["text:Hi"]);
    assert_eq!(server.received_requests().await.unwrap().len(), 1);
}

#[tokio::test]
async fn a_non_sse_json_answer_to_a_streaming_request_is_read_whole() {
    let server = MockServer::start().await;
    PROTOCOL.answer(&server,
        json_answer(json!({"content": [{"type": "text", "text": "plain"}], "model": "m", "stop_reason": "end_turn",
                           "usage": {"input_tokens": 1, "output_tokens": 1}})),
    )
    .await;
    let (result, events) = run(&PROTOCOL.provider(&server, true), &hello()).await;
    assert_eq!(result.unwrap().text(), "plain");
    assert_eq!(events, ["text:plain"]);
}

#[tokio::test]
async fn thinking_is_sent_only_with_room_for_its_minimum_below_max_tokens() {
    use panto_provider::{ReasoningEffort, RequestOptions};
    let server = MockServer::start().await;
    PROTOCOL
        .answer(&server, json_answer((PROTOCOL.text_whole)("ok")))
        .await;
    let provider = PROTOCOL.provider(&server, false);
    for (max_output_tokens, effort) in [(1024, ReasoningEffort::Low), (2000, ReasoningEffort::High)]
    {
        let mut request = hello().with_options(RequestOptions::new().with_reasoning_effort(effort));
        request.max_output_tokens = max_output_tokens;
        run(&provider, &request).await.0.unwrap();
    }
    let bodies = common::bodies(&server).await;
    // 1,024 tokens leave no room for the minimum budget below `max_tokens`: nothing is sent.
    assert_eq!(bodies[0].get("thinking"), None, "{}", bodies[0]);
    // A high effort (24,576) is cut to fit below `max_tokens`.
    assert_eq!(
        bodies[1]["thinking"],
        json!({"type": "enabled", "budget_tokens": 1999})
    );
}
