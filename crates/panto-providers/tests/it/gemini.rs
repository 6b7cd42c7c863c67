//! The Gemini adapter: its fixtures for the shared scenarios, and what only it does (request
//! shape, ids it must make, thought signatures, function names on results, a blocked prompt).

use panto_model::{ContentBlock, Message, Role};
use panto_provider::{ProviderError, ToolChoice};
use panto_providers::{GeminiProvider, RetryPolicy};
use serde_json::{Value, json};
use wiremock::matchers::{method, path, query_param};
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::common::{self, KEY, Protocol, conversation, data_stream, hello, run};

/// The Gemini protocol for the shared scenarios of `protocols.rs` (model `test-model`).
pub(crate) static PROTOCOL: Protocol = Protocol {
    name: "gemini",
    make: |config| Ok(Box::new(GeminiProvider::new(config)?)),
    base: |uri| uri.to_owned(),
    path: |streaming| {
        if streaming {
            "/v1beta/models/test-model:streamGenerateContent"
        } else {
            "/v1beta/models/test-model:generateContent"
        }
    },
    key_header: ("x-goog-api-key", ""),
    fixed_headers: &[],
    text_whole: |text| with_usage(candidate(json!([{"text": text}]), Some("STOP"))),
    text_stream: |text| {
        let (a, b) = common::halves(text);
        crlf_stream(&[
            candidate(json!([{"text": a}]), None),
            with_usage(candidate(json!([{"text": b}]), Some("STOP"))),
        ])
    },
    cut_stream: |text| crlf_stream(&[candidate(json!([{"text": text}]), None)]),
    end_marker: "finishReason",
    tool_whole: || with_usage(candidate(read_call(), Some("STOP"))),
    // Gemini sends a function call whole, in one chunk.
    tool_stream: || {
        crlf_stream(&[
            candidate(read_call(), None),
            with_usage(candidate(json!([{"text": ""}]), Some("STOP"))),
        ])
    },
    stop_cases: || {
        let text = json!([{"text": "x"}]);
        vec![
            (candidate(text.clone(), Some("STOP")), "end_turn"),
            (candidate(read_call(), Some("STOP")), "tool_use"),
            (candidate(text.clone(), Some("MAX_TOKENS")), "max_tokens"),
            (candidate(text.clone(), Some("SAFETY")), "refusal"),
            (
                candidate(text.clone(), Some("PROHIBITED_CONTENT")),
                "refusal",
            ),
            (
                candidate(text, Some("MALFORMED_FUNCTION_CALL")),
                "MALFORMED_FUNCTION_CALL",
            ),
        ]
    },
    transient: |_| {
        ResponseTemplate::new(503).set_body_json(json!({"error": {"code": 503, "message": "The model is overloaded.", "status": "UNAVAILABLE"}}))
    },
    options_wire: || {
        vec![
            ("/generationConfig/temperature", json!(0.5)),
            ("/generationConfig/topP", json!(0.9)),
            (
                "/generationConfig/thinkingConfig",
                json!({"thinkingBudget": 1024}),
            ),
            (
                "/toolConfig",
                json!({"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["read"]}}),
            ),
        ]
    },
    choice_wire: ("/toolConfig/functionCallingConfig", || {
        vec![
            (ToolChoice::Auto, json!({"mode": "AUTO"})),
            (ToolChoice::None, json!({"mode": "NONE"})),
            (ToolChoice::Required, json!({"mode": "ANY"})),
        ]
    }),
};

fn read_call() -> Value {
    json!([{"functionCall": {"id": "call_1", "name": "read", "args": {"path": "a.rs"}}}])
}

/// The answer with the usage of the shared scenarios.
fn with_usage(mut body: Value) -> Value {
    body["usageMetadata"] = json!({"promptTokenCount": 1200, "cachedContentTokenCount": 1000, "candidatesTokenCount": 30});
    body
}

/// A stream of `data:` chunks ending with CRLF pairs, as Gemini sends them.
fn crlf_stream(chunks: &[Value]) -> String {
    data_stream(chunks).replace("\n\n", "\r\n\r\n")
}

fn sse_answer(chunks: &[Value]) -> ResponseTemplate {
    common::sse_answer(crlf_stream(chunks))
}

fn candidate(parts: Value, finish: Option<&str>) -> Value {
    let mut c = json!({"content": {"role": "model", "parts": parts}, "index": 0});
    if let Some(f) = finish {
        c["finishReason"] = json!(f);
    }
    json!({"candidates": [c], "modelVersion": "gemini-x"})
}

fn usage() -> Value {
    json!({"promptTokenCount": 1000, "cachedContentTokenCount": 600, "candidatesTokenCount": 30,
           "thoughtsTokenCount": 70, "totalTokenCount": 1100})
}

fn whole() -> Value {
    let mut body = candidate(
        json!([
            {"text": "Thinking about files.", "thought": true},
            {"text": "Reading it.", "thoughtSignature": "c2lnLTE="},
            {"functionCall": {"name": "read", "args": {"path": "a.rs"}}, "thoughtSignature": "c2lnLTI="},
            {"functionCall": {"name": "grep", "args": {"pattern": "x"}}}
        ]),
        Some("STOP"),
    );
    body["usageMetadata"] = usage();
    body
}

fn check_whole(message: &Message) {
    assert_eq!(message.model.as_deref(), Some("gemini-x"));
    assert_eq!(message.stop_reason.as_deref(), Some("tool_use"));
    let usage = message.usage.clone().unwrap();
    assert_eq!(
        (
            usage.input_tokens,
            usage.cache_read_input_tokens,
            usage.output_tokens
        ),
        (400, Some(600), 100)
    );
    assert_eq!(message.content.len(), 4);
    let ContentBlock::Thinking(t) = &message.content[0] else {
        panic!("{message:?}")
    };
    assert_eq!(t.thinking, "Thinking about files.");
    assert_eq!(t.signature, None);
    let ContentBlock::Text(text) = &message.content[1] else {
        panic!("{message:?}")
    };
    assert_eq!(text.text, "Reading it.");
    assert_eq!(text.extra.get("thoughtSignature"), Some(&json!("c2lnLTE=")));
    let (ContentBlock::ToolUse(a), ContentBlock::ToolUse(b)) =
        (&message.content[2], &message.content[3])
    else {
        panic!("{message:?}")
    };
    assert_eq!(
        (a.name.as_str(), a.input.value()),
        ("read", &json!({"path": "a.rs"}))
    );
    assert_eq!(a.extra.get("thoughtSignature"), Some(&json!("c2lnLTI=")));
    assert_eq!(b.name, "grep");
    assert!(b.extra.is_empty());
    // Gemini gives no ids: fresh, distinct ones are made.
    assert!(
        a.id.starts_with("gemini_call_") && b.id.starts_with("gemini_call_"),
        "{} {}",
        a.id,
        b.id
    );
    assert_ne!(a.id, b.id);
}

#[tokio::test]
async fn request_shape() {
    let server = MockServer::start().await;
    PROTOCOL.answer(&server, sse_answer(&[whole()])).await;
    let (result, _) = run(&PROTOCOL.provider(&server, true), &conversation()).await;
    result.unwrap();
    let requests = server.received_requests().await.unwrap();
    insta::assert_json_snapshot!("gemini_request", common::request_snapshot(&requests[0]));
}

#[tokio::test]
async fn whole_answer_with_thoughts_signatures_calls_and_usage() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1beta/models/gemini-x:generateContent"))
        .respond_with(ResponseTemplate::new(200).set_body_json(whole()))
        .expect(1)
        .mount(&server)
        .await;
    let mut request = hello();
    request.model = "gemini-x".into();
    let (result, events) = run(&PROTOCOL.provider(&server, false), &request).await;
    check_whole(&result.unwrap());
    assert_eq!(
        events,
        [
            "thinking:Thinking about files.",
            "text:Reading it.",
            "tool:read",
            "tool:grep"
        ]
    );
    let requests = server.received_requests().await.unwrap();
    assert_eq!(requests[0].headers.get("x-goog-api-key").unwrap(), KEY);
    assert_eq!(requests[0].url.query(), None);
}

#[tokio::test]
async fn streamed_answer_equals_the_whole_one_and_uses_the_sse_endpoint() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1beta/models/gemini-x:streamGenerateContent"))
        .and(query_param("alt", "sse"))
        .respond_with(sse_answer(&[
            candidate(json!([{"text": "Thinking ", "thought": true}]), None),
            candidate(json!([{"text": "about files.", "thought": true}]), None),
            candidate(json!([{"text": "Reading"}]), None),
            candidate(json!([{"text": " it.", "thoughtSignature": "c2lnLTE="}]), None),
            candidate(json!([{"functionCall": {"name": "read", "args": {"path": "a.rs"}}, "thoughtSignature": "c2lnLTI="},
                             {"functionCall": {"name": "grep", "args": {"pattern": "x"}}}]), None),
            {
                let mut last = candidate(json!([{"text": ""}]), Some("STOP"));
                last["usageMetadata"] = usage();
                last
            },
        ]))
        .expect(1)
        .mount(&server)
        .await;
    let mut request = hello();
    request.model = "models/gemini-x".into();
    let (result, events) = run(&PROTOCOL.provider(&server, true), &request).await;
    check_whole(&result.unwrap());
    assert_eq!(
        events,
        [
            "thinking:Thinking ",
            "thinking:about files.",
            "text:Reading",
            "text: it.",
            "tool:read",
            "tool:grep"
        ]
    );
}

