//! The fold plan (pure): how the summarized prefix is split into compaction requests that each
//! fit the context window, oldest first, each carrying the summary so far.
//!
//! A prefix that fits one request is a fold of one chunk: the single-request compaction is the
//! same code, not a special case.

use std::fmt;
use std::ops::Range;

/// The least transcript (in tokens) a fold request carries besides its fixed part, the summary
/// it carries and its output: a window that leaves less cannot hold a useful transcript.
pub const MIN_ROOM: u64 = 64;

/// The least output any compaction request allows, in tokens: 256.
///
/// Enough for a brief handoff (about 150 words: what the short built-in prompt asks for) and
/// far from the 1-token requests it replaces, while small windows keep room for the transcript:
/// it binds only where an eighth of the room is less, below about 2,000 tokens of room, and
/// there every token given to the output is taken from the chunk and from the next request's
/// reserve for the running summary (an output and a quarter). At Ollama's default window of
/// 2,048 tokens with the short prompt a later request keeps about 970 tokens for the
/// transcript; a floor of 512 would leave it about 400. When room is short a fold makes its
/// chunks smaller, never the output; a configured `max_output_tokens` below the floor is raised
/// to it, and an answer that stops at the limit is a failed attempt (the fold then asks again
/// with more output, [`crate::MAX_LONGER`]).
pub const MIN_OUTPUT_TOKENS: u32 = 256;

/// The least output floor a small limit brings [`output_floor`] to: 64 tokens.
pub const MIN_SMALL_OUTPUT_TOKENS: u64 = 64;

/// The request limit, in panto's estimated tokens, below which a compaction uses
/// [`crate::BUILTIN_TINY_PROMPT`] instead of [`crate::BUILTIN_SHORT_PROMPT`] (when no `COMPACTION.md` was
/// layered): 2,000.
///
/// Below it the short prompt (367 tokens), the envelope, the summary a request carries and the
/// output floor take more than half the window, so each request of a fold would carry less than
/// half the window of transcript and a fold would take more requests than issue 39's bound,
/// `2 + ceil(conversation / (window / 2))`. With the tiny prompt and the output floor a tenth
/// of the limit there ([`crate::output_floor`]), a later request at 1,000 tokens keeps more
/// than half of it for the transcript.
///
/// The limit is panto's estimate, and a stated window scales into it by the provider's own
/// count ([`crate::Stated::in_estimate`]): llama.cpp's 2,048 counted above panto's estimate
/// becomes about 1,960. A window is judged as stated instead (an overflow's limit, the
/// configured one, the server's; `prompt::form_limit`): what is sent at a window stated at
/// 2,000 tokens or more does not change. One that states none is tiny only as a refused
/// compaction request bounds it: under 2,000 of panto's tokens for the prompt, under 1,700 for
/// the output floor too, so that a window of 2,048 of a provider counting up to a fifth above
/// panto's estimate keeps the floor of 256. A fold's guess alone never makes it tiny.
pub const TINY_PROMPT_BELOW: u64 = 2_000;

/// The least output a compaction request allows within a limit of `limit` tokens:
/// [`MIN_OUTPUT_TOKENS`]; under [`TINY_PROMPT_BELOW`] (2,000 tokens) a tenth of the
/// limit, never below [`MIN_SMALL_OUTPUT_TOKENS`]. There a floor of 256 with the summary a
/// later request carries (an output and a quarter) took more than half the window (issue 39
/// point 3); a tenth of 1,000 tokens (100) still holds the tiny prompt's summary of about 60
/// words ([`crate::BUILTIN_TINY_PROMPT`]), and leaves a later request half the window for the
/// transcript beside the prompt and the envelope. Nothing changes at 2,000 tokens and above.
/// A compaction asks it of the limit that decides the form of its requests
/// ([`TINY_PROMPT_BELOW`]): a window stated at 2,000 tokens or more keeps the floor of
/// 256 even where panto's estimate of it is lower (its budgets raise the floor with
/// [`FoldBudget::with_min_output`]).
pub fn output_floor(limit: Option<u64>) -> u64 {
    match limit {
        Some(l) if l < TINY_PROMPT_BELOW => (l / 10).max(MIN_SMALL_OUTPUT_TOKENS),
        _ => u64::from(MIN_OUTPUT_TOKENS),
    }
}

