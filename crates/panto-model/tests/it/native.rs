//! Providers' native compaction blocks and the facts about thinking that messages carry.
//!
//! The shapes are the providers' documented ones:
//! - Anthropic's server-side compaction block, `{"type":"compaction","content":...,
//!   "signature":...}` with optional fields such as `tool_changes`: "Compaction on demand"
//!   (<https://platform.claude.com/docs/en/build-with-claude/compaction-on-demand>, beta
//!   `compact-2026-09-04`) and "Compaction at a token threshold" (beta `compact-2026-01-12`).
//! - `OpenAI`'s Responses compaction item, `{"id":...,"type":"compaction","encrypted_content":...}`:
//!   "Compaction" (<https://developers.openai.com/api/docs/guides/compaction>).
//!
//! Both use `"type":"compaction"`, which Contract 1 gives to panto's own compaction block
//! `{"type":"compaction","summary":...}`. The rule: the block with a `summary` is panto's; one
//! without is a provider's, kept whole as an unknown block and written back byte for byte.

use panto_model::{
    ContentBlock, Entry, Message, NATIVE_ANTHROPIC, NATIVE_OPENAI_RESPONSES, THINKING_KEPT,
    THINKING_RESET, decode_line, encode_line, replay,
};
use serde_json::{Value, json};

/// An assistant message whose first block is Anthropic's compaction block, with a field panto
/// does not know (`tool_changes`) and a number spelled the way the server spelled it.
const ANTHROPIC_LINE: &str = r#"{"type":"message","id":"m4","role":"assistant","content":[{"type":"compaction","content":"The user is renaming the data model; Recipe and Step are done.","signature":"c2lnLWFudGhyb3BpYy0x","tool_changes":{"removed":["old_tool"],"at":1e2}},{"type":"text","text":"Continuing with Ingredient."}]}"#;

/// An `OpenAI` compaction item as an output item lists it: `id` before `type`.
const OPENAI_LINE: &str = r#"{"type":"message","id":"m5","role":"assistant","content":[{"id":"cmp_001","type":"compaction","encrypted_content":"gAAAAABo-opaque==","created_by":"server"}]}"#;

fn message(line: &str) -> Message {
    match decode_line(line.as_bytes(), 1).unwrap() {
        Entry::Message(m) => m,
        other => panic!("not a message: {other:?}"),
    }
}

#[test]
fn an_anthropic_compaction_block_is_kept_whole_and_written_back_byte_for_byte() {
    let m = message(ANTHROPIC_LINE);
    let ContentBlock::Other(block) = &m.content[0] else {
        panic!("read as {:?}", m.content[0]);
    };
    assert_eq!(block.native_compaction(), Some(NATIVE_ANTHROPIC));
    assert_eq!(
        block.native_summary(),
        Some("The user is renaming the data model; Recipe and Step are done.")
    );
    assert_eq!(
        encode_line(&Entry::Message(m)),
        format!("{ANTHROPIC_LINE}\n")
    );
}

#[test]
fn an_openai_compaction_item_keeps_its_key_order() {
    let m = message(OPENAI_LINE);
    let ContentBlock::Other(block) = &m.content[0] else {
        panic!("read as {:?}", m.content[0]);
    };
    assert_eq!(block.native_compaction(), Some(NATIVE_OPENAI_RESPONSES));
    assert_eq!(block.native_summary(), None, "the item is opaque");
    assert_eq!(block.type_index, 1, "`type` came second");
    assert_eq!(encode_line(&Entry::Message(m)), format!("{OPENAI_LINE}\n"));
}

#[test]
fn type_last_in_an_unknown_block_stays_last() {
    let line = r#"{"type":"message","role":"assistant","content":[{"data":"x","type":"redacted_thinking"}]}"#;
    let m = message(line);
    assert_eq!(encode_line(&Entry::Message(m)), format!("{line}\n"));
}

#[test]
fn the_block_with_a_summary_is_still_pantos() {
    let m = message(
        r#"{"type":"message","role":"user","content":[{"type":"compaction","summary":"s","content":"x"}]}"#,
    );
    assert_eq!(m.compaction_summary(), Some("s"));
}

#[test]
fn replay_carries_a_native_payload_exactly_into_the_compaction_block() {
    let native = r#"{"protocol":"anthropic","model":"claude-x","payload":[{"type":"compaction","content":"sum","signature":"c2ln","tool_changes":{"n":1.50}}]}"#;
    let lines = [
        r#"{"type":"message","id":"m1","role":"user","content":[{"type":"text","text":"old"}]}"#.to_owned(),
        format!(
            r#"{{"type":"compaction","id":"c1","summary":"sum","kept_messages":1,"copies_marked":true,"native":{native}}}"#
        ),
        r#"{"type":"message","id":"m2","role":"user","kept_by":"c1","thinking_kept":"c1","content":[{"type":"text","text":"kept"}]}"#.to_owned(),
    ];
    let context = replay(lines.iter().map(|l| decode_line(l.as_bytes(), 1).unwrap()));
    let ContentBlock::Compaction(block) = &context.messages[0].content[0] else {
        panic!("no compaction block");
    };
    assert_eq!(block.native_protocol(), Some("anthropic"));
    let payload = block.native_payload().unwrap();
    assert_eq!(
        payload[0].json(),
        r#"{"type":"compaction","content":"sum","signature":"c2ln","tool_changes":{"n":1.50}}"#
    );
    assert!(context.messages[1].thinking_kept());
}

#[test]
fn thinking_kept_holds_only_for_the_compaction_that_wrote_it() {
    let mut copy = Message::user_text("kept");
    copy.extra.insert("kept_by".into(), json!("c2"));
    copy.extra.insert(THINKING_KEPT.into(), json!("c1"));
    assert!(
        !copy.thinking_kept(),
        "kept again by c2: c1's word no longer holds"
    );
    copy.extra.insert(THINKING_KEPT.into(), json!("c2"));
    assert!(copy.thinking_kept());
    let mut reply = Message::assistant_text("ok");
    assert!(!reply.thinking_reset());
    reply.extra.insert(THINKING_RESET.into(), Value::Bool(true));
    assert!(reply.thinking_reset());
}
