//! Integration tests of the HTTP adapters against loopback servers (wiremock, or a raw TCP
//! listener where the test needs to control the bytes and the timing).
//!
//! Each protocol's module is compiled with its adapter's feature, and `protocols` runs the
//! shared scenarios against every protocol compiled in; the modules that use several adapters
//! at once need the default features.

// Tests fail loudly and handle their own fixture files: unwrapping, reading and writing files
// directly, and sleeping in a helper thread are what they are for.
#![allow(
    clippy::unwrap_used,
    clippy::disallowed_methods,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "test code: fails loudly, handles its own fixtures"
)]

#[cfg(feature = "anthropic")]
mod anthropic;
mod classify;
#[cfg(all(
    feature = "anthropic",
    feature = "openai-chat",
    feature = "openai-responses",
    feature = "gemini"
))]
mod cleared;
mod common;
#[cfg(all(
    feature = "anthropic",
    feature = "openai-chat",
    feature = "openai-responses",
    feature = "gemini"
))]
mod corpus_http;
mod custom_client;
mod discover;
mod emulate;
#[cfg(feature = "openai-chat")]
mod faults;
#[cfg(feature = "gemini")]
mod gemini;
mod kit;
#[cfg(feature = "openai-chat")]
mod limits;
#[cfg(all(
    feature = "anthropic",
    feature = "openai-chat",
    feature = "openai-responses"
))]
mod llama_cpp;
#[cfg(all(
    feature = "anthropic",
    feature = "openai-responses",
    feature = "gemini"
))]
mod mid_loop;
#[cfg(all(
    feature = "anthropic",
    feature = "openai-responses",
    feature = "gemini"
))]
mod native;
#[cfg(feature = "openai-chat")]
mod openai_chat;
#[cfg(feature = "openai-responses")]
mod openai_responses;
#[cfg(all(
    feature = "anthropic",
    feature = "openai-responses",
    feature = "gemini"
))]
mod preserved;
mod protocols;
#[cfg(all(
    feature = "anthropic",
    feature = "openai-chat",
    feature = "openai-responses",
    feature = "gemini"
))]
mod secrets;
#[cfg(feature = "openai-chat")]
mod smallwin_http;
#[cfg(feature = "openai-chat")]
mod transport;
