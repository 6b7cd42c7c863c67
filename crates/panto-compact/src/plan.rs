//! The retention plan (Contract 2): which whole turns are summarized and which are kept verbatim.
//!
//! Pure: a function of the effective context, per-message sizes and a budget.

use std::fmt;
use std::ops::Range;

use panto_model::{EffectiveContext, turns};

/// How an effective context splits into the summarized prefix and the kept suffix.
///
/// Indices are positions in `context.messages` of the context the plan was made from.
///
/// Invariants:
/// - `head <= keep_from <= end`, and `keep_from` is a turn boundary of the conversation
///   (`context.messages[head..]`), so no turn is split and every tool call lies on the same side
///   as its results;
/// - the leading compaction message (`0..head`) is neither summarized nor kept: its summary is
///   passed separately as the previous summary;
/// - the last turn (the one in flight) is always kept, whatever its size;
/// - any other kept turn fits: `kept_tokens <= budget` unless only the in-flight turn is kept;
/// - the suffix is the longest that fits: when a turn precedes it, adding that turn would
///   exceed the budget.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Plan {
    /// Where the conversation starts: 1 when a compaction message leads the context, else 0.
    pub head: usize,
    /// The first kept message; `head..keep_from` is summarized.
    pub keep_from: usize,
    /// The number of messages in the context.
    pub end: usize,
    /// Turns in the summarized prefix.
    pub summarized_turns: usize,
    /// Turns in the kept suffix.
    pub kept_turns: usize,
    /// Estimated tokens of the summarized prefix (saturating).
    pub summarized_tokens: u64,
    /// Estimated tokens of the kept suffix (saturating).
    pub kept_tokens: u64,
    /// The keep-verbatim budget the plan was made with.
    pub budget: u64,
}

impl Plan {
    /// A plan over `end` messages that summarizes `head..keep_from` and keeps `keep_from..end`,
    /// with no turns, tokens or budget counted; [`Plan::with_turns`] and [`Plan::with_tokens`]
    /// fill them in. [`plan()`] makes the plan of a context.
    pub fn new(head: usize, keep_from: usize, end: usize) -> Plan {
        Plan {
            head,
            keep_from,
            end,
            summarized_turns: 0,
            kept_turns: 0,
            summarized_tokens: 0,
            kept_tokens: 0,
            budget: 0,
        }
    }

    /// The plan with the turns of the summarized prefix and of the kept suffix.
    #[must_use]
    pub fn with_turns(mut self, summarized: usize, kept: usize) -> Plan {
        self.summarized_turns = summarized;
        self.kept_turns = kept;
        self
    }

    /// The plan with the estimated tokens of the prefix and of the suffix, and the budget.
    #[must_use]
    pub fn with_tokens(mut self, summarized: u64, kept: u64, budget: u64) -> Plan {
        self.summarized_tokens = summarized;
        self.kept_tokens = kept;
        self.budget = budget;
        self
    }

    /// The summarized messages, as a range of `context.messages`.
    pub fn prefix(&self) -> Range<usize> {
        self.head..self.keep_from
    }

    /// The kept messages, as a range of `context.messages`.
    pub fn kept(&self) -> Range<usize> {
        self.keep_from..self.end
    }

    /// Whether there is nothing to summarize (an empty prefix): a normal outcome, not an error.
    pub fn is_empty(&self) -> bool {
        self.keep_from == self.head
    }
}

/// The keep-verbatim budget for one compaction: `keep_tokens`, capped at a quarter of the
/// context limit when an overflow error reported one.
pub fn keep_budget(keep_tokens: u64, context_limit: Option<u64>) -> u64 {
    match context_limit {
        Some(limit) => keep_tokens.min(limit / 4),
        None => keep_tokens,
    }
}

/// The keep-verbatim budget of a manual compaction (`/compact`, `panto compact`): `keep_tokens`,
/// capped at half of `conversation_tokens` (the conversation's turns, without the summary it
/// starts from). A person who asks for a compaction wants one: under this cap the walk
/// backwards stops before the first turn, so a conversation of two turns or more always has
/// something to summarize, whatever `keep_tokens` is. A run given its own budget
/// ([`CompactRun::with_keep_tokens`](crate::CompactRun::with_keep_tokens)) is not capped.
pub fn manual_keep_budget(keep_tokens: u64, conversation_tokens: u64) -> u64 {
    keep_tokens.min(conversation_tokens / 2)
}

