//! panto's own record, written when no model could summarize the whole prefix
//! ([`CompactRun::record_on_failure`](crate::CompactRun::record_on_failure)): the models' summary so far, when the failed fold took
//! any, then panto's record of only the turns after it; else panto's record alone. Planned
//! within what the fold learned of the window, with fewer turns kept when they would not
//! leave the record room, and appended like any compaction (`write.rs` builds the entry).

use panto_model::Message;
use panto_size::Heuristic;
use panto_store::{SessionLog, Store, StoreError};
use panto_transcript::{Ledger, strip_ledger, transcript_items};

use super::run::Run;
use super::state::{Covered, FoldState, Folded, SoFar, Taught};
use super::{Prepared, kept_estimate};
use crate::config::min_known;
use crate::error::CompactError;
use crate::events::CompactionEvent;
use crate::ledger::with_ledger;
use crate::plan::NotSmaller;
use crate::record::{RECORD_ONLY_MODEL, models_first, record_only_text, step_record_text};
use crate::report::{CompactOutcome, FoldStep};

impl Run<'_> {
    /// Writes panto's own record of `context` after a run in which no model could summarize
    /// it whole (`failure`), for a run that asks for it
    /// ([`CompactRun::record_on_failure`](crate::CompactRun::record_on_failure)).
    ///
    /// When the failed fold had taken steps of the prefix's turns, nothing the models gave is
    /// thrown away: the summary so far (their summaries, with panto's record of any step none
    /// passed) goes on, within what the request after the record leaves, followed by panto's
    /// record of only the turns no step covered (a step of its own, `recorded`); the entry
    /// names the model that answered and counts every request the fold made. Otherwise it is
    /// panto's record alone: the previous summary, the ledger of the prefix merged with the
    /// previous one, and the last words of the assistant in the prefix, marked as such
    /// (`degraded: true`). Either is planned as the run was (with the windows it was given,
    /// the failed fold's plan when it had one), with fewer turns kept when what is known of
    /// the window cannot hold the kept turns beside a record, and appended to `log` like any
    /// compaction, so that the conversation goes on instead of dying. What the failed fold
    /// learned of the window (`taught`) bounds the record too.
    ///
    /// # Errors
    /// `failure` when the record cannot be written either (nothing to compact, not smaller
    /// unless the run forces it, the append refused); nothing is in effect then.
    pub(super) async fn write_record<S: Store>(
        &mut self,
        log: &mut SessionLog<S>,
        failure: CompactError,
    ) -> Result<CompactOutcome, CompactError> {
        let options = self.options;
        let Some((prepared, record)) = self.record(&failure) else {
            return Err(failure);
        };
        let mut compacted = self.build(prepared, record);
        let report = &compacted.report;
        if !options.force && NotSmaller::check(report.tokens_before, report.tokens_after).is_err() {
            return Err(failure);
        }
        match self.compactor.write(log, &mut compacted).await {
            Ok(()) => {}
            // Another writer appended: that, not the models, is why nothing was written.
            Err(e @ StoreError::Conflict { .. }) => return Err(CompactError::Store(e)),
            Err(_) => return Err(failure),
        }
        self.emit(CompactionEvent::Finished(Box::new(
            compacted.report.clone(),
        )));
        Ok(CompactOutcome::Compacted(Box::new(compacted)))
    }

    /// panto's record after the failed fold (`failure`), and its plan: the models' summary so
    /// far and panto's record of the turns after it, when a model's summary of a step was taken
    /// ([`Run::kept_record`]), else panto's record alone ([`Run::record_only`]). `None` when
    /// there is nothing to compact.
    fn record(&mut self, failure: &CompactError) -> Option<(Prepared, Folded)> {
        let (context, options) = (self.context, self.options);
        let partial = self.partial.take();
        // What the failed fold sent and what it cost, counted whatever is kept of it.
        let spent = partial.as_deref().map_or((0, None), |(_, so_far)| {
            (so_far.folded.requests, so_far.folded.usage.clone())
        });
        // Only a summary a model gave is kept (steps panto recorded alone are recorded again).
        let partial = partial.and_then(|partial| {
            let (prepared, so_far) = *partial;
            let covered = so_far.covered.clone()?;
            let used = so_far.folded.used.is_some();
            used.then_some((prepared, so_far, covered))
        });
        let (prepared, partial) = match partial {
            Some((prepared, so_far, covered)) => (prepared, Some((so_far, covered))),
            None => (
                self.compactor
                    .prepare(context, options, &self.windows)
                    .ok()?,
                None,
            ),
        };
        let taught = std::mem::take(&mut self.taught);
        let (prepared, state, limit) = self.record_plan(prepared, &taught);
        // What the request after the record leaves for it (the record's text and its ledger).
        let room = limit.map(|l| {
            let used = kept_estimate(&prepared, "") + self.reserved_within(l);
            l.saturating_sub(used)
        });
        let sizing = Sizing {
            limit,
            room,
            natural: state.so_far.natural_ledger_chars,
        };
        let mut record = match partial {
            Some(kept) => self.kept_record(&prepared, kept, sizing, failure),
            None => {
                let mut record = self.record_only(&prepared, state, sizing, failure);
                (record.requests, record.usage) = spent;
                record
            }
        };
        record.failures.clone_from(&taught.failures);
        self.taught = taught;
        Some((prepared, record))
    }

    /// The models' summary so far (`so_far`, which covers the turns `covered` names), cut to
    /// the `room` as [`models_first`] cuts it (the record of the rest takes what it leaves),
    /// then panto's record of the turns of `prepared`'s
    /// prefix after them, as a step of its own.
    fn kept_record(
        &mut self,
        prepared: &Prepared,
        (so_far, covered): (SoFar, Covered),
        sizing: Sizing,
        failure: &CompactError,
    ) -> Folded {
        let summarized = prepared.plan.prefix();
        let from = covered.until.clamp(summarized.start, summarized.end);
        let rest = &self.context.messages[from..summarized.end];
        let mut folded = so_far.folded;
        // A pass that condensed the summary after it, unfinished, is left out: the summary it
        // condensed is kept instead.
        folded.steps.truncate(covered.steps);
        folded.ledger = Ledger::merge(&so_far.ledger, &Ledger::from_messages(rest));
        let summary = match sizing.room {
            Some(r) => models_first(&covered.summary, r),
            None => covered.summary,
        };
        let text = if rest.is_empty() {
            summary
        } else {
            let chars = sizing.room.map_or(sizing.natural, |r| {
                usize::try_from(r.saturating_mul(3) / 2).unwrap_or(usize::MAX)
            });
            let rest = (from, rest);
            self.record_rest(prepared, &mut folded, rest, &summary, chars, failure)
        };
        let (limit, natural) = (sizing.limit, sizing.natural);
        let budget = self.rendering_budget(prepared, limit, &text, &folded.ledger, natural);
        folded.summary = with_ledger(&text, &folded.ledger, budget);
        tracing::warn!(%failure, steps = covered.steps, "the fold could not finish; kept the models' summary so far and wrote panto's record of the turns after it");
        folded
    }

    /// panto's record alone of `prepared`'s prefix (no model's summary was taken): the
    /// previous summary, the ledger of the prefix merged with `state`'s, and the assistant's
    /// last words, marked `degraded`.
    fn record_only(
        &self,
        prepared: &Prepared,
        state: FoldState,
        sizing: Sizing,
        failure: &CompactError,
    ) -> Folded {
        let prefix = &self.context.messages[prepared.plan.prefix()];
        let items = transcript_items(prefix);
        let previous = prepared.previous_summary.as_deref().map(strip_ledger);
        let ledger = Ledger::merge(&state.so_far.ledger, &Ledger::from_items(&items));
        // The record's own text takes half of what the request after it leaves (of the
        // natural size when nothing is known of the window); the ledger's rendering fits the
        // rest.
        let natural = sizing.natural;
        let chars = sizing.room.map_or(natural, |r| {
            usize::try_from(r.saturating_mul(3)).unwrap_or(usize::MAX)
        });
        let text = record_only_text(failure, previous, &items, chars / 2);
        let budget = self.rendering_budget(prepared, sizing.limit, &text, &ledger, natural);
        tracing::warn!(%failure, "no model could summarize; wrote panto's own record instead");
        Folded {
            summary: with_ledger(&text, &ledger, budget),
            ledger,
            degraded: Some(failure.to_string()),
            ..Folded::default()
        }
    }

    /// The plan of panto's record (`prepared`, the failed fold's or the run's), with the fold's
    /// state as `taught` left it and the limit the request after the record must fit. When
    /// that limit cannot hold the kept turns beside a record (a window learned smaller than
    /// the keep budget), the planner is asked again within it: fewer turns are kept, and the
    /// record covers the rest, so that the retry fits.
    fn record_plan(
        &self,
        prepared: Prepared,
        taught: &Taught,
    ) -> (Prepared, FoldState, Option<u64>) {
        let max_output_tokens = self.compactor.config.max_output_tokens;
        let state_of = |prepared: &Prepared| {
            let mut state =
                FoldState::new(self.context, prepared, max_output_tokens, &self.windows);
            state.limits.proven = taught.proven;
            state.limits.limit = min_known(state.limits.limit, taught.limit);
            state
        };
        let state = state_of(&prepared);
        let limit = self.record_target(&prepared, &state);
        let Some(l) = limit.filter(|_| self.options.must_fit()) else {
            return (prepared, state, limit);
        };
        // The record needs room of its own: a quarter of the limit at least.
        let needed = kept_estimate(&prepared, "") + self.reserved_within(l) + l / 4;
        if needed <= l {
            return (prepared, state, limit);
        }
        match self.prepare_within(l) {
            Some(again)
                if again.plan.head == prepared.plan.head
                    && again.plan.keep_from > prepared.plan.keep_from =>
            {
                tracing::info!(
                    limit = l,
                    kept_before = prepared.plan.kept_tokens,
                    kept = again.plan.kept_tokens,
                    "the window is smaller than the keep budget: keeping fewer turns"
                );
                let state = state_of(&again);
                let limit = self.record_target(&again, &state);
                (again, state, limit)
            }
            _ => (prepared, state, limit),
        }
    }

    /// The limit the request after panto's record must fit ([`Run::retry_target`]); when the
    /// window stated none and no request was taken, the limit the failed fold came down to
    /// (below every input it was refused), for a run that must fit: a record sized for no
    /// window, its kept turns planned for a window far larger, would overflow again.
    fn record_target(&self, prepared: &Prepared, state: &FoldState) -> Option<u64> {
        let fits = self
            .options
            .must_fit()
            .then_some(state.limits.limit)
            .flatten();
        self.retry_target(prepared, state).or(fits)
    }

    /// The summary so far (`summary`) followed by panto's record of the turns no step covered
    /// (`rest`, from message `from`), in about `chars` characters of lines, said as a step of
    /// its own in `folded` (`StepRecorded`).
    fn record_rest(
        &mut self,
        prepared: &Prepared,
        folded: &mut Folded,
        (from, rest): (usize, &[Message]),
        summary: &str,
        chars: usize,
        failure: &CompactError,
    ) -> String {
        let step = folded.steps.len() + 1;
        let cause = failure.to_string();
        let text = step_record_text(Some(summary), rest, step, &cause, chars);
        let first = prepared
            .turns
            .iter()
            .position(|t| t.start >= from)
            .unwrap_or(prepared.turns.len());
        folded.steps.push(FoldStep {
            turns: first..prepared.turns.len(),
            messages: from..from + rest.len(),
            model: RECORD_ONLY_MODEL.to_owned(),
            fallback: false,
            input_tokens: 0,
            max_output_tokens: 0,
            summary_tokens: Heuristic.text(&text),
            elided: 0,
            rejected: 0,
            recorded: Some(cause.clone()),
        });
        self.emit(CompactionEvent::StepRecorded {
            step,
            steps: step,
            cause,
        });
        text
    }
}

/// How panto's record is sized: the limit the request after it must fit, what that request
/// leaves for the record and its ledger, and the ledger rendering's natural size.
#[derive(Clone, Copy)]
struct Sizing {
    limit: Option<u64>,
    room: Option<u64>,
    natural: usize,
}
