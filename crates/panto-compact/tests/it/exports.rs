//! The crate root names every type the crate's docs use (issue 39, point 7): an agent that
//! depends on panto-compact alone reaches each of them without naming a lower crate.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use panto_compact::{
    CacheMode, CacheTtl, CompactRun, Heuristic, IdSource, PromptCache, SequentialIds, Sizer,
    Trigger, Truncation, TurnTranscript, UniqueIds, UsageSizer, copy_session,
};

/// The names a doc comment of the crate writes in backticks that start with a capital
/// letter: `Trigger`, a link to `UsageSizer`, the type of `Trigger::Other`.
fn doc_names(dir: &Path, into: &mut BTreeSet<String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            doc_names(&path, into);
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        for line in text.lines() {
            let line = line.trim_start();
            if !(line.starts_with("///") || line.starts_with("//!")) {
                continue;
            }
            for piece in line.split('`').skip(1).step_by(2) {
                let name: String = piece
                    .trim_start_matches('[')
                    .chars()
                    .take_while(char::is_ascii_alphanumeric)
                    .collect();
                if name.starts_with(|c: char| c.is_ascii_uppercase()) && name.len() > 2 {
                    into.insert(name);
                }
            }
        }
    }
}

/// The public types (structs, enums, traits) declared in the library crates below
/// panto-compact, which an agent would otherwise have to name.
fn lower_types(root: &Path) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for krate in [
        "panto-model",
        "panto-size",
        "panto-transcript",
        "panto-provider",
        "panto-store",
    ] {
        let mut stack = vec![root.join(krate).join("src")];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    stack.push(path);
                    continue;
                }
                let text = std::fs::read_to_string(&path).unwrap();
                for kind in ["pub struct ", "pub enum ", "pub trait "] {
                    for piece in text.split(kind).skip(1) {
                        let name: String = piece
                            .chars()
                            .take_while(char::is_ascii_alphanumeric)
                            .collect();
                        found.insert(name);
                    }
                }
            }
        }
    }
    found
}

#[test]
fn every_lower_type_the_docs_name_is_exported_at_the_root() {
    let here = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut named = BTreeSet::new();
    doc_names(&here.join("src"), &mut named);
    let lower = lower_types(here.parent().unwrap());
    let lib = std::fs::read_to_string(here.join("src/lib.rs")).unwrap();
    // The names of the `pub use` blocks of lib.rs.
    let mut exported = BTreeSet::new();
    for block in lib.split("pub use ").skip(1) {
        let block = &block[..block.find(';').unwrap()];
        for word in block.split(|c: char| !c.is_ascii_alphanumeric() && c != '_') {
            exported.insert(word.to_owned());
        }
    }
    let missing: Vec<&String> = named
        .iter()
        .filter(|n| lower.contains(*n) && !exported.contains(*n))
        .collect();
    assert!(
        missing.is_empty(),
        "panto-compact's docs name these types of a lower crate that its root does not export: {missing:?}"
    );
    // The check reads what it should: the root does export names from every lower crate.
    for name in [
        "Trigger",
        "PromptCache",
        "UsageSizer",
        "TurnTranscript",
        "Store",
    ] {
        assert!(named.contains(name) || exported.contains(name), "{name}");
        assert!(lower.contains(name), "{name}");
    }
}

/// The exported names are usable as the docs use them.
#[test]
fn the_types_the_docs_use_are_reachable_from_the_root() {
    let run = CompactRun::manual(None).with_trigger(Trigger::Other("nightly".into()));
    assert_eq!(run.trigger, Trigger::Other("nightly".into()));
    let ids = SequentialIds::default();
    assert!(
        !ids.next_id(panto_compact::model::IdKind::Message)
            .is_empty()
    );
    assert!(
        !UniqueIds
            .next_id(panto_compact::model::IdKind::Compaction)
            .is_empty()
    );
    let cache = PromptCache::default();
    let _: (CacheMode, CacheTtl) = (cache.mode, cache.ttl);
    let sizes = UsageSizer::default().message_sizes(&[panto_compact::Message::user_text("hi")]);
    assert_eq!(sizes.len(), 1);
    assert!(Heuristic.text("hello world") > 0);
    let _: Option<Truncation> = None;
    let _: Option<TurnTranscript> = None;
    let _ = copy_session::<panto_compact::MemoryStore, panto_compact::MemoryStore>;
}
