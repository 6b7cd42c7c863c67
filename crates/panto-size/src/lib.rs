//! Sizing: how many tokens each message of a conversation costs, and the next request.
//!
//! - [`Sizer`] is the narrow trait the rest of panto programs against: one size per message.
//! - [`UsageSizer`] reads the provider-reported [`panto_model::Usage`] of assistant messages:
//!   `output_tokens` sizes the assistant message itself, and the growth of the input total
//!   between two consecutive assistant messages sizes what came between them. Guards
//!   ([`Fallback`]) reject usage that is missing, goes down, is implausible, mixes models, comes
//!   from a kept copy measured before the latest compaction, or crosses a compaction; there the
//!   [`Heuristic`] is used. [`UsageSizer::measure`] tells, per message, which rule applied.
//! - [`Heuristic`] is the fallback: a per-byte cost table plus per-message and per-block
//!   overheads, calibrated on real sessions (`cargo xtask calibrate`, `docs/sizing.md`).
//! - [`estimate`] is the ruler, the one estimate function: panto's estimate of one request's
//!   input in parts that add up (system prompt, tools, summary, messages; [`RequestEstimate`]).
//!   [`Measured`] is a conversation measured once, for a caller that needs several estimates
//!   of it (the request, the request before the latest reply) and its messages' sizes without
//!   sizing a message twice. [`turn_sizes`] sums message sizes per turn.
//! - [`silent_truncation`] notices a provider that cut a request to fit its window and said
//!   nothing: its count fell far below [`input_floor`], the least the request can cost.
//!
//! The one design choice to know: usage is trusted only between two assistant messages whose
//! records are comparable, and a measured span is divided in proportion to the heuristic, so the
//! sizes of a span always sum to exactly what the provider measured while single messages stay
//! heuristic-shaped. Nothing here fails: every input gets a size.
//!
//! This crate is pure: no IO, no async runtime, no network.
//!
//! ```
//! use panto_model::{Message, Usage};
//! use panto_size::{Measured, Sizer, UsageSizer, estimate};
//!
//! let mut answer = Message::assistant_text("Forty-two.");
//! answer.usage = Some(Usage::new(1_200, 7));
//! let messages = vec![Message::user_text("What is the answer?"), answer];
//! let sizes = UsageSizer::default().message_sizes(&messages);
//! // The answer's size is what the provider measured as its output.
//! assert_eq!(sizes[1], 7);
//!
//! // The ruler: the parts add up, and the conversation is the sum of the message sizes.
//! let next = estimate("You are terse.", "", &messages);
//! assert_eq!(next.total(), next.system + next.tools + next.summary + next.messages);
//! assert_eq!(next.conversation(), sizes.iter().sum::<u64>());
//!
//! // Measured once, estimated twice: the request, and the one that came before the answer.
//! let measured = Measured::new(&messages);
//! assert_eq!(measured.sizes(), &sizes[..]);
//! assert_eq!(measured.estimate("You are terse.", ""), next);
//! assert_eq!(
//!     measured.estimate_first(1, "You are terse.", ""),
//!     estimate("You are terse.", "", &messages[..1])
//! );
//! ```

mod cost;
mod heuristic;
mod scan;
mod truncation;
mod usage;

use std::ops::Range;

use panto_model::{Message, Role};

pub use heuristic::{
    BLOCK_OVERHEAD, COMPACTION_OVERHEAD, Heuristic, IMAGE_TOKENS, MESSAGE_OVERHEAD,
    TOOL_CALL_OVERHEAD,
};
pub use truncation::{
    InputFloor, NEW_MESSAGES_DIVISOR, TRUNCATION_SLACK_PERCENT, Truncation, input_floor,
    silent_truncation, thinking_tokens,
};
pub use usage::{
    Fallback, MessageSize, PLAUSIBLE_FACTOR, Source, UsageSizer, measure_span, plausible,
};

/// Gives each message of a conversation a size in tokens.
///
/// Implementations must return exactly one size per message, in order, and must be linear in
/// the size of the input: sizing runs over whole sessions.
pub trait Sizer {
    /// The estimated tokens of each message of `messages` as part of a request, in order.
    fn message_sizes(&self, messages: &[Message]) -> Vec<u64>;
}

impl<S: Sizer + ?Sized> Sizer for &S {
    fn message_sizes(&self, messages: &[Message]) -> Vec<u64> {
        (**self).message_sizes(messages)
    }
}

