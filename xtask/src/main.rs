//! Project automation: `cargo xtask ci | tidy | deps | bench | calibrate | e2e | quality`.
//!
//! One small binary with subcommands and few dependencies, run through the `xtask` alias in
//! `.cargo/config.toml`. `bench`, `calibrate`, `e2e` and `quality` sit behind cargo features of
//! the same names, so that `tidy`, `deps` and `ci` compile without the product crates; when a
//! command's feature is off, xtask re-runs itself with it on (`forward`).

#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "xtask's reports are its output"
)]

#[cfg(feature = "bench")]
mod bench;
#[cfg(feature = "calibrate")]
mod calibrate;
mod deps;
#[cfg(feature = "e2e")]
mod e2e;
#[cfg(feature = "quality")]
mod quality;
// The Markdown tables of every command that prints one.
#[cfg(any(
    feature = "bench",
    feature = "calibrate",
    feature = "e2e",
    feature = "quality"
))]
mod table;
mod tidy;

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

const USAGE: &str = "\
usage: cargo xtask <command>

commands:
  ci     fmt check, clippy -D warnings, tests, rustdoc -D warnings, cargo package (every crate
         builds from its packaged form), tidy, deps, quality, quality --pressure, quality
         --recall, quality --strategies --no-huge (in that order)
  package  the ci step cargo package alone: every crate built from its packaged form, after
         forgetting an earlier run's packages, builds and unpacked copies
  tidy   file headers, docs naming every crate, prompts referenced, no module circle, every
         path docs/architecture.md names exists
  deps   the pure crates must not reach IO, async runtimes or HTTP
  bench  [SECTION...] [--quick] [--keep]  measurements as Markdown tables (release build);
         sections: scale, memory, session, stores, process (docs/benchmarks.md; bench --help)
  calibrate  the sizing heuristic against real sessions (PANTO_CALIBRATE_SESSIONS)
  e2e    [--provider NAME...] [--scenario NAME...] [--build-only]  panto against a real
         llama-server (docs/providers.md)
  quality  [PANTO ARGS...]  facts kept by summaries of the real sessions (offline by default,
         else `panto compact` with these arguments, e.g. --provider openai --model NAME)
  quality --pressure  facts kept through overflow compactions at windows of 4k, 8k and 16k
         tokens, against a loopback model that enforces the window (docs/compaction.md)
  quality --recall [--list] [--closed-book]  a needle exam: exact strings of the summarized
         part found in the effective context after an offline compaction and by one `panto
         recall`, in every store (docs/compaction.md; --closed-book skips the recall calls)
  quality --strategies [--no-huge]  summary, clear and tiered over five chained compactions:
         closed-book needles at equal retained tokens, model requests and tokens per
         compaction, wall time, and a 5 MB tool result at a 4k window (release build)
";

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let root = project_root();
    match args.first().map(String::as_str) {
        Some("ci") => ci(&root),
        Some("package") => package(&root),
        Some("tidy") => tidy::run(&root),
        Some("deps") => deps::run(&root),
        #[cfg(feature = "bench")]
        Some("bench") => bench::run(&root, &args[1..]),
        #[cfg(not(feature = "bench"))]
        Some("bench") => forward(&root, "bench", &args[1..]),
        #[cfg(feature = "calibrate")]
        Some("calibrate") => calibrate::run(&root),
        #[cfg(not(feature = "calibrate"))]
        Some("calibrate") => forward(&root, "calibrate", &args[1..]),
        #[cfg(feature = "e2e")]
        Some("e2e") => e2e::run(&root, &args[1..]),
        #[cfg(not(feature = "e2e"))]
        Some("e2e") => forward(&root, "e2e", &args[1..]),
        #[cfg(feature = "quality")]
        Some("quality") => quality::run(&root, &args[1..]),
        #[cfg(not(feature = "quality"))]
        Some("quality") => forward(&root, "quality", &args[1..]),
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

/// The environment variable a forwarded run carries: the command and profile it was forwarded
/// with, so that a build still lacking the feature fails instead of forwarding in a loop. (A
/// forwarded debug `bench` re-runs itself as a release build without the feature, which
/// forwards once more, as release.)
#[cfg(not(all(
    feature = "bench",
    feature = "calibrate",
    feature = "e2e",
    feature = "quality"
)))]
const FORWARDED_ENV: &str = "PANTO_XTASK_FORWARDED";

