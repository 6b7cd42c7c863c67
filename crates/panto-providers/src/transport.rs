//! The HTTP exchange shared by every adapter: send, retry transient failures, read a JSON or
//! SSE answer under the named waits, and hand error answers to the classifier.
//!
//! The adapters only describe their protocol through [`Wire`] and [`StreamParser`]; everything
//! that touches the network, the clock or the key lives here. One [`Clock`] per request holds
//! its deadline: every wait of every attempt, and every delay between attempts, ends by it.

use std::fmt;
use std::future::Future;
use std::time::{Duration, Instant, SystemTime};

use panto_model::{ContentBlock, Message};
use panto_provider::{About, ProviderError, Request, RetryNotice, StreamEvent, Wait};
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use serde_json::Value;

use crate::body::WireBody;
use crate::classify;
use crate::config::{BaseUrl, Config, Error};
use crate::protocol::Protocol;
use crate::retry::{self, Refusal};
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

    /// Sends `request`, retrying transient failures while nothing has been emitted.
    pub(crate) async fn complete<W: Wire>(
        &self,
        wire: &W,
        provider: &str,
        request: &Request,
        events: &mut (dyn FnMut(StreamEvent<'_>) + Send),
    ) -> Result<Message, ProviderError> {
        let stream = self.config.streaming;
        let mut sink = Sink {
            events,
            emitted: false,
        };
        let clock = Clock::start(self.config.request_timeout);
        let mut request = std::borrow::Cow::Borrowed(request);
        let mut mark = None;
        loop {
            match self
                .exchange(wire, provider, &request, stream, &mut sink, &clock)
                .await
            {
                Ok(mut message) => {
                    if let Some((field, value)) = mark {
                        message.extra.insert(String::from(field), value);
                    }
                    return Ok(message);
                }
                Err(error) => {
                    // Once per request, and only while nothing has reached the sink.
                    let recovery = match (&mark, sink.emitted) {
                        (None, false) => wire.recover(&request, &error),
                        _ => None,
                    };
                    let Some(recovery) = recovery else {
                        return Err(error);
                    };
                    tracing::info!(provider, %error, "sending the request once more: {}", recovery.notice);
                    sink.notice(&recovery.notice);
                    mark = Some(recovery.mark);
                    request = std::borrow::Cow::Owned(recovery.request);
                }
            }
        }
    }

    /// Sends `request` until it succeeds or fails for good: transient failures are retried
    /// while nothing has been emitted, within the policy and the deadline.
    async fn exchange<W: Wire>(
        &self,
        wire: &W,
        provider: &str,
        request: &Request,
        stream: bool,
        sink: &mut Sink<'_>,
        clock: &Clock,
    ) -> Result<Message, ProviderError> {
        let body = wire.body(request, stream).to_bytes().map_err(|e| {
            ProviderError::MalformedResponse {
                message: format!("could not encode the request: {e}"),
            }
        })?;
        let url = wire.endpoint(&self.base, request, stream);
        let policy = self.config.retry;
        let mut retry = 0;
        loop {
            tracing::debug!(provider, %url, model = %request.model, stream, retry, "sending request");
            let failure = match self
                .attempt(wire, request, &url, &body, stream, sink, clock)
                .await
            {
                Ok(mut message) => {
                    wire.settle(request, &mut message);
                    // A server that names no model answered with the one asked for.
                    if message.model.is_none() {
                        message.model = Some(request.model.as_str().into());
                    }
                    return Ok(message);
                }
                Err(failure) => failure,
            };
            let error = self
                .secrets
                .iter()
                .fold(scrub(failure.error, &self.config.api_key), scrub);
            if !error.is_transient() || sink.emitted || retry >= policy.max_retries {
                tracing::debug!(provider, %error, "request failed");
                return Err(error);
            }
            let hint = failure.retry_after.or(match &error {
                ProviderError::RateLimited { retry_after, .. } => *retry_after,
                _ => None,
            });
            let delay = match retry::next_delay(&policy, retry, hint, fastrand::f64(), clock.left())
            {
                Ok(delay) => delay,
                Err(refusal) => {
                    tracing::debug!(provider, %error, ?refusal, "transient failure; not retried");
                    return Err(not_retried(error, refusal));
                }
            };
            tracing::debug!(provider, %error, ?delay, retry, "transient failure; retrying");
            retry += 1;
            sink.retry(RetryNotice::new(retry, policy.max_retries, delay, &error));
            tokio::time::sleep(delay).await;
        }
    }

    #[expect(
        clippy::too_many_arguments,
        reason = "one attempt needs every part of its request"
    )]
    async fn attempt<W: Wire>(
        &self,
        wire: &W,
        request: &Request,
        url: &str,
        body: &[u8],
        stream: bool,
        sink: &mut Sink<'_>,
        clock: &Clock,
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
        wire.headers(&self.config.api_key, request, &mut headers);
        for (name, value) in &self.extra {
            headers.insert(name, value.clone());
        }
        request_headers(&mut headers, request);
        let send = self
            .client
            .post(url)
            .headers(headers)
            .body(body.to_vec())
            .send();
        // The head of a whole (non-streaming) answer comes with the answer itself, so only the
        // deadline bounds it; a stream's head comes before the first token.
        let first_byte = if stream {
            self.config.first_byte_timeout
        } else {
            Duration::MAX
        };
        let what = "the server accepted the request but sent no answer";
        let response = match clock
            .within(Wait::FirstByte, started, first_byte, what, send)
            .await?
        {
            Err(e) => return Err(self.reqwest_error(&e).into()),
            Ok(response) => response,
        };
        let mut response = response;
        let status = response.status();
        tracing::debug!(status = status.as_u16(), "answer received");
        if !status.is_success() {
            let retry_after = retry::retry_after(response.headers(), SystemTime::now());
            let body = read_limited(response, clock.left().min(self.config.idle_timeout)).await;
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
                .read_stream(wire, response, sink, clock)
                .await
                .map_err(Failure::from);
        }
        let cap = self.config.max_response_bytes;
        if response.content_length().is_some_and(|len| len > cap) {
            return Err(too_large(cap).into());
        }
        let mut bytes = Vec::new();
        let mut since = Instant::now();
        while let Some(chunk) = self
            .next_chunk(&mut response, clock, since, "the answer stopped arriving")
            .await?
        {
            if (bytes.len() + chunk.len()) as u64 > cap {
                return Err(too_large(cap).into());
            }
            bytes.extend_from_slice(&chunk);
            since = Instant::now();
        }
        let message = parse_json_answer(wire, &bytes)?;
        sink.message(&message);
        Ok(message)
    }

    /// Posts `body` to `path` (an endpoint of the base URL, such as `v1/responses/compact`)
    /// with the wire's headers, retrying transient failures like [`Transport::complete`], and
    /// returns the answer's bytes once checked for an error (the caller reads them exactly).
    pub(crate) async fn post_json<W: Wire>(
        &self,
        wire: &W,
        request: &Request,
        url: &str,
        body: &[u8],
    ) -> Result<Vec<u8>, ProviderError> {
        let clock = Clock::start(self.config.request_timeout);
        let policy = self.config.retry;
        let mut retry = 0;
        loop {
            let failure = match self.post_once(wire, request, url, body, &clock).await {
                Ok(bytes) => return Ok(bytes),
                Err(failure) => failure,
            };
            let error = self
                .secrets
                .iter()
                .fold(scrub(failure.error, &self.config.api_key), scrub);
            if !error.is_transient() || retry >= policy.max_retries {
                return Err(error);
            }
            let hint = failure.retry_after.or(match &error {
                ProviderError::RateLimited { retry_after, .. } => *retry_after,
                _ => None,
            });
            let delay = retry::next_delay(&policy, retry, hint, fastrand::f64(), clock.left())
                .map_err(|refusal| not_retried(error.clone(), refusal))?;
            retry += 1;
            tokio::time::sleep(delay).await;
        }
    }

    /// One JSON exchange with one of the server's own endpoints, outside the conversation
    /// protocols (a model listing, the server's properties): `GET url`, or `POST` of `body` as
    /// JSON, in one attempt within `within` (and the request deadline), with the key as a
    /// bearer token when there is one and the configured extra headers, the answer read up to
    /// the response cap. `Ok(None)` when the answer says the server has no such endpoint or
    /// does not know what was asked (HTTP 400, 404, 405, 422 or 501), or is not JSON: another
    /// kind of server. Errors are scrubbed of the key and the sensitive headers.
    ///
    /// # Errors
    /// Connection failures and expired waits, and every other error answer as the classifier
    /// reads it (an unknown key is [`ProviderError::Authentication`]).
    pub(crate) async fn fetch_json(
        &self,
        url: &str,
        body: Option<&Value>,
        within: Duration,
    ) -> Result<Option<Value>, ProviderError> {
        let fetched = self.fetch_json_once(url, body, within).await;
        fetched.map_err(|error| {
            self.secrets
                .iter()
                .fold(scrub(error, &self.config.api_key), scrub)
        })
    }

    async fn fetch_json_once(
        &self,
        url: &str,
        body: Option<&Value>,
        within: Duration,
    ) -> Result<Option<Value>, ProviderError> {
        let clock = Clock::start(within.min(self.config.request_timeout));
        let started = Instant::now();
        let mut headers = HeaderMap::new();
        headers.insert(ACCEPT, "application/json".parse().expect("static header"));
        crate::shared::key_header(
            &mut headers,
            reqwest::header::AUTHORIZATION,
            "Bearer ",
            &self.config.api_key,
        );
        for (name, value) in &self.extra {
            headers.insert(name, value.clone());
        }
        let request = match body {
            Some(body) => {
                headers.insert(
                    CONTENT_TYPE,
                    "application/json".parse().expect("static header"),
                );
                self.client.post(url).body(body.to_string())
            }
            None => self.client.get(url),
        };
        let send = request.headers(headers).send();
        let what = "the server accepted the request but sent no answer";
        let mut response = match clock
            .within(
                Wait::FirstByte,
                started,
                self.config.first_byte_timeout,
                what,
                send,
            )
            .await?
        {
            Err(e) => return Err(self.reqwest_error(&e)),
            Ok(response) => response,
        };
        let status = response.status();
        if matches!(status.as_u16(), 400 | 404 | 405 | 422 | 501) {
            return Ok(None);
        }
        if !status.is_success() {
            let retry_after = retry::retry_after(response.headers(), SystemTime::now());
            let body = read_limited(response, clock.left().min(self.config.idle_timeout)).await;
            return Err(classify::classify_response(
                Protocol::OpenAiChat,
                status.as_u16(),
                retry_after,
                &body,
            ));
        }
        let cap = self.config.max_response_bytes;
        let mut bytes = Vec::new();
        let mut since = Instant::now();
        while let Some(chunk) = self
            .next_chunk(&mut response, &clock, since, "the answer stopped arriving")
            .await?
        {
            if (bytes.len() + chunk.len()) as u64 > cap {
                return Err(too_large(cap));
            }
            bytes.extend_from_slice(&chunk);
            since = Instant::now();
        }
        Ok(serde_json::from_slice(&bytes).ok())
    }

    async fn post_once<W: Wire>(
        &self,
        wire: &W,
        request: &Request,
        url: &str,
        body: &[u8],
        clock: &Clock,
    ) -> Result<Vec<u8>, Failure> {
        let started = Instant::now();
        let mut headers = HeaderMap::new();
        headers.insert(
            CONTENT_TYPE,
            "application/json".parse().expect("static header"),
        );
        wire.headers(&self.config.api_key, request, &mut headers);
        for (name, value) in &self.extra {
            headers.insert(name, value.clone());
        }
        request_headers(&mut headers, request);
        let send = self
            .client
            .post(url)
            .headers(headers)
            .body(body.to_vec())
            .send();
        let what = "the server accepted the request but sent no answer";
        let mut response = match clock
            .within(Wait::FirstByte, started, Duration::MAX, what, send)
            .await?
        {
            Err(e) => return Err(self.reqwest_error(&e).into()),
            Ok(response) => response,
        };
        let status = response.status();
        if !status.is_success() {
            let retry_after = retry::retry_after(response.headers(), SystemTime::now());
            let body = read_limited(response, clock.left().min(self.config.idle_timeout)).await;
            let error =
                classify::classify_response(wire.protocol(), status.as_u16(), retry_after, &body);
            return Err(Failure { error, retry_after });
        }
        let cap = self.config.max_response_bytes;
        let mut bytes = Vec::new();
        let mut since = Instant::now();
        while let Some(chunk) = self
            .next_chunk(&mut response, clock, since, "the answer stopped arriving")
            .await?
        {
            if (bytes.len() + chunk.len()) as u64 > cap {
                return Err(too_large(cap).into());
            }
            bytes.extend_from_slice(&chunk);
            since = Instant::now();
        }
        let value: Value =
            serde_json::from_slice(&bytes).map_err(|e| ProviderError::MalformedResponse {
                message: format!("the answer is not valid JSON ({e}): {}", excerpt(&bytes)),
            })?;
        if let Some(error) = classify::error_in_success_body(wire.protocol(), &value) {
            return Err(error.into());
        }
        Ok(bytes)
    }

    async fn read_stream<W: Wire>(
        &self,
        wire: &W,
        mut response: reqwest::Response,
        sink: &mut Sink<'_>,
        clock: &Clock,
    ) -> Result<Message, ProviderError> {
        let mut decoder = SseDecoder::new();
        let mut parser = wire.stream();
        let mut events = Vec::new();
        // The idle wait runs from the last progress: an event, or part of one. Keep-alive
        // comments and pings prove the connection is alive, not that the answer is coming.
        let mut progress = Instant::now();
        let mut pinged = false;
        let cap = self.config.max_response_bytes;
        let mut received = 0u64;
        loop {
            let what = if pinged {
                "only keep-alive pings arrived, no stream event"
            } else {
                "the stream went silent"
            };
            let chunk = self
                .next_chunk(&mut response, clock, progress, what)
                .await?;
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
            let mut moved = decoder.in_event();
            for event in events.drain(..) {
                moved |= !is_keep_alive(&event);
                if parser.event(&event, sink)? {
                    return parser.finish(true);
                }
            }
            if ended {
                return parser.finish(false);
            }
            if moved {
                progress = Instant::now();
                pinged = false;
            } else {
                pinged = true;
            }
        }
    }

    /// The next chunk of an answer's body, within the idle wait from `since`.
    async fn next_chunk(
        &self,
        response: &mut reqwest::Response,
        clock: &Clock,
        since: Instant,
        what: &str,
    ) -> Result<Option<bytes::Bytes>, ProviderError> {
        clock
            .within(
                Wait::Idle,
                since,
                self.config.idle_timeout,
                what,
                response.chunk(),
            )
            .await?
            .map_err(|e| self.reqwest_error(&e))
    }

    /// Maps a reqwest failure onto the provider error kinds; the client's own connect timeout
    /// is the connect wait.
    fn reqwest_error(&self, e: &reqwest::Error) -> ProviderError {
        if e.is_connect() && e.is_timeout() {
            return ProviderError::WaitExpired {
                wait: Wait::Connect,
                after: self.config.connect_timeout,
                message: format!("could not connect: {}", error_chain(e)),
            };
        }
        from_reqwest(e)
    }
}

