//! Integration tests of panto-transcript: fixture snapshots and property tests.

mod fixtures;
mod props;