/// What the requests of a fold must fit, in panto's estimated tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct FoldBudget {
    /// The context limit each request must fit, input and output together; `None` when no limit
    /// is known (then the prefix goes in one request, as the seed's v1 does).
    pub limit: Option<u64>,
    /// The part of every request that does not depend on the chunk: the system prompt (with any
    /// extra instructions), the envelope and the per-request overhead.
    pub fixed: u64,
    /// The previous summary the first request carries (0 when there is none).
    pub previous: u64,
    /// The configured output limit of a compaction request (raised to [`FoldBudget::min_output`]
    /// when below it).
    pub max_output: u64,
    /// The least output a request allows: [`output_floor`] of the limit (a smaller value counts
    /// as it), raised by a fold whose model ran out of output ([`FoldBudget::with_min_output`]).
    pub min_output: u64,
}

impl FoldBudget {
    /// A budget: the limit (if known), the fixed part, the first request's previous summary and
    /// the configured output limit.
    pub fn new(limit: Option<u64>, fixed: u64, previous: u64, max_output: u64) -> FoldBudget {
        FoldBudget {
            limit,
            fixed,
            previous,
            max_output,
            min_output: output_floor(limit),
        }
    }

    /// The same budget with every request allowing at least `tokens` of output (never less than
    /// [`output_floor`] of the limit): the chunks shrink to make the room.
    #[must_use]
    pub fn with_min_output(mut self, tokens: u64) -> FoldBudget {
        self.min_output = tokens.max(output_floor(self.limit));
        self
    }

    /// The output floor of this budget: [`FoldBudget::min_output`], at least [`output_floor`]
    /// of the limit.
    fn floor(&self) -> u64 {
        self.min_output.max(output_floor(self.limit))
    }

    /// The transcript tokens a request of the fold after the first may carry, beside the
    /// summary it carries and its output: the capacity of [`fold`]'s later chunks. `None` when
    /// no limit is known, or when the limit leaves less than [`MIN_ROOM`].
    pub fn later_capacity(&self) -> Option<u64> {
        let limit = self.limit?;
        let room = limit.saturating_sub(self.fixed);
        let output = self.later_output(room);
        let capacity = room
            .saturating_sub(self.carried_reserve())
            .saturating_sub(output);
        (capacity >= MIN_ROOM).then_some(capacity)
    }

    /// The room a request of the fold after the first keeps for the summary it carries: its
    /// output limit and a quarter more (a summary may run a little past what it was asked).
    pub fn carried_reserve(&self) -> u64 {
        let room = self
            .limit
            .map_or(u64::MAX, |l| l.saturating_sub(self.fixed));
        let output = self.later_output(room);
        output + output / 4
    }

    /// The output limit of a request after the first, for `room` tokens beside the fixed part.
    fn later_output(&self, room: u64) -> u64 {
        let floor = self.floor();
        self.max_output.max(floor).min(room / 8).max(floor)
    }
}

/// One request of a fold: a run of the prefix's parts (whole turns, or the pieces the compactor
/// cut a turn too large to share a request into; the plan sees only their sizes).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Chunk {
    /// The parts, as indices into the list the plan was made for (the prefix's turns, or its
    /// parts).
    pub turns: Range<usize>,
    /// Their estimated transcript tokens, rendered whole.
    pub tokens: u64,
    /// The most transcript tokens this request may carry. When `tokens > capacity`, the chunk
    /// is a single part too large for any request, and its item bodies are elided in the
    /// transcript until it fits (unless the compactor can cut it smaller first).
    pub capacity: u64,
}

