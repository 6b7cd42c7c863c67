//! Which thinking may be sent back to a protocol that binds each thinking block to the request
//! that produced it (Anthropic's "preserved thinking"), decided from facts the messages carry.
//!
//! Anthropic checks every `thinking` and `redacted_thinking` block sent back against its
//! prefix: the system prompt, the tools and every message before it, as they were when the
//! block was produced. A changed prefix invalidates the block and every later one, and the
//! request is refused with a 400 unless it sets
//! `thinking.block_binding.prefix_mismatch_behavior: "drop_block"`
//! (<https://platform.claude.com/docs/en/build-with-claude/preserved-thinking>). The facts:
//!
//! - a kept copy (`kept_by`) was produced before its compaction replaced the prefix, so its
//!   thinking is stale, unless the copy says its thinking stays valid (`thinking_kept`, written
//!   by a native compaction that met the provider's conditions: "Compaction and preserved
//!   thinking", <https://platform.claude.com/docs/en/build-with-claude/compaction-thinking-blocks>);
//! - a message marked `thinking_reset` says the provider refused the thinking of every message
//!   before it, so all of that is stale;
//! - everything else was produced with the stale blocks already left out (this rule is
//!   deterministic), so its prefix is unchanged.
//!
//! Stale blocks are left out of the request (the session keeps them), with one exception. A
//! tool loop in flight when its thinking went stale (the kept turns of an overflow in the
//! middle of a loop, a compaction written between a call and its results, or the loop a
//! refused request was answering) must keep its thinking while
//! it waits for the results ("an assistant turn whose tool call still waits for its result
//! keeps its thinking"). Its stale blocks are therefore sent, in that request and in every
//! later one, with `thinking.block_binding.prefix_mismatch_behavior: "drop_block"`, so that
//! the API drops them instead of refusing the request, and the replies produced meanwhile keep
//! the prefix they were produced with whether the API binds them to what was sent or to what
//! it kept. When the request enables no thinking, nothing requires them and they are left out
//! like the others. The stale blocks always lead the conversation, so leaving them out never
//! breaks the unbroken run later blocks depend on.

use std::collections::HashSet;

use panto_model::{ContentBlock, Message, Role};

/// The `anthropic-beta` value that enables `thinking.block_binding`.
pub const THINKING_BINDING_BETA: &str = "thinking-binding-controls-2026-08-01";

/// What to do with the thinking of a conversation sent to a protocol that binds it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ThinkingReplay {
    /// The blocks to leave out, as (message, block) positions in the caller's messages.
    pub left_out: HashSet<(usize, usize)>,
    /// Whether stale blocks are sent (the current tool loop's) and the request must ask the
    /// API to drop them rather than refuse it (`drop_block`).
    pub drop_block: bool,
}

impl ThinkingReplay {
    /// `messages` without the blocks to leave out (a message left empty is dropped).
    pub fn apply(&self, messages: &[Message]) -> Vec<Message> {
        messages
            .iter()
            .enumerate()
            .filter_map(|(i, m)| {
                let mut m = m.clone();
                let mut b = 0;
                m.content.retain(|_| {
                    let keep = !self.left_out.contains(&(i, b));
                    b += 1;
                    keep
                });
                (!m.content.is_empty()).then_some(m)
            })
            .collect()
    }
}

/// Whether a block is thinking a provider signs: `thinking` or `redacted_thinking`.
pub fn is_signed_thinking(block: &ContentBlock) -> bool {
    match block {
        ContentBlock::Thinking(_) => true,
        ContentBlock::Other(o) => o.kind == "redacted_thinking",
        _ => false,
    }
}

/// Decides which thinking blocks of `messages` to leave out for a protocol that binds thinking
/// to its prefix (see the module docs); `thinking_on` says whether the request enables
/// thinking (only then are the stale blocks of an interrupted tool loop sent, with
/// `drop_block`).
pub fn thinking_replay(messages: &[Message], thinking_on: bool) -> ThinkingReplay {
    let reset = messages
        .iter()
        .rposition(Message::thinking_reset)
        .unwrap_or(0);
    let stale: Vec<bool> = messages
        .iter()
        .enumerate()
        .map(|(i, m)| i < reset || (m.kept_by().is_some() && !m.thinking_kept()))
        .collect();
    // The tool loops in flight where stale runs end: a run of stale messages whose last is the
    // results of a loop.
    let mut carried = vec![false; messages.len()];
    let mut i = 0;
    while i < messages.len() {
        if !stale[i] {
            i += 1;
            continue;
        }
        let start = i;
        while i < messages.len() && stale[i] {
            i += 1;
        }
        // The refused request's own results carry the mark (the request is sent again with
        // it): they close the run all the same.
        let end = if i == reset && i < messages.len() && is_results(&messages[i]) {
            i + 1
        } else {
            i
        };
        // A run that ends with a loop's results, or with its call whose results follow
        // fresh (a compaction written between a call and its results: the results came
        // after it), is a loop in flight.
        let in_flight = is_results(&messages[end - 1])
            || (is_call(&messages[end - 1]) && messages.get(end).is_some_and(is_results));
        if in_flight {
            let from = messages[start..end]
                .iter()
                .rposition(is_users_words)
                .map_or(start, |u| start + u + 1);
            for flag in &mut carried[from..end] {
                *flag = true;
            }
        }
    }
    let mut replay = ThinkingReplay::default();
    for (i, message) in messages.iter().enumerate() {
        if message.role != Role::Assistant || !stale[i] {
            continue;
        }
        for (b, block) in message.content.iter().enumerate() {
            if !is_signed_thinking(block) {
                continue;
            }
            if carried[i] && thinking_on {
                replay.drop_block = true;
            } else {
                replay.left_out.insert((i, b));
            }
        }
    }
    replay
}

/// Whether a message is tool results (a user message holding any).
fn is_results(message: &Message) -> bool {
    message.role == Role::User
        && message
            .content
            .iter()
            .any(|b| matches!(b, ContentBlock::ToolResult(_)))
}

/// Whether a message is an assistant message that calls a tool.
fn is_call(message: &Message) -> bool {
    message.role == Role::Assistant
        && message
            .content
            .iter()
            .any(|b| matches!(b, ContentBlock::ToolUse(_)))
}

/// Whether a message holds the user's own words (a prompt, an image, a summary).
fn is_users_words(message: &Message) -> bool {
    message.role == Role::User
        && message.content.iter().any(|b| {
            matches!(
                b,
                ContentBlock::Text(_) | ContentBlock::Image(_) | ContentBlock::Compaction(_)
            )
        })
}
