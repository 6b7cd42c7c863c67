//! Servers that misbehave the way real ones do (issue 14): each fault reaches a clear error
//! within its named wait, retries never stretch the request deadline, a long `Retry-After` is
//! not slept through, and each retry is announced before it happens.
//!
//! Bounds on elapsed time are in seconds and loose, for a noisy shared machine; each test's
//! timeouts are small so that a wrong wait shows as a gross overshoot.

use std::time::{Duration, Instant, SystemTime};

use panto_provider::{ProviderError, Wait};
use panto_providers::{Config, OpenAiChatProvider};
use serde_json::json;
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::common::{self, RawServer, Step, chunk, hello, run, sse_head};

/// Runs `hello()` against `config`; the error, the events and the time taken.
async fn fail(config: Config) -> (ProviderError, Vec<String>, Duration) {
    let started = Instant::now();
    let (result, events) = run(&OpenAiChatProvider::new(config).unwrap(), &hello()).await;
    let error = result.expect_err("the request should fail");
    (error, events, started.elapsed())
}

#[track_caller]
fn assert_expired(error: &ProviderError, expected: Wait, words: &str) {
    match error {
        ProviderError::WaitExpired { wait, message, .. } => {
            assert_eq!(*wait, expected, "{error}");
            assert!(message.contains(words), "{error}");
        }
        other => panic!("expected the {expected} wait to expire, got {other:?}"),
    }
}

#[track_caller]
fn assert_between(elapsed: Duration, low: u64, high: u64) {
    assert!(
        elapsed >= Duration::from_secs(low) && elapsed < Duration::from_secs(high),
        "took {elapsed:?}, expected {low} to {high} s"
    );
}

fn silent_server() -> Vec<Step> {
    vec![Step::Sleep(Duration::from_secs(60))]
}

fn head_then_silence() -> Vec<Step> {
    vec![
        Step::Write(sse_head()),
        Step::Sleep(Duration::from_secs(60)),
    ]
}

/// A stream head, then a keep-alive comment every 200 ms for 30 s.
fn pings(ping: &str) -> Vec<Step> {
    let mut steps = vec![Step::Write(sse_head())];
    for _ in 0..150 {
        steps.push(Step::Write(chunk(ping)));
        steps.push(Step::Sleep(Duration::from_millis(200)));
    }
    steps
}

/// A fast configuration whose request deadline is `total` seconds and whose other waits are
/// far longer, so that only the deadline can end the request.
fn deadline(base: &str, total: u64) -> Config {
    let mut config = common::config(base);
    config.request_timeout = Duration::from_secs(total);
    config.first_byte_timeout = Duration::from_secs(600);
    config.idle_timeout = Duration::from_secs(600);
    config
}

#[tokio::test]
async fn a_server_that_never_answers_ends_at_the_request_deadline_without_retries() {
    for streaming in [true, false] {
        let server = RawServer::start(silent_server()).await;
        let config = deadline(&server.base, 2).with_streaming(streaming);
        let (error, events, elapsed) = fail(config).await;
        assert_expired(&error, Wait::Request, "sent no answer");
        assert!(error.to_string().contains("request wait, 2 s"), "{error}");
        assert_between(elapsed, 1, 10);
        assert_eq!(
            server.connections(),
            1,
            "a silent server is not asked again"
        );
        assert!(events.is_empty(), "{events:?}");
    }
}

/// One wait set to 1 s, the others long: that wait ends the request, and only it.
fn one_short_wait(base: &str, wait: Wait, streaming: bool) -> Config {
    let mut config = common::config(base).with_streaming(streaming);
    let short = Duration::from_secs(1);
    match wait {
        Wait::FirstByte => config.first_byte_timeout = short,
        Wait::Idle => config.idle_timeout = short,
        other => panic!("no case for the {other} wait"),
    }
    config
}

