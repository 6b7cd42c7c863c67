//! Sending: one request through its attempts, its retries of transient failures within the
//! policy and the deadline, and the headers each attempt carries.

use std::time::{Duration, Instant, SystemTime};

use panto_model::Message;
use panto_provider::{About, ProviderError, Request, RetryNotice, StreamEvent, Wait};
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use serde_json::Value;

use super::errors::{excerpt, map_message, scrub};
use super::read::read_limited;
use super::{Clock, Failure, Sink, Transport, Wire};
use crate::classify;
use crate::protocol::Protocol;
use crate::retry::{self, Refusal};

impl Transport {
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
        let send = self.post(wire, request, url, body, stream).send();
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
        let bytes = self.read_whole(&mut response, clock).await?;
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
        let headers = self.headers(wire, request, false);
        self.post_retrying(url, &headers, body, Judge::Protocol(wire.protocol()))
            .await
    }

    /// Posts `body` to `url` with `headers` (the configured extra headers added), retrying
    /// transient failures within the policy and one deadline, and returns the answer's bytes
    /// once `judge` found no error in them. Errors are scrubbed of the key and the sensitive
    /// headers.
    pub(crate) async fn post_retrying(
        &self,
        url: &str,
        headers: &HeaderMap,
        body: &[u8],
        judge: Judge<'_>,
    ) -> Result<Vec<u8>, ProviderError> {
        let clock = Clock::start(self.config.request_timeout);
        let policy = self.config.retry;
        let mut retry = 0;
        loop {
            let failure = match self.post_once(url, headers, body, &clock, judge).await {
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
        let bytes = self.read_whole(&mut response, &clock).await?;
        Ok(serde_json::from_slice(&bytes).ok())
    }

    /// The POST of `body` to `url` with the wire's headers, the configured extra headers and
    /// the request's own (a stream's asks for `text/event-stream`), not yet sent.
    fn post<W: Wire>(
        &self,
        wire: &W,
        request: &Request,
        url: &str,
        body: &[u8],
        stream: bool,
    ) -> reqwest::RequestBuilder {
        let headers = self.headers(wire, request, stream);
        self.client.post(url).headers(headers).body(body.to_vec())
    }

    /// The headers of a request: JSON in (and SSE out when streaming), the wire's credentials
    /// and protocol headers, the configured extra headers, and the request's own.
    fn headers<W: Wire>(&self, wire: &W, request: &Request, stream: bool) -> HeaderMap {
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
        headers
    }

    /// The headers of a custom provider's JSON request: JSON in and out, the key in
    /// `key_header` after `prefix` (nothing when the key is empty), then the configured extra
    /// headers.
    pub(crate) fn json_headers(&self, key_header: &HeaderName, prefix: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(
            CONTENT_TYPE,
            "application/json".parse().expect("static header"),
        );
        headers.insert(ACCEPT, "application/json".parse().expect("static header"));
        crate::shared::key_header(
            &mut headers,
            key_header.clone(),
            prefix,
            &self.config.api_key,
        );
        for (name, value) in &self.extra {
            headers.insert(name, value.clone());
        }
        headers
    }

    async fn post_once(
        &self,
        url: &str,
        headers: &HeaderMap,
        body: &[u8],
        clock: &Clock,
        judge: Judge<'_>,
    ) -> Result<Vec<u8>, Failure> {
        let started = Instant::now();
        let send = self
            .client
            .post(url)
            .headers(headers.clone())
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
            let error = judge.response(status.as_u16(), retry_after, &body);
            return Err(Failure { error, retry_after });
        }
        let bytes = self.read_whole(&mut response, clock).await?;
        let value: Value =
            serde_json::from_slice(&bytes).map_err(|e| ProviderError::MalformedResponse {
                message: format!("the answer is not valid JSON ({e}): {}", excerpt(&bytes)),
            })?;
        if let Some(error) = judge.success_body(&value) {
            return Err(error.into());
        }
        Ok(bytes)
    }
}

/// What decides whether an answer is an error, and which: the table for one of panto's
/// protocols, or a caller's [`classify::Classifier`].
#[derive(Clone, Copy, Debug)]
pub(crate) enum Judge<'a> {
    /// An adapter's protocol.
    Protocol(Protocol),
    /// A custom provider's classifier.
    Classifier(&'a classify::Classifier),
}

impl Judge<'_> {
    fn response(self, status: u16, retry_after: Option<Duration>, body: &[u8]) -> ProviderError {
        match self {
            Judge::Protocol(p) => classify::classify_response(p, status, retry_after, body),
            Judge::Classifier(c) => c.classify_response(status, retry_after, body),
        }
    }

    fn success_body(self, body: &Value) -> Option<ProviderError> {
        match self {
            Judge::Protocol(p) => classify::error_in_success_body(p, body),
            Judge::Classifier(c) => c.error_in_success_body(body),
        }
    }
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
fn parse_json_answer<W: Wire>(wire: &W, bytes: &[u8]) -> Result<Message, ProviderError> {
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
fn join_beta(existing: Option<&HeaderValue>, more: &str) -> String {
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
