//! The `OpenAI` Responses adapter: its fixtures for the shared scenarios, and what only it does
//! (request shape, reasoning items and encrypted content, items rebuilt from deltas, failures
//! inside the stream).

use panto_model::{ContentBlock, Extra, Message, Role, ThinkingBlock, Usage};
use panto_provider::ProviderError;
use panto_providers::{OpenAiResponsesProvider, RetryPolicy};
use serde_json::{Value, json};
use wiremock::{MockServer, ResponseTemplate};

use crate::common::{self, Protocol, conversation, hello, run, sse};

/// The Responses protocol for the shared scenarios of `protocols.rs`.
pub(crate) static PROTOCOL: Protocol = Protocol {
    name: "openai-responses",
    make: |config| Ok(Box::new(OpenAiResponsesProvider::new(config)?)),
    base: |uri| format!("{uri}/v1"),
    path: |_| "/v1/responses",
    key_header: ("authorization", "Bearer "),
    fixed_headers: &[],
    text_whole: |text| whole("completed", json!([text_item(text)])),
    text_stream: |text| {
        let (a, b) = common::halves(text);
        let mut events = text_events(&[a, b]);
        events.push((
            "response.completed",
            json!({"type": "response.completed", "response": whole("completed", json!([text_item(&format!("{a}{b}"))]))}),
        ));
        sse(&events)
    },
    cut_stream: |text| sse(&text_events(&[text])),
    end_marker: "response.completed",
    tool_whole: || whole("completed", json!([call_item()])),
    tool_stream: || {
        let mut events = vec![(
            "response.output_item.added",
            json!({"type": "response.output_item.added", "output_index": 0,
                   "item": {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "read", "arguments": ""}}),
        )];
        for piece in ["{\"path\":", "\"a.rs\"}"] {
            events.push((
                "response.function_call_arguments.delta",
                json!({"type": "response.function_call_arguments.delta", "output_index": 0, "delta": piece}),
            ));
        }
        events.push((
            "response.completed",
            json!({"type": "response.completed", "response": whole("completed", json!([call_item()]))}),
        ));
        sse(&events)
    },
    stop_cases: || {
        let incomplete = |reason: Option<&str>| {
            let mut body = whole("incomplete", json!([text_item("x")]));
            if let Some(reason) = reason {
                body["incomplete_details"] = json!({"reason": reason});
            }
            body
        };
        vec![
            (whole("completed", json!([text_item("x")])), "end_turn"),
            (
                whole("completed", json!([text_item("x"), call_item()])),
                "tool_use",
            ),
            (incomplete(Some("max_output_tokens")), "max_tokens"),
            (incomplete(Some("content_filter")), "refusal"),
            (incomplete(Some("something_new")), "something_new"),
            (incomplete(None), "incomplete"),
        ]
    },
    transient: |_| ResponseTemplate::new(503).set_body_json(json!({"error": {"message": "busy"}})),
    options_wire: || {
        vec![
            ("/temperature", json!(0.5)),
            ("/top_p", json!(0.9)),
            ("/reasoning", json!({"effort": "low"})),
            ("/tool_choice", json!({"type": "function", "name": "read"})),
        ]
    },
    choice_wire: ("/tool_choice", common::openai_choices),
};

/// A whole response with `status` and `output`, with usage.
fn whole(status: &str, output: Value) -> Value {
    json!({"id": "resp_1", "object": "response", "status": status, "model": "gpt-5-x", "output": output,
           "usage": {"input_tokens": 1200, "input_tokens_details": {"cached_tokens": 1000}, "output_tokens": 30}})
}

fn text_item(text: &str) -> Value {
    json!({"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
           "content": [{"type": "output_text", "text": text, "annotations": []}]})
}

fn call_item() -> Value {
    json!({"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "read",
           "arguments": "{\"path\":\"a.rs\"}", "status": "completed"})
}

/// `response.created`, then a message item whose text arrives in `deltas`.
fn text_events(deltas: &[&str]) -> Vec<(&'static str, Value)> {
    let mut events = vec![
        (
            "response.created",
            json!({"type": "response.created", "response": {"id": "resp_1", "status": "in_progress", "output": []}}),
        ),
        (
            "response.output_item.added",
            json!({"type": "response.output_item.added", "output_index": 0,
                   "item": {"type": "message", "id": "msg_1", "role": "assistant", "content": []}}),
        ),
    ];
    for delta in deltas {
        events.push((
            "response.output_text.delta",
            json!({"type": "response.output_text.delta", "output_index": 0, "content_index": 0, "delta": delta}),
        ));
    }
    events
}

