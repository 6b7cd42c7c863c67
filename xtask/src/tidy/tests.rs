//! Tests of the tidy checks: the repository passes them, and each check fails on what it is for
//! (a circle of modules, a stale path in the map) in a small repository planted for the test.
//! Also the list of adapter features `ci` checks one by one, which comes from a manifest too.

use std::fs;
use std::path::{Path, PathBuf};

use super::{check, modules, paths};

#[test]
fn tidy() {
    let problems = check(&crate::project_root());
    assert!(problems.is_empty(), "tidy:\n  {}", problems.join("\n  "));
}

/// A repository of its own in a temporary folder, removed when the test ends.
struct Planted(PathBuf);

impl Planted {
    fn new(name: &str) -> Planted {
        let dir = std::env::temp_dir().join(format!("panto-tidy-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        Planted(dir)
    }

    /// Writes `text` at `path` (relative to the repository), folders included.
    fn file(&self, path: &str, text: &str) -> &Planted {
        let path = self.0.join(path);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, text).unwrap();
        self
    }

    fn root(&self) -> &Path {
        &self.0
    }

    /// The circles of the planted crate `demo`'s library.
    fn circles(&self) -> Vec<String> {
        modules::circles(&self.0.join("crates/demo/src/lib.rs"), &self.0)
    }
}

impl Drop for Planted {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

#[test]
fn a_planted_circle_fails_the_check_and_breaking_it_passes() {
    let repo = Planted::new("circle");
    repo.file("crates/demo/src/lib.rs", "//! Demo.\nmod a;\nmod b;\nmod c;\n")
        .file("crates/demo/src/a.rs", "//! A.\nuse crate::b::B;\npub struct A(B);\n")
        .file(
            "crates/demo/src/b.rs",
            "//! B.\npub struct B;\n\nimpl B {\n    fn a(self) -> crate::a::A {\n        todo!()\n    }\n}\n",
        )
        .file("crates/demo/src/c.rs", "//! C, which uses both.\nuse crate::{a::A, b::B};\n");
    let problems = repo.circles();
    assert_eq!(problems.len(), 1, "{problems:?}");
    let problem = &problems[0];
    assert!(
        problem.starts_with(
            "crates/demo/src/lib.rs: the modules `a` and `b` use each other in a circle"
        ),
        "{problem}"
    );
    assert!(
        problem.contains("`a` uses `b` (crates/demo/src/a.rs:2: `crate::b::B`)"),
        "{problem}"
    );
    assert!(
        problem.contains("`b` uses `a` (crates/demo/src/b.rs:5: `crate::a::A`)"),
        "{problem}"
    );
    // The whole check reports it.
    repo.file("crates/demo/Cargo.toml", "[package]\nname = \"demo\"\n");
    assert!(check(repo.root()).contains(problem));

    // B no longer names A: no circle.
    repo.file("crates/demo/src/b.rs", "//! B.\npub struct B;\n");
    assert_eq!(repo.circles(), Vec::<String>::new());
}

#[test]
fn a_circle_through_a_re_export_or_a_longer_loop_is_found() {
    let repo = Planted::new("reexport");
    // `b` names `A` through the root's re-export; `a` reaches `b` through `c`.
    repo.file(
        "crates/demo/src/lib.rs",
        "//! Demo.\nmod a;\nmod b;\nmod c;\npub use a::A;\n",
    )
    .file(
        "crates/demo/src/a.rs",
        "//! A.\nuse crate::c::C;\npub struct A;\n",
    )
    .file(
        "crates/demo/src/b.rs",
        "//! B.\nuse crate::A;\npub struct B;\n",
    )
    .file(
        "crates/demo/src/c.rs",
        "//! C.\nuse super::b::B as Bee;\npub struct C;\n",
    );
    let problems = repo.circles();
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        problems[0].contains("the modules `a`, `b` and `c` use each other in a circle"),
        "{}",
        problems[0]
    );
    assert!(problems[0].contains("`b` uses `a` (crates/demo/src/b.rs:2: `crate::A`)"));
}

#[test]
fn a_circle_inside_a_folder_is_named_by_its_folder() {
    let repo = Planted::new("folder");
    repo.file("crates/demo/src/lib.rs", "//! Demo.\nmod engine;\n")
        .file(
            "crates/demo/src/engine/mod.rs",
            "//! The engine: its type here, its jobs in files.\nmod fold;\nmod ask;\npub struct Engine;\nuse fold::Fold;\n",
        )
        .file(
            "crates/demo/src/engine/fold.rs",
            "//! Fold.\nuse super::Engine;\nuse super::ask::Ask;\npub struct Fold;\n",
        )
        .file(
            "crates/demo/src/engine/ask.rs",
            "//! Ask.\npub struct Ask;\nfn f() { let _ = crate::engine::fold::Fold; }\n",
        );
    let problems = repo.circles();
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        problems[0].contains("the modules `ask` and `fold` inside `engine` use each other"),
        "{}",
        problems[0]
    );
}

