//! HTTP adapters that implement `panto_provider::Provider`: Anthropic Messages
//! ([`AnthropicProvider`]), `OpenAI` Chat Completions and every compatible server
//! ([`OpenAiChatProvider`]), `OpenAI` Responses ([`OpenAiResponsesProvider`]) and Google Gemini
//! ([`GeminiProvider`]).
//!
//! Each adapter is built from a [`Config`] (base URL, [`ApiKey`], timeouts, [`RetryPolicy`],
//! streaming on or off) or from the environment (`from_env`). Each streams over SSE by default
//! and passes text to the caller's event sink as it arrives; each retries transient failures
//! (429, 5xx, 529, timeouts, broken connections) with backoff that honours `Retry-After`, and
//! never retries a context overflow or another 4xx answer. What an error answer *is* (context
//! overflow or not) is decided by one classifier ([`classify_response`],
//! [`classify_stream_error`], [`error_in_success_body`]); the adapters decide *when* something
//! is an error. The classification is a table of named rules evaluated in order, first match
//! wins, with the vetoes (rate limits, quotas, output caps) placed before every rule that can
//! say "context overflow"; the `explain_*` variants also name the rule that fired (see
//! `docs/providers.md`). A provider of one's own classifies with a [`Classifier`]: the same
//! table for one protocol or for any server ([`Classifier::generic`]), extended with its own
//! [`CustomRule`]s on status, code and wording, placed so that they never outrank a veto, and
//! sends through the adapters' own transport with an [`HttpClient`] (retries, waits, the
//! deadline, the response cap and the key's scrubbing, as the adapters have them).
//!
//! The design choice to know: provider JSON never leaves this crate. Requests are rendered
//! from `panto_model` messages after one shared wire preparation (compaction block as text,
//! unanswered tool calls answered with a synthetic error result, orphan results as text, roles
//! merged to alternate), and answers are converted back to `panto_model::Message` at the edge.
//! The caller's messages are never modified.
//!
//! Each adapter is a cargo feature (`anthropic`, `openai-chat`, `openai-responses`, `gemini`,
//! all on by default), so a program that speaks one protocol compiles one; the classifier,
//! [`Config`] and [`ApiKey`] are always there. TLS is rustls with the platform's certificate
//! verifier by default (feature `rustls`), or the platform's own TLS library (feature
//! `native-tls`); [`Config::with_client`] takes a caller's `reqwest::Client` instead, and
//! [`Config::with_header`] adds headers. The options of a request (temperature, top-p,
//! reasoning effort, tool choice) travel in `panto_provider::RequestOptions`; each adapter's
//! documentation says which it sends and under which names. [`WindowProbe`] asks a local
//! server (llama-server, Ollama, vLLM, LM Studio) for the context window it serves a model
//! with, through the same transport.
//!
//! ```
//! # #[cfg(all(feature = "anthropic", feature = "openai-chat"))]
//! # fn main() -> Result<(), panto_providers::Error> {
//! use panto_provider::Provider;
//! use panto_providers::{AnthropicProvider, Config, OpenAiChatProvider};
//!
//! // A keyless local server speaking Chat Completions (llama.cpp, vLLM, Ollama, ...).
//! let local = OpenAiChatProvider::new(Config::new("http://127.0.0.1:8080/v1", ""))?;
//! assert_eq!(local.name(), "openai");
//!
//! // The key goes into a request header only; it never shows in `Debug`, and neither does
//! // the value of an extra header named like a credential.
//! let key = "sk-ant-example-0123456789";
//! let config = Config::new("https://api.anthropic.com", key)
//!     .with_header("x-gateway-token", "gw-secret-value")
//!     .with_header("x-team", "compaction");
//! let anthropic = AnthropicProvider::new(config)?;
//! let shown = format!("{anthropic:?}");
//! assert!(!shown.contains(key) && !shown.contains("gw-secret-value"));
//! assert!(shown.contains("compaction"));
//! # Ok(())
//! # }
//! # #[cfg(not(all(feature = "anthropic", feature = "openai-chat")))]
//! # fn main() {}
//! ```

#![cfg_attr(docsrs, feature(doc_cfg))]
// Helpers shared by some adapters go unused when those adapters are compiled out; the full
// build (every adapter, the default) keeps the dead-code lint.
#![cfg_attr(
    not(all(
        feature = "anthropic",
        feature = "openai-chat",
        feature = "openai-responses",
        feature = "gemini"
    )),
    allow(dead_code, unused_imports, unused_macros)
)]

mod adapter;
#[cfg(feature = "anthropic")]
mod anthropic;
mod body;
mod classify;
mod client;
mod config;
mod discover;
mod dynamic;
#[cfg(any(test, feature = "emulate"))]
#[cfg_attr(docsrs, doc(cfg(feature = "emulate")))]
pub mod emulate;
#[cfg(feature = "gemini")]
mod gemini;
#[cfg(any(feature = "anthropic", feature = "openai-responses"))]
mod native;
#[cfg(feature = "openai-chat")]
mod openai_chat;
#[cfg(feature = "openai-responses")]
mod openai_responses;
mod prepare;
mod protocol;
mod retry;
mod secret;
mod shared;
mod sse;
mod thinking;
mod transport;
pub mod wire;

#[cfg(feature = "anthropic")]
pub use anthropic::{
    ANTHROPIC_VERSION, AnthropicProvider, COMPACT_ON_DEMAND_BETA, COMPACT_THRESHOLD_BETA,
    EXTENDED_CACHE_TTL_BETA, LOOKBACK_BLOCKS, MAX_BREAKPOINTS, minimum_cacheable_tokens,
};
pub use classify::{
    Classification, Classifier, CustomRule, Verdict, classify_response, classify_stream_error,
    error_in_success_body, explain_response, explain_stream_error, explain_success_body,
};
pub use client::HttpClient;
pub use config::{Config, DEFAULT_MAX_RESPONSE_BYTES, Environment, Error, RetryPolicy};
pub use discover::{DiscoveredWindow, ServerKind, WindowProbe};
#[cfg(feature = "gemini")]
pub use gemini::GeminiProvider;
#[cfg(feature = "openai-chat")]
pub use openai_chat::{MaxTokensField, OpenAiChatProvider};
#[cfg(feature = "openai-responses")]
pub use openai_responses::OpenAiResponsesProvider;
pub use protocol::Protocol;
pub use secret::ApiKey;
pub use transport::{CAUSE, CLOSED_EARLY, cut_short};

// The README's example runs as a doctest, so that what crates.io shows compiles and passes.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
mod readme {}

#[cfg(test)]
mod tests;
