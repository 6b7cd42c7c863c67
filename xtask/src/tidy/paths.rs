//! The path check: every path a file of `docs/` names exists.
//!
//! A word is a path when it starts with a top folder of the repository (`crates/`, `docs/`,
//! `xtask/`, `examples/`, `.cargo/`) or names a Rust file (`*.rs`). A path is found relative to
//! the root, or, inside a crate's section (a third-level heading naming `crates/NAME` in backticks), relative to that
//! crate's folder or its `src/`; a bare file name (`fold.rs`) anywhere inside the section's
//! crate, or, outside any crate's section, anywhere inside any crate. The map
//! (`docs/architecture.md`) is read strictly so; the other docs, which have no crate sections,
//! may name a path from inside any crate or folder (`tests/it/main.rs`, `anthropic/cache.rs`):
//! it exists when some file or folder of a crate or of xtask ends with it. In every doc a
//! placeholder (`crates/panto-providers/src/NAME.rs`: a piece `NAME`, `PATH`, `DIR` or `FILE`) is no path; in the
//! other docs neither is a
//! word of a fenced `text` block in them (a sample of output, about someone else's project).

use std::fs;
use std::path::{Path, PathBuf};

/// The folders a path may start with.
const TOP_FOLDERS: [&str; 5] = ["crates/", "docs/", "xtask/", "examples/", ".cargo/"];

/// The paths named in the map at `doc` (relative to `root`) that do not exist, one sentence
/// each.
pub(crate) fn stale(root: &Path, doc: &str) -> Vec<String> {
    let map = doc == "docs/architecture.md";
    let mut files = Vec::new();
    if !map {
        for dir in crate_folders(root) {
            super::walk(&dir, &mut files);
        }
    }
    let Ok(text) = fs::read_to_string(root.join(doc)) else {
        return vec![format!("{doc} is missing")];
    };
    let mut problems = Vec::new();
    let mut section: Option<PathBuf> = None;
    let mut sample = false;
    for (n, line) in text.lines().enumerate() {
        if !map && line.trim_start().starts_with("```") {
            sample = !sample && line.trim_start() == "```text";
            continue;
        }
        if sample {
            continue;
        }
        if let Some(heading) = line.strip_prefix("### ") {
            let name = heading.trim().trim_matches('`').trim_end_matches('/');
            let dir = root.join(name);
            section = dir.is_dir().then_some(dir);
        } else if line.starts_with("## ") {
            section = None;
        }
        for word in words(line) {
            let anywhere = || !map && ends_some(&files, word);
            if !placeholder(word) && !exists(root, section.as_deref(), word) && !anywhere() {
                problems.push(format!(
                    "{doc}:{}: `{word}` does not exist (name the path as it is now, or drop it)",
                    n + 1
                ));
            }
        }
    }
    problems
}

/// The words of `line` that are paths.
fn words(line: &str) -> Vec<&str> {
    line.split(|c: char| !(c.is_alphanumeric() || matches!(c, '_' | '-' | '.' | '/')))
        .map(|w| w.trim_end_matches(['.', ',']))
        .filter(|w| {
            let file = w.rsplit('/').next().unwrap_or(w);
            TOP_FOLDERS.iter().any(|top| w.starts_with(top))
                || (file.ends_with(".rs") && file.len() > 3 && !file.starts_with('.'))
        })
        .collect()
}

/// Whether `word` names something that exists, as the module docs say.
fn exists(root: &Path, section: Option<&Path>, word: &str) -> bool {
    if root.join(word).exists() {
        return true;
    }
    let bare = !word.contains('/');
    match section {
        Some(dir) => {
            dir.join(word).exists()
                || dir.join("src").join(word).exists()
                || (bare && contains_file(dir, word))
        }
        None => {
            bare && crate_folders(root)
                .iter()
                .any(|dir| contains_file(dir, word))
        }
    }
}

/// Whether `word` holds a placeholder: a piece in capitals (`NAME.rs`, `panto-store-NAME/`).
fn placeholder(word: &str) -> bool {
    word.split(['/', '.', '-', '_'])
        .any(|piece| piece.len() > 1 && piece.chars().all(|c| c.is_ascii_uppercase()))
}

/// Whether some file of `files`, or a folder holding one, ends with `/word`.
fn ends_some(files: &[PathBuf], word: &str) -> bool {
    let tail = format!("/{}", word.trim_end_matches('/'));
    files.iter().any(|f| {
        let f = f.to_string_lossy();
        f.ends_with(&tail) || f.contains(&format!("{tail}/"))
    })
}

fn crate_folders(root: &Path) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = fs::read_dir(root.join("crates"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .collect();
    dirs.push(root.join("xtask"));
    dirs
}

/// Whether a file named `name` lies anywhere under `dir`.
fn contains_file(dir: &Path, name: &str) -> bool {
    let mut files = Vec::new();
    super::walk(dir, &mut files);
    files
        .iter()
        .any(|f| f.file_name().is_some_and(|n| n.to_string_lossy() == name))
}
