//! `HttpClient` (issue 39, point 7): a custom provider sends through the adapters' transport,
//! with their retries, deadline and key handling, and its own classifier.

use std::time::Duration;

use panto_provider::ProviderError;
use panto_providers::{Classifier, CustomRule, HttpClient, Verdict};
use serde_json::json;
use wiremock::matchers::{header, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::common::{KEY, config};

async fn server() -> MockServer {
    MockServer::start().await
}

#[tokio::test]
async fn transient_failures_are_retried_and_the_answer_returned() {
    let server = server().await;
    Mock::given(method("POST"))
        .and(path("/api/generate"))
        .respond_with(ResponseTemplate::new(503).set_body_string("busy"))
        .up_to_n_times(2)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/api/generate"))
        .and(header("authorization", format!("Bearer {KEY}").as_str()))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({"text": "Hello."})))
        .mount(&server)
        .await;
    let client = HttpClient::new(
        config(&format!("{}/api", server.uri())),
        Classifier::generic(),
    )
    .unwrap();
    let answer = client
        .post_json("generate", &json!({"prompt": "Hi"}))
        .await
        .unwrap();
    assert_eq!(answer, json!({"text": "Hello."}));
    let requests = server.received_requests().await.unwrap();
    assert_eq!(requests.len(), 3, "two 503s retried");
    assert_eq!(requests[0].body, br#"{"prompt":"Hi"}"#);
    assert!(!format!("{client:?}").contains(KEY));
}

#[tokio::test]
async fn quotas_overflows_and_the_callers_rules_are_not_retried() {
    let rule = CustomRule::new("gateway-overflow", Verdict::ContextOverflow)
        .with_status(400)
        .with_phrase("no longer fits");
    let cases = [
        (
            429,
            json!({"error": {"code": 429, "message": "Resource has been exhausted (e.g. check quota).", "status": "RESOURCE_EXHAUSTED"}}),
            "quota",
        ),
        (
            400,
            json!({"error": {"message": "Request exceeds the model's maximum context of 8192 tokens"}}),
            "overflow",
        ),
        (
            400,
            json!({"error": {"message": "The conversation no longer fits."}}),
            "overflow",
        ),
        // A 2xx body that is an error, in the caller's words.
        (
            200,
            json!({"error": {"message": "The conversation no longer fits.", "code": 400}}),
            "overflow",
        ),
    ];
    for (status, body, kind) in cases {
        let server = server().await;
        Mock::given(method("POST"))
            .respond_with(ResponseTemplate::new(status).set_body_json(&body))
            .mount(&server)
            .await;
        let client = HttpClient::new(
            config(&server.uri()),
            Classifier::generic().with_rule(rule.clone()),
        )
        .unwrap();
        let error = client.post_json("v1/x", &json!({})).await.unwrap_err();
        match kind {
            "quota" => assert!(
                matches!(error, ProviderError::QuotaExceeded { .. }),
                "{error}"
            ),
            _ => assert!(error.is_context_overflow(), "{body}: {error}"),
        }
        assert_eq!(server.received_requests().await.unwrap().len(), 1, "{body}");
    }
}

#[tokio::test]
async fn the_key_goes_where_it_is_asked_and_never_into_an_error() {
    let server = server().await;
    Mock::given(method("POST"))
        .and(header("x-api-key", KEY))
        .respond_with(
            ResponseTemplate::new(401)
                .set_body_json(json!({"error": {"message": format!("invalid key {KEY}")}})),
        )
        .mount(&server)
        .await;
    let client = HttpClient::new(config(&server.uri()), Classifier::generic())
        .unwrap()
        .with_key_header("x-api-key", "")
        .unwrap();
    let error = client.post_json("check", &json!({})).await.unwrap_err();
    assert!(
        matches!(error, ProviderError::Authentication { .. }),
        "{error}"
    );
    assert!(!error.to_string().contains(KEY), "{error}");
    assert!(!format!("{error:?}").contains(&KEY[..12]), "{error:?}");
}

#[tokio::test]
async fn one_deadline_bounds_the_exchange() {
    let server = server().await;
    Mock::given(method("POST"))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(json!({"late": true}))
                .set_delay(Duration::from_secs(5)),
        )
        .mount(&server)
        .await;
    let client = HttpClient::new(
        config(&server.uri()).with_request_timeout(Duration::from_millis(300)),
        Classifier::generic(),
    )
    .unwrap();
    let started = std::time::Instant::now();
    let error = client.post_json("slow", &json!({})).await.unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(3), "{error}");
    assert!(
        matches!(
            error,
            ProviderError::WaitExpired { .. } | ProviderError::Timeout { .. }
        ),
        "{error}"
    );
}
