//! The key never shows: not in Debug output of adapters or configurations, not in any error
//! (even when the server echoes it), not in logs.

use std::io::Write;
use std::sync::{Arc, Mutex};

use panto_provider::{Provider, ProviderError};
use panto_providers::{
    AnthropicProvider, Config, GeminiProvider, OpenAiChatProvider, OpenAiResponsesProvider,
    RetryPolicy,
};
use serde_json::json;
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
