//! The constructors and setters of the `#[non_exhaustive]` types, used from outside the crate
//! as a dependent must: each value built equals the one decoded from its Contract 1 line.

use panto_model::{
    CompactionBlock, CompactionEntry, ContentBlock, DecodeError, Entry, Extra, ImageBlock, Message,
    OtherBlock, Role, TextBlock, ThinkingBlock, ToolResultBlock, ToolResultContent, ToolUseBlock,
    Trigger, UnknownEntry, Usage, decode_line, encode_line,
};
use serde_json::json;

/// `value` equals the entry decoded from `line`, and encodes back to it (without the newline).
fn check(value: Entry, line: &str) {
    assert_eq!(decode_line(line.as_bytes(), 1).unwrap(), value, "{line}");
    assert_eq!(encode_line(&value).trim_end(), line);
}

fn extra(pairs: serde_json::Value) -> Extra {
    let serde_json::Value::Object(map) = pairs else {
        panic!("not an object")
    };
    map.into_iter().collect()
}

#[test]
fn an_assistant_message_with_every_setter() {
    let message = Message::new(
        Role::Assistant,
        vec![
            ContentBlock::Thinking(ThinkingBlock::new("hmm", Some("sig".into()))),
            ContentBlock::Text(
                TextBlock::new("hi")
                    .with_extra(extra(json!({"cache_control": {"type": "ephemeral"}}))),
            ),
            ContentBlock::ToolUse(ToolUseBlock::new("t1", "read", json!({"path": "a"}))),
            ContentBlock::Other(OtherBlock::new(
                "redacted_thinking",
                extra(json!({"data": "x"})),
            )),
        ],
    )
    .with_id("m2")
    .with_model("big")
    .with_stop_reason("tool_use")
    .with_usage(
        Usage::new(10, 5)
            .with_cache_read(100)
            .with_cache_creation(None),
    )
    .with_extra(extra(json!({"ts": 1})));
    check(
        Entry::Message(message),
        r#"{"type":"message","id":"m2","role":"assistant","model":"big","stop_reason":"tool_use","usage":{"input_tokens":10,"output_tokens":5,"cache_read_input_tokens":100},"content":[{"type":"thinking","thinking":"hmm","signature":"sig"},{"type":"text","text":"hi","cache_control":{"type":"ephemeral"}},{"type":"tool_use","id":"t1","name":"read","input":{"path":"a"}},{"type":"redacted_thinking","data":"x"}],"ts":1}"#,
    );
}

#[test]
fn a_user_message_of_results_images_and_a_summary() {
    let image = ImageBlock::new(json!({"type": "url", "url": "https://example.com/a.png"}));
    let message = Message::new(
        Role::User,
        vec![
            ContentBlock::Compaction(CompactionBlock::new("before")),
            ContentBlock::ToolResult(ToolResultBlock::new(
                "t1",
                ToolResultContent::Blocks(vec![ContentBlock::Image(image)]),
                None,
            )),
        ],
    );
    check(
        Entry::Message(message),
        r#"{"type":"message","role":"user","content":[{"type":"compaction","summary":"before"},{"type":"tool_result","tool_use_id":"t1","content":[{"type":"image","source":{"type":"url","url":"https://example.com/a.png"}}]}]}"#,
    );
}

#[test]
fn a_compaction_entry_and_an_unknown_entry() {
    let entry = CompactionEntry::new("s")
        .with_id("c1")
        .with_trigger(Trigger::Manual)
        .with_model("big")
        .with_instructions("focus")
        .with_tokens(900, 100)
        .with_kept_messages(2);
    check(
        Entry::Compaction(entry),
        r#"{"type":"compaction","id":"c1","summary":"s","trigger":"manual","model":"big","instructions":"focus","tokens_before":900,"tokens_after":100,"kept_messages":2}"#,
    );
    check(
        Entry::Unknown(UnknownEntry::new("note", extra(json!({"id": "n1"})))),
        r#"{"type":"note","id":"n1"}"#,
    );
}

#[test]
fn a_decode_error_built_by_hand_reads_as_a_decoded_one() {
    let decoded = decode_line(br#"{"type":"message","role":"robot","content":[]}"#, 7).unwrap_err();
    let built = DecodeError::new(
        decoded.line,
        decoded.column,
        decoded.path.clone(),
        decoded.message.clone(),
    );
    assert_eq!(built, decoded);
    assert!(built.to_string().starts_with("line 7"), "{built}");
}
