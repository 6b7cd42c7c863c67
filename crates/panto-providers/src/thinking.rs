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
//! Stale blocks are left out of the request (the session keeps them). One exception: the
//! assistant turn whose tool calls are being answered now (the current tool loop) must keep its
//! thinking when the request enables thinking; a stale block there is sent and the request sets
//! `drop_block`, so the API drops it instead of refusing. The stale blocks always lead the
//! conversation, so leaving them out never breaks the unbroken run later blocks depend on.

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
/// thinking (only then must the current tool loop keep its thinking).
pub fn thinking_replay(messages: &[Message], thinking_on: bool) -> ThinkingReplay {
    let reset = messages.iter().rposition(Message::thinking_reset).unwrap_or(0);
    // The current tool loop: the assistant messages after the last message that is a user's
    // own words, when the conversation ends with the results they wait for.
    let ends_with_results = messages.last().is_some_and(|m| {
        m.role == Role::User
            && m
                .content
                .iter()
                .any(|b| matches!(b, ContentBlock::ToolResult(_)))
    });
    let loop_start = if ends_with_results {
        messages
            .iter()
            .rposition(|m| {
                m.role == Role::User
                    && m.content.iter().any(|b| {
                        matches!(
                            b,
                            ContentBlock::Text(_) | ContentBlock::Image(_) | ContentBlock::Compaction(_)
                        )
                    })
            })
            .map_or(0, |i| i + 1)
    } else {
        messages.len()
    };
    let mut replay = ThinkingReplay::default();
    for (i, message) in messages.iter().enumerate() {
        if message.role != Role::Assistant {
            continue;
        }
        let stale = i < reset || (message.kept_by().is_some() && !message.thinking_kept());
        if !stale {
            continue;
        }
        let pending = thinking_on && i >= loop_start;
        for (b, block) in message.content.iter().enumerate() {
            if !is_signed_thinking(block) {
                continue;
            }
            if pending {
                replay.drop_block = true;
            } else {
                replay.left_out.insert((i, b));
            }
        }
    }
    replay
}