/// An SSE answer of named events.
fn events_answer(events: &[(&str, Value)]) -> ResponseTemplate {
    common::sse_answer(sse(events))
}

fn output() -> Value {
    json!([
        {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Need the file."}],
         "encrypted_content": "gAAAA-enc"},
        {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
         "content": [{"type": "output_text", "text": "Let me read it.", "annotations": []}]},
        {"type": "function_call", "id": "fc_1", "call_id": "call_a", "name": "read", "arguments": "{\"path\":\"a.rs\"}", "status": "completed"}
    ])
}

fn response(status: &str) -> Value {
    json!({"id": "resp_1", "object": "response", "status": status, "model": "gpt-5-x", "output": output(),
           "usage": {"input_tokens": 2000, "input_tokens_details": {"cached_tokens": 1500},
                     "output_tokens": 90, "output_tokens_details": {"reasoning_tokens": 60}, "total_tokens": 2090}})
}

fn expected_message() -> Message {
    let mut extra = Extra::new();
    extra.insert("encrypted_content".into(), json!("gAAAA-enc"));
    let mut m = Message::new(
        Role::Assistant,
        vec![
            ContentBlock::Thinking(ThinkingBlock::new("Need the file.", None).with_extra(extra)),
            ContentBlock::text("Let me read it."),
            ContentBlock::tool_use("call_a", "read", json!({"path": "a.rs"})),
        ],
    );
    m.model = Some("gpt-5-x".into());
    m.stop_reason = Some("tool_use".into());
    let mut usage = Usage::new(500, 90);
    usage.cache_read_input_tokens = Some(1500);
    m.usage = Some(usage);
    m
}

fn full_stream() -> Vec<(&'static str, Value)> {
    vec![
        (
            "response.created",
            json!({"type": "response.created", "sequence_number": 0, "response": {"id": "resp_1", "status": "in_progress", "output": []}}),
        ),
        (
            "response.output_item.added",
            json!({"type": "response.output_item.added", "output_index": 0, "item": {"type": "reasoning", "id": "rs_1", "summary": []}}),
        ),
        (
            "response.reasoning_summary_text.delta",
            json!({"type": "response.reasoning_summary_text.delta", "output_index": 0, "summary_index": 0, "delta": "Need the "}),
        ),
        (
            "response.reasoning_summary_text.delta",
            json!({"type": "response.reasoning_summary_text.delta", "output_index": 0, "summary_index": 0, "delta": "file."}),
        ),
        (
            "response.output_item.done",
            json!({"type": "response.output_item.done", "output_index": 0, "item": output()[0]}),
        ),
        (
            "response.output_item.added",
            json!({"type": "response.output_item.added", "output_index": 1, "item": {"type": "message", "id": "msg_1", "role": "assistant", "content": []}}),
        ),
        (
            "response.output_text.delta",
            json!({"type": "response.output_text.delta", "output_index": 1, "content_index": 0, "delta": "Let me "}),
        ),
        (
            "response.output_text.delta",
            json!({"type": "response.output_text.delta", "output_index": 1, "content_index": 0, "delta": "read it."}),
        ),
        (
            "response.output_item.done",
            json!({"type": "response.output_item.done", "output_index": 1, "item": output()[1]}),
        ),
        (
            "response.output_item.added",
            json!({"type": "response.output_item.added", "output_index": 2, "item": {"type": "function_call", "id": "fc_1", "call_id": "call_a", "name": "read", "arguments": ""}}),
        ),
        (
            "response.function_call_arguments.delta",
            json!({"type": "response.function_call_arguments.delta", "output_index": 2, "delta": "{\"path\":"}),
        ),
        (
            "response.function_call_arguments.delta",
            json!({"type": "response.function_call_arguments.delta", "output_index": 2, "delta": "\"a.rs\"}"}),
        ),
        (
            "response.output_item.done",
            json!({"type": "response.output_item.done", "output_index": 2, "item": output()[2]}),
        ),
        (
            "response.completed",
            json!({"type": "response.completed", "response": response("completed")}),
        ),
    ]
}

#[tokio::test]
async fn request_shape() {
    let server = MockServer::start().await;
    PROTOCOL
        .answer(&server, events_answer(&full_stream()))
        .await;
    let (result, _) = run(&PROTOCOL.provider(&server, true), &conversation()).await;
    result.unwrap();
    let requests = server.received_requests().await.unwrap();
    insta::assert_json_snapshot!(
        "openai_responses_request",
        common::request_snapshot(&requests[0])
    );
}