impl Chunk {
    /// Whether the chunk's transcript must be elided to fit.
    pub fn needs_elision(&self) -> bool {
        self.tokens > self.capacity
    }
}

/// How a summarized prefix is folded into requests. Made by [`fold`].
///
/// Invariants (property-tested):
/// - the chunks are non-empty, consecutive, and cover every turn exactly once, in order;
/// - every request allows at least [`output_floor`] of the limit: `output >= output_floor(limit)`;
/// - every request fits: `fixed + previous_k + min(tokens, capacity) + output <= limit`, where
///   `previous_k` is the budget's `previous` for the first chunk and [`FoldPlan::reserve`] for
///   the others (the running summary is at most the output of the request before);
/// - a chunk over its capacity is a single part (a turn, or a piece of one);
/// - `requests() <= bound()`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct FoldPlan {
    /// The requests, oldest turns first.
    pub chunks: Vec<Chunk>,
    /// The output limit of every request before the last; the last may use more, up to the
    /// configured limit, when the window leaves room.
    pub output: u64,
    /// The room each request after the first keeps for the running summary it carries: an
    /// output and a quarter (panto's estimate of an answer may run above the provider's count
    /// that stopped it).
    pub reserve: u64,
    /// The limit the plan was made for.
    pub limit: Option<u64>,
    /// The estimated transcript tokens of the whole prefix.
    pub total: u64,
}

impl FoldPlan {
    /// How many requests the fold sends when nothing fails.
    pub fn requests(&self) -> usize {
        self.chunks.len()
    }

    /// The bound on [`FoldPlan::requests`]: `1 + 2 * ceil(total / capacity)`, with `capacity` the
    /// smallest chunk capacity. The chunks are packed greedily over whole parts, so two
    /// consecutive chunks together always hold more than one capacity (else they would be one);
    /// greedy packing of consecutive items is also the fewest chunks possible.
    pub fn bound(&self) -> usize {
        let capacity = self
            .chunks
            .iter()
            .map(|c| c.capacity)
            .min()
            .unwrap_or(u64::MAX)
            .max(1);
        let bound = 1 + 2 * self.total.div_ceil(capacity);
        usize::try_from(bound).unwrap_or(usize::MAX)
    }
}

/// Why no fold fits the window.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FoldError {
    /// The fixed part of a request (system prompt, envelope) and the summary it must carry
    /// leave less than [`MIN_ROOM`] tokens of transcript beside the output floor.
    NoRoom {
        /// The limit.
        limit: u64,
        /// The fixed part of every request.
        fixed: u64,
        /// The summary the request would carry (the previous one, or the running one).
        summary: u64,
        /// The output floor of the budget ([`FoldBudget::min_output`], at least
        /// [`output_floor`] of the limit).
        floor: u64,
    },
}

impl fmt::Display for FoldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FoldError::NoRoom {
                limit,
                fixed,
                summary,
                floor,
            } => write!(
                f,
                "a compaction request does not fit a context of about {limit} tokens: the compaction prompt takes about {fixed} tokens and the summary it carries about {summary}, which leaves less than {MIN_ROOM} tokens for the conversation beside the {floor} tokens the new summary needs at least"
            ),
        }
    }
}

impl std::error::Error for FoldError {}

