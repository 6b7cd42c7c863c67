//! The conformance suite: what every [`Store`] must do, as async checks that panic with the
//! check's name on a failure. The JSONL, SQLite and PostgreSQL stores run it in their tests
//! ([`run_all`] with a way to make a fresh, empty store), so the same behaviour is proven for
//! each.
//!
//! The checks compare a store's load with `panto_model::replay` of what was appended, and its
//! history with the exact text appended; they cover chains, kept copies, interrupted
//! compactions, unknown entry types and fields, conditional appends, paging and listing, a
//! session replaced by a longer one told from another writer's appends (`replaced.rs`), and
//! an import of a Contract 1 file whose export is that file byte for byte. They name sessions
//! `s.jsonl`, `a.jsonl` and `b.jsonl`, which every store accepts (the JSONL store lists only
//! files ending in `.jsonl`).
//!
//! The property test of every store is [`units`] (any sequence of appends and compactions,
//! complete, interrupted and foreign ones, undos, with unknown entries) fed to [`same_context`]: the
//! store's load equals `panto_model::replay` of what was appended, which is the same for every
//! store. Crashes and several processes cannot be checked in one process; each store's tests
//! and the `panto` binary's do that (`crates/panto-cli/tests/it/stores.rs`).
//!
//! Why one file: it is test code (the `conformance` feature), one check after another in the
//! order of the `Store` contract, each short and independent of the others (`import.rs` holds
//! the checks of imports and page sizes).

use panto_model::{CompactionEntry, Entry, KEPT_BY, Message, UndoEntry, UnknownEntry, replay};
use proptest::prelude::*;
use serde_json::Value;

pub mod clearing;
pub mod recall;

use crate::error::StoreError;
use crate::head::Head;
use crate::log::SessionLog;
use crate::record::{Record, RecordKind};
use crate::store::Store;

mod import;
mod replaced;

use replaced::a_replaced_session_is_not_taken_for_appends;

use import::{
    a_failed_import_leaves_nothing, import_is_one_unit_in_batches,
    import_refuses_a_session_with_entries, pages_stop_after_page_bytes,
};

/// Lines written by another program: unknown fields, unusual spacing and key order, an entry
/// of an unknown type. A store must give each back byte for byte.
pub const FOREIGN_LINES: &[&str] = &[
    r#"{"role":"user", "type":"message","id":"f1","content":[{"type":"text","text":"héllo \u00e9"}],"x-client":{"v":[1,2.50,"three"]}}"#,
    r#"{"type":"note","id":"n1","body":"not an entry panto knows"}"#,
    r#"{"type":"message","id":"f2","role":"assistant","content":[{"type":"text","text":"hi"},{"type":"fancy","data":{"k":null}}],"usage":{"input_tokens":12,"output_tokens":3},"extra_field":true}"#,
];

type Check<S> = for<'a> fn(&'a S) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

macro_rules! checks {
    ($($name:ident),* $(,)?) => {
        /// Every check, by name, in the order [`run_all`] runs them.
        pub fn checks<S: Store>() -> Vec<(&'static str, Check<S>)> {
            vec![$((stringify!($name), |s| Box::pin($name(s)))),*]
        }
    };
}

checks!(
    missing_session,
    append_creates_and_loads,
    replay_matches_panto_model,
    chains_take_the_latest,
    undo_steps_back_one_compaction_at_a_time,
    interrupted_compaction_is_ignored,
    foreign_lines_survive_byte_for_byte,
    stale_append_conflicts_and_writes_nothing,
    empty_append_writes_nothing,
    history_pages_in_order,
    sessions_are_separate_and_listed,
    session_log_reloads_after_a_conflict,
    a_replaced_session_is_not_taken_for_appends,
    session_log_appends_after_what_others_appended,
    import_export_round_trip,
    import_is_one_unit_in_batches,
    a_failed_import_leaves_nothing,
    import_refuses_a_session_with_entries,
    pages_stop_after_page_bytes,
    recall_finds_what_was_summarized,
    fetch_gives_items_by_id,
    fetch_follows_the_id_rules,
    fetch_after_an_import_and_a_copy,
    recall_after_an_import,
    a_clearing_round_trips_and_replays,
    an_interrupted_clearing_is_ignored,
    undo_steps_back_over_a_clearing,
    cleared_results_are_fetched_whole_by_id,
    a_summary_after_a_clearing_keeps_its_ledger,
);

