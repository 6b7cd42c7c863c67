//! Classification of provider errors: context overflow (compaction can help) versus everything
//! else (rate limits, quotas and billing, capacity, keys, missing models, output limits, bad
//! requests, server failures), with the provider's own message, the sizes it states and the
//! delay it asks for.
//!
//! Three entry points, one per place an error can arrive: an HTTP error answer
//! ([`classify_response`]), an error event inside a stream that began with HTTP 200
//! ([`classify_stream_error`]), and a 2xx JSON body that is really an error
//! ([`error_in_success_body`]). Each has an `explain_*` twin that also names the rule that
//! fired. The rules are a table (`rules::RULES`), documented in `docs/providers.md`.

mod custom;
mod numbers;
mod rules;
mod signals;

#[cfg(test)]
#[allow(
    clippy::disallowed_methods,
    reason = "tests read and write their fixtures directly"
)]
mod tests;

use std::time::Duration;

use panto_provider::{ProviderError, TokenNumbers};
use serde_json::Value;

pub use custom::{Classifier, CustomRule};

use crate::protocol::Protocol;
use numbers::{Sizes, retry_delay_in_text};
use signals::Signals;

/// What a rule decided, before it becomes a [`ProviderError`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Verdict {
    /// The input is too large for the window: [`ProviderError::ContextOverflow`].
    ContextOverflow,
    /// The requested output alone is too large: [`ProviderError::InvalidRequest`]. Lower the
    /// output limit; compaction cannot help.
    OutputTooLarge,
    /// One item (a string, an image, a batch) is over its own limit:
    /// [`ProviderError::InvalidRequest`].
    ItemTooLarge,
    /// A rate limit, or a quota that refills with time: [`ProviderError::RateLimited`]
    /// (transient).
    RateLimited,
    /// The account's quota, credits or billing: [`ProviderError::QuotaExceeded`] (not
    /// transient; the account must change).
    QuotaExceeded,
    /// The provider is out of capacity: [`ProviderError::Server`] (transient).
    Overloaded,
    /// The key is missing, wrong or not allowed: [`ProviderError::Authentication`].
    Authentication,
    /// The model does not exist: [`ProviderError::ModelNotFound`].
    ModelNotFound,
    /// No answer in time: [`ProviderError::Timeout`].
    Timeout,
    /// Another bad request: [`ProviderError::InvalidRequest`].
    Rejected,
    /// A server failure: [`ProviderError::Server`].
    ServerError,
}

impl Verdict {
    /// A short description for documentation.
    #[cfg(test)]
    fn describe(self) -> &'static str {
        match self {
            Verdict::ContextOverflow => "**context overflow**",
            Verdict::OutputTooLarge => "invalid request (output too large)",
            Verdict::ItemTooLarge => "invalid request (one item too large)",
            Verdict::RateLimited => "rate limited",
            Verdict::QuotaExceeded => "quota or billing (not retried)",
            Verdict::Overloaded => "server error (overloaded)",
            Verdict::Authentication => "authentication",
            Verdict::ModelNotFound => "model not found",
            Verdict::Timeout => "timeout",
            Verdict::Rejected => "invalid request",
            Verdict::ServerError => "server error",
        }
    }
}

/// A classified error and the rule that decided it.
#[derive(Clone, Debug, PartialEq)]
pub struct Classification {
    /// The name of the rule that fired, as listed in `docs/providers.md`.
    pub rule: &'static str,
    /// What the rule decided.
    pub verdict: Verdict,
    /// The error to return.
    pub error: ProviderError,
}

/// Classifies an HTTP error answer (any non-2xx status) from its status, the Retry-After delay
/// the adapter parsed from the headers (if any) and the raw body bytes, which may be JSON of any
/// shape, text, HTML or empty.
///
/// The message kept in the error is the provider's own (never a raw dump when the body has a
/// message field), at most 2000 characters, with anything that looks like an API key redacted.
/// A header delay wins over one found in the body.
pub fn classify_response(
    protocol: Protocol,
    status: u16,
    retry_after: Option<Duration>,
    body: &[u8],
) -> ProviderError {
    explain_response(protocol, status, retry_after, body).error
}

/// [`classify_response`], also naming the rule that fired.
pub fn explain_response(
    protocol: Protocol,
    status: u16,
    retry_after: Option<Duration>,
    body: &[u8],
) -> Classification {
    Classifier::new(protocol).explain_response(status, retry_after, body)
}

