//! Files shaped like those other programs (Node and Python agents) write: each input of
//! issue 12 loads, or fails with a clear error, and every byte panto does not model survives a
//! copy.

use std::fs;

use panto_model::{COPIES_MARKED, ContentBlock, Entry, KEPT_BY, Message, RawJson, decode_line};
use panto_session::{Session, SessionError, WarningKind};
use serde_json::json;

use crate::{forward, opts, session_with, temp_session, user};

/// A message line in the shape other programs write.
fn message(id: &str, role: &str, text: &str) -> String {
    format!(
        "{{\"type\":\"message\",\"id\":\"{id}\",\"role\":\"{role}\",\"content\":[{{\"type\":\"text\",\"text\":\"{text}\"}}]}}"
    )
}

/// The texts of a context's messages (the compaction message as `<summary>`).
fn texts(s: &Session) -> Vec<String> {
    s.load_context()
        .unwrap()
        .context
        .messages
        .iter()
        .map(|m| match m.compaction_summary() {
            Some(summary) => format!("<{summary}>"),
            None => m.text(),
        })
        .collect()
}

#[test]
fn a_complete_last_line_without_a_final_newline_is_part_of_the_conversation() {
    let (_dir, path) = temp_session();
    let file = format!(
        "{}\n{}",
        message("a", "user", "one"),
        message("b", "assistant", "two")
    );
    let s = session_with(&path, file.as_bytes());
    let loaded = s.load_context().unwrap();
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
    assert_eq!(texts(&s), ["one", "two"]);
    // The forward reader yields it with its line number, and agrees.
    let lines: Vec<usize> = s.history().unwrap().map(|r| r.unwrap().0).collect();
    assert_eq!(lines, [1, 2]);
    assert_eq!(forward(&s), loaded.context);
    // The next append ends it with a newline first, and the message stays in the conversation.
    s.append(&[user("three")]).unwrap();
    let text = fs::read_to_string(&path).unwrap();
    assert!(text.starts_with(&format!("{file}\n{{")), "{text}");
    assert_eq!(texts(&s), ["one", "two", "three"]);
}

#[test]
fn a_tail_that_does_not_decode_stays_a_torn_tail() {
    let (_dir, path) = temp_session();
    // Complete JSON, but not an entry: a cut-off write cannot tell it from one.
    let tail = r#"{"type":"message","role":"user"}"#;
    let file = format!("{}\n{tail}", message("a", "user", "one"));
    let s = session_with(&path, file.as_bytes());
    let loaded = s.load_context().unwrap();
    assert_eq!(texts(&s), ["one"]);
    assert_eq!(
        loaded.warnings[0].kind,
        WarningKind::TornTail {
            len: tail.len() as u64
        }
    );
    // The append acknowledges it, so it is never read as an error later.
    s.append(&[user("two")]).unwrap();
    assert_eq!(texts(&s), ["one", "two"]);
    assert!(fs::read_to_string(&path).unwrap().contains("torn_write"));
}

