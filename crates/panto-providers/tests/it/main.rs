//! Integration tests of the HTTP adapters against loopback servers (wiremock, or a raw TCP
//! listener where the test needs to control the bytes and the timing).

// Tests fail loudly and handle their own fixture files: unwrapping, reading and writing files
// directly, and sleeping in a helper thread are what they are for.
#![allow(
    clippy::unwrap_used,
    clippy::disallowed_methods,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "test code: fails loudly, handles its own fixtures"
)]

mod anthropic;
mod classify;
mod common;
mod corpus_http;
mod faults;
mod gemini;
mod limits;
mod llama_cpp;
mod openai_chat;
mod openai_responses;
mod secrets;
mod transport;
