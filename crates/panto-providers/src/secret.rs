//! The API key type: a string that never shows itself in `Debug` output or messages.

use std::fmt;

/// An API key. Its `Debug` prints `ApiKey(<redacted>)` (or `ApiKey(<empty>)`), it has no
/// `Display`, and the adapters only ever put it into a request header.
///
/// An empty key means "send no credentials", for keyless local servers.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ApiKey(String);

impl ApiKey {
    /// Wraps a key. Surrounding whitespace (a trailing newline from a file) is trimmed.
    pub fn new(key: impl Into<String>) -> ApiKey {
        let key = key.into();
        let trimmed = key.trim();
        if trimmed.len() == key.len() {
            ApiKey(key)
        } else {
            ApiKey(trimmed.to_owned())
        }
    }

    /// No key: requests carry no credentials.
    pub fn none() -> ApiKey {
        ApiKey(String::new())
    }

    /// Whether there is no key.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The key itself, for the request header. Crate-private so it cannot leak by accident.
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }

    /// `text` with every occurrence of the key replaced by `<redacted>`.
    ///
    /// Servers sometimes echo the key they were sent (`incorrect API key provided: ...`); every
    /// message the adapters return passes through here.
    pub(crate) fn scrub(&self, text: &str) -> String {
        if self.0.len() < 4 || !text.contains(&self.0) {
            text.to_owned()
        } else {
            text.replace(&self.0, "<redacted>")
        }
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            f.write_str("ApiKey(<empty>)")
        } else {
            f.write_str("ApiKey(<redacted>)")
        }
    }
}

impl From<String> for ApiKey {
    fn from(key: String) -> ApiKey {
        ApiKey::new(key)
    }
}

impl From<&str> for ApiKey {
    fn from(key: &str) -> ApiKey {
        ApiKey::new(key)
    }
}