#[test]
fn a_lone_surrogate_loads_and_a_copy_is_valid_utf8_that_keeps_carried_escapes() {
    let (_dir, path) = temp_session();
    // What JSON.stringify writes for a string cut inside an emoji, in a text and in a tool
    // argument.
    let line = r#"{"type":"message","id":"a","role":"assistant","content":[{"type":"text","text":"cut \ud83d"},{"type":"tool_use","id":"t1","name":"echo","input":{"s":"\ud83d","pair":"\ud83d\ude00"}}],"x_note":"\udc00 trailing"}"#;
    let s = session_with(&path, format!("{line}\n").as_bytes());
    let loaded = s.load_context().unwrap();
    let w = &loaded.warnings[0];
    assert_eq!(w.kind, WarningKind::LoneSurrogate);
    assert_eq!(
        w.to_string(),
        format!(
            "{}: line 1: lone surrogate escape read as U+FFFD (a string cut inside a character)",
            path.display()
        )
    );
    let m = &loaded.context.messages[0];
    assert_eq!(m.text(), "cut \u{fffd}");
    let ContentBlock::ToolUse(call) = &m.content[1] else {
        panic!("{m:?}")
    };
    // The argument panto only carries keeps the escape exactly; its parsed view is U+FFFD.
    assert_eq!(call.input.json(), r#"{"s":"\ud83d","pair":"\ud83d\ude00"}"#);
    assert_eq!(call.input["s"], json!("\u{fffd}"));
    assert_eq!(call.input["pair"], json!("😀"));

    // A copy (as a compaction writes it) is valid UTF-8, keeps the carried escapes, and reads
    // back.
    let mut copy = m.clone();
    copy.id = None;
    copy.extra.insert(KEPT_BY.into(), json!("c1"));
    s.append(&[Entry::Message(copy)]).unwrap();
    let text = String::from_utf8(fs::read(&path).unwrap()).expect("the copy is UTF-8");
    let written = text.lines().nth(1).unwrap();
    assert!(written.contains(r#""input":{"s":"\ud83d","pair":"\ud83d\ude00"}"#));
    assert!(written.contains(r#""x_note":"\udc00 trailing""#));
    assert!(written.contains("cut \u{fffd}"));
    serde_json::from_str::<serde::de::IgnoredAny>(written).expect("a JSON line");
    assert_eq!(s.load_context().unwrap().context.messages.len(), 2);
}

#[test]
fn a_byte_order_mark_at_the_start_is_skipped_with_a_warning() {
    let (_dir, path) = temp_session();
    let file = format!(
        "\u{feff}{}\n{}\n",
        message("a", "user", "one"),
        message("b", "assistant", "two")
    );
    let s = session_with(&path, file.as_bytes());
    let loaded = s.load_context().unwrap();
    assert_eq!(texts(&s), ["one", "two"]);
    assert_eq!(loaded.warnings.len(), 1);
    assert_eq!(
        loaded.warnings[0].to_string(),
        format!(
            "{}: line 1: byte-order mark at the start of the file skipped",
            path.display()
        )
    );
    let mut history = s.history().unwrap();
    assert_eq!(history.by_ref().count(), 2);
    assert_eq!(history.warnings(), loaded.warnings.as_slice());
    // A mark anywhere else is not skipped: it is a bad line.
    let (_dir2, path2) = temp_session();
    let file = format!(
        "{}\n\u{feff}{}\n",
        message("a", "user", "one"),
        message("b", "user", "x")
    );
    let err = session_with(&path2, file.as_bytes())
        .load_context()
        .unwrap_err();
    assert!(err.to_string().contains("line 2, column 1"), "{err}");
}

#[test]
fn unknown_fields_survive_a_kept_copy_byte_for_byte() {
    let (_dir, path) = temp_session();
    let unknown = r#""x_big":123456789012345678901234567890,"x_exp":1e2,"x_tiny":1e-400,"x_order":{"z":1,"a":[{"y":2,"b":-0.0}]},"x_space":{ "k" : [ 1 , 2 ] }"#;
    let line = format!(
        r#"{{"type":"message","id":"a","role":"user","content":[{{"type":"text","text":"hi","x_cc":{{"b":1,"a":2}}}}],{unknown}}}"#
    );
    let s = session_with(&path, format!("{line}\n").as_bytes());
    let m = s.load_context().unwrap().context.messages[0].clone();
    let mut copy = m;
    copy.id = Some("a2".into());
    copy.extra.insert(KEPT_BY.into(), json!("c1"));
    s.append(&[Entry::Message(copy)]).unwrap();
    let text = fs::read_to_string(&path).unwrap();
    let written = text.lines().nth(1).unwrap();
    assert_eq!(
        written,
        format!(
            r#"{{"type":"message","id":"a2","role":"user","content":[{{"type":"text","text":"hi","x_cc":{{"b":1,"a":2}}}}],{unknown},"kept_by":"c1"}}"#
        )
    );
}

/// A provider answer whose tool arguments nest `depth` deep.
fn deep_answer(depth: usize) -> Message {
    let input = format!("{}1{}", "[".repeat(depth), "]".repeat(depth));
    let mut m = Message::new(
        panto_model::Role::Assistant,
        vec![ContentBlock::tool_use(
            "t1",
            "deep",
            RawJson::from_text(input).unwrap(),
        )],
    );
    m.stop_reason = Some("tool_use".into());
    m
}

#[test]
fn tool_arguments_of_any_depth_that_panto_appends_load() {
    for depth in [126, 127, 128, 129, 10_000] {
        let (_dir, path) = temp_session();
        let s = Session::create(&path, opts()).unwrap();
        s.append(&[user("go"), Entry::Message(deep_answer(depth))])
            .unwrap();
        let loaded = s.load_context().unwrap();
        assert_eq!(loaded.context.messages.len(), 2, "depth {depth}");
        let mut want = deep_answer(depth);
        want.id = loaded.context.messages[1].id.clone();
        assert_eq!(loaded.context.messages[1], want, "depth {depth}");
        assert_eq!(forward(&s), loaded.context, "depth {depth}");
    }
    // The same from a `Value` an adapter built (126 deep is within what it parses).
    let mut v = json!(1);
    for _ in 0..126 {
        v = json!([v]);
    }
    let (_dir, path) = temp_session();
    let s = Session::create(&path, opts()).unwrap();
    let answer = Message::new(
        panto_model::Role::Assistant,
        vec![ContentBlock::tool_use("t1", "deep", v.clone())],
    );
    s.append(&[user("go"), Entry::Message(answer)]).unwrap();
    let loaded = s.load_context().unwrap();
    let ContentBlock::ToolUse(call) = &loaded.context.messages[1].content[0] else {
        panic!()
    };
    assert_eq!(*call.input, v);
}

#[test]
fn cr_only_line_endings_are_an_error_naming_the_file_for_readers_and_appenders() {
    let (_dir, path) = temp_session();
    let file = format!(
        "{}\r{}\r",
        message("a", "user", "one"),
        message("b", "user", "two")
    );
    let s = session_with(&path, file.as_bytes());
    let col = message("a", "user", "one").len() + 1;
    let want = format!(
        "{}: line 1, column {col}: lines end with a carriage return alone (CR line endings); panto reads lines ending with LF or CRLF",
        path.display()
    );
    assert_eq!(s.load_context().unwrap_err().to_string(), want);
    let err = s.history().unwrap().find_map(Result::err).unwrap();
    assert_eq!(err.to_string(), want);
    // Appending would acknowledge the whole file as debris: refused, file unchanged.
    assert_eq!(s.append(&[user("x")]).unwrap_err().to_string(), want);
    assert_eq!(fs::read(&path).unwrap(), file.as_bytes());
    // CRLF is fine.
    let (_dir2, path2) = temp_session();
    let crlf = format!(
        "{}\r\n{}\r\n",
        message("a", "user", "one"),
        message("b", "user", "two")
    );
    assert_eq!(
        texts(&session_with(&path2, crlf.as_bytes())),
        ["one", "two"]
    );
}

#[test]
fn empty_and_blank_only_files_behave_alike() {
    for bytes in [
        &b""[..],
        b"\n",
        b"\n\n  \t\n",
        b"\r\n   ",
        b"\xEF\xBB\xBF",
        b"\xEF\xBB\xBF\n\n",
    ] {
        let (_dir, path) = temp_session();
        let s = session_with(&path, bytes);
        let want = format!(
            "{}: line 1: the session file is empty: no entries",
            path.display()
        );
        let err = s.load_context().unwrap_err();
        assert!(
            matches!(err, SessionError::Empty { .. }),
            "{bytes:?}: {err:?}"
        );
        assert_eq!(err.to_string(), want);
        let err = match s.history() {
            Err(e) => e,
            Ok(mut h) => h.find_map(Result::err).unwrap(),
        };
        assert!(
            matches!(err, SessionError::Empty { .. }),
            "{bytes:?}: {err:?}"
        );
        // Appending starts the session, as with a 0-byte file.
        s.append(&[user("first")]).unwrap();
        assert_eq!(texts(&s), ["first"], "{bytes:?}");
    }
}

/// Lines of a session whose compaction another program wrote: `kept` announces its copies
/// (or not), and the copies carry the stale usage of the originals but no `kept_by`.
fn foreign_compaction(kept: Option<u64>) -> String {
    let announce = kept.map_or(String::new(), |n| format!(",\"kept_messages\":{n}"));
    let stale = r#"{"type":"message","id":"m2","role":"assistant","content":[{"type":"text","text":"old answer"}],"usage":{"input_tokens":180000,"output_tokens":530}}"#;
    [
        message("m1", "user", "old question"),
        stale.to_owned(),
        format!("{{\"type\":\"compaction\",\"id\":\"c1\",\"summary\":\"we talked\"{announce}}}"),
        message("m1", "user", "old question"),
        stale.to_owned(),
        String::new(),
    ]
    .join("\n")
}

#[test]
fn a_foreign_compaction_is_read_by_contract_1_and_its_copies_are_marked() {
    for kept in [Some(2), None] {
        let (_dir, path) = temp_session();
        let s = session_with(&path, foreign_compaction(kept).as_bytes());
        let loaded = s.load_context().unwrap();
        assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
        assert_eq!(
            texts(&s),
            ["<we talked>", "old question", "old answer"],
            "{kept:?}"
        );
        let ctx = &loaded.context;
        assert_eq!(ctx.kept, 2);
        assert!(ctx.conversation().iter().all(|m| m.kept_by() == Some("c1")));
        assert_eq!(forward(&s), loaded.context);
        // The file itself is unchanged by reading, and a new message comes after the copies.
        s.append(&[user("new")]).unwrap();
        let again = s.load_context().unwrap().context;
        assert_eq!(again.messages.len(), 4, "{kept:?}");
        assert_eq!(
            again.messages[3].kept_by(),
            kept.map_or(Some("c1"), |_| None)
        );
        // Sizing never trusts the usage of copies so marked: panto-size's
        // `usage_of_a_foreign_compactions_copies_is_not_trusted`.
    }
}

#[test]
fn the_store_writes_a_compaction_as_given_and_adds_no_marker() {
    // `copies_marked` is the compactor's to write (it knows its copies follow); the store keeps
    // every entry as it is given, so a store that forgets a step cannot lose a guarantee.
    let (_dir, path) = temp_session();
    let s = Session::create(&path, opts()).unwrap();
    s.append(&[user("a")]).unwrap();
    let mut group = crate::compaction_group(Some("c1"), "sum", &[Message::user_text("a")], Some(1));
    if let Entry::Compaction(c) = &mut group[0] {
        c.extra.remove(COPIES_MARKED);
    }
    s.append(&group).unwrap();
    let text = fs::read_to_string(&path).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    match decode_line(lines[1].as_bytes(), 2).unwrap() {
        Entry::Compaction(c) => assert_eq!(c.extra.get(COPIES_MARKED), None),
        other => panic!("{other:?}"),
    }
}
