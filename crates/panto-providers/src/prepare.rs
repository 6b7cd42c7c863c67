//! Wire preparation shared by every adapter: the conversation rewritten into a shape that every
//! provider accepts, without touching the caller's messages.
//!
//! What [`prepare`] guarantees about its output (checked by property tests):
//! - no compaction block: each becomes a text block worded by the adapter, and so does a
//!   provider's native compaction block sent to another protocol (when it has a readable
//!   summary; an opaque one is left out);
//! - every tool call is answered exactly once, in the user message right after the assistant
//!   message that makes it, by tool-result blocks at the front of that message, in call order.
//!   A call that no later message answers gets a synthetic error result
//!   ([`INTERRUPTED`]); results spread over several user messages are gathered there;
//! - a tool result with no earlier call (an orphan), or a second answer to a call, becomes
//!   plain user text ([`orphan_text`]) so the provider does not reject it;
//! - misplaced blocks (a tool call in a user message, a tool result in an assistant message)
//!   and empty text blocks are dropped; empty messages are dropped;
//! - consecutive messages of one role are merged, so roles alternate.

use std::collections::{HashMap, HashSet};

use panto_model::{ContentBlock, Message, Role, ToolResultBlock, ToolResultContent, ToolUseBlock};

/// The content of the synthetic result that answers a call the conversation never answered.
pub const INTERRUPTED: &str = "tool call was interrupted before it returned a result";

/// The text that stands for a tool result whose call is not in the conversation.
pub fn orphan_text(result: &ToolResultBlock) -> String {
    let status = if result.failed() { " (it failed)" } else { "" };
    format!(
        "Result of tool call `{}`{status}, whose call is no longer in this conversation:\n{}",
        result.tool_use_id,
        result.content.text()
    )
}

/// Rewrites `messages` for the wire; `compaction` words a compaction summary as text. A
/// provider's native compaction block of protocol `native` is kept as it is (the adapter sends
/// it back byte for byte); one of another protocol is replaced by its readable summary,
/// worded by `compaction`, or left out when it has none (an `OpenAI` item is opaque).
pub(crate) fn prepare(
    messages: &[Message],
    compaction: &dyn Fn(&str) -> String,
    native: Option<&str>,
) -> Vec<Message> {
    let answers = pair_results(messages);
    let mut out: Vec<Message> = Vec::with_capacity(messages.len() + 1);
    for (i, message) in messages.iter().enumerate() {
        let mut content = Vec::with_capacity(message.content.len());
        let mut calls: Vec<&ToolUseBlock> = Vec::new();
        for (b, block) in message.content.iter().enumerate() {
            match (message.role, block) {
                (_, ContentBlock::Compaction(c)) => {
                    content.push(ContentBlock::text(compaction(&c.summary)));
                }
                (_, ContentBlock::Other(o))
                    if o.native_compaction().is_some() && o.native_compaction() != native =>
                {
                    if let Some(summary) = o.native_summary() {
                        content.push(ContentBlock::text(compaction(summary)));
                    }
                }
                (_, ContentBlock::Text(t)) if t.text.is_empty() => {}
                (Role::Assistant, ContentBlock::ToolUse(u)) => {
                    calls.push(u);
                    content.push(block.clone());
                }
                (Role::User, ContentBlock::ToolResult(r)) => {
                    if !answers.moved.contains(&(i, b)) {
                        content.push(ContentBlock::text(orphan_text(r)));
                        if let ToolResultContent::Blocks(blocks) = &r.content {
                            content.extend(
                                blocks
                                    .iter()
                                    .filter(|b| matches!(b, ContentBlock::Image(_)))
                                    .cloned(),
                            );
                        }
                    }
                }
                (Role::User, ContentBlock::ToolUse(_))
                | (Role::Assistant, ContentBlock::ToolResult(_)) => {
                    tracing::debug!(
                        message = i,
                        block = b,
                        "dropping a misplaced block on the wire"
                    );
                }
                _ => content.push(block.clone()),
            }
        }
        push_merged(&mut out, message.role, content);
        if !calls.is_empty() {
            let results = calls
                .iter()
                .enumerate()
                .map(|(k, call)| match answers.by_call.get(&(i, k)) {
                    Some(&(j, b)) => messages[j].content[b].clone(),
                    None => synthetic_result(&call.id),
                })
                .collect();
            push_merged(&mut out, Role::User, results);
        }
    }
    out
}

