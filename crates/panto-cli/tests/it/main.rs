//! End-to-end tests of the `panto` binary: each test runs the real executable.

// Tests fail loudly and handle their own fixture files: unwrapping, reading and writing files
// directly, and sleeping in a helper thread are what they are for.
#![allow(
    clippy::unwrap_used,
    clippy::disallowed_methods,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "test code: fails loudly, handles its own fixtures"
)]

mod ahead;
mod config;
mod cost;
mod errors;
mod everyday;
mod fake_model;
mod faults;
mod hints;
mod keyboard;
mod loopback;
mod messages;
mod native;
mod offline;
mod output;
mod raw_http;
mod recall;
mod region;
mod ruler;
mod safety;
mod store_checks;
mod store_faults;
mod stores;
mod support;
mod terminal;
mod trust;
mod widths;
mod windows;
mod writers;
