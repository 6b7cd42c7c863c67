//! A step of the fold done: the request as it was sent (`Sent`), and what the state takes from
//! it, the model's summary ([`FoldState::take`]) or, when no model's summary passed, panto's
//! record of the step's turns ([`FoldState::record`]).

use std::ops::Range;

use panto_size::Heuristic;
use panto_transcript::{Elision, Ledger, strip_ledger};

use super::ask::Answer;
use super::parts::Material;
use super::state::{Covered, FoldState};
use crate::record::{RECORD_ONLY_MODEL, models_first, step_record_text};
use crate::report::{ElidedItem, FoldStep};

/// One request of the fold, as it was sent.
pub(super) struct Sent {
    /// The turns, as indices into the material's turns: every turn it holds a part of.
    pub(super) turns: Range<usize>,
    /// Their messages, as a range of the material's messages.
    pub(super) messages: Range<usize>,
    /// The messages of the turns whose first part it holds: what the step adds to the ledger
    /// (a turn cut between steps is derived once).
    pub(super) ledger: Range<usize>,
    pub(super) input_tokens: u64,
    pub(super) max_output_tokens: u32,
    /// The item bodies elided in its transcript.
    pub(super) elisions: Vec<Elision>,
    /// Requests of this step rejected as too large before this one.
    pub(super) rejected: usize,
    /// Where the messages of the turns the step completes end (a turn whose last part is in a
    /// later step is not complete): with the steps before, the summary covers the material's
    /// messages up to here.
    pub(super) whole_until: usize,
}

impl FoldState {
    /// The answer to `sent`: its step recorded; for the prefix's turns (not a carried
    /// summary's pieces), its elisions and the ledger of its messages added to the record;
    /// and its summary the one the next request carries. The ledger goes with the final
    /// summary only: the next chunk's request carries the model's text, so the fold's plan is
    /// not changed by it.
    pub(super) fn take(&mut self, answer: Answer, sent: Sent, material: &Material<'_>) {
        let summary = strip_ledger(&answer.summary).to_owned();
        let step = FoldStep {
            turns: sent.turns.clone(),
            messages: sent.messages.clone(),
            model: answer.used.model.clone(),
            fallback: answer.fallback_cause.is_some(),
            input_tokens: sent.input_tokens,
            max_output_tokens: sent.max_output_tokens,
            summary_tokens: Heuristic.text(&answer.summary),
            elided: sent.elisions.len(),
            rejected: sent.rejected,
            recorded: None,
        };
        let folded = &mut self.so_far.folded;
        folded.fallback_cause = answer
            .fallback_cause
            .clone()
            .or(folded.fallback_cause.take());
        folded.used = Some(answer.used);
        self.step_done(step, sent, material, summary);
    }

    /// A step of the prefix's turns that no model's summary passed (step `number`, for
    /// `cause`): panto's record of its turns goes on after the summary it carried, as the
    /// summary so far. When steps follow (`last` false), the whole is no larger than the room
    /// a later request keeps for a summary (requests of `fixed` tokens besides): the summary it
    /// carried keeps at most three quarters of it (its start, in whole lines: the rule of
    /// [`models_first`], as when a fold cannot finish), and the record's
    /// items are fewer where they must be. After the last step the summary it carried is kept
    /// whole, and the record takes that room beside it (a summary too large for the request
    /// after the compaction is condensed). The next steps start from the output floor again: a
    /// larger one was for the answers that failed.
    pub(super) fn record(
        &mut self,
        sent: Sent,
        material: &Material<'_>,
        (number, fixed, last): (usize, u64, bool),
        cause: &str,
    ) {
        self.output.min = 0;
        let room = self.budget(fixed, 0).carried_reserve();
        let messages = &material.messages[sent.messages.clone()];
        let previous = match self.so_far.running.as_deref() {
            Some(p) if last => Some(p.to_owned()),
            Some(p) => Some(models_first(p, room)),
            None => None,
        };
        let most = if last {
            room + previous.as_deref().map_or(0, |p| Heuristic.text(p))
        } else {
            room
        };
        let mut chars = usize::try_from(room.saturating_mul(4)).unwrap_or(usize::MAX);
        let summary = loop {
            let text = step_record_text(previous.as_deref(), messages, number, cause, chars);
            if chars == 0 || Heuristic.text(&text) <= most {
                break text;
            }
            chars = chars * 3 / 4;
            if chars < 100 {
                chars = 0;
            }
        };
        let step = FoldStep {
            turns: sent.turns.clone(),
            messages: sent.messages.clone(),
            model: RECORD_ONLY_MODEL.to_owned(),
            fallback: false,
            input_tokens: sent.input_tokens,
            max_output_tokens: sent.max_output_tokens,
            summary_tokens: Heuristic.text(&summary),
            elided: sent.elisions.len(),
            rejected: sent.rejected,
            recorded: Some(cause.to_owned()),
        };
        self.step_done(step, sent, material, summary);
    }

    /// A step done: recorded, its elisions and the ledger of its messages added to the record
    /// (for the prefix's turns, not a carried summary's pieces), and `summary` the summary the
    /// next request carries.
    fn step_done(&mut self, step: FoldStep, sent: Sent, material: &Material<'_>, summary: String) {
        let so_far = &mut self.so_far;
        let folded = &mut so_far.folded;
        folded.steps.push(step);
        if !material.carried {
            let messages = sent.messages;
            folded.elided.extend(sent.elisions.into_iter().map(|e| {
                let message = messages.start + e.message;
                ElidedItem {
                    message,
                    message_id: material.messages[message].id.as_deref().map(str::to_owned),
                    block: e.block,
                    bytes: e.bytes,
                    kept: e.kept,
                }
            }));
            // A step inside a turn begun before derives nothing new: merging nothing would
            // copy and re-cap the whole record once per step (the steps of one huge turn).
            if !sent.ledger.is_empty() {
                so_far.ledger = Ledger::merge(
                    &so_far.ledger,
                    &Ledger::from_messages(&material.messages[sent.ledger]),
                );
            }
            so_far.covered = Some(Covered {
                until: sent.whole_until,
                summary: summary.clone(),
                steps: folded.steps.len(),
            });
        }
        so_far.running = Some(summary);
    }
}
