//! Loopback emulators of the provider rules panto must follow and cannot reach from here:
//! Anthropic's preserved thinking and on-demand compaction ([`claude`]), Gemini's thought
//! signatures ([`gemini`]), `OpenAI` Responses' reasoning items and compaction ([`responses`]).
//!
//! Each enforces the rule as its provider's documentation states it (cited in each module) and
//! answers in the documented shapes, which `tests/fixtures/native/shapes.json` records with
//! their source pages. Each counts input tokens as a quarter of the request's bytes and refuses
//! a request over its window with the provider's overflow error, so a conversation on it
//! overflows, compacts and goes on.

#![allow(
    dead_code,
    reason = "each protocol's tests use part of the shared helpers"
)]

use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::Value;
use wiremock::matchers::method;
use wiremock::{Match, Mock, MockServer, Respond};

#[cfg(feature = "openai-chat")]
pub(crate) mod chat;
#[cfg(feature = "anthropic")]
pub(crate) mod claude;
#[cfg(feature = "gemini")]
pub(crate) mod gemini;
#[cfg(feature = "openai-responses")]
pub(crate) mod responses;

/// The system prompt of panto's own compaction requests in these tests, by which the emulators
/// tell them from conversation requests.
pub(crate) const SUMMARY_PROMPT: &str =
    "Summarize the transcript for a colleague who continues the work.";

/// A digest of a JSON value (keys sorted, `cache_control` left out: Anthropic leaves cache
/// markers out of the prefix comparison).
pub(crate) fn digest(value: &Value) -> String {
    let mut hasher = DefaultHasher::new();
    canonical(value).hash(&mut hasher);
    format!("{:016x}", hasher.finish())
}

fn canonical(value: &Value) -> String {
    fn strip(value: &Value) -> Value {
        match value {
            Value::Object(map) => Value::Object(
                map.iter()
                    .filter(|(k, _)| k.as_str() != "cache_control")
                    .map(|(k, v)| (k.clone(), strip(v)))
                    .collect(),
            ),
            Value::Array(items) => Value::Array(items.iter().map(strip).collect()),
            other => other.clone(),
        }
    }
    strip(value).to_string()
}

/// Estimated input tokens of a request body: a quarter of its bytes.
pub(crate) fn tokens(body: &[u8]) -> u64 {
    body.len() as u64 / 4
}

/// State shared between a test and its emulator.
#[derive(Debug, Default)]
pub(crate) struct Shared<S>(Arc<Mutex<S>>);

impl<S> Clone for Shared<S> {
    fn clone(&self) -> Self {
        Shared(self.0.clone())
    }
}

impl<S: Default> Shared<S> {
    pub(crate) fn new(state: S) -> Shared<S> {
        Shared(Arc::new(Mutex::new(state)))
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, S> {
        self.0.lock().unwrap()
    }
}

/// A server on 127.0.0.1 on which `emulator` answers every POST to a path `paths` match: how
/// each emulator starts.
pub(crate) async fn serve<E, M>(emulator: E, paths: impl IntoIterator<Item = M>) -> (MockServer, E)
where
    E: Respond + Clone + 'static,
    M: Match + 'static,
{
    let server = MockServer::start().await;
    for p in paths {
        Mock::given(method("POST"))
            .and(p)
            .respond_with(emulator.clone())
            .mount(&server)
            .await;
    }
    (server, emulator)
}

/// What an emulator saw of one request.
#[derive(Clone, Debug)]
pub(crate) struct Seen {
    /// The path.
    pub(crate) path: String,
    /// The body as sent.
    pub(crate) raw: String,
    /// The body parsed.
    pub(crate) body: Value,
    /// The HTTP status of the answer.
    pub(crate) status: u16,
    /// Why it was refused, when it was.
    pub(crate) refusal: Option<String>,
    /// What kind of request it was: `chat`, `summary` (one of panto's own compaction
    /// requests) or `compaction` (native).
    pub(crate) kind: &'static str,
}
