//! Adapter configuration: base URL, key, timeouts, retries, streaming; and reading it from the
//! environment.

use std::fmt;
use std::time::Duration;

use reqwest::Url;

use crate::secret::ApiKey;

/// The configuration of one adapter. Every field is independent of the model.
///
/// Built with [`Config::new`] and the `with_*` setters; the public fields stay readable and
/// writable, and new settings may be added without breaking callers.
///
/// Invariant: `Debug` output never contains the key ([`ApiKey`] redacts itself) nor the value
/// of a sensitive extra header ([`Config::with_header`]).
#[derive(Clone)]
#[non_exhaustive]
pub struct Config {
    /// Where the API lives, for example `https://api.anthropic.com` or
    /// `http://127.0.0.1:8080/v1`. See `docs/providers.md` for how a path is interpreted: a
    /// base URL whose path already names an API version (`/v1`, `/v1beta`, `/api/paas/v4`)
    /// is used as it is, one without a version gets the protocol's default version.
    pub base_url: String,
    /// The key. Empty means no credentials are sent (keyless local servers).
    pub api_key: ApiKey,
    /// The connect wait: the longest wait for a TCP (and TLS) connection. Default 10 s. A
    /// caller's client ([`Config::with_client`]) keeps its own connect timeout instead.
    pub connect_timeout: Duration,
    /// The first-byte wait: the longest wait from sending a streaming request to the head of
    /// its answer (a non-streaming answer's head comes with the whole answer, so there only
    /// `request_timeout` applies). Default 120 s.
    pub first_byte_timeout: Duration,
    /// The idle wait: the longest time between two events of a streaming answer, or two
    /// chunks of a whole one. Keep-alive comments and `ping` events do not count as events.
    /// Default 120 s.
    pub idle_timeout: Duration,
    /// The request deadline: the longest a whole request may take, every attempt and every
    /// delay between attempts included. Each other wait is cut short by it. Default 600 s.
    pub request_timeout: Duration,
    /// How transient failures are retried.
    pub retry: RetryPolicy,
    /// Whether to ask for a streaming (SSE) answer, so that text arrives as it is generated.
    pub streaming: bool,
    /// The most bytes of one answer that are read, streamed or not; a larger answer is a
    /// [`panto_provider::ProviderError::MalformedResponse`], not an allocation. Default
    /// [`DEFAULT_MAX_RESPONSE_BYTES`].
    pub max_response_bytes: u64,
    /// The caller's HTTP client, used instead of one built from this configuration.
    client: Option<reqwest::Client>,
    /// Headers sent with every request, after the protocol's own.
    headers: Vec<ExtraHeader>,
}

/// One header of [`Config::with_header`]. A sensitive value is held as an [`ApiKey`], so it
/// redacts itself the same way.
#[derive(Clone)]
pub(crate) struct ExtraHeader {
    pub(crate) name: String,
    pub(crate) value: ApiKey,
    pub(crate) sensitive: bool,
}

impl fmt::Debug for ExtraHeader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.sensitive {
            write!(f, "{}: <redacted>", self.name)
        } else {
            write!(f, "{}: {:?}", self.name, self.value.expose())
        }
    }
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key)
            .field("connect_timeout", &self.connect_timeout)
            .field("first_byte_timeout", &self.first_byte_timeout)
            .field("idle_timeout", &self.idle_timeout)
            .field("request_timeout", &self.request_timeout)
            .field("retry", &self.retry)
            .field("streaming", &self.streaming)
            .field("max_response_bytes", &self.max_response_bytes)
            .field("headers", &self.headers)
            .field("caller_client", &self.client.is_some())
            .finish()
    }
}

/// The default cap on the size of one answer: 64 MiB.
pub const DEFAULT_MAX_RESPONSE_BYTES: u64 = 64 * 1024 * 1024;

impl Config {
    /// A configuration with the default timeouts, retries and streaming on.
    pub fn new(base_url: impl Into<String>, api_key: impl Into<ApiKey>) -> Config {
        Config {
            base_url: base_url.into(),
            api_key: api_key.into(),
            connect_timeout: Duration::from_secs(10),
            first_byte_timeout: Duration::from_secs(120),
            idle_timeout: Duration::from_secs(120),
            request_timeout: Duration::from_secs(600),
            retry: RetryPolicy::default(),
            streaming: true,
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
            client: None,
            headers: Vec::new(),
        }
    }

