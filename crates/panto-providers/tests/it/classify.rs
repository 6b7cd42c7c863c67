//! Tests of the error classifier: every case of the fixture corpora served as an adapter would
//! receive it, the shared visible sample, reworded and look-alike variants, the mapping of
//! statuses, messages and retry delays, and properties (no panic, the rate-limit veto wins).

use std::path::{Path, PathBuf};
use std::time::Duration;

use panto_provider::{ProviderError, TokenNumbers};
use panto_providers::{
    Classification, Classifier, CustomRule, Protocol, Verdict, classify_response,
    classify_stream_error, error_in_success_body, explain_response, explain_stream_error,
    explain_success_body,
};
use proptest::prelude::*;
use serde_json::{Value, json};

// ---------------------------------------------------------------------------------------------
// Fixture corpora.

/// One line of a fixture file (the format of `shared/data/overflow/visible.jsonl`, plus the
/// expectations this crate adds: `rule`, `error`, `input_tokens`, `limit`).
struct Case {
    id: String,
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
    /// The output the body states was counted against the limit, when the case says.
    output_tokens: Option<Option<u64>>,
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

fn load(path: &Path) -> Vec<Case> {
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
                output_tokens: optional_count(&v, "output_tokens"),
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
fn serve(case: &Case) -> Vec<Classification> {
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

/// The kind of `error`, as the fixtures name it in their `error` field.
pub(crate) fn kind(error: &ProviderError) -> &'static str {
    match error {
        ProviderError::ContextOverflow { .. } => "context_overflow",
        ProviderError::RateLimited { .. } => "rate_limited",
        ProviderError::QuotaExceeded { .. } => "quota_exceeded",
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

fn message(error: &ProviderError) -> &str {
    match error {
        ProviderError::ContextOverflow { message, .. }
        | ProviderError::RateLimited { message, .. }
        | ProviderError::QuotaExceeded { message }
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
            if let ProviderError::ContextOverflow { numbers, .. } = &first.error
                && (case.input_tokens != Some(numbers.input_tokens)
                    || case.limit != Some(numbers.limit)
                    || case
                        .output_tokens
                        .is_some_and(|o| o != numbers.output_tokens))
            {
                failures.push(format!(
                    "{}: expected input_tokens {:?} limit {:?} output_tokens {:?}, got {got}",
                    loc(case),
                    case.input_tokens,
                    case.limit,
                    case.output_tokens
                ));
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

/// A file under `tests/fixtures`.
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
// ---------------------------------------------------------------------------------------------
// Statuses, messages, delays and 2xx bodies.

fn http(status: u16, body: &str) -> Classification {
    explain_response(Protocol::OpenAiChat, status, None, body.as_bytes())
}

#[test]
fn statuses_map_to_the_right_error() {
    let check = |status: u16, body: &str, rule: &str, expected: ProviderError| {
        let found = http(status, body);
        assert_eq!(
            (found.rule, &found.error),
            (rule, &expected),
            "HTTP {status} {body}"
        );
    };
    check(
        401,
        r#"{"error":{"message":"Invalid API Key","type":"invalid_request_error","code":"invalid_api_key"}}"#,
        "unauthorized-status",
        ProviderError::Authentication {
            message: "Invalid API Key".into(),
        },
    );
    check(
        403,
        r#"{"error":{"message":"Project has been denied access."}}"#,
        "authentication",
        ProviderError::Authentication {
            message: "Project has been denied access.".into(),
        },
    );
    check(
        403,
        r#"{"error":{"message":"You exceeded your current quota."}}"#,
        "quota-wording",
        ProviderError::QuotaExceeded {
            message: "You exceeded your current quota.".into(),
        },
    );
    check(
        404,
        r#"{"error":{"message":"The model `gpt-x` does not exist","code":"model_not_found"}}"#,
        "model-not-found",
        ProviderError::ModelNotFound {
            message: "The model `gpt-x` does not exist".into(),
        },
    );
    check(
        404,
        "Not Found",
        "client-error",
        ProviderError::InvalidRequest {
            status: 404,
            message: "Not Found".into(),
        },
    );
    check(
        422,
        r#"{"detail":"Unprocessable"}"#,
        "client-error",
        ProviderError::InvalidRequest {
            status: 422,
            message: "Unprocessable".into(),
        },
    );
    check(
        500,
        r#"{"error":{"message":"boom","type":"server_error"}}"#,
        "server-error",
        ProviderError::Server {
            status: 500,
            message: "boom".into(),
        },
    );
    check(
        502,
        "<html><head><title>502 Bad Gateway</title></head><body>nginx</body></html>",
        "server-error",
        ProviderError::Server {
            status: 502,
            message: "502 Bad Gateway".into(),
        },
    );
    check(
        529,
        r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
        "overloaded",
        ProviderError::Server {
            status: 529,
            message: "Overloaded".into(),
        },
    );
    check(
        408,
        "",
        "timeout",
        ProviderError::Timeout {
            message: "empty response body".into(),
        },
    );
    assert!(http(529, "").error.is_transient());
    assert!(
        !http(400, r#"{"error":{"message":"bad"}}"#)
            .error
            .is_transient()
    );
}

#[test]
fn retry_delays() {
    let delay = |retry_after: Option<Duration>, body: &str| match classify_response(
        Protocol::Gemini,
        429,
        retry_after,
        body.as_bytes(),
    ) {
        ProviderError::RateLimited { retry_after, .. } => retry_after,
        other => panic!("not a rate limit: {other:?}"),
    };
    let gemini = r#"{"error":{"code":429,"message":"Resource has been exhausted (e.g. check quota).",
        "status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo",
        "retryDelay":"30s"}]}}"#;
    assert_eq!(delay(None, gemini), Some(Duration::from_secs(30)));
    // The header wins over the body.
    assert_eq!(
        delay(Some(Duration::from_secs(2)), gemini),
        Some(Duration::from_secs(2))
    );
    let said = |text: &str| delay(None, &json!({"error": {"message": text}}).to_string());
    assert_eq!(
        said("Please try again in 1.5s."),
        Some(Duration::from_millis(1500))
    );
    assert_eq!(
        said("Rate limit reached. Please try again in 20ms."),
        Some(Duration::from_millis(20))
    );
    assert_eq!(
        said("Please try again in 6m0s."),
        Some(Duration::from_secs(360))
    );
    assert_eq!(
        said("Please retry after 86400 seconds."),
        Some(Duration::from_secs(86400))
    );
    assert_eq!(
        said("Please retry in 20.04466179s."),
        Some(Duration::from_secs_f64(20.044_661_79))
    );
    assert_eq!(
        said("Too many tokens, please wait before trying again."),
        None
    );
    // In a stream, too.
    let event = json!({"type":"response.failed","response":{"status":"failed","error":{
        "code":"rate_limit_exceeded","message":"Rate limit reached. Please try again in 11.054s."}}});
    assert_eq!(
        classify_stream_error(Protocol::OpenAiResponses, &event),
        ProviderError::RateLimited {
            message: "Rate limit reached. Please try again in 11.054s.".into(),
            retry_after: Some(Duration::from_secs_f64(11.054)),
        }
    );
}

/// Billing and plan wording is a quota unless the answer names a wait: a header, a `RetryInfo`
/// field or the text. Then it is a quota that refills (Gemini's per-minute limits), retried.
#[test]
fn a_stated_wait_makes_billing_wording_a_rate_limit() {
    let text = "You exceeded your current quota, please check your plan and billing details.";
    let body = |extra: &str| {
        json!({"error": {"code": 429, "message": format!("{text}{extra}"), "status": "RESOURCE_EXHAUSTED"}}).to_string()
    };
    let quota = explain_response(Protocol::Gemini, 429, None, body("").as_bytes());
    assert_eq!(
        (quota.rule, quota.verdict),
        ("quota-wording", Verdict::QuotaExceeded)
    );
    let said = explain_response(
        Protocol::Gemini,
        429,
        None,
        body(" Please retry in 47.4s.").as_bytes(),
    );
    assert_eq!(
        (said.rule, said.verdict),
        ("rate-limit-status", Verdict::RateLimited)
    );
    let header = explain_response(
        Protocol::Gemini,
        429,
        Some(Duration::from_secs(30)),
        body("").as_bytes(),
    );
    assert_eq!(header.verdict, Verdict::RateLimited);
    let field = json!({"error": {"code": 429, "message": text, "status": "RESOURCE_EXHAUSTED",
        "details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "30s"}]}});
    let field = explain_response(Protocol::Gemini, 429, None, field.to_string().as_bytes());
    assert_eq!(field.verdict, Verdict::RateLimited);
    // A quota of zero is the plan's, whatever wait is named.
    let zero = body(
        " Quota exceeded for metric: x_free_tier_requests, limit: 0, model: m. Please retry in 20s.",
    );
    assert_eq!(
        explain_response(Protocol::Gemini, 429, None, zero.as_bytes()).verdict,
        Verdict::QuotaExceeded
    );
    // `limit: 0` must be the whole number.
    for (text, verdict) in [
        ("limit: 0", Verdict::QuotaExceeded),
        ("limit: 0.", Verdict::QuotaExceeded),
        ("limit: 0.5 per second", Verdict::RateLimited),
        ("limit: 4000000", Verdict::RateLimited),
        ("limit: 05", Verdict::RateLimited),
    ] {
        let body = json!({"error": {"message": format!("Quota exceeded, {text}")}}).to_string();
        assert_eq!(
            explain_response(Protocol::Gemini, 429, None, body.as_bytes()).verdict,
            verdict,
            "{text}"
        );
    }
}

fn message_of(body: &[u8]) -> String {
    message(&classify_response(Protocol::OpenAiChat, 400, None, body)).to_owned()
}

#[test]
fn messages_are_the_providers_own() {
    assert_eq!(
        message_of(br#"{"message":"Input is too long for requested model."}"#),
        "Input is too long for requested model."
    );
    assert_eq!(
        message_of(br#"{"error":"prompt too long"}"#),
        "prompt too long"
    );
    assert_eq!(
        message_of(br#"[{"error":{"code":400,"message":"bad thing"}}]"#),
        "bad thing"
    );
    assert_eq!(
        message_of(br#"{"error":{"message":"{\"error\":{\"message\":\"inner words\"}}"}}"#),
        "inner words"
    );
    assert_eq!(
        message_of(br#"{"error":{"message":"Provider returned error","metadata":{"raw":"upstream words"}}}"#),
        "Provider returned error: upstream words"
    );
    assert_eq!(message_of(b"  plain words\n\n here  "), "plain words here");
    assert_eq!(message_of(b""), "empty response body");
    assert_eq!(
        message_of(b"\xff\xfe not utf-8 \xc3"),
        "\u{fffd}\u{fffd} not utf-8 \u{fffd}"
    );
    assert_eq!(message_of(br#"{"code":400}"#), r#"{"code":400}"#);
    assert_eq!(
        message_of(br#"{"error":{"message":"failed for https://x.test/v1?key=AIzaSyA1234567890abcdefghij"}}"#),
        "failed for https://x.test/v1?key=[redacted]"
    );
}

#[test]
fn absurd_bodies_are_cut() {
    let long = "x".repeat(3_000_000);
    let text = message_of(long.as_bytes());
    assert!(text.chars().count() <= 2000 + "… (truncated)".chars().count());
    assert!(text.ends_with("… (truncated)"));
    let json_body = json!({"error": {"message": format!("prompt is too long: 300000 tokens > 200000 maximum {long}")}});
    let found = classify_response(
        Protocol::Anthropic,
        400,
        None,
        json_body.to_string().as_bytes(),
    );
    assert!(found.is_context_overflow());
    assert!(message(&found).len() < 2100);
}

#[test]
fn success_bodies() {
    let is_error = |body: Value| error_in_success_body(Protocol::OpenAiChat, &body).is_some();
    assert!(!is_error(
        json!({"id":"c1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"}}]})
    ));
    assert!(!is_error(
        json!({"id":"resp_1","object":"response","status":"completed","error":null,"output":[]})
    ));
    assert!(!is_error(
        json!({"type":"message","content":[{"type":"text","text":"hi"}]})
    ));
    assert!(!is_error(
        json!({"candidates":[{"content":{"parts":[{"text":"hi"}]}}]})
    ));
    assert!(!is_error(json!({"choices":[],"error":""})));
    assert!(!is_error(json!({"choices":[],"error":{}})));
    assert!(!is_error(json!([{"candidates":[]}])));
    assert!(is_error(
        json!({"type":"error","error":{"type":"api_error","message":"x"}})
    ));
    assert!(is_error(json!({"object":"error","message":"x","code":400})));
    assert!(is_error(
        json!({"status":"failed","error":{"code":"server_error","message":"x"}})
    ));
    assert!(is_error(json!({"error":"something went wrong"})));

    let openrouter = json!({"error":{"message":"This endpoint's maximum context length is 131072 tokens. However, you requested about 140000 tokens (139000 of text input, 1000 in the output).","code":400}});
    assert_eq!(
        error_in_success_body(Protocol::OpenAiChat, &openrouter),
        Some(ProviderError::ContextOverflow {
            message: "This endpoint's maximum context length is 131072 tokens. However, you requested about 140000 tokens (139000 of text input, 1000 in the output).".into(),
            numbers: TokenNumbers::new(Some(139_000), Some(131_072)).with_output(Some(1_000)),
        })
    );
}

#[test]
fn stream_statuses() {
    // An embedded status is used; without one the type decides.
    let tgi = json!({"error":{"message":"Input validation error: `temperature` must be strictly positive","http_status_code":422}});
    assert_eq!(
        classify_stream_error(Protocol::OpenAiChat, &tgi),
        ProviderError::InvalidRequest {
            status: 422,
            message: "Input validation error: `temperature` must be strictly positive".into()
        }
    );
    let anthropic = json!({"type":"error","error":{"type":"invalid_request_error","message":"messages: text content blocks must be non-empty"}});
    let found = explain_stream_error(Protocol::Anthropic, &anthropic);
    assert_eq!(
        (found.rule, found.verdict),
        ("invalid-request-code", Verdict::Rejected)
    );
    let overloaded =
        json!({"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}});
    assert_eq!(
        classify_stream_error(Protocol::Anthropic, &overloaded),
        ProviderError::Server {
            status: 529,
            message: "Overloaded".into()
        }
    );
}

// ---------------------------------------------------------------------------------------------
// Properties.

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        "\\PC{0,60}".prop_map(Value::from),
        prop::sample::select(vec![
            "error",
            "message",
            "code",
            "context_length_exceeded",
            "429",
            "400",
            "30s",
            "prompt is too long: 5 tokens > 3 maximum",
            "{\"error\":{\"message\":\"x\"}}",
            "rate_limit_exceeded",
            "{\"error\":",
            "[",
            "n_ctx",
        ])
        .prop_map(Value::from),
    ];
    leaf.prop_recursive(6, 64, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(
                prop::sample::select(vec![
                    "error",
                    "message",
                    "code",
                    "type",
                    "status",
                    "reason",
                    "param",
                    "detail",
                    "details",
                    "metadata",
                    "raw",
                    "response",
                    "@type",
                    "__type",
                    "retryDelay",
                    "retry_after",
                    "n_prompt_tokens",
                    "n_ctx",
                    "http_status_code",
                    "choices",
                    "other",
                ])
                .prop_map(str::to_owned),
                inner,
                0..6,
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn protocols() -> impl Strategy<Value = Protocol> {
    prop::sample::select(vec![
        Protocol::Anthropic,
        Protocol::OpenAiChat,
        Protocol::OpenAiResponses,
        Protocol::Gemini,
    ])
}

/// Overflow wording of every provider, and structured overflow signals, to smuggle into
/// rate-limit answers.
const OVERFLOW_SMUGGLE: &[&str] = &[
    "prompt is too long: 219898 tokens > 200000 maximum",
    "This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens.",
    "The input token count (132478) exceeds the maximum number of tokens allowed (131072).",
    "the request exceeds the available context size, try increasing it",
    "Your input exceeds the context window of this model.",
    "Request exceeds the maximum size",
    "Input is too long for requested model.",
    "too many tokens",
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn never_panics_on_bytes(protocol in protocols(), status in any::<u16>(), body in prop::collection::vec(any::<u8>(), 0..400)) {
        let _ = classify_response(protocol, status, None, &body);
    }

    #[test]
    fn never_panics_on_json(protocol in protocols(), status in 100u16..600, value in json_value()) {
        let _ = classify_response(protocol, status, None, value.to_string().as_bytes());
        let _ = classify_stream_error(protocol, &value);
        let _ = error_in_success_body(protocol, &value);
    }

    /// Whatever overflow wording or code is added, a rate limit stays a rate limit.
    #[test]
    fn rate_limit_veto_wins(
        protocol in protocols(),
        signal in 0usize..5,
        status in prop::sample::select(vec![400u16, 413, 422, 429, 500, 200]),
        smuggled in prop::sample::select(OVERFLOW_SMUGGLE.to_vec()),
        prefix in any::<bool>(),
        overflow_code in any::<bool>(),
        in_stream in any::<bool>(),
    ) {
        let (status, base, code) = match signal {
            0 => (429, "Slow down.", None),
            1 => (status, "Request too large.", Some("rate_limit_exceeded")),
            2 => (status, "Resource exhausted.", Some("RESOURCE_EXHAUSTED")),
            3 => (status, "Limit 6000 on tokens per min (TPM), requested 9000.", None),
            _ => (status, "Too many tokens, please wait before trying again.", Some("ThrottlingException")),
        };
        let text = if prefix { format!("{smuggled} {base}") } else { format!("{base} {smuggled}") };
        let mut error = json!({"message": text, "type": "invalid_request_error"});
        if let Some(code) = code {
            error["code"] = json!(code);
        }
        if overflow_code {
            error["param"] = json!("messages");
            error["status"] = json!("context_length_exceeded");
        }
        let body = json!({"error": error});
        let found = if in_stream || status == 200 {
            if status == 429 { error["code"] = json!(429); }
            classify_stream_error(protocol, &json!({"type": "error", "error": error}))
        } else {
            classify_response(protocol, status, None, body.to_string().as_bytes())
        };
        prop_assert!(matches!(found, ProviderError::RateLimited { .. }), "{found:?} for {body}");
    }

    /// Whatever overflow wording or code is added, an account that cannot pay stays a quota:
    /// never compacted, never retried.
    #[test]
    fn quota_veto_wins(
        protocol in protocols(),
        signal in 0usize..4,
        status in prop::sample::select(vec![400u16, 403, 413, 422, 429, 200]),
        smuggled in prop::sample::select(OVERFLOW_SMUGGLE.to_vec()),
        prefix in any::<bool>(),
        overflow_code in any::<bool>(),
        in_stream in any::<bool>(),
    ) {
        let (status, base, code) = match signal {
            0 => (status, "You exceeded your current quota, please check your plan and billing details.", Some("insufficient_quota")),
            1 => (402, "Insufficient Balance", None),
            2 => (status, "Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing to upgrade or purchase credits.", None),
            _ => (status, "Quota exceeded for metric: generativelanguage.googleapis.com/generate_content_free_tier_requests, limit: 0, model: gemini-2.5-pro", None),
        };
        let text = if prefix { format!("{smuggled} {base}") } else { format!("{base} {smuggled}") };
        let mut error = json!({"message": text, "type": "invalid_request_error"});
        if let Some(code) = code {
            error["code"] = json!(code);
        }
        if overflow_code {
            error["param"] = json!("messages");
            error["status"] = json!("context_length_exceeded");
        }
        let body = json!({"error": error});
        let found = if in_stream || status == 200 {
            classify_stream_error(protocol, &json!({"type": "error", "error": error}))
        } else {
            classify_response(protocol, status, None, body.to_string().as_bytes())
        };
        prop_assert!(matches!(found, ProviderError::QuotaExceeded { .. }), "{found:?} for {body}");
        prop_assert!(!found.is_transient());
    }

    /// OpenAI-style numbers decide: overflow when the completion leaves the input room, and
    /// then the stated sizes are reported, the completion's too.
    #[test]
    fn output_room_decides(window in 1_000u64..2_000_000, messages in 1u64..3_000_000, completion in 0u64..2_000_000, sep in any::<bool>(), code in any::<bool>()) {
        let fmt = |n: u64| {
            if sep {
                let s = n.to_string();
                let mut out = String::new();
                for (i, c) in s.chars().enumerate() {
                    if i > 0 && (s.len() - i).is_multiple_of(3) { out.push(','); }
                    out.push(c);
                }
                out
            } else {
                n.to_string()
            }
        };
        let text = format!(
            "This model's maximum context length is {} tokens. However, you requested {} tokens ({} in the messages, {} in the completion). Please reduce the length of the messages or completion.",
            fmt(window), fmt(messages + completion), fmt(messages), fmt(completion)
        );
        let body = json!({"error": {"message": text, "type": "invalid_request_error", "param": "messages", "code": if code { json!("context_length_exceeded") } else { Value::Null }}});
        let found = classify_response(Protocol::OpenAiChat, 400, None, body.to_string().as_bytes());
        if window.saturating_sub(completion) >= 256 {
            prop_assert_eq!(found, ProviderError::ContextOverflow { message: text, numbers: TokenNumbers::new(Some(messages), Some(window)).with_output(Some(completion)) });
        } else {
            prop_assert!(matches!(found, ProviderError::InvalidRequest { status: 400, .. }), "{found:?}");
        }
    }

    /// Anthropic's wording is found however a proxy wraps it.
    #[test]
    fn wrapped_anthropic_overflow(input in 1u64..10_000_000, limit in 1u64..10_000_000, wrap in 0usize..4) {
        let inner = json!({"type":"error","error":{"type":"invalid_request_error","message": format!("prompt is too long: {input} tokens > {limit} maximum")}});
        let body = match wrap {
            0 => inner,
            1 => json!({"error": {"message": format!("litellm.BadRequestError: AnthropicException - {inner}"), "code": "400"}}),
            2 => json!({"error": inner.to_string()}),
            _ => json!([{"message": format!("The model returned the following errors: prompt is too long: {input} tokens > {limit} maximum")}]),
        };
        let found = classify_response(Protocol::Anthropic, 400, None, body.to_string().as_bytes());
        match found {
            ProviderError::ContextOverflow { numbers, .. } => {
                prop_assert_eq!(numbers, TokenNumbers::new(Some(input), Some(limit)));
            }
            other => prop_assert!(false, "{other:?}"),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The classifier as a value, for a custom provider (issue 39, point 7).

/// The generic classifier reads a server that speaks no protocol exactly, and takes the
/// caller's rules: one that answers an overflow comes after every veto, one that answers
/// anything else comes before the whole table.
#[test]
fn a_generic_classifier_takes_the_callers_rules_below_the_vetoes() {
    let body = |message: &str| {
        json!({"error": {"message": message}})
            .to_string()
            .into_bytes()
    };
    let generic = Classifier::generic();
    // The wording issue 39 found missed, now read by the built-in table.
    let missed = body("Request exceeds the model's maximum context of 8192 tokens");
    let found = generic.classify_response(400, None, &missed);
    assert!(found.is_context_overflow(), "{found:?}");
    // A wording the table does not know is the caller's to teach.
    let own = body("Your conversation no longer fits in the model's memory.");
    assert_eq!(
        generic.explain_response(400, None, &own).verdict,
        Verdict::Rejected
    );
    let taught = Classifier::generic().with_rule(
        CustomRule::new("gateway-overflow", Verdict::ContextOverflow)
            .with_status(400)
            .with_phrase("No longer FITS in the model's memory"),
    );
    let decided = taught.explain_response(400, None, &own);
    assert_eq!(
        (decided.rule, decided.verdict),
        ("gateway-overflow", Verdict::ContextOverflow)
    );
    // Its status is part of the rule.
    assert_eq!(
        taught.explain_response(422, None, &own).verdict,
        Verdict::Rejected
    );
    // Never above a veto: a rate limit and a quota stay what they are.
    assert_eq!(
        taught.explain_response(429, None, &own).verdict,
        Verdict::RateLimited
    );
    let quota = body("Your conversation no longer fits in the model's memory: check quota.");
    assert!(matches!(
        taught.classify_response(400, None, &quota),
        ProviderError::QuotaExceeded { .. }
    ));
    // A rule that answers anything else comes first: it takes an overflow away.
    let billing = body("prompt is too long for your plan tier");
    assert!(
        generic
            .classify_response(400, None, &billing)
            .is_context_overflow()
    );
    let plan = Classifier::generic().with_rule(
        CustomRule::new("plan-tier", Verdict::QuotaExceeded)
            .with_code("invalid_request_error")
            .with_phrase("for your plan tier"),
    );
    assert!(
        plan.classify_response(400, None, &billing)
            .is_context_overflow(),
        "the code is not there: the rule does not hold"
    );
    let coded = json!({"error": {"message": "prompt is too long for your plan tier", "type": "invalid_request_error"}})
        .to_string();
    let decided = plan.explain_response(400, None, coded.as_bytes());
    assert_eq!(
        (decided.rule, decided.verdict),
        ("plan-tier", Verdict::QuotaExceeded)
    );
    // A rule that names nothing holds nowhere.
    let empty = Classifier::generic().with_rule(CustomRule::new("empty", Verdict::Timeout));
    assert_eq!(
        empty.explain_response(400, None, &own).verdict,
        Verdict::Rejected
    );
    // In a stream too.
    let event = json!({"error": {"code": 400, "message": "Your conversation no longer fits in the model's memory."}});
    assert!(taught.classify_stream_error(&event).is_context_overflow());
}