/// Whether an event only keeps the connection alive (Anthropic's `ping`).
fn is_keep_alive(event: &SseEvent) -> bool {
    event.event == "ping"
        || serde_json::from_str::<Value>(&event.data)
            .is_ok_and(|v| v.get("type").and_then(Value::as_str) == Some("ping"))
}

/// The error of a transient failure that is not retried, saying why.
fn not_retried(error: ProviderError, refusal: Refusal) -> ProviderError {
    let note = match (refusal, &error) {
        (
            Refusal::AskedTooLong { asked, cap },
            ProviderError::RateLimited {
                retry_after: Some(said),
                ..
            },
        ) if *said == asked => format!(
            "not retried: the wait is longer than the {} retry cap",
            About(cap)
        ),
        (Refusal::AskedTooLong { asked, cap }, _) => format!(
            "not retried: the server asked to be retried in {}, longer than the {} retry cap",
            About(asked),
            About(cap)
        ),
        (Refusal::PastDeadline { delay, left }, _) => format!(
            "not retried: waiting {} would pass the request deadline ({} left)",
            About(delay),
            About(left)
        ),
    };
    map_message(error, |m| format!("{m} ({note})")).unwrap_or_else(|other| other)
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
    wire.parse_bytes(bytes, &value)
}

/// Adds the request's own headers (`RequestOptions::extra_headers`): each replaces a header of
/// the same name, except `anthropic-beta`, whose comma-separated values are joined with those
/// already set. A header named like a credential is marked sensitive.
fn request_headers(headers: &mut HeaderMap, request: &Request) {
    for (name, value) in &request.options.extra_headers {
        let Ok(name) = HeaderName::from_bytes(name.as_bytes()) else {
            tracing::warn!(header = %name, "a request header with an invalid name was not sent");
            continue;
        };
        let joined = if name.as_str() == "anthropic-beta" {
            join_beta(headers.get(&name), value)
        } else {
            value.clone()
        };
        let Ok(mut value) = HeaderValue::from_str(&joined) else {
            tracing::warn!(header = %name, "a request header with an invalid value was not sent");
            continue;
        };
        if crate::secret::is_sensitive_header(name.as_str()) {
            value.set_sensitive(true);
        }
        headers.insert(name, value);
    }
}

