//! End-to-end tests of the `panto` binary: each test runs the real executable.

mod config;
mod errors;
mod offline;
mod support;