/// [`prepare`] for an adapter that sends, of a prepared message, only the blocks `sends` takes
/// (by the message's role): a message with none of them (an assistant message of nothing but
/// thinking the protocol cannot send back) would vanish at rendering and leave the messages
/// around it, of one role, side by side on the wire. Such messages are left out and the rest
/// prepared again, which merges their neighbours, so that roles still alternate.
pub(crate) fn prepare_sendable(
    messages: &[Message],
    compaction: &dyn Fn(&str) -> String,
    native: Option<&str>,
    sends: &dyn Fn(Role, &ContentBlock) -> bool,
) -> Vec<Message> {
    let prepared = prepare(messages, compaction, native);
    let renders = |m: &Message| m.content.iter().any(|b| sends(m.role, b));
    if prepared.iter().all(renders) {
        return prepared;
    }
    let kept: Vec<Message> = prepared.into_iter().filter(renders).collect();
    prepare(&kept, compaction, native)
}

/// A synthetic error result for a call that was never answered.
fn synthetic_result(id: &str) -> ContentBlock {
    ContentBlock::tool_result(id, INTERRUPTED, true)
}

/// Appends a message, merging it into the last one when the roles match; skips empty content.
fn push_merged(out: &mut Vec<Message>, role: Role, content: Vec<ContentBlock>) {
    if content.is_empty() {
        return;
    }
    match out.last_mut() {
        Some(last) if last.role == role => last.content.extend(content),
        _ => out.push(Message::new(role, content)),
    }
}

/// Which result answers which call.
struct Answers {
    /// (assistant message, index among its calls) -> (message, block) of the result.
    by_call: HashMap<(usize, usize), (usize, usize)>,
    /// The (message, block) positions of results that were paired (and so move to their call).
    moved: HashSet<(usize, usize)>,
}

/// Pairs each tool result with the latest earlier call of its id, first answer wins.
fn pair_results(messages: &[Message]) -> Answers {
    let mut latest: HashMap<&str, (usize, usize)> = HashMap::new();
    let mut answers = Answers {
        by_call: HashMap::new(),
        moved: HashSet::new(),
    };
    for (i, message) in messages.iter().enumerate() {
        match message.role {
            Role::Assistant => {
                let mut k = 0;
                for block in &message.content {
                    if let ContentBlock::ToolUse(u) = block {
                        latest.insert(u.id.as_str(), (i, k));
                        k += 1;
                    }
                }
            }
            Role::User => {
                for (b, block) in message.content.iter().enumerate() {
                    if let ContentBlock::ToolResult(r) = block
                        && let Some(&call) = latest.get(r.tool_use_id.as_str())
                        && !answers.by_call.contains_key(&call)
                    {
                        answers.by_call.insert(call, (i, b));
                        answers.moved.insert((i, b));
                    }
                }
            }
        }
    }
    answers
}

/// The text that stands for a compaction block on the wire (every adapter sends it as
/// user-role text at the head of the conversation).
///
/// The preamble tells the model that it reads the history, not a new request; the tags keep
/// instructions quoted inside the summary from reading as the user's latest words.
pub fn compaction_text(summary: &str) -> String {
    format!(
        "This conversation was compacted: its earlier part was replaced by the summary below, \
         written so that you can continue the work. Treat it as the history of this \
         conversation, not as a new request.\n\n<conversation-summary>\n{summary}\n</conversation-summary>"
    )
}

/// A `data:` URL for a base64 image source, or the URL of a `url` source.
pub(crate) fn image_url(source: &serde_json::Value) -> Option<String> {
    let get = |k: &str| source.get(k).and_then(serde_json::Value::as_str);
    match get("type") {
        Some("base64") => Some(format!(
            "data:{};base64,{}",
            get("media_type").unwrap_or("image/png"),
            get("data")?
        )),
        Some("url") => get("url").map(str::to_owned),
        _ => None,
    }
}

/// The text of a tool result for protocols whose tool output is a string, with the images
/// it holds returned separately (they travel after the results). With `mark_error`, a failed
/// result's text starts with `Error: ` (for protocols with no error flag).
pub(crate) fn flatten_result(
    result: &ToolResultBlock,
    mark_error: bool,
) -> (String, Vec<&panto_model::ImageBlock>) {
    let mut images = Vec::new();
    let mut text = match &result.content {
        ToolResultContent::Text(s) => s.clone(),
        ToolResultContent::Blocks(blocks) => {
            let mut parts: Vec<String> = Vec::new();
            for block in blocks {
                match block {
                    ContentBlock::Text(t) => parts.push(t.text.clone()),
                    ContentBlock::Image(image) => {
                        images.push(image);
                        parts.push(format!(
                            "[image {}: attached after the tool results]",
                            images.len()
                        ));
                    }
                    _ => {}
                }
            }
            parts.join("\n")
        }
    };
    if mark_error && result.failed() {
        text = format!("Error: {text}");
    }
    (text, images)
}
