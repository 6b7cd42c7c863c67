//! The HTTP exchange shared by every adapter: send, retry transient failures, read a JSON or
//! SSE answer under timeouts, and hand error answers to the classifier.
//!
//! The adapters only describe their protocol through [`Wire`] and [`StreamParser`]; everything
//! that touches the network, the clock or the key lives here.

use std::fmt;
use std::time::{Duration, Instant, SystemTime};

use panto_model::{ContentBlock, Message};
use panto_provider::{ProviderError, Request, StreamEvent};
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap};
use serde_json::Value;

use crate::classify::{self, Protocol};
use crate::config::{BaseUrl, Config, Error};
use crate::retry;
use crate::secret::ApiKey;
use crate::sse::{SseDecoder, SseEvent};

/// The most bytes of an error body that are read (and passed to the classifier).
const ERROR_BODY_LIMIT: usize = 256 * 1024;

/// One protocol, as the transport needs to know it.
pub(crate) trait Wire: Sync {
    /// The parser of one streamed answer.
    type Stream: StreamParser + Send;

    /// Which protocol, for the classifier.
    fn protocol(&self) -> Protocol;
    /// The URL to post to.
    fn endpoint(&self, base: &BaseUrl, request: &Request, stream: bool) -> String;
    /// Adds the credentials and protocol headers.
    fn headers(&self, key: &ApiKey, headers: &mut HeaderMap);
    /// The JSON body.
    fn body(&self, request: &Request, stream: bool) -> Value;
    /// Converts a successful non-streaming answer (already checked for an embedded error).
    ///
    /// # Errors
    /// [`ProviderError::MalformedResponse`] when expected fields are missing.
    fn parse(&self, body: &Value) -> Result<Message, ProviderError>;
    /// A parser for a new streamed answer.
    fn stream(&self) -> Self::Stream;
    /// Corrects a parsed answer with what the request asked for, where a server's answer alone
    /// says too little. Nothing by default.
    fn settle(&self, _request: &Request, _message: &mut Message) {}
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
}