#[tokio::test]
async fn signatures_and_function_names_go_back_on_the_next_request() {
    let server = MockServer::start().await;
    PROTOCOL
        .answer(&server, ResponseTemplate::new(200).set_body_json(whole()))
        .await;
    let p = PROTOCOL.provider(&server, false);
    let first = run(&p, &hello()).await.0.unwrap();
    let ids: Vec<String> = first.tool_use_ids().map(str::to_owned).collect();
    let mut next = hello();
    next.messages.push(first);
    next.messages.push(Message::new(
        Role::User,
        vec![
            ContentBlock::tool_result(&ids[1], "no matches", true),
            ContentBlock::tool_result(&ids[0], "fn main() {}", false),
        ],
    ));
    run(&p, &next).await.0.unwrap();
    let body = &common::bodies(&server).await[1];
    assert_eq!(
        body["contents"],
        json!([
            {"role": "user", "parts": [{"text": "Hello?"}]},
            {"role": "model", "parts": [
                {"text": "Reading it.", "thoughtSignature": "c2lnLTE="},
                {"functionCall": {"name": "read", "args": {"path": "a.rs"}}, "thoughtSignature": "c2lnLTI="},
                {"functionCall": {"name": "grep", "args": {"pattern": "x"}}}
            ]},
            {"role": "user", "parts": [
                {"functionResponse": {"name": "read", "response": {"output": "fn main() {}"}}},
                {"functionResponse": {"name": "grep", "response": {"error": "no matches"}}}
            ]}
        ])
    );
}

