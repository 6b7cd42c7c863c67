//! The cap on the size of one answer: a larger answer is an error as soon as the cap is passed,
//! whether the server announces its length, sends it in chunks, or streams it.

use std::time::{Duration, Instant};

use panto_provider::ProviderError;
use panto_providers::{DEFAULT_MAX_RESPONSE_BYTES, OpenAiChatProvider};
use serde_json::json;
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::common::{self, RawServer, Step, chunk, hello, run, sse_head};

const CAP: u64 = 4096;

fn provider(base: &str, streaming: bool) -> OpenAiChatProvider {
    let mut config = common::config(base).with_streaming(streaming);
    config.retry.max_retries = 0;
    config.max_response_bytes = CAP;
    OpenAiChatProvider::new(config).unwrap()
}

fn answer(text: &str) -> String {
    json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}]})
        .to_string()
}

#[track_caller]
fn assert_too_large(result: &Result<panto_model::Message, ProviderError>) {
    match result {
        Err(ProviderError::MalformedResponse { message }) => {
            assert!(
                message.contains("larger than the limit of 4096 bytes"),
                "{message}"
            );
        }
        other => panic!("expected the size cap, got {other:?}"),
    }
}

#[test]
fn the_default_cap_is_64_mib() {
    assert_eq!(DEFAULT_MAX_RESPONSE_BYTES, 64 * 1024 * 1024);
    let config = panto_providers::Config::new("http://127.0.0.1:1", "");
    assert_eq!(config.max_response_bytes, DEFAULT_MAX_RESPONSE_BYTES);
}

#[tokio::test]
async fn an_answer_with_a_length_over_the_cap_is_refused_and_one_under_it_is_read() {
    let server = MockServer::start().await;
    let big = answer(&"x".repeat(CAP as usize));
    let small = answer(&"y".repeat(CAP as usize - 200));
    assert!(small.len() as u64 <= CAP);
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_body_raw(big, "application/json"))
        .up_to_n_times(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_body_raw(small, "application/json"))
        .mount(&server)
        .await;
    let p = provider(&server.uri(), false);
    assert_too_large(&run(&p, &hello()).await.0);
    let message = run(&p, &hello()).await.0.unwrap();
    assert_eq!(message.text().len(), CAP as usize - 200);
}

/// Chunks of 1 KiB, more than the cap in all, after which the server stalls without ending.
fn endless(head: &[u8], piece: &str) -> Vec<Step> {
    let mut steps = vec![Step::Write(head.to_vec())];
    for _ in 0..8 {
        steps.push(Step::Write(chunk(piece)));
    }
    steps.push(Step::Sleep(Duration::from_secs(30)));
    steps
}

#[tokio::test]
async fn a_chunked_answer_is_cut_off_as_soon_as_it_passes_the_cap() {
    let head =
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n";
    let server = RawServer::start(endless(head, &" ".repeat(1024))).await;
    let started = Instant::now();
    let (result, _) = run(&provider(&server.base, false), &hello()).await;
    assert_too_large(&result);
    // Long before the server would end the answer (or the 10 s request timeout).
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn a_stream_is_cut_off_as_soon_as_it_passes_the_cap() {
    let event = format!(
        "data: {}\n\n",
        json!({"choices": [{"index": 0, "delta": {"content": "z".repeat(960)}}]})
    );
    let server = RawServer::start(endless(&sse_head(), &event)).await;
    let started = Instant::now();
    let (result, events) = run(&provider(&server.base, true), &hello()).await;
    assert_too_large(&result);
    assert!(!events.is_empty(), "the text before the cap was shown");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}