impl<S: Sizer + ?Sized> Sizer for Box<S> {
    fn message_sizes(&self, messages: &[Message]) -> Vec<u64> {
        (**self).message_sizes(messages)
    }
}

/// Sums message sizes per turn.
///
/// A range that reaches past the end of `sizes` is cut at the end (and an inverted one counts
/// nothing), so a mismatched turn list gives low sums instead of a panic.
pub fn turn_sizes(sizes: &[u64], turns: &[Range<usize>]) -> Vec<u64> {
    turns
        .iter()
        .map(|t| {
            let end = t.end.min(sizes.len());
            let start = t.start.min(end);
            sizes[start..end].iter().sum()
        })
        .collect()
}

/// panto's estimate of the input of one request, in parts that add up: the system prompt, the
/// tool definitions, the compaction summary the context starts from, and the other messages.
///
/// Made by [`estimate`], the one ruler every size panto shows for a conversation comes from
/// (the next request, the conversation alone, a compaction's before and after).
///
/// Invariants: [`RequestEstimate::total`] is the sum of the four parts;
/// [`RequestEstimate::conversation`] (summary and messages) is the sum of the [`UsageSizer`]
/// sizes of the messages, so a list of messages with their sizes adds up to it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RequestEstimate {
    /// The system prompt.
    pub system: u64,
    /// The tool definitions.
    pub tools: u64,
    /// The compaction messages (in an effective context, the one it starts from).
    pub summary: u64,
    /// Every other message.
    pub messages: u64,
    /// Whether `system` and `tools` are what the provider counted beyond the messages in the
    /// latest request that reported usage (`true`), or the heuristic's sizes of the texts
    /// (`false`).
    pub measured: bool,
}

impl RequestEstimate {
    /// An estimate of the given parts, not measured.
    pub fn new(system: u64, tools: u64, summary: u64, messages: u64) -> RequestEstimate {
        RequestEstimate {
            system,
            tools,
            summary,
            messages,
            measured: false,
        }
    }

    /// The whole request: the sum of the parts (saturating).
    pub fn total(&self) -> u64 {
        self.system
            .saturating_add(self.tools)
            .saturating_add(self.conversation())
    }

    /// The conversation alone: the summary and the messages, without the system prompt and the
    /// tools. This is what a compaction summarizes and what its `tokens_before` and
    /// `tokens_after` count.
    pub fn conversation(&self) -> u64 {
        self.summary.saturating_add(self.messages)
    }
}

/// The ruler: panto's estimate of a request made of `system`, the tool definitions `tools` (the
/// text a request carries for them, empty for none) and `messages`, in parts that add up.
///
/// The messages are sized by [`UsageSizer`] (provider usage where it can be trusted, the
/// heuristic elsewhere); the summary part is the compaction messages among them.
///
/// The system prompt and tools: with usage, the latest assistant message that has usage, comes
/// after the latest compaction message and is not a kept copy (usage that predates the latest
/// compaction is never trusted: a kept copy, marked `kept_by` in the file or by replay for a
/// compaction another program wrote, carries the usage of its original) is the anchor. If its
/// input total is plausible (at least the [`PLAUSIBLE_FACTOR`]th part of the heuristic's size
/// of the messages before it), the provider counted the system prompt and tools of that
/// request as its input total less the sizes of the messages before it: that remainder is
/// the system prompt and tools part (`measured`), shared between the two in proportion to the
/// heuristic's sizes of `system` and `tools`. It is never less than those heuristic sizes, so
/// no part is negative and none is below what is sent now. Without such an anchor, the parts
/// are the heuristic's sizes of `system` and `tools`.
///
/// So the total is the anchor's input total plus the sizes of the anchor and every message
/// after it (the provider's own count of everything it saw, as far as panto's sizes of the
/// messages before it leave room for the system prompt and tools), else the sum of all parts.
///
/// Invariant: adding content to any message, the system prompt or the tools never lowers the
/// total. Linear in the bytes sized.
pub fn estimate(system: &str, tools: &str, messages: &[Message]) -> RequestEstimate {
    Measured::new(messages).estimate(system, tools)
}

/// A conversation measured once by the ruler ([`UsageSizer`]): each message's size, from which
/// every estimate of a request over the conversation, or over its first messages, is made
/// without sizing a message again.
///
/// Invariants: [`Measured::sizes`] is `UsageSizer::default().message_sizes(messages)`;
/// [`Measured::estimate`] is [`estimate`] of the messages, and
/// [`Measured::estimate_first`]`(n, ..)` is [`estimate`] of the first `n` of them.
#[derive(Clone, Debug)]
pub struct Measured<'a> {
    messages: &'a [Message],
    sizer: UsageSizer,
    /// The heuristic's size of each message.
    estimates: Vec<u64>,
    /// The ruler's size of each message.
    sizes: Vec<u64>,
}

