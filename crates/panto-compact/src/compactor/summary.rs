//! panto's own summary as a strategy: the summarized turns folded through as many requests as
//! the window needs (a `Fold`), then the summary with its ledger written like every
//! compaction.
//!
//! The fold goes in passes, each a walk (`walk.rs`) over some material from where the last one
//! stopped: the previous summary in pieces when it is too large to ride along; the prefix's
//! turns; when the run must leave the request after it within a window found smaller than
//! planned, the turns the planner now summarizes too; and, when the summary itself is too large
//! for that request, the summary in pieces, condensed. The planner is asked again here, by the
//! strategy, between passes; the fold never plans the compaction itself.

use super::folding::Fold;
use super::limits::{previous_tokens, request_overhead};
use super::parts::{Material, Pieces, prefix_parts, split_text};
use super::run::Run;
use super::state::{FoldState, Taught};
use super::walk::Walk;
use super::{Prepared, kept_estimate};
use crate::error::CompactError;
use crate::events::CompactionEvent;
use crate::fold::{MIN_ROOM, fold};
use crate::report::Compacted;

/// The summary of `prepared`'s prefix, folded, with its ledger, ready to be appended.
///
/// # Errors
/// When no model's summary was obtained ([`CompactError::no_summary_obtained`]), or the
/// compaction would not make the conversation smaller and the run does not force it.
pub(super) async fn produce(
    run: &mut Run<'_>,
    mut prepared: Prepared,
) -> Result<Compacted, CompactError> {
    let max_output_tokens = run.compactor.config.max_output_tokens;
    let mut state = FoldState::new(run.context, &prepared, max_output_tokens, &run.windows);
    state.instructions = run.options.instructions().map(str::to_owned);
    state.limits.request_bound = run.options.request_bound(&run.windows);
    let mut fold = Fold { run, state };
    let folded = summarize(&mut fold, &mut prepared).await;
    let Fold { run, state } = fold;
    run.taught = Taught::of(&state);
    if let Err(error) = folded {
        let fallback = run.compactor.compaction_model.is_some();
        run.failed(
            (prepared.plan.clone(), prepared.tokens_before, fallback),
            &error,
        );
        run.partial = Some(Box::new((prepared, state.so_far)));
        return Err(error);
    }
    let folded = run.finish(&prepared, state);
    let compacted = run.build(prepared, folded);
    // A compaction that leaves the conversation no smaller is not written, unless the run
    // forces it.
    run.check_smaller(compacted)
}

/// The whole fold: the prefix (the carried summary first, when it must be folded too); then,
/// when the run must leave the request after it within what is known of the window and the
/// kept turns would not fit it, the turns the planner gives for that smaller window, going on
/// from the summary so far (nothing is summarized twice); then, if the summary itself is too
/// large, the summary condensed.
async fn summarize(fold: &mut Fold<'_, '_>, prepared: &mut Prepared) -> Result<(), CompactError> {
    fold.prefix(prepared).await?;
    let run = &*fold.run;
    if !run.options.must_fit() {
        return Ok(());
    }
    let Some(target) = run.retry_target(prepared, &fold.state) else {
        return Ok(());
    };
    if fold.fits(prepared, target) {
        return Ok(());
    }
    // The planner again, within the target: when it keeps the same head and summarizes the
    // turns already folded and more, the fold goes on over the more.
    let from = prepared.turns.len();
    match run.prepare_within(target) {
        Some(again)
            if again.plan.head == prepared.plan.head
                && again.turns.len() >= from
                && again.turns[..from] == prepared.turns[..] =>
        {
            *prepared = again;
        }
        _ => return Ok(()),
    }
    fold.state.output.max = fold.run.max_output(prepared.summary_room);
    let system = prepared.system.clone();
    let fixed = request_overhead(&system);
    let system = fold
        .more_turns(prepared, from, (system, fixed), target)
        .await?;
    if fold.fits(prepared, target) {
        return Ok(());
    }
    fold.condense(system, fixed).await
}