    /// The same configuration with `streaming` set.
    pub fn with_streaming(mut self, streaming: bool) -> Config {
        self.streaming = streaming;
        self
    }

    /// The same configuration with `retry` set.
    pub fn with_retry(mut self, retry: RetryPolicy) -> Config {
        self.retry = retry;
        self
    }

    /// The same configuration with `connect_timeout` set.
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Config {
        self.connect_timeout = timeout;
        self
    }

    /// The same configuration with `first_byte_timeout` set.
    pub fn with_first_byte_timeout(mut self, timeout: Duration) -> Config {
        self.first_byte_timeout = timeout;
        self
    }

    /// The same configuration with `idle_timeout` set.
    pub fn with_idle_timeout(mut self, timeout: Duration) -> Config {
        self.idle_timeout = timeout;
        self
    }

    /// The same configuration with `request_timeout` set.
    pub fn with_request_timeout(mut self, timeout: Duration) -> Config {
        self.request_timeout = timeout;
        self
    }

    /// The same configuration with `max_response_bytes` set.
    pub fn with_max_response_bytes(mut self, bytes: u64) -> Config {
        self.max_response_bytes = bytes;
        self
    }

    /// The same configuration sending requests through `client` (its proxy, TLS roots, pool
    /// and connect timeout) instead of a client built from this configuration. The waits,
    /// the deadline, retries and the response cap still apply, since they are panto's own.
    pub fn with_client(mut self, client: reqwest::Client) -> Config {
        self.client = Some(client);
        self
    }

    /// The same configuration sending the header `name: value` with every request, after the
    /// protocol's headers (a header of the same name replaces the protocol's). A header named
    /// like a credential (`authorization`, or a name holding `auth`, `key`, `token`, `secret`,
    /// `cookie`, `password` or `session`) is sensitive: its value never shows in `Debug`
    /// output, logs or errors, and is scrubbed like the key from error messages and from the
    /// returned message. A name or value that cannot be sent is refused when the adapter is
    /// built ([`Error::InvalidHeader`]).
    pub fn with_header(mut self, name: impl Into<String>, value: impl Into<String>) -> Config {
        let name = name.into();
        let sensitive = crate::secret::is_sensitive_header(&name);
        self.headers.push(ExtraHeader {
            name,
            value: ApiKey::new(value.into()),
            sensitive,
        });
        self
    }

    /// The caller's client, when [`Config::with_client`] gave one.
    pub fn client(&self) -> Option<&reqwest::Client> {
        self.client.as_ref()
    }

    /// The names of the extra headers, in the order they were added.
    pub fn header_names(&self) -> impl Iterator<Item = &str> {
        self.headers.iter().map(|h| h.name.as_str())
    }

    pub(crate) fn extra_headers(&self) -> &[ExtraHeader] {
        &self.headers
    }
}

/// How transient failures (rate limits, 5xx, 529, refused or broken connections) are retried.
///
/// The delay before retry `n` (from 0) is the server's hint when it gave one (`retry-after-ms`,
/// `Retry-After` in seconds or as an HTTP date, or a delay the classifier read from the error
/// body), otherwise `base_delay * 2^n` with jitter (uniform in its upper half), at most
/// `max_delay`. A server that asks for a longer wait than `max_delay` is not retried at all:
/// the error is returned at once, saying when the server asked to be retried. A delay that
/// would pass the request deadline is not waited either.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RetryPolicy {
    /// Retries after the first attempt; 0 disables retrying.
    pub max_retries: u32,
    /// The delay before the first retry, doubled for each later one.
    pub base_delay: Duration,
    /// The longest single delay, and the longest wait a server may ask for and still be
    /// retried.
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> RetryPolicy {
        RetryPolicy::new(3, Duration::from_secs(1), Duration::from_secs(60))
    }
}