use clearing::{
    a_clearing_round_trips_and_replays, a_summary_after_a_clearing_keeps_its_ledger,
    an_interrupted_clearing_is_ignored, cleared_results_are_fetched_whole_by_id,
    undo_steps_back_over_a_clearing,
};

use recall::{
    fetch_after_an_import_and_a_copy, fetch_follows_the_id_rules, fetch_gives_items_by_id,
    recall_after_an_import, recall_finds_what_was_summarized,
};

/// Runs every check, each on a fresh empty store from `fresh`, and panics at the first that
/// fails, naming it.
pub async fn run_all<S: Store, F: FnMut() -> S>(mut fresh: F) {
    for (name, check) in checks::<S>() {
        let store = fresh();
        let naming = Naming(name);
        check(&store).await;
        drop(naming);
    }
}

/// Names the check that was running when a panic unwinds through it.
struct Naming(&'static str);

impl Drop for Naming {
    #[expect(
        clippy::print_stderr,
        reason = "test support: the name of the failed check goes beside the panic message"
    )]
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("conformance check `{}` failed", self.0);
        }
    }
}

fn user(text: &str, id: &str) -> Entry {
    let mut m = Message::user_text(text);
    m.id = Some(id.into());
    Entry::Message(m)
}

fn assistant(text: &str, id: &str) -> Entry {
    let mut m = Message::assistant_text(text);
    m.id = Some(id.into());
    Entry::Message(m)
}

/// A compaction `id` whose `copies` (message entries) follow it marked `kept_by`, as the
/// compactor writes it (`copies_marked` included).
fn compaction(id: &str, summary: &str, copies: &[Entry]) -> Vec<Entry> {
    let mut c = CompactionEntry::new(summary)
        .with_id(id)
        .with_kept_messages(copies.len() as u64);
    c.extra
        .insert(panto_model::COPIES_MARKED.to_owned(), Value::Bool(true));
    let mut out = vec![Entry::Compaction(c)];
    for (i, e) in copies.iter().enumerate() {
        if let Entry::Message(m) = e {
            let mut copy = m.clone();
            copy.id = Some(format!("{id}-k{i}").into());
            copy.extra.insert(KEPT_BY.to_owned(), Value::from(id));
            out.push(Entry::Message(copy));
        }
    }
    out
}

async fn append_all<S: Store>(store: &S, session: &str, units: &[Vec<Entry>]) -> Head {
    let mut head = store.head(session).await.expect("head");
    for unit in units {
        head = store.append(session, head, unit).await.expect("append");
    }
    head
}

async fn missing_session<S: Store>(store: &S) {
    assert!(
        matches!(
            store.load("nobody.jsonl").await,
            Err(StoreError::NotFound { .. })
        ),
        "loading a session that does not exist is NotFound"
    );
    assert_eq!(store.head("nobody.jsonl").await.expect("head"), Head::EMPTY);
}

async fn append_creates_and_loads<S: Store>(store: &S) {
    let head = store
        .append("s.jsonl", Head::EMPTY, &[user("hello", "m1")])
        .await
        .expect("append at EMPTY creates the session");
    assert_ne!(head, Head::EMPTY);
    let loaded = store.load("s.jsonl").await.expect("load");
    assert_eq!(loaded.head, head);
    assert_eq!(store.head("s.jsonl").await.expect("head"), head);
    assert_eq!(loaded.context.messages.len(), 1);
    assert_eq!(loaded.context.messages[0].text(), "hello");
}

async fn replay_matches_panto_model<S: Store>(store: &S) {
    let units = vec![
        vec![user("one", "m1")],
        vec![assistant("two", "m2"), user("three", "m3")],
        vec![assistant("four", "m4")],
    ];
    let head = append_all(store, "s.jsonl", &units).await;
    let all: Vec<Entry> = units.concat();
    let loaded = store.load("s.jsonl").await.expect("load");
    assert_eq!(loaded.context, replay(all));
    assert_eq!(loaded.head, head);
}

