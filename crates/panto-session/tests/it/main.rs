//! Integration tests of the session store: appends, loading, crash cuts, concurrent writers,
//! mutated files and the exact error messages.

// Tests fail loudly and handle their own fixture files: unwrapping, reading and writing files
// directly, and sleeping in a helper thread are what they are for.
#![allow(
    clippy::unwrap_used,
    clippy::disallowed_methods,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "test code: fails loudly, handles its own fixtures"
)]

mod answers;
mod append;
mod concurrent;
mod crash;
mod errors;
mod fetch;
mod foreign;
mod links;
mod load;
mod mutate;
mod recall;
mod store;
mod tail;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use panto_model::{
    COPIES_MARKED, CompactionEntry, EffectiveContext, Entry, KEPT_BY, Message, SequentialIds,
    UnknownEntry, replay,
};
use panto_session::{Session, SessionOptions};
use serde_json::json;

/// Options for tests: no fsync, deterministic ids.
pub fn opts() -> SessionOptions {
    SessionOptions::default()
        .fsync(false)
        .ids(Arc::new(SequentialIds::new()))
}

/// A fresh temporary directory and the path of a session file inside it.
pub fn temp_session() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.jsonl");
    (dir, path)
}

/// Writes raw bytes as a session file and opens it.
pub fn session_with(path: &Path, bytes: &[u8]) -> Session {
    std::fs::write(path, bytes).unwrap();
    Session::open(path, opts()).unwrap()
}

/// A user message with one text block.
pub fn user(text: &str) -> Entry {
    Entry::Message(Message::user_text(text))
}

/// An entry of a type panto does not know.
pub fn unknown(kind: &str) -> Entry {
    let mut fields = serde_json::Map::new();
    fields.insert("note".into(), json!("from a newer panto"));
    Entry::Unknown(UnknownEntry::new(kind, fields.into()))
}

/// A compaction entry announcing `announced` copies, then copies of `kept` marked `kept_by`.
pub fn compaction_group(
    id: Option<&str>,
    summary: &str,
    kept: &[Message],
    announced: Option<u64>,
) -> Vec<Entry> {
    let mut c = CompactionEntry::new(summary);
    c.id = id.map(str::to_owned);
    c.kept_messages = announced;
    // As the compactor writes it: a compaction whose copies all follow it says so.
    if !kept.is_empty() && announced == Some(kept.len() as u64) {
        c.extra.insert(COPIES_MARKED.into(), json!(true));
    }
    let mut out = vec![Entry::Compaction(c)];
    for m in kept {
        let mut copy = m.clone();
        copy.id = None;
        copy.extra
            .insert(KEPT_BY.into(), json!(id.unwrap_or("unnamed")));
        out.push(Entry::Message(copy));
    }
    out
}

/// The part of a context that replay semantics fix (not the positions of skipped entries).
pub fn essence(c: &EffectiveContext) -> (Vec<Message>, Option<CompactionEntry>, usize) {
    (c.messages.clone(), c.compaction.clone(), c.kept)
}

/// The reference: replay of every entry that a forward read of the file yields.
pub fn forward(session: &Session) -> EffectiveContext {
    let entries: Vec<Entry> = session
        .history()
        .unwrap()
        .map(|item| item.unwrap().1)
        .collect();
    replay(entries)
}
