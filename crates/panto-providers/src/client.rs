//! `HttpClient`: the transport panto's adapters use, for a provider of one's own: the same
//! client, key handling, retries, deadline, waits and response cap, with the caller's
//! [`Classifier`] deciding what an error answer is.

use std::fmt;

use panto_provider::ProviderError;
use reqwest::header::{AUTHORIZATION, HeaderName};
use serde_json::Value;

use crate::classify::Classifier;
use crate::config::{Config, Error};
use crate::transport::{Judge, Transport};

/// One JSON-over-HTTP exchange at a time with a server panto has no adapter for, through the
/// transport of panto's own adapters.
///
/// Built from a [`Config`] (base URL, key, [`RetryPolicy`](crate::RetryPolicy), the waits
/// and the request deadline, the response cap, extra headers, a caller's `reqwest::Client`)
/// and a [`Classifier`]. [`HttpClient::post_json`] sends the key as a bearer token (or in the
/// header [`HttpClient::with_key_header`] names), retries transient failures (429, 5xx,
/// timeouts, broken connections) with backoff that honours `Retry-After` within one deadline,
/// never retries an overflow, a quota or another 4xx answer, and classifies every error
/// answer with the classifier, so that an overflow comes back as
/// [`ProviderError::ContextOverflow`] and panto's recovery works. The key and the sensitive
/// headers never reach an error or `Debug`.
///
/// ```no_run
/// # async fn ask() -> Result<(), Box<dyn std::error::Error>> {
/// use panto_providers::{Classifier, Config, HttpClient};
///
/// let client = HttpClient::new(
///     Config::new("https://llm.example.internal/api", "key"),
///     Classifier::generic(),
/// )?;
/// let answer = client
///     .post_json("generate", &serde_json::json!({"prompt": "Hello"}))
///     .await?;
/// println!("{answer}");
/// # Ok(())
/// # }
/// ```
pub struct HttpClient {
    transport: Transport,
    classifier: Classifier,
    key_header: HeaderName,
    key_prefix: &'static str,
}

impl fmt::Debug for HttpClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpClient")
            .field("transport", &self.transport)
            .field("classifier", &self.classifier)
            .field("key_header", &self.key_header)
            .finish()
    }
}

impl HttpClient {
    /// A client for the server at `config.base_url`.
    ///
    /// # Errors
    /// [`Error::InvalidBaseUrl`], [`Error::InvalidKey`], [`Error::InvalidHeader`] or
    /// [`Error::Client`], as for panto's adapters.
    pub fn new(config: Config, classifier: Classifier) -> Result<HttpClient, Error> {
        Ok(HttpClient {
            transport: Transport::new(config)?,
            classifier,
            key_header: AUTHORIZATION,
            key_prefix: "Bearer ",
        })
    }

    /// Sends the key in header `name`, after `prefix` (`"x-api-key"` and `""`, say), instead
    /// of `Authorization: Bearer`.
    ///
    /// # Errors
    /// [`Error::InvalidHeader`] when `name` is not a valid header name.
    pub fn with_key_header(
        mut self,
        name: &str,
        prefix: &'static str,
    ) -> Result<HttpClient, Error> {
        self.key_header =
            HeaderName::from_bytes(name.as_bytes()).map_err(|_| Error::InvalidHeader {
                name: name.to_owned(),
                reason: "the name is not a valid header name",
            })?;
        self.key_prefix = prefix;
        Ok(self)
    }

    /// Posts `body` to `path` under the base URL (`generate` under `https://host/api` is
    /// `https://host/api/generate`) and returns the JSON answer.
    ///
    /// # Errors
    /// Every error answer as the classifier reads it (after the retries a transient one is
    /// given), a 2xx body that carries an error, an answer that is not JSON
    /// ([`ProviderError::MalformedResponse`]), connection failures and expired waits.
    pub async fn post_json(&self, path: &str, body: &Value) -> Result<Value, ProviderError> {
        let url = self.transport.base().join(path);
        let headers = self
            .transport
            .json_headers(&self.key_header, self.key_prefix);
        let body = serde_json::to_vec(body).map_err(|e| ProviderError::InvalidRequest {
            status: 0,
            message: format!("the request body cannot be written as JSON: {e}"),
        })?;
        let bytes = self
            .transport
            .post_retrying(&url, &headers, &body, Judge::Classifier(&self.classifier))
            .await?;
        serde_json::from_slice(&bytes).map_err(|e| ProviderError::MalformedResponse {
            message: format!("the answer is not valid JSON: {e}"),
        })
    }
}