#[test]
fn parents_children_tests_comments_strings_and_macros_make_no_circle() {
    let repo = Planted::new("allowed");
    repo.file(
        "crates/demo/src/lib.rs",
        "//! Demo.\nmod engine;\nmod other;\n#[cfg(test)]\nmod tests;\n",
    )
    // A folder's type used by its jobs, which it uses in turn.
    .file(
        "crates/demo/src/engine/mod.rs",
        "//! The engine.\nmod fold;\npub struct Engine;\nuse fold::Fold;\nuse crate::other::Other;\n",
    )
    .file(
        "crates/demo/src/engine/fold.rs",
        "//! Fold.\nuse super::Engine;\nuse crate::engine::Engine as Again;\npub struct Fold;\n",
    )
    // `other` names `engine` only in a comment, a string, a raw string, a macro's `$crate` and
    // its own tests.
    .file(
        "crates/demo/src/other.rs",
        concat!(
            "//! Other: see `crate::engine::Engine`.\n",
            "pub struct Other;\n",
            "// use crate::engine::Engine;\n",
            "/* crate::engine::Engine /* nested */ crate::engine */\n",
            "const S: &str = \"crate::engine::Engine\";\n",
            "const R: &str = r#\"crate::engine::\"Engine\"#;\n",
            "const C: char = '\"';\n",
            "fn life<'a>(x: &'a str) -> &'a str { x }\n",
            "macro_rules! m { () => { $crate::engine::Engine } }\n",
            "#[cfg(test)]\nmod tests {\n    use crate::engine::Engine;\n}\n",
        ),
    )
    .file(
        "crates/demo/src/tests.rs",
        "//! Tests use everything.\nuse crate::engine::Engine;\nuse crate::other::Other;\n",
    );
    assert_eq!(repo.circles(), Vec::<String>::new());
    // The same code outside a test module is a circle.
    repo.file(
        "crates/demo/src/other.rs",
        "//! Other.\npub struct Other;\nmod inner {\n    use crate::engine::Engine;\n}\n",
    );
    let problems = repo.circles();
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        problems[0].contains(
            "`other` uses `engine` (crates/demo/src/other.rs:4: `crate::engine::Engine`)"
        ),
        "{}",
        problems[0]
    );
}

#[test]
fn a_planted_stale_path_fails_the_map_check() {
    let repo = Planted::new("paths");
    repo.file("crates/demo/src/lib.rs", "//! Demo.\n")
        .file("crates/demo/src/engine/fold.rs", "//! Fold.\n")
        .file("crates/demo/tests/it/main.rs", "//! Tests.\n")
        .file("docs/guide.md", "# Guide\n")
        .file(
            "docs/architecture.md",
            concat!(
                "# Architecture\n",
                "See docs/guide.md and `docs/gone.md`.\n",
                "### `crates/demo`\n",
                "The fold (`engine/fold.rs`, also `fold.rs`), tested in `tests/it/main.rs`;\n",
                "the old `compactor.rs` and `crates/demo/src/engine.rs` are gone.\n",
                "Settings in `.panto/config.toml` and `<config dir>/panto/config.toml`.\n",
                "## Cross-cutting\n",
                "`fold.rs` is found in any crate; `tests/it/main.rs` only in a section.\n",
            ),
        );
    let problems = paths::stale(repo.root(), "docs/architecture.md");
    assert_eq!(
        problems,
        [
            "docs/architecture.md:2: `docs/gone.md` does not exist (name the path as it is now, or drop it)",
            "docs/architecture.md:5: `compactor.rs` does not exist (name the path as it is now, or drop it)",
            "docs/architecture.md:5: `crates/demo/src/engine.rs` does not exist (name the path as it is now, or drop it)",
            "docs/architecture.md:8: `tests/it/main.rs` does not exist (name the path as it is now, or drop it)",
        ]
    );
    // The whole check reports them.
    let all = check(repo.root());
    for problem in &problems {
        assert!(all.contains(problem), "{all:?}");
    }

    // Named as they are now, the map passes.
    repo.file(
        "docs/architecture.md",
        "# Architecture\n### `crates/demo`\nThe fold (`engine/fold.rs`), tested in `tests/it/main.rs`.\n",
    );
    assert_eq!(
        paths::stale(repo.root(), "docs/architecture.md"),
        Vec::<String>::new()
    );
}

