//! Where a fold stands (`FoldState`: the summary so far, the record so far, what was sent and
//! what it learned), what it walks (`Material`: the summarized prefix, or the `Pieces` of a
//! previous summary too large to ride along) and what it produced (`Folded`).

use std::collections::HashSet;
use std::ops::Range;

use panto_model::{EffectiveContext, Message};
use panto_provider::ProviderError;
use panto_size::Heuristic;
use panto_transcript::{Ledger, TurnTranscript, render_turns};

use super::Prepared;
use crate::attempt::AttemptFailure;
use crate::config::{ModelRef, RequestBound};
use crate::fold::{FoldBudget, MIN_OUTPUT_TOKENS};
use crate::ledger::{ledger_budget, previous_ledger, rendered_len};
use crate::report::{ElidedItem, FoldStep};

/// Where a fold stands: the summary so far, the record so far, what was sent, and what the
/// fold learned (a smaller limit, inputs a model rejected, a compaction model that failed).
/// Everything a fold needs to go on from where it is.
pub(super) struct FoldState {
    /// The summary so far (the model's text, no ledger): `<previous-summary>` of the next
    /// request.
    pub(super) running: Option<String>,
    /// The whole record so far: the previous entry's, merged with every chunk summarized.
    pub(super) ledger: Ledger,
    /// The steps, requests, elisions and models so far.
    pub(super) folded: Folded,
    /// The limit every request must fit (smaller after a shrink).
    pub(super) limit: Option<u64>,
    /// The output limit of the fold's requests ([`Compactor::max_output`]).
    pub(super) max_output: u64,
    /// The least output of the fold's requests: [`MIN_OUTPUT_TOKENS`], doubled (up to the
    /// configured output limit) each time a model's summary stopped at the output limit.
    pub(super) min_output: u64,
    /// How often the limit was shrunk after a rejection.
    pub(super) shrinks: usize,
    /// Inputs rejected as too large, by model: never sent to that model again.
    pub(super) rejected: HashSet<(String, u64)>,
    /// The last rejection, which a repeated input would get again.
    pub(super) last_overflow: Option<ProviderError>,
    /// Why the compaction model failed, once it has: it is not asked again in this fold.
    pub(super) compaction_model_failed: Option<AttemptFailure>,
    /// Steps planned for the material after the one being folded (the turns after the
    /// carried summary's pieces), so that the count shown is the whole fold's.
    pub(super) later_steps: usize,
    /// The natural size of the ledger's rendering ([`ledger_budget`] of what was there and
    /// what is summarized).
    pub(super) natural_ledger_chars: usize,
    /// The smallest input the provider rejected as too large without stating its limit: the
    /// window is below it (and above `proven`).
    pub(super) upper: Option<u64>,
    /// Every failed attempt so far, as `model: cause`.
    pub(super) failures: Vec<String>,
    /// The run's extra instructions, for a system prompt chosen again for a smaller window.
    pub(super) instructions: Option<String>,
    /// What bounds an overflow's requests: a summary cut at its output limit is asked again
    /// only while the fold stays within it.
    pub(super) request_bound: Option<RequestBound>,
    /// The largest request the provider accepted (input and output), in estimated tokens:
    /// once a rejection has shown the window below the planned limit, only this much is known
    /// to fit.
    pub(super) proven: u64,
}

impl FoldState {
    /// What the fold's requests must fit now: the limit, `fixed`, the summary the first request
    /// carries (`previous` tokens), and the output limit and floor.
    pub(super) fn budget(&self, fixed: u64, previous: u64) -> FoldBudget {
        FoldBudget::new(self.limit, fixed, previous, self.max_output)
            .with_min_output(self.min_output)
    }

    /// Whether a plan of `requests` more requests from here keeps the fold within the
    /// overflow's bound on requests (always, when there is none).
    pub(super) fn within_bound(&self, requests: usize) -> bool {
        self.request_bound.is_none_or(|bound| {
            self.folded.requests + requests + self.later_steps
                <= bound.compaction_requests(self.upper)
        })
    }

    /// The start of a fold of `prepared`: the previous summary and record, nothing sent.
    pub(super) fn new(
        context: &EffectiveContext,
        prepared: &Prepared,
        max_output_tokens: u32,
    ) -> FoldState {
        FoldState {
            running: prepared.previous_summary.clone(),
            ledger: previous_ledger(context),
            folded: Folded::default(),
            limit: prepared.limit,
            max_output: u64::from(max_output_tokens.max(MIN_OUTPUT_TOKENS)),
            min_output: u64::from(MIN_OUTPUT_TOKENS),
            shrinks: 0,
            rejected: HashSet::new(),
            last_overflow: None,
            compaction_model_failed: None,
            later_steps: 0,
            natural_ledger_chars: ledger_budget(
                max_output_tokens,
                rendered_len(context),
                prepared.transcript.text().len(),
                None,
            ),
            proven: 0,
            upper: None,
            failures: Vec::new(),
            instructions: None,
            request_bound: None,
        }
    }
}

