//! The `OpenAI` Chat Completions adapter: its fixtures for the shared scenarios, and what only
//! it does (request shape, reasoning fields, argument strings, the output-limit field, the
//! error shapes of compatible servers).

use panto_model::{ContentBlock, Message, Role, ThinkingBlock, Usage};
use panto_provider::ProviderError;
use panto_providers::{MaxTokensField, OpenAiChatProvider, RetryPolicy};
use serde_json::{Value, json};
use wiremock::{MockServer, ResponseTemplate};

use crate::common::{self, Protocol, conversation, data_stream, hello, run};

/// The Chat Completions protocol for the shared scenarios of `protocols.rs`.
pub(crate) static PROTOCOL: Protocol = Protocol {
    name: "openai-chat",
    make: |config| Ok(Box::new(OpenAiChatProvider::new(config)?)),
    base: |uri| format!("{uri}/v1"),
    path: |_| "/v1/chat/completions",
    key_header: ("authorization", "Bearer "),
    fixed_headers: &[],
    text_whole: |text| completion(json!({"role": "assistant", "content": text}), "stop"),
    text_stream: |text| {
        let (a, b) = common::halves(text);
        data_stream(&[
            delta(json!({"content": a}), Value::Null),
            delta(json!({"content": b}), Value::Null),
            delta(json!({}), json!("stop")),
            table_usage(),
            json!("[DONE]"),
        ])
    },
    cut_stream: |text| data_stream(&[delta(json!({"content": text}), Value::Null)]),
    end_marker: "[DONE]",
    tool_whole: || {
        completion(
            json!({"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
                   "function": {"name": "read", "arguments": "{\"path\":\"a.rs\"}"}}]}),
            "tool_calls",
        )
    },
    tool_stream: || {
        data_stream(&[
            delta(
                json!({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                                       "function": {"name": "read", "arguments": "{\"path\":"}}]}),
                Value::Null,
            ),
            delta(
                json!({"tool_calls": [{"index": 0, "function": {"arguments": "\"a.rs\"}"}}]}),
                Value::Null,
            ),
            delta(json!({}), json!("tool_calls")),
            table_usage(),
            json!("[DONE]"),
        ])
    },
    stop_cases: || {
        let text = json!({"role": "assistant", "content": "x"});
        let call = json!({"role": "assistant", "content": "x", "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]});
        vec![
            (completion(text.clone(), "stop"), "end_turn"),
            (completion(text.clone(), "length"), "max_tokens"),
            (completion(text.clone(), "content_filter"), "refusal"),
            (completion(call.clone(), "stop"), "tool_use"),
            (completion(call, "tool_calls"), "tool_use"),
            (completion(text, "weird"), "weird"),
        ]
    },
    transient: |_| ResponseTemplate::new(503).set_body_json(json!({"error": {"message": "busy"}})),
    options_wire: || {
        vec![
            ("/temperature", json!(0.5)),
            ("/top_p", json!(0.9)),
            ("/reasoning_effort", json!("low")),
            (
                "/tool_choice",
                json!({"type": "function", "function": {"name": "read"}}),
            ),
        ]
    },
    choice_wire: ("/tool_choice", common::openai_choices),
};

/// An SSE answer of unnamed `data:` chunks.
fn chunks_answer(chunks: &[Value]) -> ResponseTemplate {
    common::sse_answer(data_stream(chunks))
}

/// The usage chunk of the shared scenarios.
fn table_usage() -> Value {
    json!({"id": "c1", "model": "gpt-x", "choices": [],
           "usage": {"prompt_tokens": 1200, "completion_tokens": 30,
                     "prompt_tokens_details": {"cached_tokens": 1000}}})
}

/// A whole completion of `message`, finished for `finish`, with usage.
fn completion(message: Value, finish: &str) -> Value {
    json!({"id": "c1", "object": "chat.completion", "model": "gpt-x",
           "choices": [{"index": 0, "message": message, "finish_reason": finish}],
           "usage": {"prompt_tokens": 1200, "completion_tokens": 30,
                     "prompt_tokens_details": {"cached_tokens": 1000}}})
}

fn delta(delta: Value, finish: Value) -> Value {
    json!({"id": "c1", "model": "gpt-x", "object": "chat.completion.chunk",
           "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
}

fn usage_chunk() -> Value {
    json!({"id": "c1", "model": "gpt-x", "choices": [],
           "usage": {"prompt_tokens": 1200, "completion_tokens": 40, "total_tokens": 1240,
                     "prompt_tokens_details": {"cached_tokens": 1024}}})
}

fn full_stream() -> Vec<Value> {
    vec![
        delta(json!({"role": "assistant", "content": null}), Value::Null),
        delta(json!({"reasoning_content": "Need the "}), Value::Null),
        delta(json!({"reasoning_content": "file."}), Value::Null),
        delta(json!({"content": "Let me "}), Value::Null),
        delta(json!({"content": "read it."}), Value::Null),
        delta(
            json!({"tool_calls": [{"index": 0, "id": "call_a", "type": "function",
                                       "function": {"name": "read", "arguments": ""}}]}),
            Value::Null,
        ),
        delta(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"path\":"}}]}),
            Value::Null,
        ),
        delta(
            json!({"tool_calls": [{"index": 1, "id": "call_b", "type": "function",
                                       "function": {"name": "grep", "arguments": "{\"pattern\":\"x\"}"}}]}),
            Value::Null,
        ),
        delta(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": "\"a.rs\"}"}}]}),
            Value::Null,
        ),
        delta(json!({}), json!("tool_calls")),
        usage_chunk(),
        json!("[DONE]"),
    ]
}