#[test]
fn ci_checks_each_adapter_feature_read_from_the_manifest() {
    let features = crate::adapter_features(&crate::project_root()).unwrap();
    assert_eq!(
        features,
        ["anthropic", "openai-chat", "openai-responses", "gemini"]
    );
}

#[test]
fn a_long_file_fails_unless_it_says_why_and_tests_do_not_count() {
    use super::{LONG_FILE, long_file};
    let body = "fn f() {}\n".repeat(LONG_FILE);
    let long = format!("//! What it is for.\n{body}");
    let problem = long_file("crates/a/src/big.rs", &long).expect("a long file is a problem");
    assert!(
        problem.starts_with("crates/a/src/big.rs: 601 lines of code"),
        "{problem}"
    );
    let why = format!("//! What it is for.\n//!\n//! Why one file: one table.\n{body}");
    assert_eq!(long_file("crates/a/src/big.rs", &why), None);
    // A reason further down (not in the header) does not count.
    let later = format!("//! What it is for.\n{body}// Why one file: late.\n");
    assert!(long_file("crates/a/src/big.rs", &later).is_some());
    assert_eq!(long_file("crates/a/src/tests.rs", &long), None);
    assert_eq!(long_file("crates/a/tests/it/big.rs", &long), None);
    // The inline test module at the end does not count.
    let short = "fn f() {}\n".repeat(LONG_FILE - 10);
    let tested = format!("//! What it is for.\n{short}#[cfg(test)]\nmod tests {{\n{body}}}\n");
    assert_eq!(long_file("crates/a/src/ok.rs", &tested), None);
}

#[test]
fn a_test_module_in_a_file_of_its_own_does_not_end_the_code() {
    use super::{LONG_FILE, long_file};
    let body = "fn f() {}\n".repeat(LONG_FILE);
    // `mod tests;` declares the tests elsewhere: the code after it counts.
    let declared = format!("//! What it is for.\n#[cfg(test)]\nmod tests;\n{body}");
    let problem = long_file("crates/a/src/lib.rs", &declared).expect("its code is long");
    assert!(
        problem.starts_with("crates/a/src/lib.rs: 603 lines of code"),
        "{problem}"
    );
    // An inline one at the end does end it, also when public to the crate.
    let short = "fn f() {}\n".repeat(LONG_FILE - 10);
    let inline = format!("//! What.\n{short}#[cfg(test)]\npub(crate) mod tests {{\n{body}}}\n");
    assert_eq!(long_file("crates/a/src/lib.rs", &inline), None);
}

/// A file whose function `name` spans `lines` lines, with `above` just above it.
fn function_of(name: &str, lines: usize, above: &str) -> String {
    let body = "    let _ = \"}\"; // }\n".repeat(lines - 2);
    format!("//! A file.\n\n{above}pub(crate) fn {name}(x: [u8; 2]) -> u8 {{\n{body}}}\n")
}

/// The problems of the long functions of the file `path` (its text `text`), none known.
fn long_in(path: &str, text: &str) -> Vec<String> {
    use super::functions::{long_functions, problems};
    let found: Vec<_> = long_functions(path, text)
        .into_iter()
        .map(|span| (path.to_owned(), span))
        .collect();
    problems(&found, &[])
}