#[tokio::test]
async fn a_blocked_prompt_is_an_error() {
    let server = MockServer::start().await;
    PROTOCOL
        .answer(
            &server,
            ResponseTemplate::new(200)
                .set_body_json(json!({"promptFeedback": {"blockReason": "SAFETY"}})),
        )
        .await;
    let error = run(&PROTOCOL.provider(&server, false), &hello())
        .await
        .0
        .unwrap_err();
    assert!(
        matches!(error, ProviderError::InvalidRequest { .. }),
        "{error}"
    );
    assert!(error.to_string().contains("SAFETY"));
}

/// Issue 39, point 6: Gemini's quota answers that name no wait are sent once, never retried
/// with "wait a moment"; the same answer with a `RetryInfo` delay is a quota that refills, and
/// is retried.
#[tokio::test]
async fn a_quota_that_names_no_wait_is_not_retried() {
    let check = json!({"error": {"code": 429, "message": "Resource has been exhausted (e.g. check quota).", "status": "RESOURCE_EXHAUSTED"}});
    let organization = json!({"error": {"code": 429, "message": "This request exceeds your organization quota for input tokens.", "status": "RESOURCE_EXHAUSTED"}});
    let refills = json!({"error": {"code": 429, "message": "Resource has been exhausted (e.g. check quota).", "status": "RESOURCE_EXHAUSTED",
        "details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "0.01s"}]}});
    for (body, sent) in [(check, 1), (organization, 1), (refills, 4)] {
        let server = MockServer::start().await;
        PROTOCOL
            .answer(&server, ResponseTemplate::new(429).set_body_json(&body))
            .await;
        let error = run(&PROTOCOL.provider(&server, false), &hello())
            .await
            .0
            .unwrap_err();
        assert!(!error.is_context_overflow(), "{error}");
        assert_eq!(
            matches!(error, ProviderError::QuotaExceeded { .. }),
            sent == 1,
            "{error}"
        );
        assert_eq!(
            server.received_requests().await.unwrap().len(),
            sent,
            "{body}"
        );
    }
}

#[tokio::test]
async fn errors_reach_the_classifier() {
    let overflow = json!({"error": {"code": 400, "message": "The input token count (132478) exceeds the maximum number of tokens allowed (131072).", "status": "INVALID_ARGUMENT"}});
    let array = json!([{"error": {"code": 400, "message": "The input token count (1180940) exceeds the maximum number of tokens allowed (1048576).", "errors": [{"message": "The input token count (1180940) exceeds the maximum number of tokens allowed (1048576).", "domain": "global", "reason": "badRequest"}], "status": "INVALID_ARGUMENT"}}]);
    let quota = json!({"error": {"code": 429, "message": "You exceeded your current quota, please check your plan and billing details. Quota exceeded for metric: generativelanguage.googleapis.com/generate_content_free_tier_input_token_count, limit: 0", "status": "RESOURCE_EXHAUSTED"}});
    for (status, body, overflow) in [
        (400, overflow, true),
        (400, array, true),
        (429, quota, false),
    ] {
        let server = MockServer::start().await;
        PROTOCOL
            .answer(&server, ResponseTemplate::new(status).set_body_json(body))
            .await;
        let mut config = common::config(&server.uri());
        config.retry = RetryPolicy::none();
        let error = run(&GeminiProvider::new(config).unwrap(), &hello())
            .await
            .0
            .unwrap_err();
        assert_eq!(error.is_context_overflow(), overflow, "{error}");
        if status == 429 {
            // A free tier of `limit: 0` does not include the model: the account must change.
            assert!(
                matches!(error, ProviderError::QuotaExceeded { .. }),
                "{error}"
            );
        }
    }
    // An error chunk inside the stream.
    let server = MockServer::start().await;
    PROTOCOL.answer(&server, sse_answer(&[json!({"error": {"code": 400, "message": "The input token count (132478) exceeds the maximum number of tokens allowed (131072).", "status": "INVALID_ARGUMENT"}})])).await;
    assert!(
        run(&PROTOCOL.provider(&server, true), &hello())
            .await
            .0
            .unwrap_err()
            .is_context_overflow()
    );
}
