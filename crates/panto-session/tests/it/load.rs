//! Backwards loading equals a full forward replay, reads only the tail, and keeps unknown
//! entry types in the file.

use std::fs;

use panto_model::arbitrary::session;
use panto_model::{Entry, Message, encode_line};
use panto_session::{Session, SessionError, Warning, WarningKind};
use proptest::prelude::*;
use proptest::sample::Index;

use crate::{compaction_group, essence, forward, opts, session_with, temp_session, unknown, user};

/// One step of a generated session file.
#[derive(Clone, Debug)]
enum Op {
    /// The next message of the generated conversation.
    Message,
    /// A compaction keeping some of the latest messages, complete or cut short.
    Compaction {
        keep: Index,
        complete: bool,
        named: bool,
        announce_none: bool,
    },
    /// An entry of a type panto does not know.
    Unknown,
    /// An undo of one of the named compactions so far (the latest, mostly).
    Undo(Index, bool),
    /// A blank line.
    Blank,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => Just(Op::Message),
        2 => (any::<Index>(), prop::bool::weighted(0.7), prop::bool::weighted(0.8), prop::bool::weighted(0.1))
            .prop_map(|(keep, complete, named, announce_none)| Op::Compaction { keep, complete, named, announce_none }),
        1 => Just(Op::Unknown),
        1 => (any::<Index>(), prop::bool::weighted(0.7)).prop_map(|(i, latest)| Op::Undo(i, latest)),
        1 => Just(Op::Blank),
    ]
}