impl RetryPolicy {
    /// Up to `max_retries` retries, the first after `base_delay`, none longer than `max_delay`.
    pub fn new(max_retries: u32, base_delay: Duration, max_delay: Duration) -> RetryPolicy {
        RetryPolicy {
            max_retries,
            base_delay,
            max_delay,
        }
    }

    /// No retries at all.
    pub fn none() -> RetryPolicy {
        RetryPolicy::default().with_max_retries(0)
    }

    /// The same policy with `max_retries` set.
    pub fn with_max_retries(mut self, max_retries: u32) -> RetryPolicy {
        self.max_retries = max_retries;
        self
    }

    /// The same policy with `base_delay` set.
    pub fn with_base_delay(mut self, delay: Duration) -> RetryPolicy {
        self.base_delay = delay;
        self
    }

    /// The same policy with `max_delay` set.
    pub fn with_max_delay(mut self, delay: Duration) -> RetryPolicy {
        self.max_delay = delay;
        self
    }
}

/// Why an adapter could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The key's environment variable is unset or empty while the base URL is the official API.
    #[error(
        "{variable} is not set: it must hold the {provider} API key (a keyless server needs its own base URL in {base_url_variable})"
    )]
    MissingKey {
        /// The variable that should hold the key.
        variable: &'static str,
        /// The variable that sets the base URL.
        base_url_variable: &'static str,
        /// The provider, for the message.
        provider: &'static str,
    },
    /// The base URL cannot be used.
    #[error("invalid base URL `{url}`: {reason}")]
    InvalidBaseUrl {
        /// The URL, without any user info, query or fragment.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The key cannot be sent in an HTTP header (it holds a control character or non-ASCII
    /// text); the message does not repeat it.
    #[error("the API key cannot be sent: {reason}")]
    InvalidKey {
        /// What is wrong with it.
        reason: &'static str,
    },
    /// An extra header ([`Config::with_header`]) cannot be sent; the message names the header
    /// but never repeats its value.
    #[error("the header `{name}` cannot be sent: {reason}")]
    InvalidHeader {
        /// The header's name, as given.
        name: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The HTTP client could not be built (for example no TLS backend).
    #[error("could not build the HTTP client: {message}")]
    Client {
        /// What failed.
        message: String,
    },
    /// The protocol's adapter is not compiled in: its cargo feature is off.
    #[error(
        "the {provider} adapter is not compiled in (panto-providers' feature `{feature}` is off)"
    )]
    NotCompiled {
        /// The protocol's name.
        provider: &'static str,
        /// The feature that compiles it.
        feature: &'static str,
    },
}

/// The parsed base URL, without a trailing slash.
#[derive(Clone, Debug)]
pub(crate) struct BaseUrl {
    url: Url,
}

impl BaseUrl {
    /// Parses and checks a base URL.
    ///
    /// # Errors
    /// [`Error::InvalidBaseUrl`] when it is not an absolute `http`/`https` URL, or carries a
    /// query or fragment (where a key could hide).
    pub(crate) fn parse(text: &str) -> Result<BaseUrl, Error> {
        let shown = || shown_url(text);
        let url = Url::parse(text.trim()).map_err(|e| Error::InvalidBaseUrl {
            url: shown(),
            reason: e.to_string(),
        })?;
        if url.scheme() != "http" && url.scheme() != "https" {
            return Err(Error::InvalidBaseUrl {
                url: shown(),
                reason: "the scheme must be http or https".to_owned(),
            });
        }
        if url.query().is_some() || url.fragment().is_some() {
            return Err(Error::InvalidBaseUrl {
                url: shown(),
                reason: "a base URL cannot carry a query or a fragment (put the key in the key variable)"
                    .to_owned(),
            });
        }
        Ok(BaseUrl { url })
    }

    /// The host name, lowercased.
    pub(crate) fn host(&self) -> String {
        self.url.host_str().unwrap_or_default().to_ascii_lowercase()
    }

    /// The server's root: the base URL without a last path segment that names a version
    /// (`http://127.0.0.1:8080/v1` gives `http://127.0.0.1:8080`), where servers keep their own
    /// endpoints (`/props`, `/api/show`), and without a trailing slash.
    pub(crate) fn root(&self) -> String {
        let mut url = self.url.clone();
        let path = url.path().trim_end_matches('/').to_owned();
        let root = match path.rsplit_once('/') {
            Some((before, last)) if is_version_segment(last) => before.to_owned(),
            _ => path,
        };
        url.set_path(&root);
        url.as_str().trim_end_matches('/').to_owned()
    }