impl fmt::Debug for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Transport")
            .field("config", &self.config)
            .finish_non_exhaustive()
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
        let client = reqwest::Client::builder()
            .connect_timeout(config.connect_timeout)
            .user_agent(concat!("panto/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| Error::Client {
                message: error_chain(&e),
            })?;
        Ok(Transport {
            client,
            config,
            base,
        })
    }

    pub(crate) fn config(&self) -> &Config {
        &self.config
    }

    pub(crate) fn base(&self) -> &BaseUrl {
        &self.base
    }

    /// Sends `request`, retrying transient failures while nothing has been emitted.
    pub(crate) async fn complete<W: Wire>(
        &self,
        wire: &W,
        provider: &str,
        request: &Request,
        events: &mut (dyn FnMut(StreamEvent<'_>) + Send),
    ) -> Result<Message, ProviderError> {
        let stream = self.config.streaming;
        let body = serde_json::to_vec(&wire.body(request, stream)).map_err(|e| {
            ProviderError::MalformedResponse {
                message: format!("could not encode the request: {e}"),
            }
        })?;
        let url = wire.endpoint(&self.base, request, stream);
        let mut sink = Sink {
            events,
            emitted: false,
        };
        let policy = self.config.retry;
        let mut retry = 0;
        loop {
            tracing::debug!(provider, %url, model = %request.model, stream, retry, "sending request");
            let failure = match self.attempt(wire, &url, &body, stream, &mut sink).await {
                Ok(mut message) => {
                    wire.settle(request, &mut message);
                    // A server that names no model answered with the one asked for.
                    if message.model.is_none() {
                        message.model = Some(request.model.clone());
                    }
                    return Ok(message);
                }
                Err(failure) => failure,
            };
            let error = scrub(failure.error, &self.config.api_key);
            if !error.is_transient() || sink.emitted || retry >= policy.max_retries {
                tracing::debug!(provider, %error, "request failed");
                return Err(error);
            }
            let hint = failure.retry_after.or(match &error {
                ProviderError::RateLimited { retry_after, .. } => *retry_after,
                _ => None,
            });
            let delay = retry::delay(&policy, retry, hint, fastrand::f64());
            tracing::debug!(provider, %error, ?delay, retry, "transient failure; retrying");
            tokio::time::sleep(delay).await;
            retry += 1;
        }
    }

    async fn attempt<W: Wire>(
        &self,
        wire: &W,
        url: &str,
        body: &[u8],
        stream: bool,
        sink: &mut Sink<'_>,
    ) -> Result<Message, Failure> {
        let started = Instant::now();
        let mut headers = HeaderMap::new();
        headers.insert(
            CONTENT_TYPE,
            "application/json".parse().expect("static header"),
        );
        if stream {
            headers.insert(ACCEPT, "text/event-stream".parse().expect("static header"));
        }
        wire.headers(&self.config.api_key, &mut headers);
        let send = self
            .client
            .post(url)
            .headers(headers)
            .body(body.to_vec())
            .send();
        let timeout = self.config.request_timeout;
        let response = match tokio::time::timeout(timeout, send).await {
            Err(_) => return Err(timed_out("no answer", timeout).into()),
            Ok(Err(e)) => return Err(from_reqwest(&e).into()),
            Ok(Ok(response)) => response,
        };
        let status = response.status();
        tracing::debug!(status = status.as_u16(), "answer received");
        if !status.is_success() {
            let retry_after = retry::retry_after(response.headers(), SystemTime::now());
            let deadline = remaining(started, timeout);
            let body = read_limited(response, deadline).await;
            let error =
                classify::classify_response(wire.protocol(), status.as_u16(), retry_after, &body);
            return Err(Failure { error, retry_after });
        }
        let is_json = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.to_ascii_lowercase().contains("json"));
        if stream && !is_json {
            return self
                .read_stream(wire, response, sink)
                .await
                .map_err(Failure::from);
        }
        let deadline = remaining(started, timeout);
        let cap = self.config.max_response_bytes;
        let bytes = match tokio::time::timeout(deadline, read_capped(response, cap)).await {
            Err(_) => return Err(timed_out("the answer did not arrive", timeout).into()),
            Ok(Err(e)) => return Err(e.into()),
            Ok(Ok(bytes)) => bytes,
        };
        let message = parse_json_answer(wire, &bytes)?;
        sink.message(&message);
        Ok(message)
    }

    async fn read_stream<W: Wire>(
        &self,
        wire: &W,
        mut response: reqwest::Response,
        sink: &mut Sink<'_>,
    ) -> Result<Message, ProviderError> {
        let idle = self.config.idle_timeout;
        let mut decoder = SseDecoder::new();
        let mut parser = wire.stream();
        let mut events = Vec::new();
        let cap = self.config.max_response_bytes;
        let mut received = 0u64;
        loop {
            let chunk = match tokio::time::timeout(idle, response.chunk()).await {
                Err(_) => return Err(timed_out("the stream went silent", idle)),
                Ok(Err(e)) => return Err(from_reqwest(&e)),
                Ok(Ok(chunk)) => chunk,
            };
            if let Some(bytes) = &chunk {
                received += bytes.len() as u64;
                if received > cap {
                    return Err(too_large(cap));
                }
            }
            let ended = chunk.is_none();
            match chunk {
                Some(bytes) => decoder.push(&bytes, &mut events),
                None => decoder.finish(&mut events),
            }
            for event in events.drain(..) {
                if parser.event(&event, sink)? {
                    return parser.finish(true);
                }
            }
            if ended {
                return parser.finish(false);
            }
        }
    }
}

/// Parses a complete JSON answer: malformed JSON, an error hidden in a 2xx body, or the message.
pub(crate) fn parse_json_answer<W: Wire>(wire: &W, bytes: &[u8]) -> Result<Message, ProviderError> {
    let value: Value =
        serde_json::from_slice(bytes).map_err(|e| ProviderError::MalformedResponse {
            message: format!("the answer is not valid JSON ({e}): {}", excerpt(bytes)),
        })?;
    if let Some(error) = classify::error_in_success_body(wire.protocol(), &value) {
        return Err(error);
    }
    wire.parse(&value)
}