fn expected_message() -> Message {
    let mut m = Message::new(
        Role::Assistant,
        vec![
            ContentBlock::Thinking(ThinkingBlock::new("Need the file.", None)),
            ContentBlock::text("Let me read it."),
            ContentBlock::tool_use("call_a", "read", json!({"path": "a.rs"})),
            ContentBlock::tool_use("call_b", "grep", json!({"pattern": "x"})),
        ],
    );
    m.model = Some("gpt-x".into());
    m.stop_reason = Some("tool_use".into());
    let mut usage = Usage::new(176, 40);
    usage.cache_read_input_tokens = Some(1024);
    m.usage = Some(usage);
    m
}

#[tokio::test]
async fn request_shape() {
    let server = MockServer::start().await;
    PROTOCOL
        .answer(&server, chunks_answer(&full_stream()))
        .await;
    let (result, _) = run(&PROTOCOL.provider(&server, true), &conversation()).await;
    result.unwrap();
    let requests = server.received_requests().await.unwrap();
    insta::assert_json_snapshot!(
        "openai_chat_request",
        common::request_snapshot(&requests[0])
    );
}

#[tokio::test]
async fn whole_answer_with_reasoning_tool_calls_and_cached_usage() {
    let server = MockServer::start().await;
    PROTOCOL.answer(&server,
        ResponseTemplate::new(200).set_body_json(json!({
            "id": "c1", "object": "chat.completion", "model": "gpt-x",
            "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                "role": "assistant", "content": "Let me read it.", "reasoning_content": "Need the file.",
                "tool_calls": [
                    {"id": "call_a", "type": "function", "function": {"name": "read", "arguments": "{\"path\":\"a.rs\"}"}},
                    {"id": "call_b", "type": "function", "function": {"name": "grep", "arguments": "{\"pattern\":\"x\"}"}}
                ]}}],
            "usage": {"prompt_tokens": 1200, "completion_tokens": 40, "total_tokens": 1240,
                      "prompt_tokens_details": {"cached_tokens": 1024}}
        })),
    )
    .await;
    let (result, events) = run(&PROTOCOL.provider(&server, false), &hello()).await;
    assert_eq!(result.unwrap(), expected_message());
    assert_eq!(
        events,
        [
            "thinking:Need the file.",
            "text:Let me read it.",
            "tool:read",
            "tool:grep"
        ]
    );
    let body = &common::bodies(&server).await[0];
    assert_eq!(body.get("stream"), None);
    assert_eq!(body.get("stream_options"), None);
}

#[tokio::test]
async fn streamed_answer_equals_the_whole_one() {
    let server = MockServer::start().await;
    PROTOCOL
        .answer(&server, chunks_answer(&full_stream()))
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
            "tool:read",
            "tool:grep"
        ]
    );
    let body = &common::bodies(&server).await[0];
    assert_eq!(body["stream"], json!(true));
    assert_eq!(body["stream_options"], json!({"include_usage": true}));
}