/// `anthropic-beta` values: those already set, then `more`'s, each once.
pub(crate) fn join_beta(existing: Option<&HeaderValue>, more: &str) -> String {
    let mut values: Vec<String> = Vec::new();
    let existing = existing.and_then(|v| v.to_str().ok()).unwrap_or_default();
    for value in existing.split(',').chain(more.split(',')) {
        let value = value.trim();
        if !value.is_empty() && !values.iter().any(|v| v == value) {
            values.push(value.to_owned());
        }
    }
    values.join(",")
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

/// Separates panto's own words about a connection failure from the HTTP library's, which
/// follow as the cause: `connection refused by 127.0.0.1:9: nothing is listening there; cause:
/// error sending request ...`.
pub const CAUSE: &str = "; cause: ";

/// How the message of a [`ProviderError::Connection`] for an answer cut short begins.
pub const CLOSED_EARLY: &str = "the connection closed before the answer finished";

/// Whether `error` says that the answer stopped before its end: the connection closed while it
/// arrived, or a stream ended before its protocol's end marker. Nothing of such an answer is
/// taken; sending the request again may succeed.
pub fn cut_short(error: &ProviderError) -> bool {
    match error {
        ProviderError::Connection { message } => message.starts_with(CLOSED_EARLY),
        ProviderError::MalformedResponse { message } => {
            message.starts_with("the stream ended before")
        }
        _ => false,
    }
}

/// Maps a reqwest failure onto the provider error kinds, in panto's words (what failed, and
/// where), with the library's chain after [`CAUSE`].
fn from_reqwest(e: &reqwest::Error) -> ProviderError {
    let message = error_chain(e);
    if e.is_timeout() {
        ProviderError::Timeout { message }
    } else if e.is_connect() {
        ProviderError::Connection {
            message: format!("{}{CAUSE}{message}", connect_failure(e)),
        }
    } else if e.is_body() || e.is_decode() {
        ProviderError::Connection {
            message: format!("{CLOSED_EARLY}{CAUSE}{message}"),
        }
    } else {
        ProviderError::Connection { message }
    }
}

/// What a failed connection attempt met, in a sentence: refused (nothing listens there), a
/// name that does not resolve, or a secure connection that could not be made.
fn connect_failure(e: &reqwest::Error) -> String {
    let url = e.url();
    let host = url.and_then(|u| u.host_str()).unwrap_or("the server");
    let at = match url.and_then(reqwest::Url::port_or_known_default) {
        Some(port) => format!("{host}:{port}"),
        None => host.to_owned(),
    };
    let https = url.is_some_and(|u| u.scheme() == "https");
    let chain = error_chain(e).to_lowercase();
    let mut source = std::error::Error::source(e);
    let mut io_kind = None;
    let mut tls = false;
    while let Some(s) = source {
        // An I/O error hands out what it wraps through `get_ref`, not `source`, and may wrap
        // another I/O error: the innermost kind is the telling one.
        let mut inner: Option<&(dyn std::error::Error + 'static)> = Some(s);
        while let Some(i) = inner {
            #[cfg(feature = "rustls")]
            {
                tls |= i.is::<rustls::Error>();
            }
            inner = i.downcast_ref::<std::io::Error>().and_then(|io| {
                io_kind = Some(io.kind());
                io.get_ref()
                    .map(|e| e as &(dyn std::error::Error + 'static))
            });
        }
        source = s.source();
    }
    // On an `https` URL, a connect error that is not the network's (no I/O error of its own,
    // or one of invalid data) is the TLS handshake's, whichever TLS library made it.
    tls |= https
        && (matches!(io_kind, None | Some(std::io::ErrorKind::InvalidData))
            || ["certificate", "tls", "handshake", "ssl"]
                .iter()
                .any(|w| chain.contains(w)));
    if io_kind == Some(std::io::ErrorKind::ConnectionRefused) {
        format!("connection refused by {at}: nothing is listening there")
    } else if chain.contains("dns error") || chain.contains("failed to lookup address") {
        format!("cannot find the server {host}: its name does not resolve (DNS)")
    } else if tls {
        format!(
            "no secure connection to {at}: the TLS handshake failed (a certificate that is not trusted, or a server that does not speak HTTPS there)"
        )
    } else {
        format!("cannot connect to {at}")
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
    map_message(error, |m| key.scrub(&m)).unwrap_or_else(|other| {
        // A kind this crate does not know: scrub its whole text if the key is in it.
        let text = other.to_string();
        if key.scrub(&text) == text {
            other
        } else {
            ProviderError::MalformedResponse {
                message: key.scrub(&text),
            }
        }
    })
}

/// The error with `f` applied to its message, or the error itself (`Err`) for a kind this
/// crate does not know.
fn map_message(
    error: ProviderError,
    f: impl FnOnce(String) -> String,
) -> Result<ProviderError, ProviderError> {
    use ProviderError as E;
    Ok(match error {
        E::ContextOverflow {
            message,
            input_tokens,
            limit,
        } => E::ContextOverflow {
            message: f(message),
            input_tokens,
            limit,
        },
        E::RateLimited {
            message,
            retry_after,
        } => E::RateLimited {
            message: f(message),
            retry_after,
        },
        E::QuotaExceeded { message } => E::QuotaExceeded {
            message: f(message),
        },
        E::Authentication { message } => E::Authentication {
            message: f(message),
        },
        E::ModelNotFound { message } => E::ModelNotFound {
            message: f(message),
        },
        E::InvalidRequest { status, message } => E::InvalidRequest {
            status,
            message: f(message),
        },
        E::Server { status, message } => E::Server {
            status,
            message: f(message),
        },
        E::Timeout { message } => E::Timeout {
            message: f(message),
        },
        E::WaitExpired {
            wait,
            after,
            message,
        } => E::WaitExpired {
            wait,
            after,
            message: f(message),
        },
        E::Connection { message } => E::Connection {
            message: f(message),
        },
        E::MalformedResponse { message } => E::MalformedResponse {
            message: f(message),
        },
        E::Unsupported { message } => E::Unsupported {
            message: f(message),
        },
        other => return Err(other),
    })
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
