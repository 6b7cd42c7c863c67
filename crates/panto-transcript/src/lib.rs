//! The transcript artifact: the summarized prefix rendered as plain text, and the user prompt
//! of a compaction request.
//!
//! PLACEHOLDER API: the signatures below are the contract other crates code against; the bodies
//! are a first rough version to be replaced by the foundation issue's transcript work (full
//! block coverage, documented escaping, snapshots).

use std::fmt::Write as _;

use panto_model::{ContentBlock, Message, Role};

/// Renders messages as the plain-text transcript artifact.
pub fn render_transcript(messages: &[Message]) -> String {
    let mut out = String::new();
    render_transcript_into(&mut out, messages);
    out
}

/// Appends the transcript of `messages` to `out`.
pub fn render_transcript_into(out: &mut String, messages: &[Message]) {
    for m in messages {
        for b in &m.content {
            let _ = match (m.role, b) {
                (Role::User, ContentBlock::Text(t)) => writeln!(out, "[User]: {}", t.text),
                (Role::Assistant, ContentBlock::Text(t)) => {
                    writeln!(out, "[Assistant]: {}", t.text)
                }
                (_, ContentBlock::ToolUse(u)) => {
                    writeln!(out, "[Assistant tool call]: {} {}", u.name, u.input)
                }
                (_, ContentBlock::ToolResult(r)) => {
                    writeln!(out, "[Tool result]: {}", r.content.text())
                }
                _ => Ok(()),
            };
        }
    }
}

/// The user prompt of a compaction request: the transcript of `prefix` in a fixed envelope,
/// with the latest active summary (at most one) in a `<previous-summary>` section.
pub fn render_request(prefix: &[Message], previous_summary: Option<&str>) -> String {
    let mut out = String::new();
    if let Some(s) = previous_summary {
        let _ = writeln!(out, "<previous-summary>\n{s}\n</previous-summary>\n");
    }
    out.push_str("<transcript>\n");
    render_transcript_into(&mut out, prefix);
    out.push_str("</transcript>\n");
    out
}
