//! Retries, Retry-After, timeouts and broken connections, through the `OpenAI` Chat adapter (the
//! transport is shared by every adapter).

use std::time::{Duration, Instant};

use panto_provider::{ProviderError, Wait};
use panto_providers::OpenAiChatProvider;
use serde_json::json;
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::common::{self, RawServer, Step, chunk, hello, run, sse_head};

fn ok() -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_json(json!({
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}]}))
}

fn provider(base: &str, retries: u32) -> OpenAiChatProvider {
    let mut config = common::config(base).with_streaming(false);
    config.retry.max_retries = retries;
    OpenAiChatProvider::new(config).unwrap()
}

async fn fail_then_ok(server: &MockServer, failure: ResponseTemplate, times: u64) {
    Mock::given(method("POST"))
        .respond_with(failure)
        .up_to_n_times(times)
        .mount(server)
        .await;
    Mock::given(method("POST"))
        .respond_with(ok())
        .mount(server)
        .await;
}

fn rate_limited() -> ResponseTemplate {
    ResponseTemplate::new(429).set_body_json(json!({"error": {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"}}))
}

#[tokio::test]
async fn rate_limits_are_retried_after_the_delay_the_server_asked_for() {
    let server = MockServer::start().await;
    fail_then_ok(
        &server,
        rate_limited().insert_header("retry-after-ms", "300"),
        2,
    )
    .await;
    let started = Instant::now();
    let (result, _) = run(&provider(&server.uri(), 3), &hello()).await;
    assert_eq!(result.unwrap().text(), "ok");
    assert_eq!(server.received_requests().await.unwrap().len(), 3);
    // Two waits of 300 ms, although the base delay is 1 ms.
    assert!(
        started.elapsed() >= Duration::from_millis(600),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn retry_after_in_seconds_is_honoured() {
    let server = MockServer::start().await;
    fail_then_ok(
        &server,
        ResponseTemplate::new(503)
            .insert_header("retry-after", "1")
            .set_body_string("busy"),
        1,
    )
    .await;
    let started = Instant::now();
    let (result, _) = run(&provider(&server.uri(), 3), &hello()).await;
    result.unwrap();
    assert_eq!(server.received_requests().await.unwrap().len(), 2);
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn transient_failures_are_retried_a_bounded_number_of_times() {
    for status in [500u16, 502, 503, 504, 529, 429] {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .respond_with(ResponseTemplate::new(status).set_body_string("try later"))
            .mount(&server)
            .await;
        let error = run(&provider(&server.uri(), 2), &hello())
            .await
            .0
            .unwrap_err();
        assert!(error.is_transient(), "{status}: {error}");
        assert_eq!(
            server.received_requests().await.unwrap().len(),
            3,
            "{status}"
        );
    }
}

#[tokio::test]
async fn other_client_errors_and_overflow_are_never_retried() {
    let bodies = [
        (
            400,
            json!({"error": {"message": "bad field", "type": "invalid_request_error"}}),
        ),
        (
            401,
            json!({"error": {"message": "Incorrect API key provided", "type": "invalid_request_error", "code": "invalid_api_key"}}),
        ),
        (
            404,
            json!({"error": {"message": "The model `nope` does not exist", "code": "model_not_found"}}),
        ),
        (
            400,
            json!({"error": {"message": "This model's maximum context length is 8192 tokens.", "code": "context_length_exceeded"}}),
        ),
    ];
    for (status, body) in bodies {
        let server = MockServer::start().await;
        fail_then_ok(
            &server,
            ResponseTemplate::new(status).set_body_json(body.clone()),
            1,
        )
        .await;
        let error = run(&provider(&server.uri(), 3), &hello())
            .await
            .0
            .unwrap_err();
        assert!(!error.is_transient(), "{error}");
        assert_eq!(server.received_requests().await.unwrap().len(), 1, "{body}");
    }
}

/// An account that cannot pay gets the same answer however often it asks: each of these is sent
/// once, even with retries allowed and an answer waiting behind it. The bodies are the
/// providers' own (tests/fixtures/overflow.jsonl names where each was seen).
#[tokio::test]
async fn quota_and_billing_answers_are_sent_once() {
    let bodies = [
        // OpenAI, `insufficient_quota` on a 429.
        (
            429,
            json!({"error": {"message": "You exceeded your current quota, please check your plan and billing details.", "type": "insufficient_quota", "param": null, "code": "insufficient_quota"}}),
        ),
        // OpenRouter, 402 for credits.
        (
            402,
            json!({"error": {"message": "This request requires more credits, or fewer max_tokens. You requested up to 32000 tokens, but can only afford 27342. To increase, visit https://openrouter.ai/settings/credits and upgrade to a paid account", "code": 402, "metadata": {"provider_name": null}}}),
        ),
        // Gemini's free tier for a model it does not include: `limit: 0`, despite the delay.
        (
            429,
            json!({"error": {"code": 429, "message": "You exceeded your current quota, please check your plan and billing details.\n* Quota exceeded for metric: generativelanguage.googleapis.com/generate_content_free_tier_requests, limit: 0, model: gemini-2.5-pro\nPlease retry in 20.04466179s.", "status": "RESOURCE_EXHAUSTED"}}),
        ),
    ];
    for (status, body) in bodies {
        let server = MockServer::start().await;
        fail_then_ok(
            &server,
            ResponseTemplate::new(status).set_body_json(body.clone()),
            1,
        )
        .await;
        let (result, events) = run(&provider(&server.uri(), 3), &hello()).await;
        let error = result.unwrap_err();
        assert!(
            matches!(error, ProviderError::QuotaExceeded { .. }),
            "{status} {body}: {error:?}"
        );
        assert!(!error.is_transient());
        assert_eq!(server.received_requests().await.unwrap().len(), 1, "{body}");
        assert!(
            events.iter().all(|e| !e.starts_with("retry:")),
            "{events:?}"
        );
    }
    // The same wording with a wait the server names is a quota that refills: retried.
    let server = MockServer::start().await;
    fail_then_ok(
        &server,
        ResponseTemplate::new(429).set_body_json(json!({"error": {"code": 429, "message": "You exceeded your current quota, please check your plan and billing details.\n* Quota exceeded for metric: generativelanguage.googleapis.com/generate_content_paid_tier_input_token_count, limit: 4000000\nPlease retry in 0.01s.", "status": "RESOURCE_EXHAUSTED"}})),
        1,
    )
    .await;
    let (result, _) = run(&provider(&server.uri(), 3), &hello()).await;
    assert_eq!(result.unwrap().text(), "ok");
    assert_eq!(server.received_requests().await.unwrap().len(), 2);
}

#[tokio::test]
async fn zero_retries_means_one_attempt() {
    let server = MockServer::start().await;
    fail_then_ok(&server, ResponseTemplate::new(503), 1).await;
    assert!(run(&provider(&server.uri(), 0), &hello()).await.0.is_err());
    assert_eq!(server.received_requests().await.unwrap().len(), 1);
}

#[tokio::test]
async fn a_stream_that_goes_silent_times_out_and_is_not_retried_after_text_was_shown() {
    let data = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"}}]}\n\n";
    let server = RawServer::start(vec![
        Step::Write(sse_head()),
        Step::Write(chunk(data)),
        Step::Sleep(Duration::from_secs(30)),
    ])
    .await;
    let mut config = common::config(&server.base);
    config.idle_timeout = Duration::from_secs(1);
    let (result, events) = run(&OpenAiChatProvider::new(config).unwrap(), &hello()).await;
    assert!(
        matches!(
            result,
            Err(ProviderError::WaitExpired {
                wait: Wait::Idle,
                ..
            })
        ),
        "{result:?}"
    );
    assert_eq!(events, ["text:Hel"]);
    assert_eq!(server.connections(), 1);
}

#[tokio::test]
async fn a_connection_closed_in_the_middle_of_a_stream_is_an_error() {
    let data = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"}}]}\n\n";
    // The chunk header promises more bytes than arrive before the connection closes.
    let mut partial = format!("{:x}\r\n", data.len() + 50).into_bytes();
    partial.extend_from_slice(data.as_bytes());
    let server = RawServer::start(vec![Step::Write(sse_head()), Step::Write(partial)]).await;
    let (result, events) = run(
        &OpenAiChatProvider::new(common::config(&server.base)).unwrap(),
        &hello(),
    )
    .await;
    assert!(
        matches!(
            result,
            Err(ProviderError::Connection { .. } | ProviderError::MalformedResponse { .. })
        ),
        "{result:?}"
    );
    assert_eq!(events, ["text:Hel"]);
    assert_eq!(server.connections(), 1);
}

#[tokio::test]
async fn a_clean_end_of_stream_before_the_end_marker_is_malformed() {
    let data = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"}}]}\n\n";
    let server = RawServer::start(vec![
        Step::Write(sse_head()),
        Step::Write(chunk(data)),
        Step::Write(b"0\r\n\r\n".to_vec()),
    ])
    .await;
    let (result, _) = run(
        &OpenAiChatProvider::new(common::config(&server.base)).unwrap(),
        &hello(),
    )
    .await;
    common::assert_malformed(&result);
}

#[tokio::test]
async fn a_refused_connection_is_a_connection_error() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    let error = run(&provider(&base, 1), &hello()).await.0.unwrap_err();
    assert!(matches!(error, ProviderError::Connection { .. }), "{error}");
}

/// llama-server closes a connection after 5 s of idleness, and a request can meet a pooled
/// connection just as the server hangs up. The server here answers the first request with a
/// keep-alive response, reads the second request on the same connection and closes it without
/// answering: the request must go out again on a new connection and succeed.
#[tokio::test]
async fn a_request_on_a_pooled_connection_the_server_dropped_is_sent_again() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::AsyncWriteExt;

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let requests = Arc::new(AtomicUsize::new(0));
    let seen = requests.clone();
    tokio::spawn(async move {
        let mut first = true;
        while let Ok((mut socket, _)) = listener.accept().await {
            let seen = seen.clone();
            let drop_second = std::mem::take(&mut first);
            tokio::spawn(async move {
                let body = r#"{"choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}]}"#;
                let answer = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nKeep-Alive: timeout=5, max=100\r\n\r\n{body}",
                    body.len()
                );
                common::read_request(&mut socket).await;
                seen.fetch_add(1, Ordering::SeqCst);
                socket.write_all(answer.as_bytes()).await.unwrap();
                if drop_second {
                    common::read_request(&mut socket).await;
                    seen.fetch_add(1, Ordering::SeqCst);
                }
                // Dropping the socket closes it, with no answer to a second request.
            });
        }
    });
    let provider = provider(&base, 1);
    for _ in 0..2 {
        let message = run(&provider, &hello()).await.0.unwrap();
        assert_eq!(message.text(), "ok");
    }
    // The second request went out twice: on the pooled connection, then on a new one.
    assert_eq!(requests.load(Ordering::SeqCst), 3);
}