async fn chains_take_the_latest<S: Store>(store: &S) {
    let kept = [user("kept", "m3")];
    let mut units = vec![vec![
        user("one", "m1"),
        assistant("two", "m2"),
        user("kept", "m3"),
    ]];
    units.push(compaction("c1", "first summary", &kept));
    units.push(vec![assistant("after", "m4"), user("more", "m5")]);
    units.push(compaction("c2", "second summary", &[user("more", "m5")]));
    units.push(vec![assistant("last", "m6")]);
    append_all(store, "s.jsonl", &units).await;
    let loaded = store.load("s.jsonl").await.expect("load");
    assert_eq!(loaded.context, replay(units.concat()));
    assert_eq!(loaded.context.summary(), Some("second summary"));
    assert_eq!(loaded.context.kept, 1);
}

async fn undo_steps_back_one_compaction_at_a_time<S: Store>(store: &S) {
    // Two compactions, a message after each, then an undo of each in turn: every load is the
    // context before the compaction undone, with what came after it.
    let undo = |id: &str, of: &str| vec![Entry::Undo(UndoEntry::new(of).with_id(id))];
    let mut units = vec![vec![user("one", "m1"), assistant("two", "m2")]];
    units.push(compaction("c1", "first summary", &[assistant("two", "m2")]));
    units.push(vec![user("three", "m3")]);
    units.push(compaction("c2", "second summary", &[user("three", "m3")]));
    units.push(vec![assistant("four", "m4")]);
    units.push(undo("u1", "c2"));
    let mut head = append_all(store, "s.jsonl", &units).await;
    let loaded = store.load("s.jsonl").await.expect("load");
    assert_eq!(loaded.context, replay(units.concat()));
    assert_eq!(loaded.context.summary(), Some("first summary"));
    let texts: Vec<String> = loaded
        .context
        .conversation()
        .iter()
        .map(Message::text)
        .collect();
    assert_eq!(texts, ["two", "three", "four"]);
    let second = undo("u2", "c1");
    let records: Vec<Record> = second.iter().map(Record::encode).collect();
    head = store
        .append_records("s.jsonl", head, &records)
        .await
        .expect("append");
    units.push(second);
    let loaded = store.load("s.jsonl").await.expect("load");
    assert_eq!(loaded.head, head);
    assert_eq!(loaded.context, replay(units.concat()));
    assert_eq!(loaded.context.compaction, None);
    let texts: Vec<String> = loaded.context.messages.iter().map(Message::text).collect();
    assert_eq!(texts, ["one", "two", "three", "four"]);
}

async fn interrupted_compaction_is_ignored<S: Store>(store: &S) {
    // A compaction whose marked copies are not all there (a non-transactional store cut by a
    // crash) must replay to the context before it.
    let mut torn = compaction("c1", "summary", &[user("a", "m1"), assistant("b", "m2")]);
    torn.pop();
    let units = vec![
        vec![user("a", "m1"), assistant("b", "m2")],
        torn,
        vec![user("c", "m3")],
    ];
    append_all(store, "s.jsonl", &units).await;
    let loaded = store.load("s.jsonl").await.expect("load");
    assert_eq!(loaded.context, replay(units.concat()));
    assert!(loaded.context.compaction.is_none());
    assert!(
        !loaded.warnings.is_empty(),
        "the interrupted compaction is reported"
    );
}

async fn foreign_lines_survive_byte_for_byte<S: Store>(store: &S) {
    let records: Vec<Record> = FOREIGN_LINES
        .iter()
        .enumerate()
        .map(|(i, l)| Record::parse(*l, i + 1).expect("a foreign line is an entry"))
        .collect();
    assert_eq!(records[1].kind, RecordKind::Other);
    let head = store
        .append_records("s.jsonl", Head::EMPTY, &records)
        .await
        .expect("append");
    let page = store.read("s.jsonl", Head::EMPTY, 100).await.expect("read");
    let texts: Vec<&str> = page.records.iter().map(|r| r.text.as_str()).collect();
    assert_eq!(
        texts, FOREIGN_LINES,
        "the store gives back every line byte for byte"
    );
    assert_eq!(page.records, records);
    let loaded = store.load("s.jsonl").await.expect("load");
    assert_eq!(loaded.head, head);
    let entries: Vec<Entry> = records
        .iter()
        .map(|r| r.decode(1).expect("decode"))
        .collect();
    assert_eq!(loaded.context, replay(entries));
    assert_eq!(
        loaded.context.messages[0].extra.get("x-client"),
        Some(&serde_json::json!({"v": [1, 2.50, "three"]}))
    );
}

