//! Appends: whole lines, ids, the torn tail, and nothing already written ever changes.

use std::fs;

use panto_model::{Entry, KEPT_BY, Message, decode_line};
use panto_session::{Session, SessionError, WarningKind};
use serde_json::json;

use crate::{compaction_group, opts, session_with, temp_session, unknown, user};

#[test]
fn append_writes_whole_lines_and_returns_ids() {
    let (_dir, path) = temp_session();
    let s = Session::create(&path, opts()).unwrap();
    let mut named = Message::assistant_text("hello");
    named.id = Some("mine".into());
    let ids = s
        .append(&[user("hi"), Entry::Message(named), unknown("note")])
        .unwrap();
    assert_eq!(ids, ["m1", "mine", "e2"]);
    let text = fs::read_to_string(&path).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3);
    assert!(text.ends_with('\n'));
    for (i, line) in lines.iter().enumerate() {
        assert_eq!(
            decode_line(line.as_bytes(), i + 1).unwrap().id(),
            Some(ids[i].as_str())
        );
    }
    assert_eq!(
        lines[2],
        // Unknown fields keep their order; the id the store gives goes after them.
        r#"{"type":"note","note":"from a newer panto","id":"e2"}"#
    );
}

#[test]
fn appending_nothing_writes_nothing() {
    let (_dir, path) = temp_session();
    let s = Session::create(&path, opts()).unwrap();
    assert!(s.append(&[]).unwrap().is_empty());
    assert_eq!(fs::read(&path).unwrap(), b"");
}

#[test]
fn every_append_keeps_the_earlier_bytes_as_a_prefix() {
    let (_dir, path) = temp_session();
    let s = session_with(
        &path,
        b"{\"type\":\"message\",\"role\":\"user\",\"content\":[]}\n{\"type\":\"mess",
    );
    let mut before = fs::read(&path).unwrap();
    for i in 0..5 {
        s.append(&[user(&format!("turn {i}"))]).unwrap();
        let after = fs::read(&path).unwrap();
        assert!(
            after.starts_with(&before),
            "append {i} changed earlier bytes"
        );
        assert!(after.ends_with(b"\n"));
        before = after;
    }
}

#[test]
fn a_compaction_without_id_gets_one_and_its_copies_follow_it() {
    let (_dir, path) = temp_session();
    let s = Session::create(&path, opts()).unwrap();
    s.append(&[user("a"), user("b")]).unwrap();
    let kept = [Message::user_text("b")];
    let group = compaction_group(None, "sum", &kept, Some(1));
    let ids = s.append(&group).unwrap();
    assert_eq!(ids[0], "c3");
    let loaded = s.load_context().unwrap();
    assert_eq!(loaded.context.summary(), Some("sum"));
    assert_eq!(loaded.context.kept, 1);
    assert_eq!(
        loaded.context.messages[1].extra.get(KEPT_BY),
        Some(&json!("c3"))
    );
}

#[test]
fn the_torn_write_type_is_reserved() {
    let (_dir, path) = temp_session();
    let s = Session::create(&path, opts()).unwrap();
    let err = s.append(&[user("a"), unknown("torn_write")]).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "{}: cannot append entry 1: the type `torn_write` is reserved for the store",
            path.display()
        )
    );
    assert_eq!(fs::read(&path).unwrap(), b"");
}