/// Builds the file text of a generated session.
fn build(messages: &[Message], ops: &[Op]) -> String {
    let mut text = String::new();
    let mut written: Vec<Message> = Vec::new();
    let mut names: Vec<String> = Vec::new();
    let mut next = 0;
    for (i, op) in ops.iter().enumerate() {
        match op {
            Op::Message => {
                let m = messages[next % messages.len()].clone();
                next += 1;
                text.push_str(&encode_line(&Entry::Message(m.clone())));
                written.push(m);
            }
            Op::Compaction {
                keep,
                complete,
                named,
                announce_none,
            } => {
                let k = keep.index(written.len().min(6) + 1);
                let kept = &written[written.len() - k..];
                let id = format!("c{i}");
                let announced = if *complete {
                    if *announce_none && k == 0 {
                        None
                    } else {
                        Some(k as u64)
                    }
                } else {
                    Some(k as u64 + 1)
                };
                if *named {
                    names.push(id.clone());
                }
                let group = compaction_group(
                    named.then_some(id.as_str()),
                    &format!("summary {i}"),
                    kept,
                    announced,
                );
                for e in &group {
                    text.push_str(&encode_line(e));
                }
            }
            Op::Unknown => text.push_str(&encode_line(&unknown("note"))),
            Op::Undo(pick, latest) => {
                let undoes = match (names.last(), latest) {
                    (None, _) => "c-none".to_owned(),
                    (Some(last), true) => last.clone(),
                    (Some(_), false) => names[pick.index(names.len())].clone(),
                };
                let undo = panto_model::UndoEntry::new(undoes).with_id(format!("u{i}"));
                text.push_str(&encode_line(&Entry::Undo(undo)));
            }
            Op::Blank => text.push_str("  \n"),
        }
    }
    text
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn backwards_load_equals_full_forward_replay(
        s in session(4),
        ops in prop::collection::vec(op(), 0..40),
        chunk in prop_oneof![1usize..64, Just(64 * 1024)],
    ) {
        let (_dir, path) = temp_session();
        let text = build(&s.messages, &ops);
        fs::write(&path, &text).unwrap();
        let session = Session::open(&path, opts().read_chunk(chunk)).unwrap();
        if text.trim().is_empty() {
            // No operation wrote an entry (nothing, or only blank lines: the shrunk case
            // `ops = [Blank]` in proptest-regressions): the empty file is reported, not loaded.
            let empty = matches!(session.load_context(), Err(SessionError::Empty { .. }));
            prop_assert!(empty);
            return Ok(());
        }
        let (loaded, stats) = session.load_context_with_stats().unwrap();
        let full = forward(&session);
        prop_assert_eq!(essence(&loaded.context), essence(&full));
        if stats.replay_from == 0 {
            // Every entry was replayed, so what was skipped is what a full replay skips.
            prop_assert_eq!(&loaded.context.skipped, &full.skipped);
        }
        // Every reported position is the start of a line holding what the warning says.
        let text = fs::read_to_string(&path).unwrap();
        let offset = |w: &Warning| w.offset().unwrap() as usize;
        for w in &loaded.warnings {
            let line = text[offset(w)..].lines().next().unwrap_or("");
            match &w.kind {
                WarningKind::UnknownType { kind } => {
                    let want = format!("\"type\":\"{kind}\"");
                    prop_assert!(line.contains(&want), "{}", line);
                }
                WarningKind::IncompleteCompaction { .. } => {
                    let compaction = line.starts_with(r#"{"type":"compaction""#);
                    prop_assert!(compaction, "{}", line);
                }
                other => prop_assert!(false, "unexpected warning {:?}", other),
            }
            prop_assert!(offset(w) == 0 || text.as_bytes()[offset(w) - 1] == b'\n');
        }
        // Line numbers, given or resolved, are the true ones.
        let mut resolved = loaded.warnings.clone();
        session.resolve_lines(&mut resolved).unwrap();
        for w in &resolved {
            let want = text[..offset(w)].matches('\n').count() + 1;
            prop_assert_eq!(w.line(), Some(want));
            if let Some(given) = loaded.warnings.iter().find(|v| v.offset() == w.offset()).and_then(Warning::line) {
                prop_assert_eq!(given, want);
            }
        }
    }

    #[test]
    fn appending_through_the_store_gives_the_same_context_as_replay(
        s in session(3),
        ops in prop::collection::vec(op(), 1..25),
        cuts in prop::collection::vec(any::<Index>(), 0..4),
    ) {
        // The same kind of file, appended in several calls rather than written at once.
        let text = build(&s.messages, &ops);
        let entries: Vec<Entry> = panto_model::entries(text.as_bytes()).map(Result::unwrap).collect();
        let mut bounds: Vec<usize> = cuts.iter().map(|c| c.index(entries.len() + 1)).collect();
        bounds.push(0);
        bounds.push(entries.len());
        bounds.sort_unstable();
        let (_dir, path) = temp_session();
        let session = Session::create(&path, opts()).unwrap();
        for w in bounds.windows(2) {
            session.append(&entries[w[0]..w[1]]).unwrap();
        }
        if entries.is_empty() {
            // Its shrunk case (`ops = [Blank]`): a file that never got an entry is empty. The
            // named test is `errors::an_empty_file_opens_reads_as_a_clear_error_and_starts_with_its_first_append`.
            let empty = matches!(session.load_context(), Err(SessionError::Empty { .. }));
            prop_assert!(empty);
            return Ok(());
        }
        let loaded = session.load_context().unwrap();
        prop_assert_eq!(essence(&loaded.context), essence(&forward(&session)));
        let ids: Vec<Entry> = session.history().unwrap().map(|r| r.unwrap().1).collect();
        prop_assert_eq!(ids.len(), entries.len());
        prop_assert!(ids.iter().all(|e| e.id().is_some()));
    }
}

#[test]
fn loading_reads_only_what_follows_the_latest_compaction() {
    let (_dir, path) = temp_session();
    let s = Session::create(&path, opts()).unwrap();
    let big: Vec<Entry> = (0..20_000)
        .map(|i| user(&format!("old turn {i}")))
        .collect();
    s.append(&big).unwrap();
    let kept = [Message::user_text("old turn 19999")];
    s.append(&compaction_group(
        Some("c1"),
        "everything so far",
        &kept,
        Some(1),
    ))
    .unwrap();
    s.append(&[user("new 1"), user("new 2")]).unwrap();
    let len = fs::metadata(&path).unwrap().len();
    assert!(len > 1_500_000, "{len}");
    let (loaded, stats) = s.load_context_with_stats().unwrap();
    assert_eq!(loaded.context.summary(), Some("everything so far"));
    assert_eq!(loaded.context.messages.len(), 4);
    assert_eq!(stats.entries, 4);
    assert!(stats.bytes_read <= 64 * 1024, "{stats:?}");
    assert!(stats.replay_from > len - 1000, "{stats:?}");
    // Line numbers are unknown there (reading stopped early) until resolved.
    assert!(loaded.warnings.is_empty());
}

#[test]
fn an_incomplete_compaction_at_the_end_is_ignored_and_reading_goes_further_back() {
    let (_dir, path) = temp_session();
    let s = Session::create(&path, opts()).unwrap();
    s.append(&[user("a")]).unwrap();
    s.append(&compaction_group(
        Some("c1"),
        "first",
        &[Message::user_text("a")],
        Some(1),
    ))
    .unwrap();
    s.append(&[user("b")]).unwrap();
    // Two copies announced, one written: an append cut short.
    let mut partial = compaction_group(Some("c2"), "second", &[Message::user_text("b")], Some(2));
    partial.truncate(2);
    s.append(&partial).unwrap();
    let loaded = s.load_context().unwrap();
    assert_eq!(loaded.context.summary(), Some("first"));
    let texts: Vec<String> = loaded
        .context
        .conversation()
        .iter()
        .map(Message::text)
        .collect();
    assert_eq!(texts, ["a", "b"]);
    let w: Vec<String> = loaded.warnings.iter().map(ToString::to_string).collect();
    assert_eq!(
        w,
        [format!(
            "{}: byte {}: compaction with 1 of its 2 kept copies ignored (an interrupted append)",
            path.display(),
            loaded.warnings[0].offset().unwrap()
        )]
    );
    assert_eq!(essence(&loaded.context), essence(&forward(&s)));
}

#[test]
fn unknown_entry_types_are_skipped_and_kept_in_the_file() {
    let (_dir, path) = temp_session();
    let s = session_with(&path, b"");
    s.append(&[user("a"), unknown("future_thing"), user("b")])
        .unwrap();
    let loaded = s.load_context().unwrap();
    assert_eq!(loaded.context.messages.len(), 2);
    assert_eq!(
        loaded
            .warnings
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
        [format!(
            "{}: line 2: entry of unknown type `future_thing` skipped",
            path.display()
        )]
    );
    let text = fs::read_to_string(&path).unwrap();
    assert_eq!(
        text.lines().nth(1).unwrap(),
        r#"{"type":"future_thing","note":"from a newer panto","id":"e2"}"#
    );
    let history: Vec<(usize, Entry)> = s.history().unwrap().map(Result::unwrap).collect();
    assert_eq!(history[1].0, 2);
    assert_eq!(history[1].1.type_name(), "future_thing");
}

#[test]
fn a_writer_holds_the_lock_across_load_and_append() {
    let (_dir, path) = temp_session();
    let s = Session::create(&path, opts()).unwrap();
    s.append(&[user("a")]).unwrap();
    let mut w = s.lock().unwrap();
    let before = w.load_context().unwrap();
    assert_eq!(before.context.messages.len(), 1);
    w.append(&[user("b")]).unwrap();
    assert_eq!(w.load_context().unwrap().context.messages.len(), 2);
}

/// The shrunk case of `backwards_load_equals_full_forward_replay` (`ops = [Blank]`): a file of
/// blank lines only holds no entry and is reported as empty, not loaded.
#[test]
fn a_file_of_blank_lines_only_is_empty() {
    let (_dir, path) = temp_session();
    fs::write(&path, "  \n").unwrap();
    let session = Session::open(&path, opts()).unwrap();
    assert!(matches!(
        session.load_context(),
        Err(SessionError::Empty { .. })
    ));
}
