//! Errors: reqwest failures in panto's words, answers cut short, keys scrubbed from messages,
//! and the small helpers the adapters share to read stream events and name malformed answers.

use panto_provider::{ProviderError, Wait};
use serde_json::Value;

use super::Transport;
use crate::secret::ApiKey;
use crate::sse::SseEvent;

impl Transport {
    /// Maps a reqwest failure onto the provider error kinds; the client's own connect timeout
    /// is the connect wait.
    pub(super) fn reqwest_error(&self, e: &reqwest::Error) -> ProviderError {
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
pub(super) fn error_chain(e: &dyn std::error::Error) -> String {
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
pub(super) fn map_message(
    error: ProviderError,
    f: impl FnOnce(String) -> String,
) -> Result<ProviderError, ProviderError> {
    use ProviderError as E;
    Ok(match error {
        E::ContextOverflow { message, numbers } => E::ContextOverflow {
            message: f(message),
            numbers,
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
