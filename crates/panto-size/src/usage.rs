//! The usage-based sizer: exact sizes from provider-reported usage, behind guards.
//!
//! An assistant message's `output_tokens` is its size. Between two consecutive assistant
//! messages, the growth of the input total minus the earlier message's size is what the
//! messages between them cost; it is spread over them in proportion to the heuristic, the parts
//! summing exactly to the measured span. Wherever a guard says the measurement cannot be
//! trusted, the heuristic sizes the message instead, and [`Source`] says why.

use std::ops::Range;

use panto_model::{Message, Role, Usage};

use crate::Sizer;
use crate::heuristic::Heuristic;

/// How far a measurement may lie from the heuristic, as a factor either way, and still be
/// believed. Beyond it the measurement says more about a changed context (a new system prompt,
/// stripped reasoning, a log that recorded a partial count) than about the messages.
///
/// On the calibration data (`docs/sizing.md`) the heuristic's worst underestimate of a usable
/// span is 1.35x (2.8x on logs with partial output counts) and its worst overestimate 3.4x, on
/// spans of a few tokens; the spans outside the band are context changes.
pub const PLAUSIBLE_FACTOR: u64 = 4;

/// The size of one message and where it came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct MessageSize {
    /// Estimated tokens of the message as part of a request.
    pub tokens: u64,
    /// How the estimate was obtained.
    pub source: Source,
}

impl MessageSize {
    /// A size of `tokens` obtained from `source`.
    pub fn new(tokens: u64, source: Source) -> MessageSize {
        MessageSize { tokens, source }
    }
}

/// Where a size came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Source {
    /// An assistant message's own `output_tokens`.
    Output,
    /// The measured span between two assistant messages, which held only this message (exact).
    Span,
    /// A share of a measured span that held several messages, in proportion to the heuristic.
    /// The shares of a span sum exactly to the span.
    Share,
    /// The heuristic, because no trustworthy usage covers the message.
    Heuristic(Fallback),
}

/// Why a message was sized by the heuristic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Fallback {
    /// The message is not between two assistant messages (it comes before the first or after the
    /// last), so no pair of usage records brackets it.
    Unbracketed,
    /// The assistant message, or one of the two assistant messages around the span, has no usage.
    MissingUsage,
    /// The input total went down: the later request's input total is below the earlier one's
    /// plus the earlier message's size (a cache reset, a trimmed context, stripped reasoning).
    Decreasing,
    /// The measured span is more than [`PLAUSIBLE_FACTOR`] times the heuristic, or less than
    /// its [`PLAUSIBLE_FACTOR`]th part.
    Implausible,
    /// The two assistant messages around the span name different models (their tokenizers
    /// differ, so the difference mixes units).
    ModelChanged,
    /// One of the two assistant messages around the span is a kept copy written by a
    /// compaction: its usage was measured against the context before that compaction.
    KeptCopy,
    /// The message is a compaction message, or the span contains one.
    Compaction,
    /// An assistant message whose `output_tokens` is below the [`PLAUSIBLE_FACTOR`]th part of
    /// the heuristic (some logs record the count at the start of streaming).
    ImplausibleOutput,
}

/// Sizes from provider-reported usage where it can be trusted, the heuristic elsewhere.
///
/// The rules, in order:
///
/// 1. An assistant message is sized by its `output_tokens`, unless it has no usage
///    ([`Fallback::MissingUsage`]), it is a compaction message, or its output is below the
///    [`PLAUSIBLE_FACTOR`]th part of the heuristic ([`Fallback::ImplausibleOutput`]). A kept
///    copy keeps its exact output.
/// 2. The messages strictly between two consecutive assistant messages `a` and `b` form a span
///    of size `input_total(b) - input_total(a) - size(a)`, where `size(a)` is the size rule 1
///    gave `a` (so a span after an implausible output absorbs the heuristic's error for `a`,
///    and the pair's total stays exact). The span is used when: both have usage
///    ([`Fallback::MissingUsage`]), neither is a kept copy ([`Fallback::KeptCopy`]), their
///    `model` fields are equal ([`Fallback::ModelChanged`]), no message from `a` to `b` is a
///    compaction message ([`Fallback::Compaction`]), the difference is not negative
///    ([`Fallback::Decreasing`]), and it lies within [`PLAUSIBLE_FACTOR`] of the heuristic's
///    size of the span ([`Fallback::Implausible`]).
/// 3. A usable span of one message gives it the whole span ([`Source::Span`]); a span of
///    several is divided in proportion to the heuristic with cumulative rounding, so the parts
///    sum exactly to the span ([`Source::Share`]).
/// 4. Every other message gets the heuristic: those before the first or after the last
///    assistant message ([`Fallback::Unbracketed`]), the leading compaction message
///    ([`Fallback::Compaction`]), and the spans a guard rejected.
///
/// Invariants: linear in the number of messages and their bytes; adding content to a message
/// never lowers that message's size nor the total of all sizes (it may move tokens between the
/// messages of one measured span, whose total is fixed by usage).
#[derive(Clone, Copy, Debug, Default)]
#[non_exhaustive]
pub struct UsageSizer {
    /// Used where usage is missing or cannot be trusted.
    pub fallback: Heuristic,
}