/// Classifies an error that arrived inside a stream that began with HTTP 200: the JSON payload
/// of an SSE `error` event, of a `response.failed` event (error at `response.error`), or of a
/// data chunk carrying `error`. A status embedded in the payload (`code: 400`) is used when
/// present; otherwise the error's type decides.
pub fn classify_stream_error(protocol: Protocol, payload: &Value) -> ProviderError {
    explain_stream_error(protocol, payload).error
}

/// [`classify_stream_error`], also naming the rule that fired.
pub fn explain_stream_error(protocol: Protocol, payload: &Value) -> Classification {
    Classifier::new(protocol).explain_stream_error(payload)
}

/// Recognises a 2xx JSON body that is really an error (`OpenRouter` answering 200 with an `error`
/// object and no `choices`, a Responses body with `status: "failed"`, an Anthropic
/// `{"type":"error"}`): `Some` with the classified error when it is one, `None` for a normal
/// answer (including one whose `error` is `null` or empty).
pub fn error_in_success_body(protocol: Protocol, body: &Value) -> Option<ProviderError> {
    explain_success_body(protocol, body).map(|c| c.error)
}

/// [`error_in_success_body`], also naming the rule that fired.
pub fn explain_success_body(protocol: Protocol, body: &Value) -> Option<Classification> {
    if !is_error_body(body, 0) {
        return None;
    }
    Some(explain_stream_error(protocol, body))
}

/// Whether a 2xx body carries an error instead of an answer.
pub(super) fn is_error_body(body: &Value, depth: usize) -> bool {
    match body {
        // Gemini's non-SSE streaming answer is an array of chunks; an error may be one of them.
        Value::Array(items) if depth == 0 => items.iter().any(|item| is_error_body(item, 1)),
        Value::Object(map) => {
            let present = |v: Option<&Value>| match v {
                None | Some(Value::Null) => false,
                Some(Value::String(s)) => !s.trim().is_empty(),
                Some(Value::Object(o)) => o.values().any(|v| !v.is_null()),
                Some(_) => true,
            };
            let failed_response = map
                .get("response")
                .is_some_and(|r| r.get("status").and_then(Value::as_str) == Some("failed"));
            present(map.get("error"))
                || matches!(
                    map.get("type").and_then(Value::as_str),
                    Some("error" | "response.failed")
                )
                || map.get("object").and_then(Value::as_str) == Some("error")
                || (map.get("status").and_then(Value::as_str) == Some("failed")
                    && present(map.get("error")))
                || failed_response
        }
        _ => false,
    }
}

/// The error a verdict gives, with the message, sizes and delay the answer states.
fn to_classification(
    protocol: Protocol,
    status: Option<u16>,
    retry_after: Option<Duration>,
    signals: &Signals,
    sizes: Sizes,
    rule: &'static str,
    verdict: Verdict,
) -> Classification {
    let message = signals.message.clone();
    let error = match verdict {
        Verdict::ContextOverflow => ProviderError::ContextOverflow {
            message,
            numbers: TokenNumbers::new(
                signals.n_prompt_tokens.or(sizes.input_tokens()),
                signals.n_ctx.or(sizes.limit),
            )
            .with_output(sizes.output),
        },
        Verdict::RateLimited => ProviderError::RateLimited {
            message,
            retry_after: retry_after
                .or(signals.retry_delay)
                .or_else(|| retry_delay_in_text(&signals.text)),
        },
        Verdict::QuotaExceeded => ProviderError::QuotaExceeded { message },
        Verdict::Overloaded => ProviderError::Server {
            status: status.unwrap_or(match protocol {
                Protocol::Anthropic => 529,
                _ => 503,
            }),
            message,
        },
        Verdict::Authentication => ProviderError::Authentication { message },
        Verdict::ModelNotFound => ProviderError::ModelNotFound { message },
        Verdict::Timeout => ProviderError::Timeout { message },
        Verdict::OutputTooLarge | Verdict::ItemTooLarge | Verdict::Rejected => {
            ProviderError::InvalidRequest {
                status: status.unwrap_or(400),
                message,
            }
        }
        Verdict::ServerError => ProviderError::Server {
            status: status.unwrap_or(500),
            message,
        },
    };
    Classification {
        rule,
        verdict,
        error,
    }
}
