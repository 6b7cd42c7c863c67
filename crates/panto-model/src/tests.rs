//! Unit tests for decoding, turns, validation, replay and ids, driven by small literal sessions.

use serde_json::{Value, json};

use crate::*;

/// Decodes one line and checks the error it gives.
fn check_error(line: &str, expect: &str) {
    let err = decode_line(line.as_bytes(), 12).expect_err("line should not decode");
    assert_eq!(err.to_string(), expect);
}

/// Decodes JSONL text, stopping at the first error.
fn parse(text: &str) -> Vec<Entry> {
    read_entries(text.as_bytes()).expect("valid session")
}

fn messages(text: &str) -> Vec<Message> {
    parse(text)
        .into_iter()
        .filter_map(|e| match e {
            Entry::Message(m) => Some(m),
            _ => None,
        })
        .collect()
}

#[test]
fn contract_example_round_trips() {
    let text = r#"{"type":"message","id":"m7","role":"user","content":[{"type":"text","text":"Fix the failing test"}]}
{"type":"message","id":"m8","role":"assistant","model":"claude-sonnet-4-5","stop_reason":"tool_use","usage":{"input_tokens":5120,"output_tokens":88,"cache_read_input_tokens":0,"cache_creation_input_tokens":0},"content":[{"type":"text","text":"Reading it."},{"type":"tool_use","id":"toolu_1","name":"read","input":{"path":"src/lib.rs"}}]}
{"type":"message","id":"m9","role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"fn main() {}","is_error":false}]}
{"type":"compaction","id":"c1","summary":"...","trigger":"manual","model":"m","instructions":"keep bugs","tokens_before":182000,"tokens_after":23000}
"#;
    for line in text.lines() {
        let entry = decode_line(line.as_bytes(), 1).unwrap();
        let back: Value = serde_json::from_str(&encode_line(&entry)).unwrap();
        let orig: Value = serde_json::from_str(line).unwrap();
        assert_eq!(back, orig);
    }
}

#[test]
fn every_trigger_reads_and_writes_back_as_its_word() {
    for (word, trigger) in [
        ("manual", Trigger::Manual),
        ("overflow", Trigger::Overflow),
        ("auto", Trigger::Auto),
        ("scheduled", Trigger::Other("scheduled".into())),
    ] {
        assert_eq!(Trigger::parse(word), trigger);
        assert_eq!(trigger.as_str(), word);
        let line = format!(r#"{{"type":"compaction","id":"c1","summary":"s","trigger":"{word}"}}"#);
        let entry = decode_line(line.as_bytes(), 1).unwrap();
        let Entry::Compaction(c) = &entry else {
            panic!("not a compaction")
        };
        assert_eq!(c.trigger.as_ref(), Some(&trigger));
        let back: Value = serde_json::from_str(&encode_line(&entry)).unwrap();
        assert_eq!(back, serde_json::from_str::<Value>(&line).unwrap());
    }
}

#[test]
fn unknown_fields_nulls_and_late_type_survive() {
    let line = r#"{"role":"assistant","x_meta":{"a":[1,2]},"id":null,"content":[{"text":"hi","type":"text","cache_control":{"type":"ephemeral"}},{"type":"redacted_thinking","data":"abc"}],"usage":{"output_tokens":3,"input_tokens":9,"service_tier":"standard","cache_read_input_tokens":null},"type":"message"}"#;
    let entry = decode_line(line.as_bytes(), 1).unwrap();
    let Entry::Message(m) = &entry else {
        panic!("not a message")
    };
    assert_eq!(m.id, None);
    assert_eq!(m.content[0].type_name(), "text");
    assert_eq!(m.content[1].type_name(), "redacted_thinking");
    assert_eq!(m.usage.as_ref().unwrap().input_total(), 9);
    let back: Value = serde_json::from_str(&encode_line(&entry)).unwrap();
    assert_eq!(back, serde_json::from_str::<Value>(line).unwrap());
}

#[test]
fn unknown_entry_type_is_kept_whole() {
    let line = r#"{"type":"label","id":"l1","content":"not blocks","n":1}"#;
    let entry = decode_line(line.as_bytes(), 1).unwrap();
    assert_eq!(entry.type_name(), "label");
    assert_eq!(entry.id(), Some("l1"));
    let back: Value = serde_json::from_str(&encode_line(&entry)).unwrap();
    assert_eq!(back, serde_json::from_str::<Value>(line).unwrap());
}

#[test]
fn string_content_becomes_one_text_block() {
    let m: Message = from_json(br#"{"role":"user","content":"hello"}"#).unwrap();
    assert_eq!(m.content, vec![ContentBlock::text("hello")]);
}

#[test]
fn errors_name_line_column_and_field() {
    check_error(
        r#"{"type":"message","role":"user","content":[{"type":"text","text":"a"},{"type":"tool_result","content":"x"}]}"#,
        "line 12, column 106: content[1].tool_use_id: missing field",
    );
    check_error(
        r#"{"type":"message","role":"system","content":[]}"#,
        "line 12, column 33: role: unknown variant `system`, expected `user` or `assistant`",
    );
    check_error(
        r#"{"type":"message","role":"user"}"#,
        "line 12, column 32: content: missing field",
    );
    check_error(
        r#"{"type":"message","role":"assistant","content":[],"usage":{"input_tokens":-1,"output_tokens":2}}"#,
        "line 12, column 76: usage.input_tokens: invalid value: integer `-1`, expected u64",
    );
    check_error(
        r#"{"type":"message","role":"user","content":[{"type":"text","text":"a"}]"#,
        "line 12, column 70: EOF while parsing an object",
    );
    check_error(
        r#"["not an object"]"#,
        "line 12: invalid type: sequence, expected a session entry object",
    );
    check_error(
        r#"{"role":"user"}"#,
        "line 12, column 15: type: missing field",
    );
    check_error(
        r#"{"type":"message","role":"user","content":[]} trailing"#,
        "line 12, column 47: trailing characters after the JSON object",
    );
    check_error(
        r#"{"type":"compaction","summary":"a","summary":"b"}"#,
        "line 12, column 44: summary: duplicate field",
    );
}

#[test]
fn late_type_errors_still_name_the_field() {
    let err = decode_line(
        br#"{"role":"user","content":[{"text":5,"type":"text"}],"type":"message"}"#,
        3,
    )
    .unwrap_err();
    assert_eq!(err.line, 3);
    assert!(err.to_string().contains("content[0]"), "{err}");
}

#[test]
fn invalid_utf8_is_an_error_not_a_panic() {
    let mut line =
        br#"{"type":"message","role":"user","content":[{"type":"text","text":""#.to_vec();
    line.extend_from_slice(&[0xff, 0xfe]);
    line.extend_from_slice(br#""}]}"#);
    let err = decode_line(&line, 4).unwrap_err();
    assert_eq!(err.line, 4);
    assert_eq!(err.to_string(), "line 4, column 67: not valid UTF-8");
}

#[test]
fn entries_skip_blank_lines_and_count_lines() {
    let text = "\n{\"type\":\"message\",\"role\":\"user\",\"content\":[]}\r\n\n{\"oops\n";
    let (good, bad) = read_entries_lossy(text.as_bytes());
    assert_eq!(good.len(), 1);
    assert_eq!(bad.len(), 1);
    assert_eq!(bad[0].line, 4);
}

const TOOL_LOOP: &str = r#"{"type":"message","role":"user","content":[{"type":"text","text":"go"}]}
{"type":"message","role":"assistant","content":[{"type":"tool_use","id":"a","name":"t","input":{}},{"type":"tool_use","id":"b","name":"t","input":{}}]}
{"type":"message","role":"user","content":[{"type":"tool_result","tool_use_id":"b","content":"1"}]}
{"type":"message","role":"user","content":[{"type":"tool_result","tool_use_id":"a","content":"2"}]}
{"type":"message","role":"assistant","content":[{"type":"text","text":"done"}]}
{"type":"message","role":"user","content":[{"type":"text","text":"thanks"}]}
"#;

#[test]
fn turns_keep_calls_with_results_spread_over_messages() {
    let msgs = messages(TOOL_LOOP);
    assert_eq!(turns(&msgs), vec![0..1, 1..4, 4..5, 5..6]);
    assert_eq!(
        allowed_cuts(&msgs),
        vec![true, true, false, false, true, true, true]
    );
}

#[test]
fn turns_of_nothing_and_of_an_interrupted_call() {
    assert!(turns(&[]).is_empty());
    let msgs = messages(
        r#"{"type":"message","role":"user","content":[{"type":"text","text":"go"}]}
{"type":"message","role":"assistant","content":[{"type":"tool_use","id":"a","name":"t","input":{}}]}
{"type":"message","role":"user","content":[{"type":"text","text":"stop"}]}
"#,
    );
    // The unanswered call does not hold the next prompt in its turn.
    assert_eq!(turns(&msgs), vec![0..1, 1..2, 2..3]);
}

#[test]
fn validation_reports_each_defect() {
    let msgs = messages(
        r#"{"type":"message","role":"user","content":[{"type":"tool_result","tool_use_id":"ghost","content":"?"}]}
{"type":"message","role":"assistant","content":[{"type":"tool_use","id":"a","name":"t","input":{}},{"type":"tool_use","id":"a","name":"t","input":{}}]}
{"type":"message","role":"user","content":[]}
{"type":"message","role":"assistant","content":[{"type":"tool_result","tool_use_id":"a","content":"x"}]}
"#,
    );
    let got: Vec<String> = validate(&msgs).iter().map(ToString::to_string).collect();
    assert_eq!(
        got,
        vec![
            "message 0: tool result for `ghost` has no earlier tool call",
            "message 1: tool call id `a` was already used in message 1",
            "message 2: empty content",
            "message 3: content[0]: a `tool_result` block cannot come from the assistant",
        ]
    );
    let msgs = messages(TOOL_LOOP);
    assert!(validate(&msgs).is_empty());
    let unanswered = messages(
        r#"{"type":"message","role":"assistant","content":[{"type":"tool_use","id":"z","name":"t","input":{}}]}"#,
    );
    assert_eq!(
        validate(&unanswered),
        vec![Problem::UnansweredCall {
            message: 0,
            tool_use_id: "z".into()
        }]
    );
}

fn msg_entry(role: Role, text: &str) -> Entry {
    Entry::Message(Message::new(role, vec![ContentBlock::text(text)]))
}

fn kept_copy(text: &str, by: &str) -> Entry {
    let mut m = Message::user_text(text);
    m.extra.insert(KEPT_BY.into(), json!(by));
    Entry::Message(m)
}

fn compaction(id: &str, summary: &str, kept: Option<u64>) -> Entry {
    let mut c = CompactionEntry::new(summary);
    c.id = Some(id.into());
    c.kept_messages = kept;
    Entry::Compaction(c)
}

#[test]
fn replay_starts_at_the_latest_compaction() {
    let ctx = replay(vec![
        msg_entry(Role::User, "a"),
        compaction("c1", "S1", None),
        msg_entry(Role::User, "b"),
        Entry::Unknown(UnknownEntry {
            kind: "label".into(),
            fields: Extra::new(),
        }),
        compaction("c2", "S2", Some(1)),
        kept_copy("b", "c2"),
        msg_entry(Role::Assistant, "c"),
    ]);
    assert_eq!(ctx.summary(), Some("S2"));
    assert_eq!(ctx.kept, 1);
    let texts: Vec<String> = ctx.conversation().iter().map(Message::text).collect();
    assert_eq!(texts, vec!["b", "c"]);
    assert_eq!(ctx.messages[0].compaction_summary(), Some("S2"));
    assert_eq!(
        ctx.skipped,
        vec![Skipped::UnknownType {
            index: 3,
            kind: "label".into()
        }]
    );
}

#[test]
fn replay_ignores_a_compaction_missing_its_copies() {
    let old = vec![msg_entry(Role::User, "a"), msg_entry(Role::Assistant, "b")];
    // Cut after one of two copies, then a later append.
    let mut entries = old;
    entries.push(compaction("c1", "S1", Some(2)));
    entries.push(kept_copy("a", "c1"));
    entries.push(msg_entry(Role::User, "next"));
    let ctx = replay(entries);
    let texts: Vec<String> = ctx.messages.iter().map(Message::text).collect();
    assert_eq!(texts, vec!["a", "b", "next"]);
    assert_eq!(ctx.compaction, None);
    assert_eq!(
        ctx.skipped,
        vec![Skipped::IncompleteCompaction {
            index: 2,
            expected: 2,
            found: 1
        }]
    );
}

#[test]
fn unknown_fields_are_written_back_as_the_exact_text_they_were_read_as() {
    // Numbers of any size and spelling, key order, nested objects and whitespace, on an entry,
    // a block and a usage record; `type` last exercises the buffered path too.
    let unknown = r#""x_big":123456789012345678901234567890,"x_exp":1e2,"x_tiny":1e-400,"x_z":{"b":[1,{"d":2,"c":-0.0}],"a":null},"x_sp":{ "k" : [ 1 , 2 ] }"#;
    for line in [
        format!(
            r#"{{"type":"message","role":"user","content":[{{"type":"text","text":"hi",{unknown}}}],{unknown}}}"#
        ),
        format!(
            r#"{{"role":"assistant","content":[],"usage":{{"input_tokens":1,"output_tokens":2,{unknown}}},{unknown},"type":"message"}}"#
        ),
    ] {
        let written = encode_line(&decode_line(line.as_bytes(), 1).unwrap());
        assert_eq!(
            written.matches(unknown).count(),
            line.matches(unknown).count(),
            "{written}"
        );
    }
}

#[test]
fn tool_arguments_are_carried_without_recursing_into_them() {
    let deep = format!("{}{}", "[".repeat(5000), "]".repeat(5000));
    let line = format!(
        r#"{{"type":"message","role":"assistant","content":[{{"type":"tool_use","id":"t","name":"n","input":{deep}}}]}}"#
    );
    let entry = decode_line(line.as_bytes(), 1).unwrap();
    assert_eq!(encode_line(&entry), format!("{line}\n"));
    let Entry::Message(m) = entry else { panic!() };
    let ContentBlock::ToolUse(u) = &m.content[0] else {
        panic!()
    };
    assert_eq!(u.input.json(), deep);
    // Code that looks inside gets the text as a string past serde_json's depth limit.
    assert_eq!(u.input.value(), &Value::String(deep));
}

#[test]
fn a_lone_surrogate_reads_as_replacement_in_modelled_strings_and_stays_in_carried_ones() {
    let line = r#"{"type":"message","id":"\ud83d","role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"cut \ud83d\ude00 \ude00"},{"type":"text","text":"x","x":"\udbff"}]}"#;
    let d = decode_line_checked(line.as_bytes(), 1).unwrap();
    assert!(d.replaced_surrogates);
    let Entry::Message(m) = &d.entry else {
        panic!()
    };
    assert_eq!(m.id.as_deref(), Some("\u{fffd}"));
    let ContentBlock::ToolResult(r) = &m.content[0] else {
        panic!()
    };
    assert_eq!(r.content.text(), "cut 😀 \u{fffd}");
    let ContentBlock::Text(t) = &m.content[1] else {
        panic!()
    };
    assert_eq!(t.extra.get_raw("x").unwrap().json(), r#""\udbff""#);
    // A line without one says so.
    let plain = r#"{"type":"message","role":"user","content":"\u00e9"}"#;
    assert!(
        !decode_line_checked(plain.as_bytes(), 1)
            .unwrap()
            .replaced_surrogates
    );
    // A lone surrogate does not hide the real error of a bad line.
    check_error(
        r#"{"type":"message","role":"user","content":[{"type":"text","text":"\ud83d"},{"type":"text"}]}"#,
        "line 12, column 90: content[1].text: missing field",
    );
}

#[test]
fn a_byte_order_mark_at_the_start_of_jsonl_text_is_skipped() {
    let text = "\u{feff}{\"type\":\"message\",\"role\":\"user\",\"content\":\"a\"}\n";
    assert_eq!(parse(text).len(), 1);
}

#[test]
fn a_compaction_whose_copies_are_not_marked_is_read_by_contract_1() {
    let text = r#"{"type":"message","id":"m1","role":"user","content":"old"}
{"type":"compaction","id":"c1","summary":"s","kept_messages":1}
{"type":"message","id":"m1","role":"user","content":"old"}
{"type":"message","id":"m2","role":"user","content":"new"}
"#;
    let ctx = replay(parse(text));
    assert_eq!(ctx.summary(), Some("s"));
    let conv: Vec<(String, Option<&str>)> = ctx
        .conversation()
        .iter()
        .map(|m| (m.text(), m.kept_by()))
        .collect();
    assert_eq!(
        conv,
        [("old".to_owned(), Some("c1")), ("new".to_owned(), None)]
    );
    assert_eq!(ctx.kept, 1);
    assert!(ctx.skipped.is_empty());
    // With panto's marker the same entries are an interrupted append: the old context.
    let marked = text.replace(
        r#""kept_messages":1"#,
        r#""kept_messages":1,"copies_marked":true"#,
    );
    let ctx = replay(parse(&marked));
    assert_eq!(ctx.summary(), None);
    assert_eq!(ctx.messages.len(), 3);
}

/// The shrunk failures of the replay and compaction crash proptests while foreign compactions
/// were being added: an append cut right after its compaction line, no copy yet.
#[test]
fn a_compaction_announcing_copies_as_the_last_entry_is_an_interrupted_append() {
    let text = r#"{"type":"message","id":"m1","role":"user","content":"old"}
{"type":"compaction","id":"c1","summary":"s","kept_messages":1}
"#;
    for marker in ["", r#","copies_marked":true"#] {
        let text = text.replace(
            r#""kept_messages":1"#,
            &format!(r#""kept_messages":1{marker}"#),
        );
        let ctx = replay(parse(&text));
        assert_eq!(ctx.summary(), None, "{marker}");
        assert_eq!(ctx.messages.len(), 1);
        assert!(matches!(
            ctx.skipped[..],
            [Skipped::IncompleteCompaction {
                index: 1,
                expected: 1,
                found: 0
            }]
        ));
    }
}

// Ids.

#[test]
fn sequential_ids_count_across_kinds_from_where_they_start() {
    let s = SequentialIds::new();
    let got: Vec<String> = [IdKind::Compaction, IdKind::Message, IdKind::Other]
        .into_iter()
        .map(|k| s.next_id(k))
        .collect();
    assert_eq!(got, ["c1", "m2", "e3"]);
    assert_eq!(SequentialIds::starting_at(7).next_id(IdKind::Message), "m7");
    assert_eq!(SequentialIds::starting_at(0).next_id(IdKind::Message), "m1");
}

#[test]
fn unique_ids_have_one_shape_and_do_not_repeat() {
    let mut seen = std::collections::HashSet::new();
    for kind in [IdKind::Message, IdKind::Compaction, IdKind::Other] {
        for _ in 0..500 {
            let id = UniqueIds.next_id(kind);
            assert_eq!(id.len(), 29, "{id}");
            assert!(id.starts_with(kind.letter()), "{id}");
            assert!(id[1..].bytes().all(|b| b.is_ascii_hexdigit()), "{id}");
            assert!(seen.insert(id));
        }
    }
}

#[test]
fn unique_ids_lead_with_the_time_so_they_sort_by_it() {
    let early = ids::unique_id(IdKind::Message, 0x0193_a1b2_c3d4, u64::MAX);
    let late = ids::unique_id(IdKind::Message, 0x0193_a1b2_c3d5, 0);
    assert_eq!(early, "m0193a1b2c3d4ffffffffffffffff");
    assert!(early < late);
    // Only the low 48 bits of the clock are kept, so the length never changes.
    assert_eq!(ids::unique_id(IdKind::Compaction, u64::MAX, 1).len(), 29);
}

#[test]
fn every_entry_kind_has_its_letter() {
    let lines = [
        (r#"{"type":"message","role":"user","content":[]}"#, 'm'),
        (r#"{"type":"compaction","summary":"s"}"#, 'c'),
        (r#"{"type":"undo","undoes":"c1"}"#, 'u'),
        (r#"{"type":"bookmark","at":3}"#, 'e'),
    ];
    for (line, letter) in lines {
        let entry = decode_line(line.as_bytes(), 1).expect("a valid line");
        assert_eq!(IdKind::of(&entry).letter(), letter, "{line}");
    }
}

#[test]
fn shared_sources_count_once() {
    let shared: std::sync::Arc<dyn IdSource> = std::sync::Arc::new(SequentialIds::new());
    let boxed: Box<dyn IdSource> = Box::new(std::sync::Arc::clone(&shared));
    assert_eq!(shared.next_id(IdKind::Message), "m1");
    assert_eq!(boxed.next_id(IdKind::Message), "m2");
}

/// A loaded context holds every message, so the fixed size of a message and of a block is
/// memory per message of the whole session (docs/benchmarks.md, profile 6): an empty `Extra`
/// is one pointer, a `RawJson` keeps its parsed value behind one, and a block list is as long
/// as the blocks it holds.
#[cfg(target_pointer_width = "64")]
#[test]
fn messages_and_blocks_stay_small() {
    use std::mem::size_of;
    assert_eq!(size_of::<Extra>(), 8);
    assert_eq!(size_of::<RawJson>(), 32);
    assert!(
        size_of::<ContentBlock>() <= 88,
        "{}",
        size_of::<ContentBlock>()
    );
    assert!(size_of::<Message>() <= 168, "{}", size_of::<Message>());
    for (line, blocks) in [
        (
            r#"{"type":"message","role":"user","content":[{"type":"text","text":"a"}]}"#,
            1,
        ),
        (
            r#"{"type":"message","role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}"#,
            2,
        ),
        (
            r#"{"type":"message","role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"},{"type":"text","text":"c"},{"type":"text","text":"d"},{"type":"text","text":"e"}]}"#,
            5,
        ),
    ] {
        let Entry::Message(m) = serde_json::from_str::<Entry>(line).unwrap() else {
            panic!("not a message: {line}");
        };
        assert_eq!(m.content.len(), blocks);
        assert_eq!(m.content.capacity(), blocks, "{line}");
    }
}

/// The short names of a message read from a file (its id, model and stop reason, a call's
/// tool name) take no allocation of their own, escaped or not; a long one keeps its text.
#[test]
fn short_names_read_from_a_file_are_stored_in_place() {
    let line = r#"{"type":"message","id":"m1","role":"assistant","model":"claude-sonnet-4-5","stop_reason":"tool\u005fuse","content":[{"type":"tool_use","id":"toolu_017qEkVzzPb7b7o4FkgJLF23","name":"read","input":{}}]}"#;
    let Entry::Message(m) = serde_json::from_str::<Entry>(line).unwrap() else {
        panic!("not a message");
    };
    for name in [&m.id, &m.model, &m.stop_reason] {
        let name = name.as_ref().unwrap();
        assert!(name.is_inline(), "{name}");
    }
    assert_eq!(m.stop_reason.as_deref(), Some("tool_use"));
    let ContentBlock::ToolUse(u) = &m.content[0] else {
        panic!("not a call");
    };
    assert!(u.name.is_inline());
    assert_eq!(u.name, "read");
    assert_eq!(u.id, "toolu_017qEkVzzPb7b7o4FkgJLF23");
    let long = r#"{"type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929-with-a-suffix","content":[]}"#;
    let Entry::Message(m) = serde_json::from_str::<Entry>(long).unwrap() else {
        panic!("not a message");
    };
    let model = m.model.unwrap();
    assert!(!model.is_inline());
    assert_eq!(model, "claude-sonnet-4-5-20250929-with-a-suffix");
    let written = encode_line(&Entry::Message(
        Message::new(Role::User, vec![]).with_id("m9"),
    ));
    assert!(written.contains(r#""id":"m9""#), "{written}");
}

/// An `Extra` whose fields were all removed equals one that never had any.
#[test]
fn an_emptied_extra_equals_a_new_one() {
    let mut extra = Extra::new();
    extra.insert("a".to_owned(), json!(1));
    assert_ne!(extra, Extra::new());
    assert_eq!(
        extra.remove("a").map(|v| v.json().to_owned()),
        Some("1".to_owned())
    );
    assert_eq!(extra, Extra::new());
    assert!(extra.is_empty());
    extra.insert("b".to_owned(), json!(2));
    extra.clear();
    assert_eq!(extra, Extra::new());
    assert_eq!(extra.into_iter().count(), 0);
}

proptest::proptest! {
    /// `CallIndex` answers what a scan of every call so far, latest first, answers, for ids
    /// that share a tail, a prefix, or neither, and for lookups of calls far older than the
    /// recent ones it scans first.
    #[test]
    fn a_call_index_finds_the_latest_call_with_an_id(
        ops in proptest::collection::vec((proptest::bool::ANY, 0usize..6, 0usize..3), 0..120),
    ) {
        let ids: Vec<String> = (0..6)
            .map(|i| match i % 3 {
                0 => format!("toolu_{i}_same_tail"),
                1 => format!("call_{i}"),
                _ => format!("{i}-shared-prefix-0123456789abcdef"),
            })
            .collect();
        let mut index = CallIndex::default();
        let mut all: Vec<(&str, usize)> = Vec::new();
        for (n, &(push, id, pad)) in ops.iter().enumerate() {
            if push {
                index.push(&ids[id], n);
                all.push((&ids[id], n));
                // Calls of other ids, so the one looked up may be older than the recent scan.
                for _ in 0..pad * 9 {
                    index.push("toolu_filler", usize::MAX);
                    all.push(("toolu_filler", usize::MAX));
                }
            } else {
                let want = all.iter().rev().find(|(c, _)| *c == ids[id]).map(|&(_, v)| v);
                proptest::prop_assert_eq!(index.latest(&ids[id]), want);
            }
        }
    }
}

/// One of a few entries that put a replayer in each of its states: fresh, after an unknown
/// entry, with a compaction pending its copies, active, or foreign (copies not marked).
fn state_entry(kind: usize, n: usize) -> Entry {
    match kind {
        0 => msg_entry(Role::User, &format!("plain {n}")),
        1 => serde_json::from_str::<Entry>(r#"{"type":"note","text":"x"}"#).unwrap(),
        2 => compaction("c1", "s", Some(2)),
        3 => kept_copy(&format!("copy {n}"), "c1"),
        4 => compaction("c2", "s", None),
        _ => compaction("c3", "s", Some(0)),
    }
}

proptest::proptest! {
    /// `Replayer::push_messages` gives what pushing each message gives, whatever state the
    /// replayer is in (the vector is taken whole only by a fresh one).
    #[test]
    fn pushing_messages_at_once_replays_like_pushing_each(
        before in proptest::collection::vec(0usize..6, 0..6),
        batch in proptest::collection::vec(proptest::bool::ANY, 0..6),
        after in proptest::collection::vec(0usize..6, 0..4),
    ) {
        let before: Vec<Entry> = before.iter().enumerate().map(|(n, &k)| state_entry(k, n)).collect();
        let batch: Vec<Message> = batch
            .iter()
            .enumerate()
            .map(|(n, &copy)| match state_entry(if copy { 3 } else { 0 }, 10 + n) {
                Entry::Message(m) => m,
                _ => unreachable!(),
            })
            .collect();
        let after: Vec<Entry> = after.iter().enumerate().map(|(n, &k)| state_entry(k, 20 + n)).collect();
        let mut one_by_one = before.clone();
        one_by_one.extend(batch.iter().cloned().map(Entry::Message));
        one_by_one.extend(after.iter().cloned());
        let mut replayer = Replayer::new();
        for e in before {
            replayer.push(e);
        }
        replayer.push_messages(batch);
        for e in after {
            replayer.push(e);
        }
        proptest::prop_assert_eq!(replayer.finish(), replay(one_by_one));
    }
}