#[tokio::test]
async fn a_stream_with_a_finish_reason_but_no_done_is_complete() {
    let chunks = vec![
        delta(json!({"content": "ok"}), Value::Null),
        delta(json!({}), json!("stop")),
    ];
    let server = MockServer::start().await;
    PROTOCOL.answer(&server, chunks_answer(&chunks)).await;
    let message = run(&PROTOCOL.provider(&server, true), &hello())
        .await
        .0
        .unwrap();
    assert_eq!(message.text(), "ok");
    assert_eq!(message.stop_reason.as_deref(), Some("end_turn"));
    assert_eq!(message.usage, None);
}

#[tokio::test]
async fn unparsable_tool_arguments_survive_as_a_string_and_go_back_verbatim() {
    let server = MockServer::start().await;
    PROTOCOL.answer(&server,
        ResponseTemplate::new(200).set_body_json(json!({"choices": [{"index": 0, "finish_reason": "tool_calls",
            "message": {"role": "assistant", "content": null, "tool_calls": [
                {"id": "c9", "type": "function", "function": {"name": "f", "arguments": "{\"a\": 1,"}}]}}]})),
    )
    .await;
    let p = PROTOCOL.provider(&server, false);
    let message = run(&p, &hello()).await.0.unwrap();
    assert_eq!(
        message.content,
        vec![ContentBlock::tool_use("c9", "f", json!("{\"a\": 1,"))]
    );
    let mut next = hello();
    next.messages.push(message);
    next.messages.push(Message::new(
        Role::User,
        vec![ContentBlock::tool_result("c9", "bad args", true)],
    ));
    run(&p, &next).await.0.unwrap();
    let body = &common::bodies(&server).await[1];
    assert_eq!(
        body["messages"][2]["tool_calls"][0]["function"]["arguments"],
        json!("{\"a\": 1,")
    );
    assert_eq!(
        body["messages"][3],
        json!({"role": "tool", "tool_call_id": "c9", "content": "Error: bad args"})
    );
}