#[tokio::test]
async fn each_wait_that_runs_out_names_itself_and_is_not_retried() {
    let whole_head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 500\r\n\r\n{\"choices\"";
    let cases = [
        (silent_server(), true, Wait::FirstByte, "sent no answer"),
        (
            head_then_silence(),
            true,
            Wait::Idle,
            "the stream went silent",
        ),
        (
            vec![
                Step::Write(whole_head.to_vec()),
                Step::Sleep(Duration::from_secs(60)),
            ],
            false,
            Wait::Idle,
            "the answer stopped arriving",
        ),
    ];
    for (steps, streaming, wait, words) in cases {
        let server = RawServer::start(steps).await;
        let (error, _, elapsed) = fail(one_short_wait(&server.base, wait, streaming)).await;
        assert_expired(&error, wait, words);
        assert!(
            error.to_string().contains(&format!("({wait} wait, 1 s)")),
            "{error}"
        );
        assert_between(elapsed, 1, 8);
        assert_eq!(server.connections(), 1, "{error}");
    }
}

#[tokio::test]
async fn keep_alive_comments_and_ping_events_are_not_progress() {
    for ping in [": ping\n\n", "event: ping\ndata: {\"type\": \"ping\"}\n\n"] {
        let server = RawServer::start(pings(ping)).await;
        let mut config = common::config(&server.base);
        config.idle_timeout = Duration::from_secs(2);
        let (error, events, elapsed) = fail(config).await;
        assert_expired(&error, Wait::Idle, "only keep-alive pings arrived");
        assert_between(elapsed, 2, 10);
        assert!(events.is_empty(), "{events:?}");
    }
}

#[tokio::test]
async fn the_deadline_ends_a_stream_of_pings_too() {
    let server = RawServer::start(pings(": ping\n\n")).await;
    let (error, _, elapsed) = fail(deadline(&server.base, 2)).await;
    assert_expired(&error, Wait::Request, "only keep-alive pings arrived");
    assert_between(elapsed, 1, 10);
}

#[tokio::test]
async fn pings_between_real_events_do_not_end_a_stream_that_progresses() {
    let delta = |text: &str| {
        chunk(&format!(
            "data: {}\n\n",
            json!({"choices": [{"index": 0, "delta": {"content": text}}]})
        ))
    };
    let mut steps = vec![Step::Write(sse_head())];
    // Four pieces 0.8 s apart, pings in between: longer than the 1.5 s idle wait in all,
    // never that long without an event.
    for piece in ["a", "b", "c", "d"] {
        steps.push(Step::Write(delta(piece)));
        steps.push(Step::Sleep(Duration::from_millis(400)));
        steps.push(Step::Write(chunk(": ping\n\n")));
        steps.push(Step::Sleep(Duration::from_millis(400)));
    }
    steps.push(Step::Write(chunk(&format!(
        "data: {}\n\ndata: [DONE]\n\n",
        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    ))));
    steps.push(Step::Write(b"0\r\n\r\n".to_vec()));
    let server = RawServer::start(steps).await;
    let mut config = common::config(&server.base);
    config.idle_timeout = Duration::from_millis(1500);
    let (result, _) = run(&OpenAiChatProvider::new(config).unwrap(), &hello()).await;
    assert_eq!(result.unwrap().text(), "abcd");
}

async fn rate_limited_server(header: &str, value: &str) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(
            ResponseTemplate::new(429)
                .insert_header(header, value)
                .set_body_json(
                    json!({"error": {"message": "Rate limit reached", "type": "requests"}}),
                ),
        )
        .mount(&server)
        .await;
    server
}

#[tokio::test]
async fn a_retry_after_beyond_the_cap_stops_at_once_saying_when() {
    let server = rate_limited_server("retry-after", "3600").await;
    let mut config = common::config(&server.uri());
    config.retry.max_delay = Duration::from_secs(60);
    let (error, events, elapsed) = fail(config).await;
    assert!(
        matches!(error, ProviderError::RateLimited { retry_after: Some(d), .. } if d == Duration::from_secs(3600)),
        "{error:?}"
    );
    let text = error.to_string();
    assert!(
        text.starts_with("rate limited; retry in about 60 min: Rate limit reached"),
        "{text}"
    );
    assert!(text.contains("longer than the 60 s retry cap"), "{text}");
    assert_eq!(server.received_requests().await.unwrap().len(), 1);
    assert!(events.is_empty(), "{events:?}");
    assert!(elapsed < Duration::from_secs(5), "{elapsed:?}");
}

