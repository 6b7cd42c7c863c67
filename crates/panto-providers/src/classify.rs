//! Error classification: what kind of failure an error answer is (placeholder, replaced at merge).
//!
//! This minimal version exists only so that the adapters compile and their plumbing tests run;
//! the real classifier (with the overflow rule table) is written in its own branch.

use std::time::Duration;

use panto_provider::ProviderError;
use serde_json::Value;

/// The wire protocol an error came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// Anthropic Messages.
    Anthropic,
    /// OpenAI Chat Completions and compatible servers.
    OpenAiChat,
    /// OpenAI Responses.
    OpenAiResponses,
    /// Google Gemini.
    Gemini,
}

/// Classifies an HTTP error answer (any non-2xx status).
pub fn classify_response(
    protocol: Protocol,
    status: u16,
    retry_after: Option<Duration>,
    body: &[u8],
) -> ProviderError {
    let _ = protocol;
    classify_text(
        status,
        retry_after,
        String::from_utf8_lossy(body).into_owned(),
    )
}

/// Classifies an error that arrived inside a stream that began with HTTP 200.
pub fn classify_stream_error(protocol: Protocol, payload: &Value) -> ProviderError {
    let _ = protocol;
    let code = payload
        .pointer("/error/code")
        .and_then(Value::as_u64)
        .and_then(|c| u16::try_from(c).ok())
        .unwrap_or(400);
    classify_text(code, None, payload.to_string())
}

/// A 2xx JSON body that is really an error: `Some(error)` when it is one.
pub fn error_in_success_body(protocol: Protocol, body: &Value) -> Option<ProviderError> {
    body.get("error")
        .filter(|e| !e.is_null())
        .map(|_| classify_stream_error(protocol, body))
}

fn classify_text(status: u16, retry_after: Option<Duration>, message: String) -> ProviderError {
    let lower = message.to_lowercase();
    let has = |words: &[&str]| words.iter().any(|w| lower.contains(w));
    if status == 429 || has(&["rate limit", "rate_limit", "quota", "resource_exhausted"]) {
        ProviderError::RateLimited {
            message,
            retry_after,
        }
    } else if status == 529 || status >= 500 || has(&["overloaded"]) {
        ProviderError::Server { status, message }
    } else if has(&[
        "context_length_exceeded",
        "context length",
        "context window",
        "context size",
        "prompt is too long",
        "exceed context limit",
        "maximum number of tokens allowed",
    ]) {
        ProviderError::ContextOverflow {
            message,
            input_tokens: None,
            limit: None,
        }
    } else if status == 401 || status == 403 {
        ProviderError::Authentication { message }
    } else if status == 404 {
        ProviderError::ModelNotFound { message }
    } else {
        ProviderError::InvalidRequest { status, message }
    }
}