/// Folds a prefix whose turns have the estimated transcript sizes `turn_tokens` into requests
/// that fit `budget`.
///
/// - The floor is [`FoldBudget::min_output`], at least [`output_floor`] of the limit;
///   `max_output` below it counts as the floor: no request allows less.
/// - No known limit: one request with every turn, output `max_output`.
/// - Otherwise the room of a request is `limit - fixed - previous`, and the output of every
///   request but the last is `min(max_output, room / 8)`, at least the floor. When
///   the whole prefix and that output fit the room, the fold is one request. Else each later
///   request keeps [`FoldPlan::reserve`] (an output and a quarter) for the running summary, and
///   the turns are packed greedily, oldest first, into chunks that fit; a turn larger than any
///   chunk's capacity goes alone into its own chunk, to be elided. A short room makes the
///   chunks smaller, never the output.
///
/// An eighth of the room is the output because the running summary is a handoff of what came
/// before, not of the chunk alone: it is carried forward and rewritten by every request, and
/// the ledger keeps the facts beside it. What the output does not take goes to the chunks, so a
/// later chunk holds more than half the window once the prompt is short, and a prefix folds in
/// about `prefix / (window / 2)` requests.
///
/// # Errors
/// [`FoldError::NoRoom`] when a request cannot hold [`MIN_ROOM`] tokens of transcript and
/// the output floor besides its fixed part and the summary it carries.
pub fn fold(turn_tokens: &[u64], budget: &FoldBudget) -> Result<FoldPlan, FoldError> {
    let total = turn_tokens.iter().fold(0u64, |a, &t| a.saturating_add(t));
    let all = |capacity, output| FoldPlan {
        chunks: if turn_tokens.is_empty() {
            Vec::new()
        } else {
            vec![Chunk {
                turns: 0..turn_tokens.len(),
                tokens: total,
                capacity,
            }]
        },
        output,
        reserve: 0,
        limit: budget.limit,
        total,
    };
    let floor = budget.floor();
    let max_output = budget.max_output.max(floor);
    let Some(limit) = budget.limit else {
        return Ok(all(u64::MAX, max_output));
    };
    let no_room = |summary| FoldError::NoRoom {
        limit,
        fixed: budget.fixed,
        summary,
        floor,
    };
    let room = limit
        .saturating_sub(budget.fixed)
        .saturating_sub(budget.previous);
    if room < floor + MIN_ROOM {
        return Err(no_room(budget.previous));
    }
    let output = max_output.min(room / 8).max(floor);
    if total.saturating_add(output) <= room {
        return Ok(all(room - output, output));
    }
    let reserve = output + output / 4;
    let first = room - output;
    let later_room = limit.saturating_sub(budget.fixed).saturating_sub(reserve);
    if later_room < output + MIN_ROOM {
        return Err(no_room(reserve));
    }
    let later = later_room - output;
    let capacity = |chunks: usize| if chunks == 0 { first } else { later };
    let chunks = pack(turn_tokens, capacity);
    Ok(FoldPlan {
        chunks,
        output,
        reserve,
        limit: Some(limit),
        total,
    })
}

/// The parts of sizes `turn_tokens` packed greedily, oldest first, into chunks, the `n`th
/// (from 0) carrying at most `capacity(n)`; a part larger than its chunk's capacity alone.
/// Greedy packing of consecutive parts takes the fewest chunks possible.
pub(crate) fn pack(turn_tokens: &[u64], capacity: impl Fn(usize) -> u64) -> Vec<Chunk> {
    let mut chunks: Vec<Chunk> = Vec::new();
    let mut start = 0;
    let mut sum = 0u64;
    for (i, &tokens) in turn_tokens.iter().enumerate() {
        let cap = capacity(chunks.len());
        if start < i && sum.saturating_add(tokens) > cap {
            chunks.push(Chunk {
                turns: start..i,
                tokens: sum,
                capacity: cap,
            });
            start = i;
            sum = 0;
        }
        sum = sum.saturating_add(tokens);
        let cap = capacity(chunks.len());
        if sum > cap {
            // A turn too large for any chunk: alone, to be elided.
            chunks.push(Chunk {
                turns: i..i + 1,
                tokens: sum,
                capacity: cap,
            });
            start = i + 1;
            sum = 0;
        }
    }
    if start < turn_tokens.len() {
        chunks.push(Chunk {
            turns: start..turn_tokens.len(),
            tokens: sum,
            capacity: capacity(chunks.len()),
        });
    }
    chunks
}