impl UsageSizer {
    /// The size of each message with its source, in order.
    pub fn measure(&self, messages: &[Message]) -> Vec<MessageSize> {
        self.measure_with_estimates(messages).1
    }

    /// The heuristic's estimate of each message, and the size of each with its source.
    pub(crate) fn measure_with_estimates(
        &self,
        messages: &[Message],
    ) -> (Vec<u64>, Vec<MessageSize>) {
        let estimates = self.fallback.message_sizes(messages);
        // Which messages are compaction messages, found in the one pass that starts the sizes,
        // so that no rule reads a message's blocks again to ask.
        let mut compactions = Vec::new();
        let mut sizes: Vec<MessageSize> = messages
            .iter()
            .zip(&estimates)
            .enumerate()
            .map(|(i, (m, &tokens))| {
                let compaction = m.compaction_summary().is_some();
                if compaction {
                    compactions.push(i);
                }
                MessageSize {
                    tokens,
                    source: Source::Heuristic(if compaction {
                        Fallback::Compaction
                    } else {
                        Fallback::Unbracketed
                    }),
                }
            })
            .collect();
        let spans = Spans {
            messages,
            estimates: &estimates,
            compactions: &compactions,
        };
        let mut previous: Option<usize> = None;
        for (i, message) in messages.iter().enumerate() {
            if message.role != Role::Assistant {
                continue;
            }
            sizes[i] = own_size(message, estimates[i], spans.has_compaction(i..i + 1));
            if let Some(a) = previous {
                spans.size(a, i, &mut sizes);
            }
            previous = Some(i);
        }
        (estimates, sizes)
    }
}

/// Rule 1: the size of an assistant message.
fn own_size(message: &Message, estimate: u64, compaction: bool) -> MessageSize {
    let heuristic = |reason| MessageSize {
        tokens: estimate,
        source: Source::Heuristic(reason),
    };
    if compaction {
        return heuristic(Fallback::Compaction);
    }
    match &message.usage {
        None => heuristic(Fallback::MissingUsage),
        Some(u) if u.output_tokens.saturating_mul(PLAUSIBLE_FACTOR) < estimate => {
            heuristic(Fallback::ImplausibleOutput)
        }
        Some(u) => MessageSize {
            tokens: u.output_tokens,
            source: Source::Output,
        },
    }
}

/// What rules 2 and 3 read: the messages, the heuristic's estimate of each, and the indices
/// of the compaction messages among them, in order.
struct Spans<'a> {
    messages: &'a [Message],
    estimates: &'a [u64],
    compactions: &'a [usize],
}

