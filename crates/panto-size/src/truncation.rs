//! Silent truncation: a provider that answers a request too large for its window as if it fit
//! (Ollama cuts the front of the prompt when it exceeds `num_ctx`), noticed from its own count.
//!
//! The request after a reply holds everything the request that produced the reply held (the
//! same system prompt and tools, every message, and more), so the provider's count of it can
//! fall below its count of the earlier one only by what a provider leaves out of a resent
//! conversation (the thinking of finished turns: [`thinking_tokens`]). [`input_floor`] is the
//! least it can honestly count; [`silent_truncation`] compares a reply's count with it, and
//! with the count before.

use panto_model::{ContentBlock, Message};

use crate::Sizer;
use crate::heuristic::Heuristic;

/// How far below [`InputFloor::tokens`] an honest count may still fall, in percent of it: a
/// quarter. On the real sessions (`docs/sizing.md`, "Silent truncation") no provider counted a
/// request below its count of the request before by more than 0.74%; the slack leaves room for
/// the heuristic's error (the thinking a provider drops from a resent conversation is taken
/// off the floor itself), while a front-truncated prompt (Ollama keeps about half of its
/// window) falls far below it.
pub const TRUNCATION_SLACK_PERCENT: u64 = 25;

/// The heuristic's size of the messages after the last counted request is divided by this to
/// give the least they can cost: the heuristic overestimates a span by 1.28 at the median and
/// 1.5 at the 90th percentile, so an honest count of new messages is at least half of it (the
/// spans where it is off by more are a few tokens each, within the slack).
pub const NEW_MESSAGES_DIVISOR: u64 = 2;

/// The least input a provider can honestly count for the next request of a conversation,
/// from what it counted for the previous one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct InputFloor {
    /// The floor, in the provider's tokens: `previous` plus the least the messages after it
    /// cost.
    pub tokens: u64,
    /// What the provider counted for the request that produced the last reply (its input
    /// total, cache reads and writes included).
    pub previous: u64,
    /// The index of that reply among the messages.
    pub anchor: usize,
    /// The heuristic's size of the thinking before the anchor, which `previous` may have
    /// counted and the next count may leave out; the floor is lowered by it.
    pub thinking: u64,
}

/// A reply whose request the provider counted far below what it must hold: the provider cut
/// the request to fit its window and said nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Truncation {
    /// What the provider counted for the request (the reply's input total).
    pub counted: u64,
    /// The least it could honestly have counted ([`InputFloor::tokens`]).
    pub floor: u64,
    /// What it counted for the request before ([`InputFloor::previous`]).
    pub previous: u64,
}

/// The least input a provider can count for a request made of `messages` (with the system
/// prompt and tools of the request that produced the last reply among them), or `None` when
/// nothing anchors it.
///
/// The anchor is the last assistant message after the latest compaction message that is not
/// a kept copy and carries usage with an input total above zero (a relay that reports 0
/// counted nothing). Usage from before a compaction measured another context, so after a
/// compaction there is no floor until the next reply. The floor is the anchor's input total
/// plus the heuristic's size of the messages after the anchor divided by
/// [`NEW_MESSAGES_DIVISOR`], less the heuristic's size of every thinking block before the
/// anchor ([`thinking_tokens`]); the anchor's own output is not counted (a reasoning model's
/// output holds reasoning that is never sent back).
///
/// The thinking comes off because the previous count may hold thinking the next one does not:
/// Anthropic counts the thinking of the tool loop in progress and leaves the thinking of
/// finished turns out of the context, so the request after a loop ends is counted without
/// the loop's thinking; local servers' chat templates drop earlier reasoning too; and panto
/// leaves out thinking a provider refused. A loop whose thinking is a quarter of the request
/// would otherwise look cut. The heuristic overestimates, so this lowers the floor by at
/// least what a provider leaves out.
///
/// Invariant: adding messages after the anchor never lowers the floor.
pub fn input_floor(messages: &[Message]) -> Option<InputFloor> {
    let anchor = crate::usage_anchor(messages)?;
    let previous = messages[anchor].usage.as_ref()?.input_total();
    if previous == 0 {
        return None;
    }
    let new: u64 = Heuristic
        .message_sizes(&messages[anchor + 1..])
        .iter()
        .fold(0u64, |t, &s| t.saturating_add(s));
    let thinking = thinking_tokens(&messages[..anchor]);
    Some(InputFloor {
        tokens: previous
            .saturating_sub(thinking)
            .saturating_add(new / NEW_MESSAGES_DIVISOR),
        previous,
        anchor,
        thinking,
    })
}

/// The heuristic's size of the thinking in `messages` that a provider may leave out of its
/// count of a resent conversation: `thinking` blocks, and the `redacted_thinking` blocks and
/// `reasoning` items panto keeps as they came.
pub fn thinking_tokens(messages: &[Message]) -> u64 {
    messages
        .iter()
        .flat_map(|m| &m.content)
        .filter(|b| match b {
            ContentBlock::Thinking(_) => true,
            ContentBlock::Other(o) => matches!(o.kind.as_str(), "redacted_thinking" | "reasoning"),
            _ => false,
        })
        .fold(0u64, |t, b| t.saturating_add(Heuristic.block(b)))
}

/// Whether the provider truncated the request made of `sent` silently, judging by `reply`: its
/// input total is above zero, below what the provider counted for the request before, and
/// more than [`TRUNCATION_SLACK_PERCENT`] below the [`input_floor`] of `sent`; and the reply
/// and the anchor name the same model (another model counts with another tokenizer). `None`
/// when nothing anchors the floor, when the reply reports no usage or an input of 0 (a relay
/// that does not count), or when the count is within the slack.
///
/// A count that did not go down is never taken for a truncation, however far below the floor:
/// a relay that reports made-up numbers (the same count for every request, say) would
/// otherwise look like a server that cut every request. The price is a first large paste that
/// a server cut to less than the window while the count still rose: the next request, whose
/// count falls, is caught.
pub fn silent_truncation(sent: &[Message], reply: &Message) -> Option<Truncation> {
    let counted = reply.usage.as_ref()?.input_total();
    if counted == 0 {
        return None;
    }
    let floor = input_floor(sent)?;
    if let (Some(a), Some(b)) = (&sent[floor.anchor].model, &reply.model)
        && a != b
    {
        return None;
    }
    let allowed = u128::from(floor.tokens) * u128::from(100 - TRUNCATION_SLACK_PERCENT) / 100;
    (counted < floor.previous && u128::from(counted) < allowed).then_some(Truncation {
        counted,
        floor: floor.tokens,
        previous: floor.previous,
    })
}