/// Reads at most [`ERROR_BODY_LIMIT`] bytes of an error body; a read that fails or times out
/// keeps what arrived (the status is already known).
async fn read_limited(mut response: reqwest::Response, deadline: Duration) -> Vec<u8> {
    let mut body = Vec::new();
    let read = async {
        while let Ok(Some(chunk)) = response.chunk().await {
            let room = ERROR_BODY_LIMIT - body.len();
            body.extend_from_slice(&chunk[..chunk.len().min(room)]);
            if body.len() >= ERROR_BODY_LIMIT {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(deadline, read).await;
    body
}

/// Reads a whole answer body, refusing one larger than `cap` bytes: by its `Content-Length`
/// before reading anything, or as soon as more than `cap` bytes have arrived.
async fn read_capped(mut response: reqwest::Response, cap: u64) -> Result<Vec<u8>, ProviderError> {
    if response.content_length().is_some_and(|len| len > cap) {
        return Err(too_large(cap));
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| from_reqwest(&e))? {
        if (body.len() + chunk.len()) as u64 > cap {
            return Err(too_large(cap));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// The error for an answer over the size cap.
fn too_large(cap: u64) -> ProviderError {
    ProviderError::MalformedResponse {
        message: format!(
            "the answer is larger than the limit of {} bytes ({} MiB); it was not read further",
            cap,
            cap / (1024 * 1024)
        ),
    }
}

fn remaining(started: Instant, total: Duration) -> Duration {
    total.saturating_sub(started.elapsed())
}

fn timed_out(what: &str, after: Duration) -> ProviderError {
    ProviderError::Timeout {
        message: format!("{what} within {:.1}s", after.as_secs_f64()),
    }
}

/// Maps a reqwest failure onto the provider error kinds.
fn from_reqwest(e: &reqwest::Error) -> ProviderError {
    let message = error_chain(e);
    if e.is_timeout() {
        ProviderError::Timeout { message }
    } else if e.is_connect() {
        ProviderError::Connection {
            message: format!("could not connect: {message}"),
        }
    } else if e.is_body() || e.is_decode() {
        ProviderError::Connection {
            message: format!("the connection broke while the answer arrived: {message}"),
        }
    } else {
        ProviderError::Connection { message }
    }
}

/// An error and its sources, joined by `: `.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}

/// The start of a body, for error messages.
///
/// The cut may fall inside an echoed key; every error then passes through [`scrub`], which
/// removes any piece of the key of 8 bytes or more, so what the cut leaves of a key is either
/// removed or shorter than that (`ApiKey::scrub`).
pub(crate) fn excerpt(bytes: &[u8]) -> String {
    const MAX: usize = 200;
    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(MAX)]);
    if bytes.len() > MAX {
        format!("{text}...")
    } else {
        text.into_owned()
    }
}

/// The error with every occurrence of the key removed from its message.
pub(crate) fn scrub(error: ProviderError, key: &ApiKey) -> ProviderError {
    use ProviderError as E;
    let s = |m: String| key.scrub(&m);
    match error {
        E::ContextOverflow {
            message,
            input_tokens,
            limit,
        } => E::ContextOverflow {
            message: s(message),
            input_tokens,
            limit,
        },
        E::RateLimited {
            message,
            retry_after,
        } => E::RateLimited {
            message: s(message),
            retry_after,
        },
        E::Authentication { message } => E::Authentication {
            message: s(message),
        },
        E::ModelNotFound { message } => E::ModelNotFound {
            message: s(message),
        },
        E::InvalidRequest { status, message } => E::InvalidRequest {
            status,
            message: s(message),
        },
        E::Server { status, message } => E::Server {
            status,
            message: s(message),
        },
        E::Timeout { message } => E::Timeout {
            message: s(message),
        },
        E::Connection { message } => E::Connection {
            message: s(message),
        },
        E::MalformedResponse { message } => E::MalformedResponse {
            message: s(message),
        },
        E::Unsupported { message } => E::Unsupported {
            message: s(message),
        },
        other => {
            let text = other.to_string();
            if key.scrub(&text) == text {
                other
            } else {
                E::MalformedResponse {
                    message: key.scrub(&text),
                }
            }
        }
    }
}

/// Parses the JSON payload of an SSE event.
///
/// # Errors
/// [`ProviderError::MalformedResponse`] naming the event.
pub(crate) fn event_json(event: &SseEvent) -> Result<Value, ProviderError> {
    serde_json::from_str(&event.data).map_err(|e| ProviderError::MalformedResponse {
        message: format!(
            "invalid JSON in stream event `{}` ({e}): {}",
            if event.event.is_empty() {
                "message"
            } else {
                &event.event
            },
            excerpt(event.data.as_bytes())
        ),
    })
}

/// The payload of an error event for the classifier: its JSON, or for text that is not JSON,
/// `{"error": {"message": text}}`. A bare `error:` line's object is wrapped as `{"error": ...}`.
pub(crate) fn error_payload(event: &SseEvent) -> Value {
    match serde_json::from_str::<Value>(&event.data) {
        Ok(value) if event.raw && value.get("error").is_none() => {
            serde_json::json!({ "error": value })
        }
        Ok(value) => value,
        Err(_) => serde_json::json!({ "error": { "message": event.data } }),
    }
}

/// A malformed-response error.
pub(crate) fn malformed(message: impl Into<String>) -> ProviderError {
    ProviderError::MalformedResponse {
        message: message.into(),
    }
}

/// A new tool call id for protocols or servers that give none: `prefix` and 16 random hex
/// digits, so that ids stay unique across a session.
pub(crate) fn fresh_id(prefix: &str) -> String {
    format!("{prefix}{:016x}", fastrand::u64(..))
}