async fn stale_append_conflicts_and_writes_nothing<S: Store>(store: &S) {
    let first = store
        .append("s.jsonl", Head::EMPTY, &[user("one", "m1")])
        .await
        .expect("append");
    let second = store
        .append("s.jsonl", first, &[assistant("two", "m2")])
        .await
        .expect("append");
    // A writer that last saw the session at `first` is stale.
    match store.append("s.jsonl", first, &[user("late", "m3")]).await {
        Err(StoreError::Conflict {
            expected, found, ..
        }) => {
            assert_eq!(expected, first);
            assert_eq!(found, second);
        }
        other => panic!("a stale append must be a conflict, got {other:?}"),
    }
    // So is one that claims the session is new.
    assert!(matches!(
        store
            .append("s.jsonl", Head::EMPTY, &[user("late", "m3")])
            .await,
        Err(StoreError::Conflict { .. })
    ));
    let loaded = store.load("s.jsonl").await.expect("load");
    assert_eq!(loaded.head, second, "nothing was written");
    assert_eq!(loaded.context.messages.len(), 2);
}

async fn empty_append_writes_nothing<S: Store>(store: &S) {
    let head = store
        .append("s.jsonl", Head::EMPTY, &[user("one", "m1")])
        .await
        .expect("append");
    assert_eq!(
        store
            .append("s.jsonl", head, &[])
            .await
            .expect("empty append"),
        head
    );
    assert_eq!(store.head("s.jsonl").await.expect("head"), head);
}

async fn history_pages_in_order<S: Store>(store: &S) {
    let entries: Vec<Entry> = (0..25)
        .map(|i| {
            if i % 2 == 0 {
                user(&format!("u{i}"), &format!("m{i}"))
            } else {
                assistant(&format!("a{i}"), &format!("m{i}"))
            }
        })
        .collect();
    let mut head = Head::EMPTY;
    for chunk in entries.chunks(4) {
        head = store.append("s.jsonl", head, chunk).await.expect("append");
    }
    let mut read = Vec::new();
    let mut from = Head::EMPTY;
    loop {
        let page = store.read("s.jsonl", from, 7).await.expect("read");
        assert!(page.records.len() <= 7);
        if page.records.is_empty() {
            break;
        }
        from = page.next;
        read.extend(page.records);
    }
    let expected: Vec<Record> = entries.iter().map(Record::encode).collect();
    assert_eq!(
        read, expected,
        "every record, in order, exactly as appended"
    );
    assert_eq!(from, head, "the last page ends at the head");
}

async fn sessions_are_separate_and_listed<S: Store>(store: &S) {
    store
        .append("b.jsonl", Head::EMPTY, &[user("in b", "m1")])
        .await
        .expect("append");
    store
        .append("a.jsonl", Head::EMPTY, &[user("in a", "m1")])
        .await
        .expect("append");
    let a = store.load("a.jsonl").await.expect("load");
    assert_eq!(a.context.messages[0].text(), "in a");
    let listed = store.list().await.expect("list");
    let ours: Vec<&str> = listed
        .iter()
        .map(String::as_str)
        .filter(|n| *n == "a.jsonl" || *n == "b.jsonl")
        .collect();
    assert_eq!(ours, ["a.jsonl", "b.jsonl"], "sessions are listed, sorted");
}