impl Fold<'_, '_> {
    /// The prefix of `prepared`: its carried summary first, in pieces, when it is too large to
    /// ride along, then its turns. The fold is announced whole (`Folding`).
    async fn prefix(&mut self, prepared: &mut Prepared) -> Result<(), CompactError> {
        self.state.output.max = self.run.max_output(prepared.summary_room);
        let fixed = request_overhead(&prepared.system);
        let mut carried = self.carried_pieces(fixed);
        let carried_steps = match &carried {
            Some(pieces) => {
                // The previous summary is the material now; the turns follow its summary.
                self.state.so_far.running = None;
                self.plan(&pieces.parts, 0, fixed, None)?.requests()
            }
            None => 0,
        };
        let previous = if carried.is_some() {
            // The summary of the pieces is at most one output.
            Some(self.state.output.max + self.state.output.max / 4)
        } else {
            self.state.so_far.running.as_deref().map(previous_tokens)
        };
        let mut parts = prefix_parts(prepared, &self.state, fixed, &self.run.context.messages);
        let budget = self
            .state
            .budget(fixed + parts.allowance(), previous.unwrap_or(0));
        let turns_plan = fold(&parts.tokens, &budget).map_err(CompactError::NoRoom)?;
        self.run.emit(CompactionEvent::Folding {
            steps: carried_steps + turns_plan.requests(),
            limit: self.state.limits.limit,
            transcript_tokens: turns_plan.total,
        });
        if let Some(pieces) = &mut carried {
            self.state.later_steps = turns_plan.requests();
            let system = prepared.system.clone();
            Walk::start(self, pieces.material(), system, 0)?
                .run(self)
                .await?;
            self.state.later_steps = 0;
            // The turns were planned for a summary of a whole output; said again when the one
            // the pieces came to needs another count.
            let running = self.state.so_far.running.clone();
            let turns = self.plan(&parts, 0, fixed, running.as_deref())?;
            if turns.requests() != turns_plan.requests() {
                self.run.emit(CompactionEvent::Replanned {
                    steps: self.state.so_far.folded.steps.len() + turns.requests(),
                    cause: "the earlier summary came out shorter than planned".to_owned(),
                });
            }
        }
        let context = self.run.context;
        let material = Material {
            messages: &context.messages,
            parts: &mut parts,
            carried: false,
        };
        let system = prepared.system.clone();
        Walk::start(self, material, system, 0)?.run(self).await?;
        Ok(())
    }

    /// Whether the request after the compaction, with the summary so far and the kept turns of
    /// `prepared`, fits `target`.
    fn fits(&self, prepared: &Prepared, target: u64) -> bool {
        let summary = self.state.so_far.running.as_deref().unwrap_or("");
        kept_estimate(prepared, summary) + self.run.reserved_within(target) <= target
    }

    /// The turns of `prepared` from turn `from` on (the planner summarized them for a window
    /// smaller than planned), after the summary so far, with `system` (of `fixed` tokens).
    /// Gives the system prompt the walk ended with.
    async fn more_turns(
        &mut self,
        prepared: &mut Prepared,
        from: usize,
        (system, fixed): (String, u64),
        target: u64,
    ) -> Result<String, CompactError> {
        if from >= prepared.turns.len() {
            return Ok(system);
        }
        tracing::info!(
            limit = target,
            turns = prepared.turns.len() - from,
            "the window is smaller than planned: summarizing more turns, going on from the summary so far"
        );
        let mut parts = prefix_parts(prepared, &self.state, fixed, &self.run.context.messages);
        let from = parts.first_of(from);
        let running = self.state.so_far.running.clone();
        let rest = self.plan(&parts, from, fixed, running.as_deref())?;
        self.run.emit(CompactionEvent::Replanned {
            steps: self.state.so_far.folded.steps.len() + rest.requests(),
            cause: format!(
                "the window is smaller than planned, so {} more turns are summarized after the summary so far",
                prepared.turns.len() - parts.turns_in(from..parts.len()).start
            ),
        });
        let context = self.run.context;
        let material = Material {
            messages: &context.messages,
            parts: &mut parts,
            carried: false,
        };
        Walk::start(self, material, system, from)?.run(self).await
    }

    /// The summary so far, too large for the request after it, condensed: in pieces that each
    /// fit a request (of `fixed` tokens besides, with `system`), folded like a carried summary.
    async fn condense(&mut self, system: String, fixed: u64) -> Result<(), CompactError> {
        let Some(running) = self.state.so_far.running.take() else {
            return Ok(());
        };
        let capacity = self
            .state
            .budget(fixed, 0)
            .later_capacity()
            .unwrap_or(MIN_ROOM);
        let mut pieces = Pieces::new(split_text(&running, capacity - capacity / 10));
        let steps = self.plan(&pieces.parts, 0, fixed, None)?.requests();
        self.run.emit(CompactionEvent::Replanned {
            steps: self.state.so_far.folded.steps.len() + steps,
            cause: "the summary is too large for the window: condensing it".to_owned(),
        });
        Walk::start(self, pieces.material(), system, 0)?
            .run(self)
            .await?;
        Ok(())
    }

    /// The previous summary as material, in pieces that each fit a request, when it is too
    /// large to ride along as `<previous-summary>` (larger than what a later request may carry
    /// of the transcript): `None` when it fits, or when no limit is known.
    fn carried_pieces(&self, fixed: u64) -> Option<Pieces> {
        let previous = self.state.so_far.running.as_deref()?;
        let capacity = self.state.budget(fixed, 0).later_capacity()?;
        if previous_tokens(previous) <= capacity {
            return None;
        }
        // Each piece a little under the capacity: escaping may add to a piece's text.
        let pieces = split_text(previous, capacity - capacity / 10);
        tracing::info!(
            pieces = pieces.len(),
            "the previous summary does not fit beside the conversation: summarizing it first"
        );
        Some(Pieces::new(pieces))
    }
}
