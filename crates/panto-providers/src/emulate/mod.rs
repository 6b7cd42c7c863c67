//! Emulators of the providers' prompt caching, for tests and benchmarks (feature `emulate`):
//! each takes a request body as it arrives on the wire, enforces its provider's caching rules
//! as the provider's documentation states them (each rule cites its page), and says what the
//! request would be billed as.
//!
//! - [`AnthropicCache`]: Anthropic's explicit breakpoints ("Prompt caching",
//!   <https://platform.claude.com/docs/en/build-with-claude/prompt-caching>): at most four,
//!   never on thinking or empty text, lifetimes longest first, the 1-hour lifetime behind its
//!   beta, a prefix matched exactly up to a breakpoint, a hit looked for at most 20 blocks
//!   before it, the model's minimum cacheable length, entries that expire, and the usage
//!   fields `cache_creation_input_tokens`, `cache_read_input_tokens` and `cache_creation`.
//! - [`OpenAiCache`]: `OpenAI`'s automatic prefix caching ("Prompt caching",
//!   <https://developers.openai.com/api/docs/guides/prompt-caching>): prompts of 1,024 tokens
//!   and more, hits in 128-token steps from 1,024, routed by `prompt_cache_key`, kept in memory
//!   or 24 hours (`prompt_cache_retention`, refused where the model does not offer it), and the
//!   usage fields `prompt_tokens_details.cached_tokens` (Chat Completions) and
//!   `input_tokens_details.cached_tokens` (Responses).
//! - [`Loopback`]: an HTTP server on 127.0.0.1 that speaks the three protocols' JSON answers
//!   with these rules, a context window, a virtual clock and a scripted model, for the
//!   benchmark (`cargo xtask bench cost`).
//!
//! The emulators count tokens their own way, not panto's: a block costs a quarter of the bytes
//! of its JSON (at least one), so that a rule is checked against a count panto did not make.

mod anthropic;
mod openai;
#[cfg(test)]
mod placement;
#[cfg(test)]
mod props;
mod server;
#[cfg(test)]
mod tests;

pub use anthropic::{AnthropicCache, Breakpoint};
pub use openai::{OpenAiCache, OpenAiFlavor};
pub use server::{Loopback, LoopbackConfig, Script, Scripted, Seen};

use std::hash::{DefaultHasher, Hash, Hasher};
use std::time::Duration;

use serde_json::Value;

/// A request the emulated provider refuses: the HTTP status and the provider's message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// The HTTP status.
    pub status: u16,
    /// The provider's message.
    pub message: String,
}

impl Refusal {
    fn bad_request(message: impl Into<String>) -> Refusal {
        Refusal {
            status: 400,
            message: message.into(),
        }
    }
}

/// What one request was billed as, in the emulator's tokens.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Billed {
    /// Input neither read from nor written to the cache.
    pub input: u64,
    /// Input read from the cache.
    pub cache_read: u64,
    /// Input written to the cache with the short lifetime.
    pub cache_write: u64,
    /// Input written to the cache with the long lifetime.
    pub cache_write_long: u64,
}

impl Billed {
    /// Every input token of the request.
    pub fn total(&self) -> u64 {
        self.input + self.cache_read + self.cache_write + self.cache_write_long
    }
}

/// The emulator's token count of a JSON value: a quarter of its bytes, at least one.
pub fn tokens_of(value: &Value) -> u64 {
    (canonical(value).len() as u64 / 4).max(1)
}

/// A value as compared for a prefix match: `cache_control` left out (a marker is not part of
/// the prompt), keys in order (`serde_json` keeps them sorted).
fn canonical(value: &Value) -> String {
    fn strip(value: &Value) -> Value {
        match value {
            Value::Object(map) => Value::Object(
                map.iter()
                    .filter(|(k, _)| k.as_str() != "cache_control")
                    .map(|(k, v)| (k.clone(), strip(v)))
                    .collect(),
            ),
            Value::Array(items) => Value::Array(items.iter().map(strip).collect()),
            other => other.clone(),
        }
    }
    strip(value).to_string()
}

/// The hash of a prefix extended by one more piece.
fn chain(previous: u64, piece: &str) -> u64 {
    let mut hasher = DefaultHasher::new();
    previous.hash(&mut hasher);
    piece.hash(&mut hasher);
    hasher.finish()
}

/// A cache entry: how many tokens its prefix holds, when it expires, and its lifetime.
#[derive(Clone, Copy, Debug)]
struct Entry {
    tokens: u64,
    expires: Duration,
    lifetime: Duration,
}
