//! `cargo xtask deps`: the layering check.
//!
//! The pure crates (model, sizing, transcript, and the store trait) must not reach IO, async
//! runtimes or HTTP, and the crates below the provider adapters must not reach HTTP. Checked
//! on `cargo tree`, so a dependency that sneaks in transitively fails too.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};

/// Crates that do IO, run async tasks or speak a network protocol.
const IO_CRATES: &[&str] = &[
    "tokio",
    "reqwest",
    "hyper",
    "hyper-util",
    "h2",
    "http-body",
    "mio",
    "socket2",
    "async-std",
    "smol",
    "async-io",
    "futures-executor",
    "ureq",
    "curl",
    "isahc",
    "rustls",
    "native-tls",
    "openssl",
    "fs4",
    "fs2",
    "fd-lock",
    "memmap2",
    "notify",
    "tempfile",
    "wiremock",
];

/// HTTP stacks: only the provider adapters (and what is built on them) may link these.
const HTTP_CRATES: &[&str] = &[
    "reqwest",
    "hyper",
    "hyper-util",
    "h2",
    "ureq",
    "curl",
    "isahc",
];

/// (crate, forbidden set, why)
const RULES: &[(&str, &[&str], &str)] = &[
    ("panto-model", IO_CRATES, "pure: no IO, no async runtime"),
    ("panto-size", IO_CRATES, "pure: no IO, no async runtime"),
    (
        "panto-transcript",
        IO_CRATES,
        "pure: no IO, no async runtime",
    ),
    (
        "panto-provider",
        IO_CRATES,
        "the trait crate stays free of runtimes and HTTP",
    ),
    (
        "panto-store",
        IO_CRATES,
        "the store trait crate stays free of IO and runtimes",
    ),
    (
        "panto-session",
        HTTP_CRATES,
        "the file store never speaks HTTP (its file work may use tokio's blocking pool)",
    ),
    (
        "panto-store-sqlite",
        HTTP_CRATES,
        "the SQLite store never speaks HTTP (its database work may use tokio's blocking pool)",
    ),
    (
        "panto-store-postgres",
        HTTP_CRATES,
        "the PostgreSQL store speaks PostgreSQL's protocol, never HTTP",
    ),
    (
        "panto-compact",
        HTTP_CRATES,
        "orchestration uses the Provider trait, not HTTP",
    ),
];

pub(crate) fn run(root: &Path) -> Result<()> {
    let mut failures = Vec::new();
    for (krate, forbidden, why) in RULES {
        let tree = normal_deps(root, krate)?;
        failures.extend(violations(krate, forbidden, why, &tree));
        eprintln!(
            "deps: {krate}: ok against {} forbidden crates",
            forbidden.len()
        );
    }
    if !failures.is_empty() {
        bail!("layering violated:\n  {}", failures.join("\n  "));
    }
    Ok(())
}

/// The forbidden crates that `tree` (one `name version` per line, as `cargo tree --prefix none`
/// prints) contains, each as a sentence naming `krate` and the rule.
fn violations(krate: &str, forbidden: &[&str], why: &str, tree: &str) -> Vec<String> {
    let mut found: Vec<String> = tree
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| forbidden.contains(name))
        .map(|name| format!("{krate} reaches `{name}` ({why})"))
        .collect();
    found.sort();
    found.dedup();
    found
}

/// The crates `krate` depends on for its library with default features (no dev- or
/// build-dependencies, and not the test-support `proptest` feature), one per line.
fn normal_deps(root: &Path, krate: &str) -> Result<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let out = Command::new(cargo)
        .args([
            "tree",
            "--package",
            krate,
            "--edges",
            "normal",
            "--prefix",
            "none",
            "--locked",
        ])
        .current_dir(root)
        .output()
        .with_context(|| format!("could not run cargo tree for {krate}"))?;
    if !out.status.success() {
        bail!(
            "cargo tree failed for {krate}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8(out.stdout)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pure_crate_that_reaches_an_io_crate_fails() {
        let tree = "panto-model v0.1.0 (/w/crates/panto-model)\nserde v1.0.0\ntokio v1.54.1\nmio v1.2.5\ntokio v1.54.1\n";
        assert_eq!(
            violations("panto-model", IO_CRATES, "pure", tree),
            [
                "panto-model reaches `mio` (pure)",
                "panto-model reaches `tokio` (pure)"
            ]
        );
        let clean = "panto-model v0.1.0 (/w/crates/panto-model)\nserde v1.0.0\nserde_json v1.0.0\n";
        assert!(violations("panto-model", IO_CRATES, "pure", clean).is_empty());
        // HTTP stacks are caught for the orchestration crate, and a runtime for the store trait.
        assert_eq!(
            violations("panto-compact", HTTP_CRATES, "no HTTP", "reqwest v0.12.0\n").len(),
            1
        );
        assert_eq!(
            violations("panto-store", IO_CRATES, "pure", "tokio v1.0.0\n").len(),
            1
        );
    }
}