impl Spans<'_> {
    /// Whether a compaction message lies in `range`.
    fn has_compaction(&self, range: Range<usize>) -> bool {
        let first = self.compactions.partition_point(|&c| c < range.start);
        self.compactions.get(first).is_some_and(|&c| c < range.end)
    }

    /// Rules 2 and 3: sizes the messages strictly between assistant messages `a` and `b`.
    fn size(&self, a: usize, b: usize, sizes: &mut [MessageSize]) {
        let inner = a + 1..b;
        if inner.is_empty() {
            return;
        }
        let estimate: u64 = self.estimates[inner.clone()].iter().sum();
        let measured = guarded_span(
            &self.messages[a],
            &self.messages[b],
            self.has_compaction(a..b + 1),
            sizes[a].tokens,
        )
        .and_then(|measured| {
            if plausible(measured, estimate) {
                Ok(measured)
            } else {
                Err(Fallback::Implausible)
            }
        });
        let measured = match measured {
            Ok(measured) => measured,
            Err(reason) => {
                for s in &mut sizes[inner] {
                    s.source = Source::Heuristic(reason);
                }
                return;
            }
        };
        if inner.len() == 1 {
            sizes[a + 1] = MessageSize {
                tokens: measured,
                source: Source::Span,
            };
            return;
        }
        // Cumulative rounding: part i is floor(T * C_i / H) - floor(T * C_{i-1} / H), where
        // C_i is the running sum of estimates. The parts sum to T exactly, and a part never
        // shrinks when its own estimate grows.
        let total = u128::from(measured);
        let whole = u128::from(estimate.max(1));
        let mut running = 0u128;
        let mut given = 0u128;
        for i in inner {
            running += u128::from(self.estimates[i]);
            let upto = total * running / whole;
            sizes[i] = MessageSize {
                // Cannot exceed `measured`, which is a u64.
                tokens: u64::try_from(upto - given).unwrap_or(u64::MAX),
                source: Source::Share,
            };
            given = upto;
        }
    }
}

/// Rule 2 of [`UsageSizer`] without its plausibility band: the size of the span strictly
/// between the assistant messages `messages[a]` and `messages[b]` (`a < b`), measured as
/// `input_total(b) - input_total(a) - size_a`, where `size_a` is what `messages[a]` itself is
/// taken to cost. `cargo xtask calibrate` measures the heuristic with it, so the calibration
/// and the sizer believe the same spans; [`plausible`] is the band.
///
/// # Errors
/// The guard that rejects the span, checked in this order: [`Fallback::MissingUsage`],
/// [`Fallback::KeptCopy`], [`Fallback::ModelChanged`], [`Fallback::Compaction`],
/// [`Fallback::Decreasing`].
///
/// # Panics
/// When `b` is not an index of `messages` or `a >= b`.
pub fn measure_span(
    messages: &[Message],
    a: usize,
    b: usize,
    size_a: u64,
) -> Result<u64, Fallback> {
    assert!(a < b, "measure_span: a span needs a < b");
    let compaction = messages[a..=b]
        .iter()
        .any(|m| m.compaction_summary().is_some());
    guarded_span(&messages[a], &messages[b], compaction, size_a)
}

/// [`measure_span`] between `first` and `second`, told whether a compaction message lies
/// between them (the two included).
fn guarded_span(
    first: &Message,
    second: &Message,
    compaction: bool,
    size_a: u64,
) -> Result<u64, Fallback> {
    let (Some(ua), Some(ub)) = (&first.usage, &second.usage) else {
        return Err(Fallback::MissingUsage);
    };
    if first.kept_by().is_some() || second.kept_by().is_some() {
        return Err(Fallback::KeptCopy);
    }
    if first.model != second.model {
        return Err(Fallback::ModelChanged);
    }
    if compaction {
        return Err(Fallback::Compaction);
    }
    difference(ua, ub, size_a).ok_or(Fallback::Decreasing)
}

/// `input_total(later) - input_total(earlier) - size_earlier`, when it is not negative.
fn difference(earlier: &Usage, later: &Usage, size_earlier: u64) -> Option<u64> {
    later
        .input_total()
        .checked_sub(earlier.input_total())?
        .checked_sub(size_earlier)
}

/// Whether a measured size lies within [`PLAUSIBLE_FACTOR`] of the heuristic's estimate, either
/// way (the band of rule 2 of [`UsageSizer`]; saturating, so no size overflows it).
pub fn plausible(measured: u64, estimate: u64) -> bool {
    measured.saturating_mul(PLAUSIBLE_FACTOR) >= estimate
        && measured <= estimate.saturating_mul(PLAUSIBLE_FACTOR)
}

impl Sizer for UsageSizer {
    fn message_sizes(&self, messages: &[Message]) -> Vec<u64> {
        self.measure(messages)
            .into_iter()
            .map(|s| s.tokens)
            .collect()
    }
}
