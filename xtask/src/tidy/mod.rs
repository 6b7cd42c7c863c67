//! `cargo xtask tidy`: repository rules that are cheaper to check than to review.
//!
//! - every Rust file opens with a `//!` line saying what it is for;
//! - `docs/architecture.md` names every crate of the workspace;
//! - every file under a crate's `prompts/` folder is pulled in by some `include_str!`;
//! - every crate's manifest inherits the workspace lints and sets what crates.io needs, and the
//!   crate carries both licence files and a README of its own;
//! - no two modules of one crate use each other in a circle (`modules`);
//! - every path a file of `docs/` names exists (`paths`);
//! - no file's code (its lines before an inline test module; `#[cfg(test)] mod tests;` is a
//!   declaration, not one) runs past [`LONG_FILE`] lines unless its header says why it stays
//!   one file (a `//!` line starting `Why one file:`): a concept larger than a screen is a
//!   folder with one file per job;
//! - no function of that code spans more than [`functions::LONG_FUNCTION`] lines unless the
//!   comments above it say why (a line starting `Why long:`): a long job is a run of small
//!   steps (`functions`; those long when the check came are listed there, and the list only
//!   shrinks).
//!
//! The same checks run as an ordinary `#[test]`, so `cargo test` catches them too; `tests.rs`
//! plants each failure (a circle, a stale path in any doc, a long file, a long function) in a
//! repository of its own and sees each fail.

mod functions;
mod lex;
mod modules;
mod paths;
#[cfg(test)]
mod tests;

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Result, bail};

pub(crate) fn run(root: &Path) -> Result<()> {
    let problems = check(root);
    if problems.is_empty() {
        eprintln!("tidy: ok");
        Ok(())
    } else {
        bail!(
            "tidy found {} problem(s):\n  {}",
            problems.len(),
            problems.join("\n  ")
        )
    }
}

/// All tidy problems, one sentence each.
pub(crate) fn check(root: &Path) -> Vec<String> {
    let mut problems = Vec::new();
    let mut rust_files = Vec::new();
    for dir in ["crates", "xtask"] {
        walk(&root.join(dir), &mut rust_files);
    }
    rust_files.retain(|p| p.extension().is_some_and(|e| e == "rs"));
    rust_files.sort();
    let mut sources = String::new();
    let mut long = Vec::new();
    for file in &rust_files {
        let text = fs::read_to_string(file).unwrap_or_default();
        if !text.trim_start().starts_with("//!") {
            problems.push(format!(
                "{}: the file must open with a `//!` line saying what it is for",
                rel(root, file)
            ));
        }
        if let Some(problem) = long_file(&rel(root, file), &text) {
            problems.push(problem);
        }
        let path = rel(root, file);
        long.extend(
            functions::long_functions(&path, &text)
                .into_iter()
                .map(|span| (path.clone(), span)),
        );
        sources.push_str(&text);
    }
    problems.extend(functions::problems(&long, &known_long(root)));

    let architecture = fs::read_to_string(root.join("docs/architecture.md")).unwrap_or_default();
    for krate in crate_names(root) {
        if !architecture.contains(&krate) {
            problems.push(format!(
                "docs/architecture.md does not name the crate `{krate}`"
            ));
        }
        let manifest = root.join("crates").join(&krate).join("Cargo.toml");
        let text = fs::read_to_string(&manifest).unwrap_or_default();
        if !text.contains("[lints]\nworkspace = true") {
            problems.push(format!(
                "crates/{krate}/Cargo.toml: add `[lints] workspace = true`"
            ));
        }
        // What crates.io shows and needs: every crate is published.
        for key in PACKAGE_KEYS {
            if !text.lines().any(|l| l.starts_with(key)) {
                problems.push(format!("crates/{krate}/Cargo.toml: add `{key}`"));
            }
        }
        // crates.io shows each crate's own README: what it is for and a short example.
        if !text.lines().any(|l| l == "readme = \"README.md\"")
            || !root.join("crates").join(&krate).join("README.md").is_file()
        {
            problems.push(format!(
                "crates/{krate}: add a README.md (what the crate is for, a short example) and `readme = \"README.md\"` to its manifest"
            ));
        }
        for licence in ["LICENSE-MIT", "LICENSE-APACHE"] {
            if !root.join("crates").join(&krate).join(licence).is_file() {
                problems.push(format!(
                    "crates/{krate}/{licence} is missing (a link to the one at the root)"
                ));
            }
        }
    }

    // Prompts ship inside the crate that embeds them, so that its package builds alone.
    let mut prompts = Vec::new();
    for krate in crate_names(root) {
        walk(
            &root.join("crates").join(krate).join("prompts"),
            &mut prompts,
        );
    }
    for prompt in prompts {
        let name = prompt
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .to_string();
        if !sources.contains(&format!("prompts/{name}\")")) {
            problems.push(format!(
                "{} is not pulled in by any include_str!(\"../prompts/{name}\")",
                rel(root, &prompt)
            ));
        }
    }
    problems.extend(circles(root));
    problems.extend(paths::stale(root, "docs/architecture.md"));
    for doc in docs(root) {
        if doc != "docs/architecture.md" {
            problems.extend(paths::stale(root, &doc));
        }
    }
    problems
}