#[tokio::test]
async fn whole_answer_with_reasoning_text_function_call_and_cached_usage() {
    let server = MockServer::start().await;
    PROTOCOL
        .answer(
            &server,
            ResponseTemplate::new(200).set_body_json(response("completed")),
        )
        .await;
    let (result, events) = run(&PROTOCOL.provider(&server, false), &hello()).await;
    assert_eq!(result.unwrap(), expected_message());
    assert_eq!(
        events,
        [
            "thinking:Need the file.",
            "text:Let me read it.",
            "tool:read"
        ]
    );
}

#[tokio::test]
async fn streamed_answer_equals_the_whole_one() {
    let server = MockServer::start().await;
    PROTOCOL
        .answer(&server, events_answer(&full_stream()))
        .await;
    let (result, events) = run(&PROTOCOL.provider(&server, true), &hello()).await;
    assert_eq!(result.unwrap(), expected_message());
    assert_eq!(
        events,
        [
            "thinking:Need the ",
            "thinking:file.",
            "text:Let me ",
            "text:read it.",
            "tool:read"
        ]
    );
}

#[tokio::test]
async fn a_completed_event_with_empty_output_falls_back_to_the_streamed_items() {
    let mut events = full_stream();
    let mut last = response("completed");
    last["output"] = json!([]);
    *events.last_mut().unwrap() = (
        "response.completed",
        json!({"type": "response.completed", "response": last}),
    );
    // Without the done events, the items are rebuilt from their deltas.
    events.retain(|(name, _)| *name != "response.output_item.done");
    let server = MockServer::start().await;
    PROTOCOL.answer(&server, events_answer(&events)).await;
    let message = run(&PROTOCOL.provider(&server, true), &hello())
        .await
        .0
        .unwrap();
    let mut expected = expected_message();
    if let ContentBlock::Thinking(t) = &mut expected.content[0] {
        t.extra.clear();
    }
    assert_eq!(message, expected);
}

#[tokio::test]
async fn incomplete_answers_say_why() {
    let mut incomplete = response("incomplete");
    incomplete["incomplete_details"] = json!({"reason": "max_output_tokens"});
    incomplete["output"] = json!([output()[1]]);
    let server = MockServer::start().await;
    PROTOCOL
        .answer(
            &server,
            events_answer(&[(
                "response.incomplete",
                json!({"type": "response.incomplete", "response": incomplete}),
            )]),
        )
        .await;
    let message = run(&PROTOCOL.provider(&server, true), &hello())
        .await
        .0
        .unwrap();
    assert_eq!(message.stop_reason.as_deref(), Some("max_tokens"));
    assert_eq!(message.text(), "Let me read it.");
}

#[tokio::test]
async fn failures_inside_the_stream_reach_the_classifier() {
    let failed_overflow = vec![
        (
            "response.created",
            json!({"type": "response.created", "sequence_number": 0, "response": {"id": "resp_1", "status": "in_progress", "output": []}}),
        ),
        (
            "response.failed",
            json!({"type": "response.failed", "sequence_number": 1, "response": {"id": "resp_1", "object": "response", "status": "failed", "output": [],
            "error": {"code": "context_length_exceeded", "message": "Your input exceeds the context window of this model. Please adjust your input and try again."}}}),
        ),
    ];
    let error_event = vec![(
        "error",
        json!({"type": "error", "sequence_number": 1, "error": {"type": "invalid_request_error", "code": "context_length_exceeded",
               "message": "Your input exceeds the context window of this model. Please adjust your input and try again.", "param": "input"}}),
    )];
    for events in [failed_overflow, error_event] {
        let server = MockServer::start().await;
        PROTOCOL.answer(&server, events_answer(&events)).await;
        let error = run(&PROTOCOL.provider(&server, true), &hello())
            .await
            .0
            .unwrap_err();
        assert!(error.is_context_overflow(), "{error}");
        assert_eq!(server.received_requests().await.unwrap().len(), 1);
    }
}

#[tokio::test]
async fn a_rate_limit_in_response_failed_is_not_overflow_and_is_retried_while_nothing_was_shown() {
    let tpm = vec![(
        "response.failed",
        json!({"type": "response.failed", "sequence_number": 3, "response": {"id": "resp_6", "object": "response", "status": "failed",
            "error": {"code": "rate_limit_exceeded", "message": "Rate limit reached for gpt-5.1 in organization org-AAA on tokens per min (TPM): Limit 30000, Used 22999, Requested 12528. Please try again in 20ms."},
            "usage": null}}),
    )];
    let server = MockServer::start().await;
    PROTOCOL.answer(&server, events_answer(&tpm)).await;
    let mut config = common::config(&server.uri());
    // The delay the message asks for is within the cap, so it is waited and retried (a longer
    // one would end the request at once: see `faults.rs`).
    config.retry = RetryPolicy::new(
        2,
        std::time::Duration::from_millis(1),
        std::time::Duration::from_millis(50),
    );
    let error = run(&OpenAiResponsesProvider::new(config).unwrap(), &hello())
        .await
        .0
        .unwrap_err();
    assert!(
        matches!(error, ProviderError::RateLimited { .. }),
        "{error}"
    );
    assert_eq!(server.received_requests().await.unwrap().len(), 3);
}

