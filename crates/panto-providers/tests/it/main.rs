//! Integration tests of panto-providers, one module per feature.

mod classify;
