//! The HTTP exchange shared by every adapter: send, retry transient failures, read a JSON or
//! SSE answer under the named waits, and hand error answers to the classifier.
//!
//! The adapters only describe their protocol through [`Wire`] and [`StreamParser`]; everything
//! that touches the network, the clock or the key lives here. One [`Clock`] per request holds
//! its deadline: every wait of every attempt, and every delay between attempts, ends by it.
//!
//! Sending and retrying live in `send.rs`, reading answers (streams, bodies, the size cap) in
//! `read.rs`, and errors in panto's words with the key scrubbed from them in `errors.rs`.

use std::fmt;
use std::future::Future;
use std::time::{Duration, Instant};

use panto_model::{ContentBlock, Message};
use panto_provider::{ProviderError, Request, RetryNotice, StreamEvent, Wait};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::Value;

use crate::body::WireBody;
use crate::config::{BaseUrl, Config, Error};
use crate::protocol::Protocol;
use crate::secret::ApiKey;
use crate::sse::SseEvent;

mod errors;
mod read;
mod send;

use self::errors::error_chain;
#[cfg(test)]
pub(crate) use self::errors::excerpt;
pub use self::errors::{CAUSE, CLOSED_EARLY, cut_short};
pub(crate) use self::errors::{error_payload, event_json, fresh_id, malformed};
pub(crate) use self::send::Judge;

/// One protocol, as the transport needs to know it.
pub(crate) trait Wire: Sync {
    /// The parser of one streamed answer.
    type Stream: StreamParser + Send;

    /// Which protocol, for the classifier.
    fn protocol(&self) -> Protocol;
    /// The URL to post to.
    fn endpoint(&self, base: &BaseUrl, request: &Request, stream: bool) -> String;
    /// Adds the credentials and the protocol's headers for `request`.
    fn headers(&self, key: &ApiKey, request: &Request, headers: &mut HeaderMap);
    /// The JSON body, with the pieces that go on the wire byte for byte.
    fn body(&self, request: &Request, stream: bool) -> WireBody;
    /// Converts a successful non-streaming answer (already checked for an embedded error).
    ///
    /// # Errors
    /// [`ProviderError::MalformedResponse`] when expected fields are missing.
    fn parse(&self, body: &Value) -> Result<Message, ProviderError>;
    /// Converts a successful non-streaming answer from its bytes (`value` is the same answer
    /// parsed), for protocols that keep some of it exactly as received. [`Wire::parse`] of
    /// the value by default.
    ///
    /// # Errors
    /// As [`Wire::parse`].
    fn parse_bytes(&self, bytes: &[u8], value: &Value) -> Result<Message, ProviderError> {
        let _ = bytes;
        self.parse(value)
    }
    /// A request to send once more after `error` refused `request`, when the protocol knows
    /// one that can succeed (the Anthropic adapter, for thinking refused as bound to a
    /// different conversation). `None` by default.
    fn recover(&self, request: &Request, error: &ProviderError) -> Option<Recovery> {
        let _ = (request, error);
        None
    }
    /// A parser for a new streamed answer.
    fn stream(&self) -> Self::Stream;
    /// Corrects a parsed answer with what the request asked for, where a server's answer alone
    /// says too little. Nothing by default.
    fn settle(&self, _request: &Request, _message: &mut Message) {}
}

/// A request sent once more after a refusal the protocol can work around.
pub(crate) struct Recovery {
    /// The request to send instead.
    pub(crate) request: Request,
    /// What the user is told before it is sent ([`StreamEvent::Notice`]).
    pub(crate) notice: String,
    /// An extra field set on the reply to that request, so that the choice is stored with it.
    pub(crate) mark: (&'static str, Value),
}

/// Turns the events of one streamed answer into a message.
pub(crate) trait StreamParser {
    /// Handles one event; `Ok(true)` when it was the protocol's terminal event.
    ///
    /// # Errors
    /// The classified error of an error event, or a malformed-response error.
    fn event(&mut self, event: &SseEvent, sink: &mut Sink<'_>) -> Result<bool, ProviderError>;
    /// The message, once the stream has ended. `terminal` says whether the terminal event was
    /// seen; without it, a parser accepts the stream only if the protocol's own end marker
    /// (such as a finish reason) arrived.
    ///
    /// # Errors
    /// [`ProviderError::MalformedResponse`] for a stream cut off before its end.
    fn finish(self, terminal: bool) -> Result<Message, ProviderError>;
}

/// The caller's event callback, remembering whether anything reached it.
pub(crate) struct Sink<'a> {
    events: &'a mut (dyn FnMut(StreamEvent<'_>) + Send),
    emitted: bool,
}

impl Sink<'_> {
    /// More answer text.
    pub(crate) fn text(&mut self, text: &str) {
        if !text.is_empty() {
            self.emitted = true;
            (self.events)(StreamEvent::Text(text));
        }
    }

    /// More reasoning text.
    pub(crate) fn thinking(&mut self, text: &str) {
        if !text.is_empty() {
            self.emitted = true;
            (self.events)(StreamEvent::Thinking(text));
        }
    }

    /// A tool call began.
    pub(crate) fn tool_call(&mut self, name: &str) {
        self.emitted = true;
        (self.events)(StreamEvent::ToolCall { name });
    }

    /// A retry is about to happen. It is news about the request, not part of the answer, so
    /// it does not count as something emitted.
    fn retry(&mut self, notice: RetryNotice<'_>) {
        (self.events)(StreamEvent::Retry(notice));
    }

    /// A note for the user about the request; not part of the answer either.
    fn notice(&mut self, text: &str) {
        (self.events)(StreamEvent::Notice(text));
    }

    /// Replays a whole message (for answers that did not stream).
    fn message(&mut self, message: &Message) {
        for block in &message.content {
            match block {
                ContentBlock::Text(t) => self.text(&t.text),
                ContentBlock::Thinking(t) => self.thinking(&t.thinking),
                ContentBlock::ToolUse(u) => self.tool_call(&u.name),
                _ => {}
            }
        }
    }
}

