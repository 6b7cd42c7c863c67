//! Tests of the error classifier: every case of the fixture corpora served as an adapter would
//! receive it, the shared visible sample, reworded and look-alike variants, the mapping of
//! statuses, messages and retry delays, and properties (no panic, the rate-limit veto wins).

use std::path::{Path, PathBuf};
use std::time::Duration;

use panto_provider::ProviderError;
use panto_providers::{
    Classification, Protocol, Verdict, classify_response, classify_stream_error,
    error_in_success_body, explain_response, explain_stream_error, explain_success_body,
};
use proptest::prelude::*;
use serde_json::{Value, json};

// ---------------------------------------------------------------------------------------------
// Fixture corpora.

/// One line of a fixture file (the format of `shared/data/overflow/visible.jsonl`, plus the
/// expectations this crate adds: `rule`, `error`, `input_tokens`, `limit`).
pub(crate) struct Case {
    pub(crate) id: String,
    line: usize,
    protocol: Protocol,
    status: u16,
    body: Option<Value>,
    sse: Option<Vec<Value>>,
    expect_overflow: bool,
    rule: Option<String>,
    error: Option<String>,
    input_tokens: Option<Option<u64>>,
    limit: Option<Option<u64>>,
}

fn protocol(name: &str) -> Protocol {
    match name {
        "anthropic" => Protocol::Anthropic,
        "openai-chat" => Protocol::OpenAiChat,
        "openai-responses" => Protocol::OpenAiResponses,
        "gemini" => Protocol::Gemini,
        other => panic!("unknown protocol {other}"),
    }
}

fn optional_count(v: &Value, key: &str) -> Option<Option<u64>> {
    v.get(key).map(Value::as_u64)
}

pub(crate) fn load(path: &Path) -> Vec<Case> {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            let v: Value = serde_json::from_str(l)
                .unwrap_or_else(|e| panic!("{}:{}: bad JSON: {e}", path.display(), i + 1));
            let field = |k: &str| {
                v.get(k)
                    .unwrap_or_else(|| panic!("{}:{}: missing `{k}`", path.display(), i + 1))
            };
            let expect = field("expect").as_str().unwrap_or_default();
            assert!(
                matches!(expect, "overflow" | "not_overflow"),
                "{}:{}: `expect` must be overflow or not_overflow",
                path.display(),
                i + 1
            );
            Case {
                id: field("id").as_str().unwrap_or_default().to_owned(),
                line: i + 1,
                protocol: protocol(field("protocol").as_str().unwrap_or_default()),
                status: u16::try_from(field("status").as_u64().unwrap_or(0)).unwrap_or(0),
                body: v.get("body").cloned(),
                sse: v.get("sse").and_then(Value::as_array).cloned(),
                expect_overflow: expect == "overflow",
                rule: v.get("rule").and_then(Value::as_str).map(str::to_owned),
                error: v.get("error").and_then(Value::as_str).map(str::to_owned),
                input_tokens: optional_count(&v, "input_tokens"),
                limit: optional_count(&v, "limit"),
            }
        })
        .collect()
}

/// Whether an SSE event carries an error, as an adapter decides it.
fn is_error_event(event: &Value) -> bool {
    let data = &event["data"];
    matches!(event["event"].as_str(), Some("error" | "response.failed"))
        || matches!(data["type"].as_str(), Some("error" | "response.failed"))
        || data.get("error").is_some_and(|e| !e.is_null())
}

/// Serves a case as the adapter would receive it; one classification per error it carries.
pub(crate) fn serve(case: &Case) -> Vec<Classification> {
    if let Some(events) = &case.sse {
        let found: Vec<Classification> = events
            .iter()
            .filter(|e| is_error_event(e))
            .map(|e| explain_stream_error(case.protocol, &e["data"]))
            .collect();
        assert!(
            !found.is_empty(),
            "{}: no error event in the stream",
            case.id
        );
        return found;
    }
    let body = case.body.as_ref().expect("a case has `body` or `sse`");
    if (200..300).contains(&case.status) {
        let found = explain_success_body(case.protocol, body)
            .unwrap_or_else(|| panic!("{}: 2xx error body not recognised", case.id));
        return vec![found];
    }
    // A string body is served as raw text (a non-JSON answer).
    let bytes = match body {
        Value::String(s) => s.clone().into_bytes(),
        other => serde_json::to_vec(other).expect("serialisable"),
    };
    vec![explain_response(case.protocol, case.status, None, &bytes)]
}

