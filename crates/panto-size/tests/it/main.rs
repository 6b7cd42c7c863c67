//! Integration tests of panto-size: property tests over generated sessions.

mod examples;
mod monotonic;
mod synthetic;
