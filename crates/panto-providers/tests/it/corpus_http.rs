//! Every case of the overflow corpora (and of the shared visible sample, when it is there)
//! served by a loopback HTTP server to the adapter of its protocol: HTTP errors in streaming
//! and non-streaming mode, errors inside a stream that began with 200, and error bodies with a
//! 2xx status. The adapter's answer must be an overflow exactly when the case says so, of the
//! kind the case names.

use std::path::Path;

use panto_provider::Provider;
use panto_providers::{
    AnthropicProvider, GeminiProvider, OpenAiChatProvider, OpenAiResponsesProvider, RetryPolicy,
};
use serde_json::Value;
use wiremock::matchers::method;
use wiremock::{Mock, MockServer};

use crate::classify::{fixture, kind};
use crate::common::{self, case_response, hello, run};

fn adapter(protocol: &str, base: &str, streaming: bool) -> Box<dyn Provider> {
    let mut config = common::config(base);
    config.retry = RetryPolicy::none();
    config.streaming = streaming;
    match protocol {
        "anthropic" => Box::new(AnthropicProvider::new(config).unwrap()),
        "openai-chat" => Box::new(OpenAiChatProvider::new(config).unwrap()),
        "openai-responses" => Box::new(OpenAiResponsesProvider::new(config).unwrap()),
        "gemini" => Box::new(GeminiProvider::new(config).unwrap()),
        other => panic!("unknown protocol {other}"),
    }
}

/// The base URL an adapter of `protocol` is given for a server at `uri`.
fn base(protocol: &str, uri: &str) -> String {
    match protocol {
        "openai-chat" | "openai-responses" => format!("{uri}/v1"),
        _ => uri.to_owned(),
    }
}

/// Serves every case of `path` to its adapter; returns the number of requests made and the
/// mismatches.
async fn check(path: &Path, strict_kind: bool) -> (usize, Vec<String>) {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let server = MockServer::start().await;
    let mut served = 0;
    let mut wrong = Vec::new();
    for (i, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let case: Value = serde_json::from_str(line).unwrap();
        let id = case["id"].as_str().unwrap_or("?");
        let protocol = case["protocol"].as_str().unwrap();
        let overflow = case["expect"] == "overflow";
        // An error inside a stream needs a streaming request; an HTTP error must be recognised
        // whether the request streamed or not.
        let modes: &[bool] = if case.get("sse").is_some() {
            &[true]
        } else {
            &[false, true]
        };
        for &streaming in modes {
            server.reset().await;
            Mock::given(method("POST"))
                .respond_with(case_response(&case))
                .mount(&server)
                .await;
            let p = adapter(protocol, &base(protocol, &server.uri()), streaming);
            let (result, _) = run(&*p, &hello()).await;
            served += 1;
            let at = format!("{}:{} {id} (streaming {streaming})", path.display(), i + 1);
            match result {
                Ok(m) => wrong.push(format!("{at}: taken for an answer: {m:?}")),
                Err(e) => {
                    if e.is_context_overflow() != overflow {
                        wrong.push(format!(
                            "{at}: overflow {} expected {overflow}: {e}",
                            e.is_context_overflow()
                        ));
                    }
                    if strict_kind
                        && let Some(expected) = case.get("error").and_then(Value::as_str)
                        && kind(&e) != expected
                    {
                        wrong.push(format!("{at}: {} expected {expected}: {e}", kind(&e)));
                    }
                }
            }
        }
    }
    (served, wrong)
}

#[tokio::test]
async fn every_corpus_case_through_its_adapter() {
    for name in ["overflow.jsonl", "overflow_variants.jsonl"] {
        let (served, wrong) = check(&fixture(name), true).await;
        assert!(served > 200, "{name}: only {served} requests");
        eprintln!("{name}: {served} requests");
        assert!(wrong.is_empty(), "{name}:\n{}", wrong.join("\n"));
    }
}

#[tokio::test]
async fn the_shared_visible_sample_through_its_adapter() {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/overflow/visible.jsonl");
    if !path.exists() {
        eprintln!(
            "the_shared_visible_sample_through_its_adapter: {} is absent; skipped (its cases are also in tests/fixtures/overflow.jsonl)",
            path.display()
        );
        return;
    }
    let (served, wrong) = check(&path, false).await;
    assert!(served >= 10);
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