impl<'a> Measured<'a> {
    /// `messages`, measured.
    pub fn new(messages: &'a [Message]) -> Measured<'a> {
        let sizer = UsageSizer::default();
        let (estimates, measured) = sizer.measure_with_estimates(messages);
        Measured {
            messages,
            sizer,
            estimates,
            sizes: measured.into_iter().map(|s| s.tokens).collect(),
        }
    }

    /// The size of each message, in order.
    pub fn sizes(&self) -> &[u64] {
        &self.sizes
    }

    /// The ruler's estimate of a request of `system`, `tools` and the messages ([`estimate`]).
    pub fn estimate(&self, system: &str, tools: &str) -> RequestEstimate {
        estimate_from(
            &self.sizer,
            system,
            tools,
            self.messages,
            &self.estimates,
            &self.sizes,
        )
    }

    /// The ruler's estimate of a request of `system`, `tools` and the first `n` messages (all
    /// of them when `n` is larger): what [`estimate`] gives for them, from these sizes. A
    /// prefix sizes its messages as the whole does, except those after its last assistant
    /// message, which no usage of the prefix measures: they take the heuristic's size.
    pub fn estimate_first(&self, n: usize, system: &str, tools: &str) -> RequestEstimate {
        let n = n.min(self.messages.len());
        let messages = &self.messages[..n];
        let measured_to = messages
            .iter()
            .rposition(|m| m.role == Role::Assistant)
            .map_or(0, |a| a + 1);
        let mut sizes = self.sizes[..n].to_vec();
        sizes[measured_to..].copy_from_slice(&self.estimates[measured_to..n]);
        estimate_from(
            &self.sizer,
            system,
            tools,
            messages,
            &self.estimates[..n],
            &sizes,
        )
    }
}

/// [`estimate`] from the heuristic `estimates` and the `sizes` that `sizer` gave `messages`.
fn estimate_from(
    sizer: &UsageSizer,
    system: &str,
    tools: &str,
    messages: &[Message],
    estimates: &[u64],
    sizes: &[u64],
) -> RequestEstimate {
    let mut parts = RequestEstimate::new(
        sizer.fallback.text(system),
        sizer.fallback.text(tools),
        0,
        0,
    );
    for (m, &size) in messages.iter().zip(sizes) {
        if m.compaction_summary().is_some() {
            parts.summary = parts.summary.saturating_add(size);
        } else {
            parts.messages = parts.messages.saturating_add(size);
        }
    }
    // Usage recorded before the latest compaction measured a context that no longer exists:
    // only messages after the latest compaction message that are not its copies may anchor.
    let anchor = usage_anchor(messages);
    if let Some(a) = anchor
        && let Some(usage) = &messages[a].usage
    {
        let before: u64 = estimates[..a].iter().sum();
        let input = usage.input_total();
        if input.saturating_mul(PLAUSIBLE_FACTOR) >= before {
            let sized = sizes[..a].iter().fold(0u64, |t, &s| t.saturating_add(s));
            let heuristic = parts.system.saturating_add(parts.tools);
            let outside = input.saturating_sub(sized).max(heuristic);
            // Shared in proportion to the heuristic; all of it is the system prompt's when
            // neither text costs anything by the heuristic.
            let tools = if heuristic == 0 {
                0
            } else {
                u64::try_from(u128::from(outside) * u128::from(parts.tools) / u128::from(heuristic))
                    .unwrap_or(u64::MAX)
            };
            parts.tools = tools;
            parts.system = outside - tools;
            parts.measured = true;
        }
    }
    parts
}

// The README's example runs as a doctest, so that what crates.io shows compiles and passes.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
mod readme {}

/// The message whose recorded usage measured the context as it is now: the last assistant
/// message after the latest compaction message that is not a kept copy and carries usage.
/// Usage recorded before the latest compaction measured a context that no longer exists.
pub(crate) fn usage_anchor(messages: &[Message]) -> Option<usize> {
    let after = messages
        .iter()
        .rposition(|m| m.compaction_summary().is_some())
        .map_or(0, |c| c + 1);
    messages[after..]
        .iter()
        .rposition(|m| m.role == Role::Assistant && m.usage.is_some() && m.kept_by().is_none())
        .map(|i| after + i)
}

#[cfg(test)]
mod tests;