#[test]
fn a_planted_long_function_fails_unless_it_says_why() {
    use super::functions::LONG_FUNCTION;
    let path = "crates/a/src/big.rs";
    assert_eq!(
        long_in(path, &function_of("fits", LONG_FUNCTION, "")),
        Vec::<String>::new()
    );
    let long = function_of("sprawls", LONG_FUNCTION + 1, "/// Does much.\n");
    assert_eq!(
        long_in(path, &long),
        [
            "crates/a/src/big.rs:4: the function `sprawls` spans 101 lines, past 100: split it into steps, or say why above it (`// Why long: ...`)"
        ]
    );
    let why =
        "/// Does much.\n// Why long: one table of cases, read top to bottom.\n#[allow(unused)]\n";
    let said = function_of("sprawls", LONG_FUNCTION + 1, why);
    assert_eq!(long_in(path, &said), Vec::<String>::new());
    // In a test file, or in the inline test module, it does not count.
    assert_eq!(
        long_in("crates/a/src/tests.rs", &long),
        Vec::<String>::new()
    );
    let tested = format!(
        "//! A file.\n#[cfg(test)]\nmod tests {{\n{}}}\n",
        &long[12..]
    );
    assert_eq!(long_in(path, &tested), Vec::<String>::new());
    // A nested function is measured by itself, and a declaration has no body.
    let nested = format!(
        "//! A file.\ntrait T {{\n    fn declared(&self);\n}}\nfn outer() {{\n{}}}\n",
        &function_of("inner", LONG_FUNCTION + 5, "")[13..]
    );
    let problems = long_in(path, &nested);
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(
        problems[0].contains("`outer` spans 107 lines"),
        "{problems:?}"
    );
    assert!(
        problems[1].contains("`inner` spans 105 lines"),
        "{problems:?}"
    );

    // The whole check reports it.
    let repo = Planted::new("function");
    repo.file("crates/demo/src/lib.rs", &long)
        .file("crates/demo/Cargo.toml", "[package]\nname = \"demo\"\n");
    let all = check(repo.root());
    assert!(
        all.iter()
            .any(|p| p.starts_with("crates/demo/src/lib.rs:4: the function `sprawls`")),
        "{all:?}"
    );
}

#[test]
fn a_known_long_function_passes_until_it_is_split_and_then_its_line_must_go() {
    use super::functions::{LONG_FUNCTION, long_functions, problems};
    let path = "crates/a/src/big.rs";
    let known = [(path, "sprawls")];
    let found = |text: &str| -> Vec<_> {
        long_functions(path, text)
            .into_iter()
            .map(|span| (path.to_owned(), span))
            .collect()
    };
    let long = function_of("sprawls", LONG_FUNCTION + 1, "");
    assert_eq!(problems(&found(&long), &known), Vec::<String>::new());
    // Another long function in the same file is not known.
    let two = format!(
        "{long}{}",
        &function_of("grows", LONG_FUNCTION + 1, "")[12..]
    );
    let problems_two = problems(&found(&two), &known);
    assert_eq!(problems_two.len(), 1, "{problems_two:?}");
    assert!(problems_two[0].contains("`grows`"), "{problems_two:?}");
    // Split, it must leave the list.
    let split = function_of("sprawls", LONG_FUNCTION, "");
    assert_eq!(
        problems(&found(&split), &known),
        [
            "crates/a/src/big.rs: the function `sprawls` is no longer past 100 lines: drop it from KNOWN_LONG (xtask/src/tidy/functions.rs)"
        ]
    );
}

#[test]
fn a_stale_path_in_any_doc_fails_the_check() {
    let repo = Planted::new("docs");
    repo.file("crates/demo/src/lib.rs", "//! Demo.\n")
        .file("crates/demo/Cargo.toml", "[package]\nname = \"demo\"\n")
        .file("docs/architecture.md", "# Architecture\n`crates/demo`\n")
        .file(
            "docs/guide.md",
            "# Guide\nSee `crates/demo/src/lib.rs` and `crates/demo/src/gone.rs`.\n",
        );
    let all = check(repo.root());
    let problem = "docs/guide.md:2: `crates/demo/src/gone.rs` does not exist (name the path as it is now, or drop it)";
    assert!(all.iter().any(|p| p == problem), "{all:?}");
    // Named from inside the crate, a placeholder, and a sample of output pass.
    repo.file(
        "docs/guide.md",
        "# Guide\nSee `src/lib.rs`, `crates/demo/src/NAME.rs`.\n```text\n- `crates/x/src/y.rs`\n```\n",
    );
    let in_guide = |all: Vec<String>| all.into_iter().filter(|p| p.starts_with("docs/guide.md"));
    assert_eq!(in_guide(check(repo.root())).count(), 0);
    // The same sample outside its block does not.
    repo.file("docs/guide.md", "# Guide\n- `crates/x/src/y.rs`\n");
    assert_eq!(in_guide(check(repo.root())).count(), 1);
}