/// The known long functions ([`functions::KNOWN_LONG`]) of the repository at `root`: all of them
/// for this repository, none for one planted by a test.
fn known_long(root: &Path) -> Vec<(&'static str, &'static str)> {
    let planted = !root.join("xtask/src/tidy/functions.rs").is_file();
    if planted {
        Vec::new()
    } else {
        functions::KNOWN_LONG.to_vec()
    }
}

/// The Markdown files under `docs/`, relative to `root`, sorted.
fn docs(root: &Path) -> Vec<String> {
    let mut files = Vec::new();
    walk(&root.join("docs"), &mut files);
    let mut docs: Vec<String> = files
        .iter()
        .filter(|f| f.extension().is_some_and(|e| e == "md"))
        .map(|f| rel(root, f))
        .collect();
    docs.sort();
    docs
}

/// The most lines of code (tests aside) a file holds before it must say why it stays one.
pub(crate) const LONG_FILE: usize = 600;

/// The problem with `text` (the file at `path`) when it is a long file that does not say why it
/// stays one. Test files (`tests.rs`, anything under a `tests/` folder) and the inline test
/// module at the end of a file do not count.
pub(crate) fn long_file(path: &str, text: &str) -> Option<String> {
    if functions::is_test_file(path) {
        return None;
    }
    let code = functions::code_lines(text);
    let says_why = text.lines().take_while(|l| l.starts_with("//!")).any(|l| {
        l.trim_start_matches("//!")
            .trim_start()
            .starts_with("Why one file:")
    });
    (code > LONG_FILE && !says_why).then(|| {
        format!(
            "{path}: {code} lines of code, past {LONG_FILE}: make the concept a folder with one file per job, or say in its header why it stays one (`//! Why one file: ...`)"
        )
    })
}

/// The module circles of every crate of the repository: each library, binary, integration-test
/// binary and example of the packages under `crates/` and of xtask.
fn circles(root: &Path) -> Vec<String> {
    let mut packages: Vec<PathBuf> = crate_names(root)
        .into_iter()
        .map(|name| root.join("crates").join(name))
        .collect();
    packages.push(root.join("xtask"));
    packages
        .iter()
        .flat_map(|dir| modules::crate_roots(dir))
        .flat_map(|file| modules::circles(&file, root))
        .collect()
}

/// The package keys every crate's manifest sets (itself or from the workspace).
const PACKAGE_KEYS: [&str; 7] = [
    "description",
    "license",
    "repository",
    "readme",
    "keywords",
    "categories",
    "rust-version",
];

fn crate_names(root: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(root.join("crates"))
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().join("Cargo.toml").exists())
        .map(|e| e.file_name().to_string_lossy().to_string())
        .collect();
    names.sort();
    names
}

pub(crate) fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        if name == "target" || name.to_string_lossy().starts_with('.') {
            continue;
        }
        if path.is_dir() {
            walk(&path, out);
        } else {
            out.push(path);
        }
    }
}

fn rel(root: &Path, p: &Path) -> String {
    p.strip_prefix(root).unwrap_or(p).display().to_string()
}
