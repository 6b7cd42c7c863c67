//! End-to-end tests of the `panto` binary: each test runs the real executable.

mod config;
mod errors;
mod fake_model;
mod faults;
mod loopback;
mod offline;
mod output;
mod safety;
mod support;
mod terminal;
mod trust;
mod windows;