#[test]
fn appending_after_a_torn_line_starts_a_fresh_line_and_acknowledges_it() {
    let (_dir, path) = temp_session();
    let good = "{\"type\":\"message\",\"id\":\"m0\",\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"}]}\n";
    let torn = "{\"type\":\"message\",\"role\":\"assi";
    let s = session_with(&path, format!("{good}{torn}").as_bytes());
    let loaded = s.load_context().unwrap();
    assert_eq!(loaded.context.messages.len(), 1);
    assert_eq!(loaded.warnings.len(), 1);
    assert_eq!(
        loaded.warnings[0].to_string(),
        format!(
            "{}: line 2: torn last line ({} bytes without a final newline) kept and ignored",
            path.display(),
            torn.len()
        )
    );

    s.append(&[user("b")]).unwrap();
    let text = fs::read_to_string(&path).unwrap();
    let offset = good.len();
    let record_start = offset + torn.len() + 1;
    assert_eq!(
        text,
        format!(
            "{good}{torn}\n{{\"type\":\"torn_write\",\"offset\":{offset},\"length\":{}}}\n{}",
            record_start - 1 - offset,
            "{\"type\":\"message\",\"id\":\"m1\",\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"b\"}]}\n"
        )
    );
    let loaded = s.load_context().unwrap();
    let texts: Vec<String> = loaded.context.messages.iter().map(Message::text).collect();
    assert_eq!(texts, ["a", "b"]);
    assert_eq!(loaded.warnings.len(), 1);
    assert_eq!(
        loaded.warnings[0].kind,
        WarningKind::Debris {
            len: torn.len() as u64,
            acknowledged: true
        }
    );
    assert_eq!(
        loaded.warnings[0].to_string(),
        format!(
            "{}: line 2: remains of an interrupted write ({} bytes) skipped",
            path.display(),
            torn.len()
        )
    );
    // The forward reader agrees.
    let mut history = s.history().unwrap();
    let lines: Vec<usize> = history.by_ref().map(|r| r.unwrap().0).collect();
    assert_eq!(lines, [1, 4]);
    assert_eq!(history.warnings(), loaded.warnings.as_slice());
}

#[test]
fn a_torn_tail_that_is_a_whole_entry_becomes_a_line() {
    let (_dir, path) = temp_session();
    let whole =
        "{\"type\":\"message\",\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"}]}";
    let s = session_with(&path, whole.as_bytes());
    // Before: already the last line of the conversation (JSON Lines allows the final newline
    // to be missing), with no warning.
    let before = s.load_context().unwrap();
    assert_eq!(before.context.messages.len(), 1);
    assert!(before.warnings.is_empty());
    s.append(&[user("b")]).unwrap();
    let text = fs::read_to_string(&path).unwrap();
    assert!(text.starts_with(&format!("{whole}\n{{\"type\":\"message\",\"id\":\"m1\"")));
    let loaded = s.load_context().unwrap();
    assert_eq!(loaded.context.messages.len(), 2);
    assert!(loaded.warnings.is_empty());
}

#[test]
fn cut_off_lines_at_the_end_are_acknowledged_together() {
    // What an append interrupted twice leaves: a torn line, the newline of the next append,
    // then the start of its record.
    let (_dir, path) = temp_session();
    let good = "{\"type\":\"message\",\"role\":\"user\",\"content\":[]}\n";
    let (cut, tail) = ("{\"type\":\"mes", "{\"type\":\"torn_wr");
    let s = session_with(&path, format!("{good}{cut}\n{tail}").as_bytes());
    let loaded = s.load_context().unwrap();
    let kinds: Vec<_> = loaded.warnings.iter().map(|w| w.kind.clone()).collect();
    assert_eq!(
        kinds,
        [
            WarningKind::Debris {
                len: cut.len() as u64,
                acknowledged: false
            },
            WarningKind::TornTail {
                len: tail.len() as u64
            }
        ]
    );
    s.append(&[user("b")]).unwrap();
    let loaded = s.load_context().unwrap();
    assert_eq!(loaded.context.messages.len(), 2);
    assert_eq!(
        loaded
            .warnings
            .iter()
            .map(|w| w.kind.clone())
            .collect::<Vec<_>>(),
        [WarningKind::Debris {
            len: (cut.len() + 1 + tail.len()) as u64,
            acknowledged: true
        }]
    );
}

#[test]
fn fsync_on_appends_too() {
    let (_dir, path) = temp_session();
    let s = Session::create(&path, panto_session::SessionOptions::default()).unwrap();
    let ids = s.append(&[user("durable")]).unwrap();
    assert_eq!(ids.len(), 1);
    assert_eq!(ids[0].len(), 29, "{}", ids[0]);
    assert!(ids[0].starts_with('m'));
    assert_ne!(s.append(&[user("again")]).unwrap()[0], ids[0]);
    assert_eq!(s.load_context().unwrap().context.messages.len(), 2);
}

#[test]
fn appending_to_a_missing_file_is_not_found() {
    let (_dir, path) = temp_session();
    let s = Session::create(&path, opts()).unwrap();
    fs::remove_file(&path).unwrap();
    let err = s.append(&[user("a")]).unwrap_err();
    assert!(matches!(err, SessionError::NotFound { .. }), "{err}");
    assert!(!path.exists(), "append must not create the session file");
}
