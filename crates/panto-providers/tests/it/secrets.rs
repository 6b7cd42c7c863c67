//! The key never shows: not in Debug output of adapters or configurations, not in any error
//! (even when the server echoes it), not in logs.

use std::io::Write;
use std::sync::{Arc, Mutex};

use panto_provider::{Provider, ProviderError};
use panto_providers::{
    AnthropicProvider, Config, GeminiProvider, OpenAiChatProvider, OpenAiResponsesProvider,
    RetryPolicy,
};
use serde_json::{Value, json};
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::common::{self, KEY, hello, run};

/// Every adapter, with its Debug output.
fn providers(base: &str) -> Vec<(String, Box<dyn Provider>)> {
    let config = || {
        let mut c = common::config(base);
        c.retry = RetryPolicy::none();
        c
    };
    fn entry<P: Provider + std::fmt::Debug + 'static>(p: P) -> (String, Box<dyn Provider>) {
        (format!("{p:?}"), Box::new(p))
    }
    vec![
        entry(AnthropicProvider::new(config()).unwrap()),
        entry(OpenAiChatProvider::new(config()).unwrap()),
        entry(OpenAiResponsesProvider::new(config()).unwrap()),
        entry(GeminiProvider::new(config()).unwrap()),
    ]
}

#[track_caller]
fn assert_clean(what: &str, text: &str) {
    assert!(!text.contains(KEY), "{what} leaks the key: {text}");
}

fn check_error(error: &ProviderError) {
    assert_clean("error Display", &error.to_string());
    assert_clean("error Debug", &format!("{error:?}"));
}

/// A writer into a shared buffer, for capturing logs.
#[derive(Clone, Default)]
struct Buffer(Arc<Mutex<Vec<u8>>>);

impl Write for Buffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn the_key_appears_in_no_debug_output_error_or_log() {
    let logs = Buffer::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    // Global, because a thread-local default races with the interest cache of callsites that
    // other tests (running in parallel) hit first. Other tests' logs land here too, and are
    // checked as well.
    tracing::subscriber::set_global_default(subscriber).expect("only this test sets a subscriber");

    let config = Config::new("http://127.0.0.1:9", KEY);
    assert_clean("Config Debug", &format!("{config:?}"));

    // The server echoes the key in every error body, as some do.
    let echo = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(401).set_body_json(json!({
            "error": {"message": format!("Incorrect API key provided: {KEY}"), "type": "invalid_request_error", "code": "invalid_api_key"}})))
        .mount(&echo)
        .await;
    for (debug, p) in providers(&echo.uri()) {
        assert!(debug.contains("ApiKey(<redacted>)"), "{debug}");
        assert_clean("adapter Debug", &debug);
        let (result, _) = run(&*p, &hello()).await;
        let error = result.unwrap_err();
        // The transport removes the exact key, and the classifier also masks anything shaped
        // like a key; either way the provider's words around it survive.
        let text = error.to_string();
        assert!(
            text.contains("Incorrect API key provided: <redacted>")
                || text.contains("Incorrect API key provided: [redacted]"),
            "{error}"
        );
        check_error(&error);
    }

    // Errors made here: connection refused, malformed answers, stream errors.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let closed = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    for (_, p) in providers(&closed) {
        check_error(&run(&*p, &hello()).await.0.unwrap_err());
    }
    let garbage = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_body_raw(
            format!("data: {{\"error\": \"{KEY}\"}}\n\nnot json {KEY}"),
            "text/event-stream",
        ))
        .mount(&garbage)
        .await;
    for (_, p) in providers(&garbage.uri()) {
        check_error(&run(&*p, &hello()).await.0.unwrap_err());
    }

    let logs = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    assert!(
        logs.contains("sending request"),
        "the logs were captured: {logs}"
    );
    assert_clean("logs", &logs);
}

/// Whether `text` holds a piece of the key of 8 bytes or more.
fn holds_a_piece_of_the_key(text: &str) -> Option<&str> {
    KEY.as_bytes()
        .windows(8)
        .map(|w| std::str::from_utf8(w).unwrap())
        .find(|w| text.contains(w))
}

#[track_caller]
fn assert_no_piece(what: &str, text: &str) {
    if let Some(piece) = holds_a_piece_of_the_key(text) {
        panic!("{what} holds {piece:?}, a piece of the key: {text}");
    }
}

/// A body that is not JSON, with the key starting `before_cut` bytes before byte 200, where
/// error messages cut their excerpt of a body.
fn straddling_body(before_cut: usize) -> String {
    let head = "{\"echo\": \"";
    let pad = "x".repeat(200 - before_cut - head.len());
    format!("{head}{pad}{KEY} and the rest of a body that is not JSON")
}

/// Every adapter, streaming or not.
fn adapters(base: &str, streaming: bool) -> Vec<Box<dyn Provider>> {
    let config = || {
        let mut c = common::config(base).with_streaming(streaming);
        c.retry = RetryPolicy::none();
        c
    };
    vec![
        Box::new(AnthropicProvider::new(config()).unwrap()),
        Box::new(OpenAiChatProvider::new(config()).unwrap()),
        Box::new(OpenAiResponsesProvider::new(config()).unwrap()),
        Box::new(GeminiProvider::new(config()).unwrap()),
    ]
}