/// What a fold walks: messages split in turns, with each turn's size and the transcript
/// rendered turn by turn; either the summarized prefix of the context, or the pieces of a
/// previous summary too large to ride along.
pub(super) struct Material<'a> {
    pub(super) messages: &'a [Message],
    /// The turns, as ranges of `messages`.
    pub(super) turns: &'a [Range<usize>],
    pub(super) turn_tokens: &'a [u64],
    pub(super) turn_tenths: &'a [u64],
    pub(super) transcript: &'a mut TurnTranscript,
    /// Whether these are a previous summary's pieces: no ledger to derive, no elision to
    /// record, no echo to refuse.
    pub(super) carried: bool,
}

impl<'a> Material<'a> {
    /// The summarized prefix of `context` as `prepared` planned it.
    pub(super) fn prefix(
        context: &'a EffectiveContext,
        prepared: &'a mut Prepared,
    ) -> Material<'a> {
        Material {
            messages: &context.messages,
            turns: &prepared.turns,
            turn_tokens: &prepared.turn_tokens,
            turn_tenths: &prepared.turn_tenths,
            transcript: &mut prepared.transcript,
            carried: false,
        }
    }
}

/// A previous summary cut into pieces, each a compaction message of its own (rendered as
/// `[Summary of earlier conversation]:`) and a turn of its own.
pub(super) struct Pieces {
    pub(super) messages: Vec<Message>,
    pub(super) turns: Vec<Range<usize>>,
    pub(super) turn_tokens: Vec<u64>,
    pub(super) turn_tenths: Vec<u64>,
    pub(super) transcript: TurnTranscript,
}

impl Pieces {
    pub(super) fn new(pieces: Vec<String>) -> Pieces {
        let messages: Vec<Message> = pieces.into_iter().map(Message::compaction).collect();
        let turns: Vec<Range<usize>> = (0..messages.len()).map(|i| i..i + 1).collect();
        let transcript = render_turns(&messages, &turns);
        let turn_tenths: Vec<u64> = (0..turns.len())
            .map(|i| Heuristic.text_tenths(transcript.turns(i..i + 1)))
            .collect();
        Pieces {
            turn_tokens: turn_tenths.iter().map(|t| t.div_ceil(10)).collect(),
            messages,
            turns,
            turn_tenths,
            transcript,
        }
    }

    pub(super) fn material(&mut self) -> Material<'_> {
        Material {
            messages: &self.messages,
            turns: &self.turns,
            turn_tokens: &self.turn_tokens,
            turn_tenths: &self.turn_tenths,
            transcript: &mut self.transcript,
            carried: true,
        }
    }
}

/// `text` in pieces of at most `max_tokens` estimated tokens each, cut between lines (a line
/// longer than that between characters), in order; together they are the whole text.
pub(super) fn split_text(text: &str, max_tokens: u64) -> Vec<String> {
    let max_tokens = max_tokens.max(1);
    let mut pieces = Vec::new();
    let mut piece = String::new();
    for line in text.split_inclusive('\n') {
        if !piece.is_empty() && Heuristic.text(&piece) + Heuristic.text(line) > max_tokens {
            pieces.push(std::mem::take(&mut piece));
        }
        if Heuristic.text(line) <= max_tokens {
            piece.push_str(line);
            continue;
        }
        // A line too long for any piece: cut between characters.
        let mut part = String::new();
        for (i, c) in line.chars().enumerate() {
            part.push(c);
            // Sized every 64 characters, not at each one.
            if (i + 1).is_multiple_of(64) && Heuristic.text(&part) >= max_tokens {
                pieces.push(std::mem::take(&mut part));
            }
        }
        piece = part;
    }
    if !piece.trim().is_empty() {
        pieces.push(piece);
    }
    pieces
}

/// What a fold learned of the window and the models, kept for panto's own record when the
/// fold failed.
pub(super) struct Learned {
    pub(super) proven: u64,
    pub(super) limit: Option<u64>,
    pub(super) failures: Vec<String>,
}

/// What a fold produced.
#[derive(Default)]
pub(super) struct Folded {
    pub(super) summary: String,
    pub(super) used: Option<ModelRef>,
    pub(super) fallback_cause: Option<AttemptFailure>,
    pub(super) steps: Vec<FoldStep>,
    pub(super) requests: usize,
    pub(super) elided: Vec<ElidedItem>,
    pub(super) ledger: Ledger,
    pub(super) degraded: Option<String>,
    /// Every failed attempt, as `model: cause`.
    pub(super) failures: Vec<String>,
    /// The limit the fold ended with (lower than planned after a shrink).
    pub(super) limit: Option<u64>,
}