#[tokio::test]
async fn http_errors_reach_the_classifier() {
    let overflow = json!({"error": {"message": "Your input exceeds the context window of this model. Please adjust your input and try again.",
                                    "type": "invalid_request_error", "param": "input", "code": "context_length_exceeded"}});
    let too_long_field = json!({"error": {"message": "Invalid 'input[0].content': string too long. Expected a string with maximum length 10485760, but got a string with length 10485761 instead.",
                                          "type": "invalid_request_error", "param": "input[0].content", "code": "string_above_max_length"}});
    for (body, overflow) in [(overflow, true), (too_long_field, false)] {
        let server = MockServer::start().await;
        PROTOCOL
            .answer(&server, ResponseTemplate::new(400).set_body_json(body))
            .await;
        let error = run(&PROTOCOL.provider(&server, false), &hello())
            .await
            .0
            .unwrap_err();
        assert_eq!(error.is_context_overflow(), overflow, "{error}");
    }
}

#[tokio::test]
async fn encrypted_reasoning_is_requested_on_demand_and_sent_back() {
    let server = MockServer::start().await;
    PROTOCOL
        .answer(
            &server,
            ResponseTemplate::new(200).set_body_json(response("completed")),
        )
        .await;
    let p = OpenAiResponsesProvider::new(
        common::config(&format!("{}/v1", server.uri())).with_streaming(false),
    )
    .unwrap()
    .with_encrypted_reasoning(true);
    let first = run(&p, &hello()).await.0.unwrap();
    let mut next = hello();
    next.messages.push(first);
    next.messages.push(Message::new(
        Role::User,
        vec![ContentBlock::tool_result("call_a", "fn main() {}", false)],
    ));
    run(&p, &next).await.0.unwrap();
    let bodies = common::bodies(&server).await;
    assert_eq!(bodies[0]["include"], json!(["reasoning.encrypted_content"]));
    assert_eq!(bodies[0]["store"], json!(false));
    assert_eq!(
        bodies[1]["input"],
        json!([
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hello?"}]},
            {"type": "reasoning", "summary": [{"type": "summary_text", "text": "Need the file."}], "encrypted_content": "gAAAA-enc"},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Let me read it."}]},
            {"type": "function_call", "call_id": "call_a", "name": "read", "arguments": "{\"path\":\"a.rs\"}"},
            {"type": "function_call_output", "call_id": "call_a", "output": "fn main() {}"}
        ])
    );
}

/// The shrunk case of `cleared::every_request_a_clearing_produces_passes_every_providers_rules`
/// that found it: two assistant replies in a row (the user's empty prompt between them left
/// out on the wire), the first with nothing after its reasoning. The API refuses a reasoning
/// item "provided without its required following item", so only the second goes.
#[tokio::test]
async fn of_two_reasoning_items_in_a_row_only_the_one_with_a_following_item_is_sent() {
    let server = MockServer::start().await;
    PROTOCOL
        .answer(
            &server,
            ResponseTemplate::new(200).set_body_json(response("completed")),
        )
        .await;
    let p = OpenAiResponsesProvider::new(
        common::config(&format!("{}/v1", server.uri())).with_streaming(false),
    )
    .unwrap()
    .with_encrypted_reasoning(true);
    let thinking = |n: &str| {
        let mut t = ThinkingBlock::new(format!("thought {n}"), None);
        t.extra
            .insert("encrypted_content".into(), json!(format!("enc-{n}")));
        ContentBlock::Thinking(t)
    };
    let mut request = hello();
    request.messages.extend([
        Message::new(Role::Assistant, vec![thinking("1"), ContentBlock::text("")]),
        Message::user_text(""),
        Message::new(
            Role::Assistant,
            vec![thinking("2"), ContentBlock::text("the answer")],
        ),
        Message::user_text("and then?"),
    ]);
    run(&p, &request).await.0.unwrap();
    let bodies = common::bodies(&server).await;
    assert_eq!(
        bodies[0]["input"],
        json!([
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hello?"}]},
            {"type": "reasoning", "summary": [{"type": "summary_text", "text": "thought 2"}], "encrypted_content": "enc-2"},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "the answer"}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "and then?"}]}
        ])
    );
}