    /// The URL of `path` under the base URL as it is (no version added): `base/path`.
    pub(crate) fn join(&self, path: &str) -> String {
        format!(
            "{}/{}",
            self.url.as_str().trim_end_matches('/'),
            path.trim_start_matches('/')
        )
    }

    /// The endpoint URL for `tail` (like `chat/completions`): the base path, then
    /// `default_version` unless the base path already names a version, then `tail`. A base
    /// path that already ends with `tail` is used as it is.
    pub(crate) fn endpoint(&self, default_version: &str, tail: &str) -> String {
        let mut out = self.url.as_str().trim_end_matches('/').to_owned();
        let path = self.url.path().trim_end_matches('/');
        if path.ends_with(&format!("/{tail}")) {
            return out;
        }
        if !path.split('/').any(is_version_segment) {
            out.push('/');
            out.push_str(default_version);
        }
        out.push('/');
        out.push_str(tail);
        out
    }
}

/// `v1`, `v1beta`, `v4`, `v1alpha2`: a `v`, a digit, then letters and digits.
fn is_version_segment(segment: &str) -> bool {
    let mut chars = segment.chars();
    chars.next() == Some('v')
        && chars.next().is_some_and(|c| c.is_ascii_digit())
        && chars.all(|c| c.is_ascii_alphanumeric())
}

/// A URL as it may appear in an error message: scheme, host, port and path only.
fn shown_url(text: &str) -> String {
    match Url::parse(text.trim()) {
        Ok(mut url) => {
            let _ = url.set_username("");
            let _ = url.set_password(None);
            url.set_query(None);
            url.set_fragment(None);
            url.to_string()
        }
        Err(_) => text
            .split(['?', '#', '@'])
            .next()
            .unwrap_or_default()
            .to_owned(),
    }
}

/// Where an adapter finds its key and base URL, and the official API it talks to when no base
/// URL is given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Environment {
    /// The provider, as a message names it (`Anthropic`, `OpenAI`, `Gemini`).
    pub provider: &'static str,
    /// The variable that holds the key, such as `ANTHROPIC_API_KEY`.
    pub key_variable: &'static str,
    /// The variable that sets the base URL, such as `ANTHROPIC_BASE_URL`.
    pub base_url_variable: &'static str,
    /// The official API.
    pub default_base_url: &'static str,
}

impl Environment {
    /// Whether `base_url` points at the official API: the host of
    /// [`default_base_url`](Environment::default_base_url). A URL that does not parse is not it.
    /// Anywhere else is a server of the user's own (llama-server, Ollama, vLLM, a proxy), which
    /// needs no key and may be asked for its window ([`WindowProbe`](crate::WindowProbe)).
    pub fn is_official(&self, base_url: &str) -> bool {
        match (
            BaseUrl::parse(base_url),
            BaseUrl::parse(self.default_base_url),
        ) {
            (Ok(url), Ok(official)) => url.host() == official.host(),
            _ => false,
        }
    }
}

/// Builds a configuration from environment lookups.
///
/// The key may be missing only when the base URL points somewhere other than the official API
/// (a local llama.cpp, Ollama or vLLM server needs none).
///
/// # Errors
/// [`Error::MissingKey`] naming the variable, or [`Error::InvalidBaseUrl`].
pub(crate) fn config_from_lookup(
    spec: &Environment,
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<Config, Error> {
    let base_url = lookup(spec.base_url_variable)
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| spec.default_base_url.to_owned());
    BaseUrl::parse(&base_url)?;
    let key = lookup(spec.key_variable).map_or_else(ApiKey::none, ApiKey::new);
    if key.is_empty() && spec.is_official(&base_url) {
        return Err(Error::MissingKey {
            variable: spec.key_variable,
            base_url_variable: spec.base_url_variable,
            provider: spec.provider,
        });
    }
    Ok(Config::new(base_url, key))
}
