//! Project automation: `cargo xtask ci | tidy | deps | bench | calibrate | e2e | quality`.
//!
//! One small binary with subcommands and few dependencies, run through the `xtask` alias in
//! `.cargo/config.toml`.

mod bench;
mod calibrate;
mod deps;
mod e2e;
mod quality;
mod tidy;

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

const USAGE: &str = "\
usage: cargo xtask <command>

commands:
  ci     fmt check, clippy -D warnings, tests, rustdoc -D warnings, cargo package (every crate
         builds from its packaged form), tidy, deps, quality (in that order)
  tidy   file headers, docs naming every crate, prompts referenced
  deps   the pure crates must not reach IO, async runtimes or HTTP
  bench  [SECTION...] [--quick] [--keep]  measurements as Markdown tables (release build);
         sections: scale, memory, session, process (docs/benchmarks.md; bench --help)
  calibrate  the sizing heuristic against real sessions (PANTO_CALIBRATE_SESSIONS)
  e2e    [--provider NAME...] [--build-only]  panto against a real llama-server (docs/providers.md)
  quality  [PANTO ARGS...]  facts kept by summaries of the real sessions (offline by default,
         else `panto compact` with these arguments, e.g. --provider openai --model NAME)
";

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let root = project_root();
    match args.first().map(String::as_str) {
        Some("ci") => ci(&root),
        Some("tidy") => tidy::run(&root),
        Some("deps") => deps::run(&root),
        Some("bench") => bench::run(&root, &args[1..]),
        Some("calibrate") => calibrate::run(&root),
        Some("e2e") => e2e::run(&root, &args[1..]),
        Some("quality") => quality::run(&root, &args[1..]),
        Some("help" | "--help" | "-h") | None => {
            print!("{USAGE}");
            Ok(())
        }
        Some(other) => bail!("unknown command `{other}`\n\n{USAGE}"),
    }
}

/// The workspace root (the parent of this crate's folder).
pub fn project_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives one level below the root")
        .to_path_buf()
}

fn ci(root: &Path) -> Result<()> {
    step(root, "fmt", &["fmt", "--all", "--check"], &[])?;
    step(
        root,
        "clippy",
        &[
            "clippy",
            "--workspace",
            "--all-targets",
            "--locked",
            "--",
            "-D",
            "warnings",
        ],
        &[],
    )?;
    step(
        root,
        "test",
        &["test", "--workspace", "--locked"],
        &[("INSTA_UPDATE", "no")],
    )?;
    step(
        root,
        "doc",
        &["doc", "--workspace", "--no-deps", "--locked"],
        &[("RUSTDOCFLAGS", "-D warnings")],
    )?;
    // Every published crate must build from its packaged form (a prompt outside the crate, a
    // path dependency without a version, a missing file would all pass the steps above).
    // `--workspace` packages them together, so one crate may depend on another unpublished one;
    // xtask is never published. `--allow-dirty` lets a contributor run ci before committing; on
    // a clean clone it changes nothing.
    forget_packaged(root)?;
    step(
        root,
        "package",
        &[
            "package",
            "--workspace",
            "--exclude",
            "xtask",
            "--locked",
            "--allow-dirty",
        ],
        &[],
    )?;
    eprintln!("==> tidy");
    tidy::run(root)?;
    eprintln!("==> deps");
    deps::run(root)?;
    eprintln!("==> quality");
    quality::run(root, &[])?;
    eprintln!("ci: all steps passed");
    Ok(())
}

fn step(root: &Path, name: &str, args: &[&str], env: &[(&str, &str)]) -> Result<()> {
    eprintln!("==> {name}: cargo {}", args.join(" "));
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let mut cmd = Command::new(cargo);
    cmd.args(args).current_dir(root);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let status = cmd
        .status()
        .with_context(|| format!("could not run cargo for step {name}"))?;
    if !status.success() {
        bail!("step `{name}` failed ({status})");
    }
    Ok(())
}

/// Removes what an earlier `cargo package` left behind: `target/package` (its temporary
/// registry) and cargo's unpacked copies of the workspace crates taken from that registry.
/// Cargo reuses an unpacked copy of the same name and version, so without this a second run
/// verifies against the sources of the first.
fn forget_packaged(root: &Path) -> Result<()> {
    let package = root.join("target/package");
    if package.exists() {
        std::fs::remove_dir_all(&package)
            .with_context(|| format!("could not remove {}", package.display()))?;
    }
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")));
    let Some(sources) = home.map(|h| h.join("registry/src")) else {
        return Ok(());
    };
    let version = workspace_version(root)?;
    let members: Vec<String> = std::fs::read_dir(root.join("crates"))?
        .flatten()
        .map(|e| format!("{}-{version}", e.file_name().to_string_lossy()))
        .collect();
    // Only the temporary registries: crates.io's unpacked sources stay.
    for registry in std::fs::read_dir(&sources).into_iter().flatten().flatten() {
        if registry.file_name().to_string_lossy().starts_with("index.") {
            continue;
        }
        for member in &members {
            let copy = registry.path().join(member);
            if copy.exists() {
                std::fs::remove_dir_all(&copy)
                    .with_context(|| format!("could not remove {}", copy.display()))?;
            }
        }
    }
    Ok(())
}

/// The `version` of `[workspace.package]` in the root manifest.
fn workspace_version(root: &Path) -> Result<String> {
    let manifest = std::fs::read_to_string(root.join("Cargo.toml"))?;
    manifest
        .split("[workspace.package]")
        .nth(1)
        .and_then(|section| section.lines().find_map(|l| l.strip_prefix("version = ")))
        .map(|v| v.trim().trim_matches('"').to_owned())
        .context("the root Cargo.toml has no [workspace.package] version")
}
