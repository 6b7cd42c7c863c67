//! Integration tests of the HTTP adapters against loopback servers (wiremock, or a raw TCP
//! listener where the test needs to control the bytes and the timing).

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
