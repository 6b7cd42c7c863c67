//! Placeholder: the `panto` binary is filled by a later issue.

fn main() {}
