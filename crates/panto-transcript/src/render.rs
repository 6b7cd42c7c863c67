//! Rendering: messages to the transcript text, and the user prompt of a compaction request.
//!
//! Everything is written into one `String`, reserved up front from the sizes of the texts;
//! escaping copies unremarkable runs whole, and tool arguments are serialised straight into the
//! buffer.

use panto_model::{ContentBlock, Message, ToolResultContent};

use crate::escape::{Escaper, escape_into, write_json, write_token};
use crate::item::{ItemRef, walk};
use crate::syntax::{
    Head, INTRO, INTRO_WITH_SUMMARY, SUMMARY_CLOSE, SUMMARY_OPEN, TRANSCRIPT_CLOSE, TRANSCRIPT_OPEN,
};

/// Renders messages as the plain-text transcript artifact (format in the crate docs).
///
/// Invariant: `parse_transcript(&render_transcript(m)) == transcript_items(m)` for all `m`, and
/// no text inside `m` can start a marker line or contain an envelope tag.
pub fn render_transcript(messages: &[Message]) -> String {
    let mut out = String::new();
    render_transcript_into(&mut out, messages);
    out
}

/// Appends the transcript of `messages` to `out`, leaving what `out` held untouched.
pub fn render_transcript_into(out: &mut String, messages: &[Message]) {
    out.reserve(estimate(messages));
    walk(messages, |item| write_item(out, item));
}

/// The user prompt of a compaction request: one line saying what the material is, the latest
/// active summary (at most one) in a `<previous-summary>` section when there is one, then the
/// transcript of `prefix` in a `<transcript>` section.
///
/// The previous summary comes first because it covers older events than the transcript, so the
/// model reads the history in order. Invariant: [`crate::parse_request`] finds exactly one
/// transcript section and at most one previous-summary section in the result, and gives back
/// `previous_summary` and the items of `prefix` unchanged.
pub fn render_request(prefix: &[Message], previous_summary: Option<&str>) -> String {
    let summary_len = previous_summary.map_or(0, str::len);
    let mut out = String::with_capacity(estimate(prefix) + summary_len + 512);
    match previous_summary {
        Some(summary) => {
            out.push_str(INTRO_WITH_SUMMARY);
            out.push_str("\n\n");
            out.push_str(SUMMARY_OPEN);
            out.push('\n');
            escape_into(&mut out, summary, true);
            out.push('\n');
            out.push_str(SUMMARY_CLOSE);
            out.push_str("\n\n");
        }
        None => {
            out.push_str(INTRO);
            out.push_str("\n\n");
        }
    }
    out.push_str(TRANSCRIPT_OPEN);
    out.push('\n');
    render_transcript_into(&mut out, prefix);
    out.push_str(TRANSCRIPT_CLOSE);
    out.push('\n');
    out
}

/// A cheap lower bound of the rendered size, so that the buffer grows at most a few times.
fn estimate(messages: &[Message]) -> usize {
    const PER_ITEM: usize = 24;
    let mut n = 0;
    for m in messages {
        for b in &m.content {
            n += PER_ITEM
                + match b {
                    ContentBlock::Text(t) => t.text.len(),
                    ContentBlock::Thinking(t) => t.thinking.len(),
                    ContentBlock::ToolUse(u) => u.name.len() + u.id.len() + json_len(&u.input),
                    ContentBlock::ToolResult(r) => {
                        r.tool_use_id.len()
                            + match &r.content {
                                ToolResultContent::Text(s) => s.len(),
                                ToolResultContent::Blocks(bs) => bs.len() * PER_ITEM,
                            }
                    }
                    ContentBlock::Compaction(c) => c.summary.len(),
                    ContentBlock::Image(_) | ContentBlock::Other(_) => 16,
                };
        }
    }
    n
}

/// An estimate of the compact JSON length of `v`: its strings, keys and punctuation.
fn json_len(v: &serde_json::Value) -> usize {
    use serde_json::Value;
    match v {
        Value::Null | Value::Bool(_) => 5,
        Value::Number(_) => 8,
        Value::String(s) => s.len() + 2,
        Value::Array(items) => 2 + items.iter().map(|i| json_len(i) + 1).sum::<usize>(),
        Value::Object(map) => {
            2 + map
                .iter()
                .map(|(k, v)| k.len() + 4 + json_len(v))
                .sum::<usize>()
        }
    }
}

/// Writes one item: the marker, then `: ` and the body when it is not empty, then a blank line.
fn write_item(out: &mut String, item: ItemRef<'_>) {
    match item {
        ItemRef::Text { role, text } => {
            out.push_str(Head::Text(role).open());
            text_body(out, text);
        }
        ItemRef::Thinking { role, text } => {
            out.push_str(Head::Thinking(role).open());
            text_body(out, text);
        }
        ItemRef::ToolCall {
            role,
            id,
            name,
            input,
        } => {
            out.push_str(Head::ToolCall(role).open());
            out.push(' ');
            write_token(out, name);
            out.push_str(" (");
            write_token(out, id);
            out.push_str(")]: ");
            write_json(out, input);
            out.push_str("\n\n");
        }
        ItemRef::ToolResult {
            id,
            name,
            is_error,
            content,
        } => {
            out.push_str(if is_error {
                Head::ToolError.open()
            } else {
                Head::ToolResult.open()
            });
            if let Some(name) = name {
                out.push(' ');
                write_token(out, name);
            }
            out.push_str(" (");
            write_token(out, id);
            out.push(')');
            match content {
                ToolResultContent::Text(text) => text_body(out, text),
                ToolResultContent::Blocks(blocks) => blocks_body(out, blocks),
            }
        }
        ItemRef::Image { from, media_type } => {
            out.push_str(Head::Image(from).open());
            text_body(out, media_type.unwrap_or(""));
        }
        ItemRef::Unknown { from, kind } => {
            out.push_str(Head::Unknown(from).open());
            text_body(out, kind);
        }
        ItemRef::Summary { text } => {
            out.push_str(Head::Summary.open());
            text_body(out, text);
        }
    }
}

/// Closes the marker and writes an escaped text body and the blank line after it.
fn text_body(out: &mut String, text: &str) {
    out.push_str("]:");
    if !text.is_empty() {
        out.push(' ');
        escape_into(out, text, false);
    }
    out.push_str("\n\n");
}

/// Like [`text_body`] for the text blocks of a tool result, without building the joined
/// string. The body is exactly [`ToolResultContent::text`]: a newline goes before a text block
/// only once something has been written, so leading empty blocks add nothing.
fn blocks_body(out: &mut String, blocks: &[ContentBlock]) {
    out.push_str("]:");
    let mut written = false;
    let mut escaper = Escaper::new(false);
    for block in blocks {
        let ContentBlock::Text(t) = block else {
            continue;
        };
        if written {
            escaper.push(out, "\n");
        } else if !t.text.is_empty() {
            out.push(' ');
            written = true;
        }
        escaper.push(out, &t.text);
    }
    out.push_str("\n\n");
}