#[tokio::test]
async fn errors_reach_the_classifier_in_every_shape() {
    // (status, content type, body, overflow?)
    let cases: Vec<(u16, &str, String, bool)> = vec![
        (400, "application/json", json!({"error": {"message": "This model's maximum context length is 128000 tokens. However, your messages resulted in 202868 tokens.", "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}}).to_string(), true),
        (429, "application/json", json!({"error": {"message": "Request too large for gpt-4o on tokens per min (TPM): Limit 30000, Requested 36278.", "type": "tokens", "param": null, "code": "rate_limit_exceeded"}}).to_string(), false),
        // Ollama: `error` is a string.
        (400, "application/json", json!({"error": "the prompt is longer than the context length currently available to the model"}).to_string(), true),
        // A JSON array body.
        (400, "application/json", json!([{"error": {"code": 400, "message": "The input token count (132478) exceeds the maximum number of tokens allowed (131072).", "status": "INVALID_ARGUMENT"}}]).to_string(), true),
        // Not JSON at all: a proxy's 413 page. The request body is too large for the gateway,
        // and compaction shrinks the body, so it counts as an overflow (docs/providers.md).
        (413, "text/html", "<html><body>413 Request Entity Too Large</body></html>".to_owned(), true),
        // OpenRouter: HTTP 200 with an error and no choices.
        (200, "application/json", json!({"error": {"message": "This endpoint's maximum context length is 131072 tokens. However, you requested about 141607 tokens (131000 of text input, 10607 in the output). Please reduce the length of either one.", "code": 400}, "user_id": "u1"}).to_string(), true),
    ];
    for (status, content_type, body, overflow) in cases {
        let server = MockServer::start().await;
        PROTOCOL
            .answer(
                &server,
                ResponseTemplate::new(status).set_body_raw(body.clone(), content_type),
            )
            .await;
        let mut config = common::config(&format!("{}/v1", server.uri()));
        config.retry = RetryPolicy::none();
        config.streaming = false;
        let (result, _) = run(&OpenAiChatProvider::new(config).unwrap(), &hello()).await;
        let error = result.unwrap_err();
        assert_eq!(
            error.is_context_overflow(),
            overflow,
            "{status} {body}: {error}"
        );
        if status == 429 {
            assert!(
                matches!(error, ProviderError::RateLimited { .. }),
                "{error}"
            );
        }
    }
}

#[tokio::test]
async fn an_error_in_a_200_body_is_an_error_not_a_message() {
    // The requested output alone fills the window here, so whether it is an overflow is the
    // classifier's call; the adapter's part is to hand it over instead of reading a message.
    let body = json!({"error": {"message": "This endpoint's maximum context length is 131072 tokens. However, you requested about 141607 tokens (10535 of text input, 131072 in the output). Please reduce the length of either one, or use the \"middle-out\" transform to compress your prompt automatically.", "code": 400, "metadata": {"provider_name": "Chutes"}}});
    for streaming in [false, true] {
        let server = MockServer::start().await;
        PROTOCOL
            .answer(
                &server,
                ResponseTemplate::new(200).set_body_json(body.clone()),
            )
            .await;
        let error = run(&PROTOCOL.provider(&server, streaming), &hello())
            .await
            .0
            .unwrap_err();
        assert!(
            !matches!(error, ProviderError::MalformedResponse { .. }),
            "{error}"
        );
        assert!(error.to_string().contains("middle-out"), "{error}");
    }
}

#[tokio::test]
async fn errors_inside_a_stream_reach_the_classifier() {
    let streams = [
        // SGLang: a data chunk carrying `error`.
        format!(
            "data: {}\n\n",
            json!({"error": {"object": "error", "message": "The input (8391 tokens) is longer than the model's context length (8192 tokens).", "type": "BadRequestError", "param": null, "code": 400}})
        ),
        // Old llama.cpp: a bare `error:` line after the 200.
        format!(
            "data: {}\n\nerror: {}\n\n",
            delta(json!({"role": "assistant"}), Value::Null),
            json!({"code": 400, "message": "the request exceeds the available context size. try increasing the context size or enable context shift", "type": "invalid_request_error"})
        ),
        // LM Studio: a named error event.
        format!(
            "event: error\ndata: {}\n\n",
            json!({"error": {"message": "Input does not fit in context length. The input has 31430 tokens, but the context length only supports 30000 tokens."}, "message": "Input does not fit in context length. The input has 31430 tokens, but the context length only supports 30000 tokens."})
        ),
    ];
    for stream in streams {
        let server = MockServer::start().await;
        PROTOCOL
            .answer(
                &server,
                ResponseTemplate::new(200).set_body_raw(stream.clone(), "text/event-stream"),
            )
            .await;
        let (result, _) = run(&PROTOCOL.provider(&server, true), &hello()).await;
        let error = result.unwrap_err();
        assert!(error.is_context_overflow(), "{stream}: {error}");
        assert_eq!(server.received_requests().await.unwrap().len(), 1);
    }
}

#[tokio::test]
async fn a_base_url_without_a_version_gets_v1() {
    let server = MockServer::start().await;
    PROTOCOL
        .answer(&server, chunks_answer(&full_stream()))
        .await;
    let config = common::config(&server.uri());
    run(&OpenAiChatProvider::new(config).unwrap(), &hello())
        .await
        .0
        .unwrap();
    let requests = server.received_requests().await.unwrap();
    assert_eq!(requests[0].url.path(), "/v1/chat/completions");
}

#[tokio::test]
async fn the_output_limit_field_is_max_tokens_for_compatible_servers_and_can_be_switched() {
    let server = MockServer::start().await;
    PROTOCOL
        .answer(&server, chunks_answer(&full_stream()))
        .await;
    run(&PROTOCOL.provider(&server, true), &hello())
        .await
        .0
        .unwrap();
    let p = OpenAiChatProvider::new(
        common::config(&format!("{}/v1", server.uri())).with_streaming(true),
    )
    .unwrap()
    .with_max_tokens_field(MaxTokensField::MaxCompletionTokens);
    run(&p, &hello()).await.0.unwrap();
    let bodies = common::bodies(&server).await;
    assert_eq!(bodies[0]["max_tokens"], json!(256));
    assert_eq!(bodies[0].get("max_completion_tokens"), None);
    assert_eq!(bodies[1]["max_completion_tokens"], json!(256));
    assert_eq!(bodies[1].get("max_tokens"), None);

    let official = OpenAiChatProvider::new(panto_providers::Config::new(
        "https://api.openai.com/v1",
        "k",
    ))
    .unwrap();
    assert!(format!("{official:?}").contains("MaxCompletionTokens"));
}
