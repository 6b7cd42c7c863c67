//! The conformance suite: what every [`Store`] must do, as async checks that panic with the
//! check's name on a failure. The JSONL, SQLite and PostgreSQL stores run it in their tests
//! ([`run_all`] with a way to make a fresh, empty store), so the same behaviour is proven for
//! each.
//!
//! The checks compare a store's load with `panto_model::replay` of what was appended, and its
//! history with the exact text appended; they cover chains, kept copies, interrupted
//! compactions, unknown entry types and fields, conditional appends, paging and listing. They
//! name sessions `s.jsonl`, `a.jsonl` and `b.jsonl`, which every store accepts (the JSONL store
//! lists only files ending in `.jsonl`).

use panto_model::{CompactionEntry, Entry, KEPT_BY, Message, replay};
use serde_json::Value;

use crate::error::StoreError;
use crate::log::SessionLog;
use crate::record::{Record, RecordKind};
use crate::store::{Head, Store};

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
    interrupted_compaction_is_ignored,
    foreign_lines_survive_byte_for_byte,
    stale_append_conflicts_and_writes_nothing,
    empty_append_writes_nothing,
    history_pages_in_order,
    sessions_are_separate_and_listed,
    session_log_reloads_after_a_conflict,
);

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