/// The HTTP client and configuration of one adapter.
pub(crate) struct Transport {
    client: reqwest::Client,
    config: Config,
    base: BaseUrl,
    /// The extra headers of the configuration, checked, the sensitive ones marked so.
    extra: HeaderMap,
    /// The values of the sensitive extra headers, scrubbed from errors like the key.
    secrets: Vec<ApiKey>,
}

impl fmt::Debug for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Transport")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// A client built from the configuration, with the TLS backend the crate's features chose:
/// native-tls when that feature is on, otherwise rustls (its `ring` provider installed as the
/// process default unless the program installed one first) with the platform's verifier, and
/// plain HTTP only when neither is on.
fn build_client(config: &Config) -> Result<reqwest::Client, Error> {
    let builder = reqwest::Client::builder()
        .connect_timeout(config.connect_timeout)
        .user_agent(concat!("panto/", env!("CARGO_PKG_VERSION")));
    #[cfg(feature = "native-tls")]
    let builder = builder.tls_backend_native();
    #[cfg(all(feature = "rustls", not(feature = "native-tls")))]
    let builder = {
        // Fails only when a provider is installed already, which is then the one used.
        let _ = rustls::crypto::ring::default_provider().install_default();
        builder.tls_backend_rustls()
    };
    builder.build().map_err(|e| Error::Client {
        message: error_chain(&e),
    })
}

/// The deadline of one request, shared by its attempts.
#[derive(Clone, Copy, Debug)]
struct Clock {
    deadline: Instant,
    total: Duration,
}

impl Clock {
    fn start(total: Duration) -> Clock {
        let now = Instant::now();
        // A bound too large for the clock is no bound: a century stands in for it.
        let deadline = now
            .checked_add(total)
            .unwrap_or_else(|| now + Duration::from_secs(100 * 365 * 86_400));
        Clock { deadline, total }
    }

    /// What is left of the deadline.
    fn left(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }

    /// Awaits `future` until `since + bound` (the `wait`), and no later than the deadline.
    /// When the time runs out the error names whichever of the two ended first; `what` says
    /// what did not arrive.
    async fn within<F: Future>(
        &self,
        wait: Wait,
        since: Instant,
        bound: Duration,
        what: &str,
        future: F,
    ) -> Result<F::Output, ProviderError> {
        let (until, wait, bound) = match since.checked_add(bound) {
            Some(own) if own < self.deadline => (own, wait, bound),
            _ => (self.deadline, Wait::Request, self.total),
        };
        tokio::time::timeout_at(until.into(), future)
            .await
            .map_err(|_| expired(wait, bound, what))
    }
}

/// The error of an expired wait.
fn expired(wait: Wait, after: Duration, what: &str) -> ProviderError {
    let message = match wait {
        Wait::Request => format!("{what}; the deadline of the whole request passed"),
        _ => what.to_owned(),
    };
    ProviderError::WaitExpired {
        wait,
        after,
        message,
    }
}

/// A failed attempt: the error and the server's delay hint from the headers.
struct Failure {
    error: ProviderError,
    retry_after: Option<Duration>,
}

impl From<ProviderError> for Failure {
    fn from(error: ProviderError) -> Failure {
        Failure {
            error,
            retry_after: None,
        }
    }
}

impl Transport {
    /// Builds the client.
    ///
    /// # Errors
    /// [`Error::InvalidBaseUrl`], [`Error::InvalidKey`] or [`Error::Client`].
    pub(crate) fn new(config: Config) -> Result<Transport, Error> {
        let base = BaseUrl::parse(&config.base_url)?;
        let key = config.api_key.expose();
        if !key.is_empty() && !key.bytes().all(|b| (0x21..0x7f).contains(&b)) {
            return Err(Error::InvalidKey {
                reason: "it holds spaces, control characters or non-ASCII text",
            });
        }
        let client = match config.client() {
            Some(client) => client.clone(),
            None => build_client(&config)?,
        };
        let mut extra = HeaderMap::new();
        let mut secrets = Vec::new();
        for header in config.extra_headers() {
            let invalid = |reason| Error::InvalidHeader {
                name: header.name.clone(),
                reason,
            };
            let name = HeaderName::from_bytes(header.name.as_bytes())
                .map_err(|_| invalid("the name is not a valid header name"))?;
            let mut value = HeaderValue::from_str(header.value.expose())
                .map_err(|_| invalid("the value holds control characters or non-ASCII text"))?;
            if header.sensitive {
                value.set_sensitive(true);
                secrets.push(header.value.clone());
            }
            extra.insert(name, value);
        }
        Ok(Transport {
            client,
            config,
            base,
            extra,
            secrets,
        })
    }

    pub(crate) fn config(&self) -> &Config {
        &self.config
    }

    /// The values of the sensitive extra headers.
    pub(crate) fn secrets(&self) -> &[ApiKey] {
        &self.secrets
    }

    pub(crate) fn base(&self) -> &BaseUrl {
        &self.base
    }
}
