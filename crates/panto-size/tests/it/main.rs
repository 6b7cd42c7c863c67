//! Integration tests of panto-size: property tests over generated sessions.

// Tests fail loudly and handle their own fixture files: unwrapping, reading and writing files
// directly, and sleeping in a helper thread are what they are for.
#![allow(
    clippy::unwrap_used,
    clippy::disallowed_methods,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "test code: fails loudly, handles its own fixtures"
)]

mod examples;
mod monotonic;
mod synthetic;
mod truncation;

use panto_model::Message;

/// The total of the ruler's estimate of a request of `system` and `messages`, without tools.
fn estimate_request(system: &str, messages: &[Message]) -> u64 {
    panto_size::estimate(system, "", messages).total()
}