#[tokio::test]
async fn a_key_that_straddles_the_cut_of_an_excerpt_leaves_no_piece_on_any_adapter() {
    // From the first byte of the key to all but one byte cut off.
    for before_cut in [1, 7, 8, 12, KEY.len() - 1] {
        let whole = MockServer::start().await;
        Mock::given(method("POST"))
            .respond_with(
                ResponseTemplate::new(200)
                    .set_body_raw(straddling_body(before_cut), "application/json"),
            )
            .mount(&whole)
            .await;
        // The same body as the data of a streamed event.
        let streamed = MockServer::start().await;
        Mock::given(method("POST"))
            .respond_with(ResponseTemplate::new(200).set_body_raw(
                format!(
                    "event: message_start\ndata: {}\n\n",
                    straddling_body(before_cut)
                ),
                "text/event-stream",
            ))
            .mount(&streamed)
            .await;
        for (server, streaming) in [(&whole, false), (&streamed, true)] {
            for p in adapters(&server.uri(), streaming) {
                let error = run(&*p, &hello()).await.0.unwrap_err();
                let what = format!(
                    "{} (streaming {streaming}, {before_cut} before the cut)",
                    p.name()
                );
                assert!(
                    matches!(error, ProviderError::MalformedResponse { .. }),
                    "{what}: {error:?}"
                );
                assert_no_piece(&what, &error.to_string());
                assert_no_piece(&what, &format!("{error:?}"));
            }
        }
    }
}

/// A successful answer of each protocol whose text and tool arguments echo `echo`.
fn echoing_answers(echo: &str) -> [(&'static str, Value); 4] {
    let args = json!({ "path": echo }).to_string();
    [
        (
            "anthropic",
            json!({"id": "msg_1", "type": "message", "role": "assistant", "model": "m",
            "content": [{"type": "text", "text": format!("your key is {echo}.")},
                        {"type": "tool_use", "id": "t1", "name": "read", "input": {"path": echo}}],
            "stop_reason": "tool_use", "usage": {"input_tokens": 3, "output_tokens": 2}}),
        ),
        (
            "openai",
            json!({"id": "c1", "object": "chat.completion", "model": "m",
            "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                "role": "assistant", "content": format!("your key is {echo}."),
                "tool_calls": [{"id": "t1", "type": "function", "function": {"name": "read", "arguments": args}}]}}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 2}}),
        ),
        (
            "openai-responses",
            json!({"id": "r1", "object": "response", "status": "completed", "model": "m",
            "output": [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": format!("your key is {echo}.")}]},
                       {"type": "function_call", "call_id": "t1", "name": "read", "arguments": args}],
            "usage": {"input_tokens": 3, "output_tokens": 2}}),
        ),
        (
            "gemini",
            json!({"candidates": [{"index": 0, "finishReason": "STOP", "content": {"role": "model", "parts": [
                {"text": format!("your key is {echo}.")},
                {"functionCall": {"name": "read", "args": {"path": echo}}}]}}],
            "usageMetadata": {"promptTokenCount": 3, "candidatesTokenCount": 2}}),
        ),
    ]
}

#[tokio::test]
async fn a_key_echoed_in_a_successful_answer_is_scrubbed_from_the_message_and_the_events() {
    // The whole key, and a piece of it (all but its first and last byte).
    let piece = &KEY[1..KEY.len() - 1];
    for echo in [KEY, piece] {
        for (i, (name, body)) in echoing_answers(echo).into_iter().enumerate() {
            let server = MockServer::start().await;
            Mock::given(method("POST"))
                .respond_with(ResponseTemplate::new(200).set_body_json(body))
                .mount(&server)
                .await;
            let p = adapters(&server.uri(), false).remove(i);
            assert_eq!(p.name(), name);
            let (result, events) = run(&*p, &hello()).await;
            let message = result.unwrap_or_else(|e| panic!("{name}: {e}"));
            let stored = panto_model::encode_line(&panto_model::Entry::Message(message.clone()));
            assert_no_piece(&format!("{name} message"), &stored);
            assert!(
                message.text().contains("your key is <redacted>."),
                "{name}: {stored}"
            );
            let Some(panto_model::ContentBlock::ToolUse(call)) = message.content.last() else {
                panic!("{name}: no tool call in {stored}");
            };
            assert_eq!(call.input, json!({"path": "<redacted>"}), "{name}");
            assert_no_piece(&format!("{name} events"), &events.join(""));
        }
    }
}

#[tokio::test]
async fn a_key_split_over_streamed_events_reaches_the_sink_in_no_piece() {
    // The key cut into pieces of 1 to 7 bytes, each in its own event, between other words.
    let mut chunks = vec![
        json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": "key: "}}]}),
    ];
    let mut rest = KEY;
    let mut size = 1;
    while !rest.is_empty() {
        let (piece, tail) = rest.split_at(size.min(rest.len()));
        chunks.push(json!({"choices": [{"index": 0, "delta": {"content": piece}}]}));
        rest = tail;
        size = size % 7 + 1;
    }
    chunks.push(json!({"choices": [{"index": 0, "delta": {"content": " (done)"}, "finish_reason": "stop"}]}));
    chunks.push(json!("[DONE]"));
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_raw(common::data_stream(&chunks), "text/event-stream"),
        )
        .mount(&server)
        .await;
    let p = OpenAiChatProvider::new(common::config(&server.uri())).unwrap();
    let (result, events) = run(&p, &hello()).await;
    let message = result.unwrap();
    let shown: String = events
        .iter()
        .map(|e| e.trim_start_matches("text:"))
        .collect();
    assert_eq!(shown, "key: <redacted> (done)");
    assert_eq!(message.text(), "key: <redacted> (done)");
}
