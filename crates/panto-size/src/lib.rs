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
//! - [`estimate_request`] is panto's estimate of the input size of the next request, and
//!   [`turn_sizes`] sums message sizes per turn.
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
//! use panto_size::{Sizer, UsageSizer, estimate_request};
//!
//! let mut answer = Message::assistant_text("Forty-two.");
//! answer.usage = Some(Usage::new(1_200, 7));
//! let messages = vec![Message::user_text("What is the answer?"), answer];
//! let sizes = UsageSizer::default().message_sizes(&messages);
//! // The answer's size is what the provider measured as its output.
//! assert_eq!(sizes[1], 7);
//! assert!(estimate_request("You are terse.", &messages) >= sizes.iter().sum::<u64>());
//! ```

mod heuristic;
mod scan;
mod usage;

use std::ops::Range;

use panto_model::{Message, Role};

pub use heuristic::{
    BLOCK_OVERHEAD, COMPACTION_OVERHEAD, Heuristic, IMAGE_TOKENS, MESSAGE_OVERHEAD,
    TOOL_CALL_OVERHEAD,
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

    /// [`Sizer::message_sizes`] and the estimate of a request made of `messages` alone
    /// ([`estimate_request`] with no system prompt), for callers that need both. This default
    /// sizes the messages twice; [`UsageSizer`] gives both from one pass (its own fallback
    /// standing in for the default one).
    fn sizes_and_request(&self, messages: &[Message]) -> (Vec<u64>, u64) {
        (self.message_sizes(messages), estimate_request("", messages))
    }
}

impl<S: Sizer + ?Sized> Sizer for &S {
    fn message_sizes(&self, messages: &[Message]) -> Vec<u64> {
        (**self).message_sizes(messages)
    }
    fn sizes_and_request(&self, messages: &[Message]) -> (Vec<u64>, u64) {
        (**self).sizes_and_request(messages)
    }
}

impl<S: Sizer + ?Sized> Sizer for Box<S> {
    fn message_sizes(&self, messages: &[Message]) -> Vec<u64> {
        (**self).message_sizes(messages)
    }
    fn sizes_and_request(&self, messages: &[Message]) -> (Vec<u64>, u64) {
        (**self).sizes_and_request(messages)
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

/// panto's estimate of the input size of the next request built from `system` and `messages`.
///
/// With usage: take the last assistant message that has usage, comes after the latest
/// compaction message and is not a kept copy (usage that predates the latest compaction is
/// never trusted: a kept copy, marked `kept_by` in the file or by replay for a compaction
/// another program wrote, carries the usage of its original). If its input total is plausible (at least the [`PLAUSIBLE_FACTOR`]th
/// part of the heuristic's size of the messages before it), the estimate is that input total
/// plus the [`UsageSizer`] sizes of that message and every message after it. The input total
/// already holds the system prompt and tool definitions as they were then, so `system` is not
/// added again.
///
/// Without usage: the heuristic's size of `system` plus the [`UsageSizer`] sizes of all the
/// messages. Tool definitions are not known here and are not counted.
///
/// Invariant: adding content to any message never lowers the estimate.
pub fn estimate_request(system: &str, messages: &[Message]) -> u64 {
    let sizer = UsageSizer::default();
    let (estimates, measured) = sizer.measure_with_estimates(messages);
    let sizes: Vec<u64> = measured.iter().map(|s| s.tokens).collect();
    request_estimate(&sizer, system, messages, &estimates, &sizes)
}

/// [`estimate_request`] with `system` and with no system prompt, in that order, from one
/// sizing pass.
pub fn estimate_request_with(system: &str, messages: &[Message]) -> (u64, u64) {
    let sizer = UsageSizer::default();
    let (estimates, measured) = sizer.measure_with_estimates(messages);
    let sizes: Vec<u64> = measured.iter().map(|s| s.tokens).collect();
    (
        request_estimate(&sizer, system, messages, &estimates, &sizes),
        request_estimate(&sizer, "", messages, &estimates, &sizes),
    )
}

/// [`estimate_request`] from the heuristic `estimates` and the `sizes` that `sizer` gave
/// `messages`.
pub(crate) fn request_estimate(
    sizer: &UsageSizer,
    system: &str,
    messages: &[Message],
    estimates: &[u64],
    sizes: &[u64],
) -> u64 {
    // Usage recorded before the latest compaction measured a context that no longer exists:
    // only messages after the latest compaction message that are not its copies may anchor.
    let after = messages
        .iter()
        .rposition(|m| m.compaction_summary().is_some())
        .map_or(0, |c| c + 1);
    let anchor = messages[after..]
        .iter()
        .rposition(|m| m.role == Role::Assistant && m.usage.is_some() && m.kept_by().is_none())
        .map(|i| after + i);
    if let Some(a) = anchor
        && let Some(usage) = &messages[a].usage
    {
        let before: u64 = estimates[..a].iter().sum();
        let input = usage.input_total();
        if input.saturating_mul(PLAUSIBLE_FACTOR) >= before {
            return input.saturating_add(sizes[a..].iter().sum());
        }
    }
    sizer.fallback.text(system) + sizes.iter().sum::<u64>()
}

#[cfg(test)]
mod tests;