pub(crate) fn kind(error: &ProviderError) -> &'static str {
    match error {
        ProviderError::ContextOverflow { .. } => "context_overflow",
        ProviderError::RateLimited { .. } => "rate_limited",
        ProviderError::Authentication { .. } => "authentication",
        ProviderError::ModelNotFound { .. } => "model_not_found",
        ProviderError::InvalidRequest { .. } => "invalid_request",
        ProviderError::Server { .. } => "server",
        ProviderError::Timeout { .. } => "timeout",
        ProviderError::Connection { .. } => "connection",
        ProviderError::MalformedResponse { .. } => "malformed_response",
        ProviderError::Unsupported { .. } => "unsupported",
        _ => "other",
    }
}

pub(crate) fn message(error: &ProviderError) -> &str {
    match error {
        ProviderError::ContextOverflow { message, .. }
        | ProviderError::RateLimited { message, .. }
        | ProviderError::Authentication { message }
        | ProviderError::ModelNotFound { message }
        | ProviderError::InvalidRequest { message, .. }
        | ProviderError::Server { message, .. }
        | ProviderError::Timeout { message }
        | ProviderError::Connection { message }
        | ProviderError::MalformedResponse { message }
        | ProviderError::Unsupported { message } => message,
        _ => "",
    }
}

/// Checks every case of a fixture file; returns the failures, one line each.
fn check_file(path: &Path, strict: bool) -> (usize, Vec<String>) {
    let cases = load(path);
    let mut failures = Vec::new();
    let loc = |c: &Case| format!("{}:{} {}", path.display(), c.line, c.id);
    for case in &cases {
        let found = serve(case);
        let first = &found[0];
        let overflow = first.error.is_context_overflow();
        if found
            .iter()
            .any(|f| f.error.is_context_overflow() != overflow)
        {
            failures.push(format!("{}: the stream's error events disagree", loc(case)));
        }
        let got = format!(
            "rule {} error {} {:?}",
            first.rule,
            kind(&first.error),
            first.error
        );
        if overflow != case.expect_overflow {
            failures.push(format!(
                "{}: expected {}, got {got}",
                loc(case),
                if case.expect_overflow {
                    "overflow"
                } else {
                    "not overflow"
                }
            ));
            continue;
        }
        if strict {
            if case.rule.as_deref() != Some(first.rule) {
                failures.push(format!(
                    "{}: expected rule {:?}, got {got}",
                    loc(case),
                    case.rule
                ));
            }
            if case.error.as_deref() != Some(kind(&first.error)) {
                failures.push(format!(
                    "{}: expected error {:?}, got {got}",
                    loc(case),
                    case.error
                ));
            }
            if let ProviderError::ContextOverflow {
                input_tokens,
                limit,
                ..
            } = &first.error
            {
                if case.input_tokens != Some(*input_tokens) || case.limit != Some(*limit) {
                    failures.push(format!(
                        "{}: expected input_tokens {:?} limit {:?}, got {got}",
                        loc(case),
                        case.input_tokens,
                        case.limit
                    ));
                }
            }
        }
        let text = message(&first.error);
        if text.is_empty() || text.contains("\"error\"") {
            failures.push(format!(
                "{}: message is empty or a raw dump: {text}",
                loc(case)
            ));
        }
    }
    (cases.len(), failures)
}

pub(crate) fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

#[test]
fn overflow_corpus() {
    let (count, failures) = check_file(&fixture("overflow.jsonl"), true);
    assert!(count >= 109, "the corpus lost cases: {count}");
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn overflow_variants() {
    let (count, failures) = check_file(&fixture("overflow_variants.jsonl"), true);
    assert!(count > 0);
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The shared sample, read where it lies beside the repository when it is there.
#[test]
fn shared_visible_sample() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let path = root.join("../shared/data/overflow/visible.jsonl");
    if !path.exists() {
        eprintln!(
            "shared_visible_sample: {} is absent; skipped (its cases are also in \
             tests/fixtures/overflow.jsonl)",
            path.display()
        );
        return;
    }
    let (count, failures) = check_file(&path, false);
    assert!(count > 0, "{} has no case", path.display());
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
