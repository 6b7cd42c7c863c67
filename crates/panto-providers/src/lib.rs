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
//! `docs/providers.md`).
//!
//! The design choice to know: provider JSON never leaves this crate. Requests are rendered
//! from `panto_model` messages after one shared wire preparation (compaction block as text,
//! unanswered tool calls answered with a synthetic error result, orphan results as text, roles
//! merged to alternate), and answers are converted back to `panto_model::Message` at the edge.
//! The caller's messages are never modified.
//!
//! ```
//! use panto_provider::Provider;
//! use panto_providers::{AnthropicProvider, Config, OpenAiChatProvider};
//!
//! // A keyless local server speaking Chat Completions (llama.cpp, vLLM, Ollama, ...).
//! let local = OpenAiChatProvider::new(Config::new("http://127.0.0.1:8080/v1", ""))?;
//! assert_eq!(local.name(), "openai");
//!
//! // The key goes into a request header only; it never shows in `Debug`.
//! let key = "sk-ant-example-0123456789";
//! let anthropic = AnthropicProvider::new(Config::new("https://api.anthropic.com", key))?;
//! assert!(!format!("{anthropic:?}").contains(key));
//! # Ok::<(), panto_providers::Error>(())
//! ```

#![cfg_attr(docsrs, feature(doc_cfg))]

mod adapter;
mod anthropic;
mod classify;
mod config;
mod gemini;
mod openai_chat;
mod openai_responses;
mod prepare;
mod retry;
mod secret;
mod sse;
mod transport;

pub use anthropic::{ANTHROPIC_VERSION, AnthropicProvider};
pub use classify::{
    Classification, Protocol, Verdict, classify_response, classify_stream_error,
    error_in_success_body, explain_response, explain_stream_error, explain_success_body,
};
pub use config::{Config, DEFAULT_MAX_RESPONSE_BYTES, Error, RetryPolicy};
pub use gemini::GeminiProvider;
pub use openai_chat::{MaxTokensField, OpenAiChatProvider};
pub use openai_responses::OpenAiResponsesProvider;
pub use secret::ApiKey;

#[cfg(test)]
mod tests;