/// Plans a compaction of `context`: walking backwards over whole turns of the conversation, keep
/// the longest run that fits `budget`, the in-flight (last) turn always included.
///
/// `sizes[i]` is the estimated size in tokens of `context.messages[i]`. A missing size counts as
/// unbounded, so a turn without sizes is never kept unless it is the one in flight: when sizing
/// data is missing the plan keeps less, never more.
pub fn plan(context: &EffectiveContext, sizes: &[u64], budget: u64) -> Plan {
    plan_and_turns(context, sizes, budget).0
}

/// [`plan()`], with the turns of the conversation it segmented (`panto_model::turns` of the
/// messages after the head, relative to it). The summarized prefix ends where a turn starts,
/// and whether a cut is allowed depends only on the messages before it, so the first
/// `summarized_turns` of them are the turns of the prefix alone: the caller need not
/// segment it again.
pub(crate) fn plan_and_turns(
    context: &EffectiveContext,
    sizes: &[u64],
    budget: u64,
) -> (Plan, Vec<Range<usize>>) {
    let head = usize::from(context.compaction.is_some()).min(context.messages.len());
    let end = context.messages.len();
    let size = |i: usize| sizes.get(i).copied().unwrap_or(u64::MAX);
    let turn_size = |r: &Range<usize>| {
        r.clone()
            .map(|i| size(head + i))
            .fold(0u64, u64::saturating_add)
    };
    let turns = turns(&context.messages[head..]);
    let mut keep_from = end;
    let mut kept_turns = 0;
    let mut kept_tokens = 0u64;
    for (n, turn) in turns.iter().rev().enumerate() {
        let cost = turn_size(turn);
        let total = kept_tokens.saturating_add(cost);
        if n > 0 && total > budget {
            break;
        }
        kept_tokens = total;
        kept_turns += 1;
        keep_from = head + turn.start;
    }
    let summarized_tokens = (head..keep_from).map(size).fold(0u64, u64::saturating_add);
    let plan = Plan {
        head,
        keep_from,
        end,
        summarized_turns: turns.len() - kept_turns,
        kept_turns,
        summarized_tokens,
        kept_tokens,
        budget,
    };
    (plan, turns)
}

/// Why a compaction had nothing to do: every turn is kept verbatim. A normal outcome.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct NothingToCompact {
    /// Turns in the conversation (after the compaction message, if any).
    pub turns: usize,
    /// Their estimated tokens.
    pub tokens: u64,
    /// The keep budget they fit.
    pub budget: u64,
}

impl NothingToCompact {
    /// The verdict for `turns` turns of about `tokens` tokens that fit `budget`.
    pub fn new(turns: usize, tokens: u64, budget: u64) -> NothingToCompact {
        NothingToCompact {
            turns,
            tokens,
            budget,
        }
    }
}

impl fmt::Display for NothingToCompact {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.turns {
            0 => f.write_str("nothing to compact: the conversation is empty"),
            1 => f.write_str(
                "nothing to compact: the conversation is a single turn, which is always kept verbatim",
            ),
            n => write!(
                f,
                "nothing to compact: all {n} turns (about {} tokens) fit the keep-verbatim budget of {} tokens",
                self.tokens, self.budget
            ),
        }
    }
}

/// A compaction that would not make the conversation smaller: the summary and the kept turns
/// are estimated at no fewer tokens than the conversation they replace (a summary of a tiny
/// prefix, say, which costs its own overhead). Such a compaction is not written unless the run
/// forces it ([`CompactRun::with_force`](crate::CompactRun::with_force)).
///
/// Both sizes come from the same ruler (`panto_size::estimate`), as a compaction's
/// `tokens_before` and `tokens_after` do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct NotSmaller {
    /// Estimated tokens of the conversation before.
    pub tokens_before: u64,
    /// Estimated tokens of the conversation the compaction would leave.
    pub tokens_after: u64,
}

impl NotSmaller {
    /// `Err` when a compaction from `tokens_before` to `tokens_after` saves nothing.
    ///
    /// # Errors
    /// [`NotSmaller`] when `tokens_after >= tokens_before`.
    pub fn check(tokens_before: u64, tokens_after: u64) -> Result<(), NotSmaller> {
        if tokens_after < tokens_before {
            Ok(())
        } else {
            Err(NotSmaller {
                tokens_before,
                tokens_after,
            })
        }
    }
}

impl fmt::Display for NotSmaller {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the compaction would not make the conversation smaller: the summary and the kept messages are about {} tokens, the conversation about {}",
            self.tokens_after, self.tokens_before
        )
    }
}