/// Runs `cargo xtask <command> <args>` again as `cargo run --package xtask --features <command>`
/// (with `--release` when this is a release build), for a command this build was compiled
/// without. Exits with the child's status, so a failure is reported once, by the child.
#[cfg(not(all(
    feature = "bench",
    feature = "calibrate",
    feature = "e2e",
    feature = "quality"
)))]
fn forward(root: &Path, command: &str, args: &[String]) -> Result<()> {
    let release = !cfg!(debug_assertions);
    let signature = format!("{command} {}", if release { "release" } else { "debug" });
    if std::env::var_os(FORWARDED_ENV).is_some_and(|s| s == signature.as_str()) {
        bail!(
            "xtask was re-run with `--features {command}` and still lacks the `{command}` command"
        );
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let mut cmd = Command::new(cargo);
    cmd.args(["run", "--package", "xtask", "--features", command]);
    if release {
        cmd.arg("--release");
    }
    cmd.arg("--")
        .arg(command)
        .args(args)
        .current_dir(root)
        .env(FORWARDED_ENV, &signature);
    let status = cmd
        .status()
        .with_context(|| format!("could not run cargo for `xtask {command}`"))?;
    if !status.success() {
        std::process::exit(status.code().unwrap_or(1));
    }
    Ok(())
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
            "--features",
            "xtask/full",
            "--",
            "-D",
            "warnings",
        ],
        &[],
    )?;
    // Each adapter of panto-providers compiles alone (and the shared core with none), so a
    // user who enables one feature gets a crate that builds.
    let mut features = vec![String::new()];
    features.extend(adapter_features(root)?);
    for feature in &features {
        let feature = feature.as_str();
        let mut args = vec![
            "check",
            "-p",
            "panto-providers",
            "--no-default-features",
            "--locked",
        ];
        if !feature.is_empty() {
            args.extend(["--features", feature]);
        }
        let name = format!("features [{feature}]");
        step(root, &name, &args, &[])?;
    }
    step(
        root,
        "test",
        &[
            "test",
            "--workspace",
            "--locked",
            "--features",
            "xtask/full",
        ],
        &[("INSTA_UPDATE", "no")],
    )?;
    step(
        root,
        "doc",
        &[
            "doc",
            "--workspace",
            "--no-deps",
            "--locked",
            "--features",
            "xtask/full",
        ],
        &[("RUSTDOCFLAGS", "-D warnings")],
    )?;
    // Every published crate must build from its packaged form (a prompt outside the crate, a
    // path dependency without a version, a missing file would all pass the steps above).
    // `--workspace` packages them together, so one crate may depend on another unpublished one;
    // xtask is never published. `--allow-dirty` lets a contributor run ci before committing; on
    // a clean clone it changes nothing.
    package(root)?;
    eprintln!("==> tidy");
    tidy::run(root)?;
    eprintln!("==> deps");
    deps::run(root)?;
    eprintln!("==> quality");
    quality(root, &[])?;
    eprintln!("==> quality --pressure");
    quality(root, &["--pressure".to_owned()])?;
    eprintln!("==> quality --recall");
    quality(root, &["--recall".to_owned()])?;
    eprintln!("==> quality --strategies --no-huge");
    quality(root, &["--strategies".to_owned(), "--no-huge".to_owned()])?;
    eprintln!("ci: all steps passed");
    Ok(())
}

/// The adapter features of panto-providers: the features of its manifest that enable nothing
/// else (`anthropic = []`), one per protocol.
fn adapter_features(root: &Path) -> Result<Vec<String>> {
    let manifest = std::fs::read_to_string(root.join("crates/panto-providers/Cargo.toml"))?;
    let section = manifest
        .split("\n[features]\n")
        .nth(1)
        .context("crates/panto-providers/Cargo.toml has no [features]")?;
    let features: Vec<String> = section
        .lines()
        .take_while(|l| !l.starts_with('['))
        .filter_map(|l| l.strip_suffix(" = []"))
        .map(str::to_owned)
        .collect();
    if features.is_empty() {
        bail!("crates/panto-providers/Cargo.toml names no adapter feature (`NAME = []`)");
    }
    Ok(features)
}

/// A `quality` step of ci, in this process when the feature is on.
#[cfg(feature = "quality")]
fn quality(root: &Path, args: &[String]) -> Result<()> {
    quality::run(root, args)
}

/// A `quality` step of ci, through `forward` when the feature is off (the test step has
/// built what it needs by then).
#[cfg(not(feature = "quality"))]
fn quality(root: &Path, args: &[String]) -> Result<()> {
    forward(root, "quality", args)
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

/// `cargo package` of every published crate, each verified by building it from its packaged
/// form, after forgetting what an earlier run packaged ([`forget_packaged`]).
fn package(root: &Path) -> Result<()> {
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
            "--target-dir",
            PACKAGE_TARGET,
        ],
        &[],
    )
}

/// The target folder of `cargo package`'s verification builds (see [`forget_packaged`]).
const PACKAGE_TARGET: &str = "target/package-verify";

/// Removes what an earlier `cargo package` left behind: its `package` folder (the `.crate`
/// files and the temporary registry; `target/package` from before the verification builds had
/// a folder of their own) and cargo's unpacked copies of the workspace crates taken from that
/// registry. Cargo reuses an unpacked copy of the same name and version, so without this a
/// second run verifies against the sources of the first (measured: a constant added to
/// panto-store and used by panto-store-sqlite, then renamed in both, failed the second run's
/// verification with E0425 when the copies were kept, and passed when they were removed).
fn forget_packaged(root: &Path) -> Result<()> {
    for package in [
        root.join("target/package"),
        root.join(PACKAGE_TARGET).join("package"),
    ] {
        if package.exists() {
            std::fs::remove_dir_all(&package)
                .with_context(|| format!("could not remove {}", package.display()))?;
        }
    }
    // The verification builds go to a target folder of their own, where every panto crate is
    // a copy from the temporary registry. Cargo never checks a registry crate's sources again,
    // so an earlier run's builds of them (same name, version and registry) would be reused
    // with the old code: they go; the other dependencies stay built.
    for kind in ["deps", ".fingerprint", "build"] {
        let dir = root.join(PACKAGE_TARGET).join("debug").join(kind);
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with("panto-")
                || name.starts_with("panto_")
                || name.starts_with("libpanto_")
            {
                let path = entry.path();
                let removed = if path.is_dir() {
                    std::fs::remove_dir_all(&path)
                } else {
                    std::fs::remove_file(&path)
                };
                removed.with_context(|| format!("could not remove {}", path.display()))?;
            }
        }
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