async fn session_log_appends_after_what_others_appended<S: Store>(store: &S) {
    let (mut mine, _) = SessionLog::open(store, "s.jsonl").await.expect("open");
    let (mut theirs, _) = SessionLog::open(store, "s.jsonl").await.expect("open");
    let none = mine.appended_since().await.expect("read");
    assert!(none.records.is_empty());
    assert_eq!(none.next, mine.head());
    theirs
        .append(&[user("one", "t1"), user("two", "t2")])
        .await
        .expect("append");
    let before = mine.head();
    let page = mine.appended_since().await.expect("read");
    assert_eq!(mine.head(), before, "reading moves no head");
    let texts: Vec<String> = page
        .records
        .iter()
        .map(|r| match r.decode(1).expect("decode") {
            Entry::Message(m) => m.text(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(texts, ["one", "two"]);
    // Appending at the old head still conflicts; after what was read, it lands.
    assert!(mine.append(&[user("mine", "m1")]).await.is_err());
    assert_eq!(mine.head(), before);
    mine.append_after(page.next, &[user("mine", "m1")])
        .await
        .expect("append after");
    assert!(!mine.conflicted());
    assert_eq!(mine.head(), store.head("s.jsonl").await.expect("head"));
    // A head another append has passed conflicts, and the head stays.
    theirs.reload().await.expect("reload");
    theirs.append(&[user("three", "t3")]).await.expect("append");
    let stale = mine.head();
    assert!(
        mine.append_after(page.next, &[user("late", "m2")])
            .await
            .is_err()
    );
    assert_eq!(mine.head(), stale);
    let loaded = store.load("s.jsonl").await.expect("load");
    let texts: Vec<String> = loaded.context.messages.iter().map(Message::text).collect();
    assert_eq!(texts, ["one", "two", "mine", "three"]);
}

async fn session_log_reloads_after_a_conflict<S: Store>(store: &S) {
    let (mut mine, _) = SessionLog::open(store, "s.jsonl").await.expect("open");
    let (mut theirs, _) = SessionLog::open(store, "s.jsonl").await.expect("open");
    mine.append(&[user("mine", "m1")]).await.expect("append");
    assert!(theirs.changed().await.expect("changed"));
    assert!(theirs.append(&[user("theirs", "m2")]).await.is_err());
    assert!(theirs.conflicted());
    let loaded = theirs.reload().await.expect("reload");
    assert_eq!(loaded.context.messages.len(), 1);
    theirs
        .append(&[user("theirs", "m2")])
        .await
        .expect("append after reload");
    assert!(!theirs.conflicted());
    assert_eq!(
        store
            .load("s.jsonl")
            .await
            .expect("load")
            .context
            .messages
            .len(),
        2
    );
}

/// A Contract 1 file another program wrote: foreign spellings and unknown fields, an entry of an
/// unknown type, a compaction panto wrote (marked copies) and one it did not. An import of it
/// (each line a [`Record`], one unit) must export as this text byte for byte.
pub const CONTRACT_FILE: &str = concat!(
    r#"{"role":"user", "type":"message","id":"f1","content":[{"type":"text","text":"héllo \u00e9"}],"x-client":{"v":[1,2.50,"three"]}}"#,
    "\n",
    r#"{"type":"message","id":"f2","role":"assistant","content":[{"type":"text","text":"hi"},{"type":"fancy","data":{"k":null}}],"usage":{"input_tokens":12,"output_tokens":3},"extra_field":true}"#,
    "\n",
    r#"{"type":"note","id":"n1","body":"not an entry panto knows"}"#,
    "\n",
    r#"{"type":"message","id":"f3","role":"user","content":"a plain string prompt"}"#,
    "\n",
    r#"{"type":"compaction","id":"c1","summary":"the user said hello","copies_marked":true,"kept_messages":1,"tokens_before":100,"x-score":1e2}"#,
    "\n",
    r#"{"type":"message","id":"c1-k0","role":"user","content":"a plain string prompt","kept_by":"c1"}"#,
    "\n",
    r#"{"type":"message","id":"f4","role":"assistant","content":[{"type":"tool_use","id":"t1","name":"read","input":{"path":"a.rs","n":123456789012345678901234567890}}]}"#,
    "\n",
    r#"{"type":"message","id":"f5","role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"fn main() {}"}]}"#,
    "\n",
    r#"{"type":"compaction","id":"x9","summary":"another program's summary"}"#,
    "\n",
    r#"{"type":"message","id":"f6","role":"user","content":[{"type":"text","text":"go on\n\ttabs"}]}"#,
    "\n",
);

/// The records of a Contract 1 file, one per line, each the line's exact text.
///
/// # Panics
/// On a line that is not an entry (test support).
pub fn records_of(file: &str) -> Vec<Record> {
    file.lines()
        .enumerate()
        .map(|(i, l)| Record::parse(l, i + 1).expect("a Contract 1 line"))
        .collect()
}

/// The whole history of `session` as Contract 1 text, read in pages of `page` records: what
/// `panto export` writes.
///
/// # Panics
/// When the store fails (test support).
pub async fn export<S: Store + ?Sized>(store: &S, session: &str, page: usize) -> String {
    let mut out = String::new();
    let mut from = Head::EMPTY;
    loop {
        let read = store.read(session, from, page).await.expect("read");
        if read.records.is_empty() {
            return out;
        }
        for r in &read.records {
            out.push_str(&r.text);
            out.push('\n');
        }
        from = read.next;
    }
}

async fn import_export_round_trip<S: Store>(store: &S) {
    let records = records_of(CONTRACT_FILE);
    let head = store
        .append_records("s.jsonl", Head::EMPTY, &records)
        .await
        .expect("import");
    assert_eq!(
        export(store, "s.jsonl", 3).await,
        CONTRACT_FILE,
        "the export of an import is the original file byte for byte"
    );
    let loaded = store.load("s.jsonl").await.expect("load");
    assert_eq!(loaded.head, head);
    let entries: Vec<Entry> = records
        .iter()
        .enumerate()
        .map(|(i, r)| r.decode(i + 1).expect("decode"))
        .collect();
    // `skipped` counts from the first entry a store replayed, which is the store's choice.
    let full = replay(entries);
    assert_eq!(loaded.context.messages, full.messages);
    assert_eq!(loaded.context.compaction, full.compaction);
    assert_eq!(loaded.context.kept, full.kept);
    assert_eq!(loaded.context.summary(), Some("another program's summary"));
}

/// What one generated append holds.
#[derive(Clone, Debug)]
pub enum Unit {
    /// Messages of the conversation (and, with the flag, an entry of an unknown type after them).
    Messages(Vec<Message>, bool),
    /// A compaction as the compactor writes it, keeping copies of the last `n` messages.
    Compaction(usize),
    /// A compaction whose last copy is missing: what a store that is not transactional keeps
    /// after a crash in the middle of the append.
    Interrupted(usize),
    /// A compaction another program wrote: no `copies_marked`, copies not marked.
    Foreign(usize),
    /// An undo of the compaction active then (of none that exists when none is active), as
    /// `Driver::undo` writes it: what was before it is the context again.
    Undo,
}

/// Any sequence of appends and compactions over a valid conversation: the strategy of the
/// property test every store runs with [`same_context`].
pub fn units() -> impl Strategy<Value = Vec<Unit>> {
    (
        panto_model::arbitrary::session(5),
        proptest::collection::vec((1usize..4, 0u8..8, 0usize..4), 1..10),
    )
        .prop_map(|(session, plan)| {
            let mut messages = session.messages.into_iter();
            let mut out = Vec::new();
            for (take, kind, kept) in plan {
                let batch: Vec<Message> = messages.by_ref().take(take).collect();
                if batch.is_empty() {
                    break;
                }
                out.push(Unit::Messages(batch, kind == 7));
                out.push(match kind {
                    0 | 1 => Unit::Compaction(kept),
                    2 => Unit::Interrupted(kept.max(1)),
                    3 => Unit::Foreign(kept),
                    4 => Unit::Undo,
                    _ => continue,
                });
            }
            out
        })
}

/// The entries of `units`, each unit's as one append.
pub fn unit_entries(units: &[Unit]) -> Vec<Vec<Entry>> {
    let mut seen: Vec<Message> = Vec::new();
    let mut out = Vec::new();
    for (u, unit) in units.iter().enumerate() {
        let id = format!("c{u}");
        let last = |n: usize, seen: &[Message]| -> Vec<Entry> {
            seen[seen.len().saturating_sub(n)..]
                .iter()
                .cloned()
                .map(Entry::Message)
                .collect()
        };
        out.push(match unit {
            Unit::Messages(batch, unknown) => {
                seen.extend(batch.iter().cloned());
                let mut entries: Vec<Entry> = batch.iter().cloned().map(Entry::Message).collect();
                if *unknown {
                    let mut fields = panto_model::Extra::default();
                    fields.insert("note".to_owned(), Value::from(format!("unit {u}")));
                    entries.push(Entry::Unknown(UnknownEntry::new("x-note", fields)));
                }
                entries
            }
            Unit::Compaction(n) => compaction(&id, &format!("summary {u}"), &last(*n, &seen)),
            Unit::Interrupted(n) => {
                let mut entries = compaction(&id, &format!("summary {u}"), &last(*n, &seen));
                entries.pop();
                entries
            }
            Unit::Foreign(n) => {
                let kept = last(*n, &seen);
                let mut entries = vec![Entry::Compaction(
                    CompactionEntry::new(format!("foreign summary {u}"))
                        .with_kept_messages(kept.len() as u64),
                )];
                entries.extend(kept);
                entries
            }
            Unit::Undo => {
                let so_far: Vec<Entry> = out.iter().flatten().cloned().collect();
                let active = replay(so_far).compaction.and_then(|c| c.id);
                let undoes = active.unwrap_or_else(|| "c-none".to_owned());
                vec![Entry::Undo(UndoEntry::new(undoes).with_id(format!("u{u}")))]
            }
        });
    }
    out
}

/// Appends `units` to a new session `session` of `store`, one append each, and checks that its
/// load, and its load after every append, equals `panto_model::replay` of what was appended (as
/// stored: each entry decoded from its record), and that its history is every record.
///
/// # Panics
/// When the store disagrees (test support).
pub async fn same_context<S: Store + ?Sized>(store: &S, session: &str, units: &[Unit]) {
    let mut head = Head::EMPTY;
    let mut all = Vec::new();
    let mut records_all = Vec::new();
    for unit in unit_entries(units) {
        let records: Vec<Record> = unit.iter().map(Record::encode).collect();
        head = store
            .append_records(session, head, &records)
            .await
            .expect("append");
        all.extend(
            records
                .iter()
                .map(|r| r.decode(1).expect("a record decodes")),
        );
        records_all.extend(records);
        let loaded = store.load(session).await.expect("load");
        assert_eq!(loaded.head, head);
        // `skipped` counts from the first entry a store replayed, which is the store's choice.
        let full = replay(all.clone());
        assert_eq!(
            (
                loaded.context.messages,
                loaded.context.compaction,
                loaded.context.kept
            ),
            (full.messages, full.compaction, full.kept),
            "the load equals a replay of every entry"
        );
    }
    let mut expected = String::new();
    for r in &records_all {
        expected.push_str(&r.text);
        expected.push('\n');
    }
    assert_eq!(export(store, session, 4).await, expected);
    // An index kept current over these appends answers as one built from the whole history.
    recall::same_as_scan(store, session).await;
}

/// Unit `n` of a crash test: a compaction (summary `unit n`) and `copies` marked copies, each
/// about 1 KiB, so that an append takes long enough to be killed in the middle of it. Every
/// odd unit is a clearing (`strategy: "clear"`, carrying the summary), whose copies are tool
/// calls and the placeholders of their cleared results, so that a crash in the middle of a
/// clearing is checked on every store too.
pub fn crash_unit(n: usize, copies: usize) -> Vec<Entry> {
    if n % 2 == 1 {
        return clearing_crash_unit(n, copies);
    }
    let kept: Vec<Entry> = (0..copies)
        .map(|i| {
            user(
                &format!("unit {n} copy {i}: {}", "x".repeat(1000)),
                &format!("m{n}-{i}"),
            )
        })
        .collect();
    compaction(&format!("c{n}"), &format!("unit {n}"), &kept)
}

/// The clearing of [`crash_unit`] `n`: copies alternate a call (about 1 KiB of arguments) and
/// the placeholder of its cleared result, as a clearing writes them.
fn clearing_crash_unit(n: usize, copies: usize) -> Vec<Entry> {
    use panto_model::{CLEARED, CLEARED_PREFIX, ContentBlock, Role, ToolResultBlock};
    let call = |i: usize| format!("t{n}-{i}");
    let kept: Vec<Entry> = (0..copies)
        .map(|i| {
            let message = if i % 2 == 0 {
                Message::new(
                    Role::Assistant,
                    vec![ContentBlock::tool_use(
                        call(i),
                        "read",
                        serde_json::json!({"path": format!("src/{n}/{i}.rs"), "pad": "x".repeat(1000)}),
                    )],
                )
            } else {
                let mut placeholder = ToolResultBlock::new(
                    call(i - 1),
                    panto_model::ToolResultContent::Text(format!(
                        "{CLEARED_PREFIX} to save room: 5000 bytes in 80 lines; first line: unit {n}; id {}]",
                        call(i - 1)
                    )),
                    Some(false),
                );
                placeholder
                    .extra
                    .insert(CLEARED.to_owned(), Value::from(format!("c{n}")));
                Message::new(Role::User, vec![ContentBlock::ToolResult(placeholder)])
            };
            Entry::Message(message.with_id(format!("m{n}-{i}")))
        })
        .collect();
    let mut entries = compaction(&format!("c{n}"), &format!("unit {n}"), &kept);
    if let Some(Entry::Compaction(c)) = entries.first_mut() {
        let cleared: Vec<Value> = (0..copies)
            .step_by(2)
            .filter(|i| i + 1 < copies)
            .map(|i| {
                serde_json::json!({"id": call(i), "message": format!("m{n}-{}", i + 1), "block": 0, "kind": "tool_result", "bytes": 5000})
            })
            .collect();
        c.extra.insert(
            panto_model::STRATEGY.to_owned(),
            Value::from(panto_model::CLEARING),
        );
        c.extra.insert("provider".to_owned(), Value::from("panto"));
        c.extra.insert("cleared".to_owned(), Value::Array(cleared));
    }
    entries
}

/// After a process appending [`crash_unit`]s to `session` (from an empty session, one unit per
/// append) was killed with SIGKILL, at any moment: checks that the history holds whole units
/// only, and a prefix of one at most for a store that is not transactional (`torn_ok`), which
/// replay ignores; and that the load is the latest whole unit. Returns how many whole units
/// there are.
///
/// # Panics
/// When a unit is half-written in a way replay does not ignore (test support).
pub async fn after_a_kill<S: Store + ?Sized>(
    store: &S,
    session: &str,
    copies: usize,
    torn_ok: bool,
) -> usize {
    let text = match store.read(session, Head::EMPTY, 1).await {
        Err(StoreError::NotFound { .. }) => return 0,
        _ => export(store, session, 1000).await,
    };
    let records = records_of(&text);
    let unit = copies + 1;
    let whole = records.len() / unit;
    let rest = records.len() % unit;
    assert!(
        rest == 0 || torn_ok,
        "{} records: unit {whole} is half-written ({rest} of {unit} records)",
        records.len()
    );
    for n in 0..whole {
        let expected: Vec<Record> = crash_unit(n, copies).iter().map(Record::encode).collect();
        assert_eq!(records[n * unit..(n + 1) * unit], expected[..], "unit {n}");
    }
    match store.load(session).await {
        Ok(loaded) => {
            let expected = whole.checked_sub(1).map(|n| format!("unit {n}"));
            assert_eq!(loaded.context.summary(), expected.as_deref());
            if whole > 0 {
                assert_eq!(loaded.context.messages.len(), copies + 1);
            }
            if whole > 1 {
                // What the latest whole unit summarized is recalled, torn records or not.
                let query = crate::recall::RecallQuery::new("\"unit 0 copy 0\"");
                let found = store
                    .recall(session, &query)
                    .await
                    .expect("recall after a kill");
                assert_eq!(recall::hit_ids(&found).first(), Some(&"c0-k0#0"));
                recall::same_as_scan(store, session).await;
            }
        }
        Err(e) => panic!("a killed append left a session that does not load: {e}"),
    }
    whole
}