#[tokio::test]
async fn a_retry_after_date_is_read_as_a_date() {
    let in_two_hours = httpdate::fmt_http_date(SystemTime::now() + Duration::from_secs(7200));
    let far = "Tue, 01 Dec 2099 00:00:00 GMT";
    for (date, said) in [(in_two_hours.as_str(), "about 2 h"), (far, "about 266")] {
        let server = rate_limited_server("retry-after", date).await;
        let (error, _, elapsed) = fail(common::config(&server.uri())).await;
        let text = error.to_string();
        assert!(text.contains(&format!("retry in {said}")), "{text}");
        assert_eq!(server.received_requests().await.unwrap().len(), 1);
        assert!(elapsed < Duration::from_secs(5), "{elapsed:?}");
    }
}

#[tokio::test]
async fn a_retry_that_would_pass_the_deadline_is_not_waited() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(
            ResponseTemplate::new(503)
                .insert_header("retry-after", "3")
                .set_body_string("busy"),
        )
        .mount(&server)
        .await;
    let mut config = deadline(&server.uri(), 2);
    config.retry.max_delay = Duration::from_secs(60);
    let (error, events, elapsed) = fail(config).await;
    assert!(
        matches!(error, ProviderError::Server { status: 503, .. }),
        "{error:?}"
    );
    assert!(
        error
            .to_string()
            .contains("not retried: waiting 3 s would pass the request deadline"),
        "{error}"
    );
    assert!(events.is_empty(), "{events:?}");
    assert_eq!(server.received_requests().await.unwrap().len(), 1);
    assert!(elapsed < Duration::from_secs(2), "{elapsed:?}");
}

#[tokio::test]
async fn a_refused_connection_is_retried_with_each_retry_announced() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    let mut config = common::config(&base);
    config.retry.max_retries = 2;
    let (error, events, elapsed) = fail(config).await;
    assert!(matches!(error, ProviderError::Connection { .. }), "{error}");
    // panto's words first, the HTTP library's after them as the cause.
    let port = base.rsplit(':').next().unwrap();
    let text = error.to_string();
    assert!(
        text.starts_with(&format!(
            "connection failed: connection refused by 127.0.0.1:{port}: nothing is listening there; cause: "
        )),
        "{text}"
    );
    assert!(!panto_providers::cut_short(&error));
    assert_eq!(events, ["retry:1/2:connection", "retry:2/2:connection"]);
    assert!(elapsed < Duration::from_secs(5), "{elapsed:?}");
}

#[tokio::test]
async fn retries_share_the_deadline_of_the_request() {
    // Every answer is a 503 after 700 ms; with a 2 s deadline and many retries allowed, the
    // request ends near 2 s, not after all the attempts.
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(
            ResponseTemplate::new(503)
                .set_body_string("busy")
                .set_delay(Duration::from_millis(700)),
        )
        .mount(&server)
        .await;
    let mut config = deadline(&server.uri(), 2);
    config.retry.max_retries = 20;
    let (error, events, elapsed) = fail(config).await;
    assert_between(elapsed, 1, 6);
    let attempts = server.received_requests().await.unwrap().len();
    assert!((2..=4).contains(&attempts), "{attempts} attempts: {error}");
    assert_eq!(events.len(), attempts - 1, "{events:?}");
}

#[tokio::test]
async fn a_name_that_does_not_resolve_is_said_in_plain_words() {
    // `.invalid` never resolves (RFC 6761), with or without a network.
    let mut config = common::config("http://panto-test.invalid");
    config.retry.max_retries = 0;
    let (error, _, _) = fail(config).await;
    let text = error.to_string();
    assert!(
        text.starts_with(
            "connection failed: cannot find the server panto-test.invalid: its name does not resolve (DNS); cause: "
        ),
        "{text}"
    );
}

#[tokio::test]
async fn a_server_that_does_not_speak_tls_on_https_is_said_in_plain_words() {
    // A plain TCP server that answers anything with HTTP text: the TLS handshake fails.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for socket in listener.incoming() {
            let Ok(mut socket) = socket else { return };
            let _ = std::io::Write::write_all(
                &mut socket,
                b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n",
            );
        }
    });
    let mut config = common::config(&format!("https://127.0.0.1:{port}"));
    config.retry.max_retries = 0;
    let (error, _, _) = fail(config).await;
    let text = error.to_string();
    assert!(
        text.starts_with(&format!(
            "connection failed: no secure connection to 127.0.0.1:{port}: the TLS handshake failed"
        )) && text.contains("; cause: "),
        "{text}"
    );
}
