//! Property tests of the model: round trip, turns, replay, validation, robustness.

// Tests fail loudly and handle their own fixture files: unwrapping, reading and writing files
// directly, and sleeping in a helper thread are what they are for.
#![allow(
    clippy::unwrap_used,
    clippy::disallowed_methods,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "test code: fails loudly, handles its own fixtures"
)]

mod build;
mod cost;
mod decode;
mod native;
mod replay;
mod roundtrip;
mod turns;
mod validate;
