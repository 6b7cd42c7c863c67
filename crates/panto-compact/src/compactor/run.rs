//! One compaction run (`Run`): the compactor it runs with, the context, the run as asked, the
//! window as the run knows it and what the run learns of it. Everything that holds only for
//! one run lives here, never on the [`Compactor`]: it plans, hands the plan to the compactor's
//! strategy (`strategy.rs`), and appends what the strategy produced, or panto's own record.

use panto_model::EffectiveContext;
use panto_store::{SessionLog, Store};
use tracing::{Instrument, Span, info_span};

use super::state::{FLOOR_TINY_BELOW, FoldState, SoFar, Taught};
use super::{Compactor, Prepared};
use crate::config::{CompactRun, CompactionStrategy, min_known};
use crate::error::CompactError;
use crate::events::CompactionEvent;
use crate::fold::output_floor;
use crate::prompt::form_limit;
use crate::report::{CompactOutcome, Compacted};
use crate::window::{KnownWindows, Window, WindowSource};

/// One compaction run.
pub(super) struct Run<'a> {
    /// The compactor: its models, settings, sizer, ids and events.
    pub(super) compactor: &'a mut Compactor,
    /// The context compacted.
    pub(super) context: &'a EffectiveContext,
    /// The run as asked.
    pub(super) options: &'a CompactRun,
    /// The window as the run knows it: what it was given, and what its overflow said. The run
    /// plans with it from start to end; what it learns goes to `taught`.
    pub(super) windows: KnownWindows,
    /// What the run learned of the window (and the failed attempts, for panto's record).
    pub(super) taught: Taught,
    /// A failed fold's plan and where it stood: panto's record goes on from the summary the
    /// models gave, never in place of it (`write.rs`).
    pub(super) partial: Option<Box<(Prepared, SoFar)>>,
    /// Whether a compaction that would not be smaller is said as the run's failure (`Failed`);
    /// not for a tiered run's summary, whose caller writes the clearing alone then.
    pub(super) not_smaller_is_failure: bool,
}

impl<'a> Run<'a> {
    /// A run of `options` over `context` with `compactor`, knowing `windows` and what the run's
    /// overflow said.
    pub(super) fn new(
        compactor: &'a mut Compactor,
        context: &'a EffectiveContext,
        options: &'a CompactRun,
        windows: &KnownWindows,
    ) -> Run<'a> {
        let mut windows = *windows;
        options.teach(&mut windows);
        Run {
            compactor,
            context,
            options,
            windows,
            taught: Taught::default(),
            partial: None,
            not_smaller_is_failure: true,
        }
    }

    /// Plans, and hands the plan to the compactor's strategy: the compaction ready to be
    /// written, or nothing to compact.
    ///
    /// # Errors
    /// The strategy's, when no summary was obtained or the compaction would not shrink.
    pub(super) async fn produce(&mut self) -> Result<CompactOutcome, CompactError> {
        let strategy = self.compactor.config.compaction_strategy;
        self.produce_with(strategy).await
    }

    /// [`Run::produce`] with `strategy` (a tiered run summarizes with the summary's).
    ///
    /// # Errors
    /// As [`Run::produce`].
    pub(super) async fn produce_with(
        &mut self,
        strategy: CompactionStrategy,
    ) -> Result<CompactOutcome, CompactError> {
        let plan = || {
            self.compactor
                .prepare(self.context, self.options, &self.windows)
        };
        let prepared = match info_span!("plan").in_scope(plan) {
            Ok(p) => p,
            Err(nothing) => {
                tracing::info!(%nothing, "nothing to compact");
                return Ok(CompactOutcome::NothingToCompact(nothing));
            }
        };
        // A clearing asks no model; a tiered run says it starts when it summarizes.
        if !matches!(
            strategy,
            CompactionStrategy::Clear | CompactionStrategy::Tiered
        ) {
            self.started(&prepared);
        }
        let compacted = strategy.produce(self, prepared).await?;
        Ok(CompactOutcome::Compacted(Box::new(compacted)))
    }

    /// Says that a model is about to be asked to summarize `prepared` (`Started`).
    pub(super) fn started(&mut self, prepared: &Prepared) {
        let compactor = &*self.compactor;
        let first = compactor.compaction_model.as_ref();
        let model = first.unwrap_or(&compactor.active).model.clone();
        self.emit(CompactionEvent::Started {
            trigger: self.options.trigger.clone(),
            model,
            plan: prepared.plan.clone(),
            tokens_before: prepared.tokens_before,
        });
    }

    /// Appends `compacted` to `log` in one conditional append (after another writer's prompts
    /// when they came first: `rebase.rs`), and says so.
    ///
    /// # Errors
    /// [`CompactError::Store`] when the append failed; nothing is in effect then.
    pub(super) async fn append<S: Store>(
        &mut self,
        log: &mut SessionLog<S>,
        mut compacted: Compacted,
        span: &Span,
    ) -> Result<CompactOutcome, CompactError> {
        let entries = compacted.entries.len();
        let written = self
            .compactor
            .write(log, &mut compacted)
            .instrument(info_span!(parent: span, "write", entries))
            .await;
        let report = &compacted.report;
        if let Err(e) = written {
            let error = CompactError::Store(e);
            let failed = (report.plan.clone(), report.tokens_before, report.fallback);
            self.failed(failed, &error);
            return Err(error);
        }
        self.emit(CompactionEvent::Finished(Box::new(report.clone())));
        Ok(CompactOutcome::Compacted(Box::new(compacted)))
    }

    /// Gives `windows` back updated: what the run knew (the caller's, and what its overflow
    /// said) and what it learned.
    pub(super) fn teach(&self, windows: &mut KnownWindows) {
        *windows = self.windows;
        self.taught.teach(windows);
    }

    /// The plan again, within `target` tokens (as a window stated for the run): for a summary
    /// that must leave the request after it within a window found smaller than planned. The
    /// room for the reply is kept as the run knows it (whether the server counts the output),
    /// as the check that the request fits keeps it (`Run::reserved_within`).
    pub(super) fn prepare_within(&self, target: u64) -> Option<Prepared> {
        let mut tighter = KnownWindows::new().with(Window::new(target, WindowSource::Configured));
        tighter.counts_output = self.windows.counts_output;
        let mut again = self
            .compactor
            .prepare(self.context, self.options, &tighter)
            .ok()?;
        // The form of the requests is the run's window's: the target is no window stated.
        let form = form_limit(Some(target), self.windows.form_window(FLOOR_TINY_BELOW));
        again.system = (self.compactor.prompt).system_prompt_for(self.options.instructions(), form);
        Some(again)
    }

    /// The limit the request after the compaction must fit, in estimated tokens, when
    /// anything is known of it: the stated or configured window (or the smaller one a
    /// rejection taught); when the provider stated none, the largest request it accepted (a
    /// conversation request before, or a compaction request now), since all that is known of
    /// the window is that it is above what the provider took and below what it rejected.
    pub(super) fn retry_target(&self, prepared: &Prepared, state: &FoldState) -> Option<u64> {
        let fit = self.fit_target(prepared, state);
        // A proactive compaction leaves room under the threshold it crossed (one rule with a
        // tiered run's target, `tiered.rs`).
        match (fit, self.options.target_tokens) {
            (Some(fit), Some(target)) => Some(fit.min(target)),
            (fit, _) => fit,
        }
    }

    /// [`Run::retry_target`] without the run's own target: what the request must fit.
    fn fit_target(&self, prepared: &Prepared, state: &FoldState) -> Option<u64> {
        let limits = &state.limits;
        match self.options.known_limit(&self.windows) {
            // The fold's limit is a guess below a rejection, never below what a model took;
            // a try above the largest request taken (which no request may have filled) is no
            // more than a guess.
            Some(known) => {
                let limit = limits.limit.unwrap_or(known);
                let limit = match self.taken(state) {
                    Some(taken) if limits.tried => limit.min(taken),
                    _ => limit,
                };
                Some(known.min(limit.max(limits.proven)))
            }
            // Nothing is known of a window that never refused a request (a manual compaction
            // with none configured): no constraint.
            None if prepared.limit.is_none() => None,
            None => {
                let proven = limits.proven.max(self.windows.accepted.unwrap_or(0));
                let bound = min_known(limits.limit, prepared.limit);
                (proven > 0).then(|| bound.map_or(proven, |b| proven.min(b)))
            }
        }
    }

    /// The largest request of the fold a provider took, as the request after the compaction
    /// counts against the window: its input and output together when the server counts the
    /// output ([`KnownWindows::counts_output`]) and the reply would be kept whole within that
    /// much ([`KnownWindows::reply_room`]); else its input. `None` before one was taken, and
    /// where the reply is above half of what was taken: the room kept for it would then be an
    /// eighth of the smaller limit, leaving the request more input than within the fold's own
    /// (the loopback sweep's windows stated a half too high with a reply of half the window
    /// ended in 3 to 7 more typed errors a seed).
    fn taken(&self, state: &FoldState) -> Option<u64> {
        let limits = &state.limits;
        if limits.proven == 0 {
            return None;
        }
        if self.windows.counts_output != Some(true) {
            return Some(limits.proven);
        }
        let reply = self.options.reply_tokens.unwrap_or(0);
        let total = limits.proven_total;
        (self.windows.reply_room(reply, total) == reply).then_some(total)
    }

    /// What the request after the compaction holds besides the summary and the kept turns,
    /// within a window of `limit`: the system prompt, the tools and the room for the reply,
    /// as the window the run knows says ([`CompactRun::reserved_within`]).
    pub(super) fn reserved_within(&self, limit: u64) -> u64 {
        self.options.reserved_within(limit, &self.windows)
    }

    /// The output limit of the fold's requests: the configured one, never below the floor
    /// ([`crate::MIN_OUTPUT_TOKENS`], or [`output_floor`] of a tiny window, [`form_limit`]), and
    /// at most half of what the request after the compaction leaves for the summary (the rest
    /// is for the ledger's rendering).
    pub(super) fn max_output(&self, summary_room: Option<u64>) -> u64 {
        let windows = &self.windows;
        let floor = output_floor(form_limit(
            windows.limit(),
            windows.form_window(FLOOR_TINY_BELOW),
        ));
        let configured = u64::from(self.compactor.config.max_output_tokens).max(floor);
        summary_room.map_or(configured, |room| configured.min((room / 2).max(floor)))
    }

    /// The most output a request of the fold may allow after a model's summary stopped at its
    /// limit: the configured output limit (the fold's own keeps the final summary within what
    /// the request after the compaction leaves; one that comes out larger is condensed).
    pub(super) fn longest_output(&self, state: &FoldState) -> u64 {
        u64::from(self.compactor.config.max_output_tokens).max(state.output.max)
    }

    /// Says that the run failed with `error`, for its plan, the size of the conversation and
    /// whether a fallback model was involved.
    pub(super) fn failed(
        &mut self,
        (plan, tokens_before, fallback): (crate::plan::Plan, u64, bool),
        error: &CompactError,
    ) {
        self.emit(CompactionEvent::Failed {
            trigger: self.options.trigger.clone(),
            fallback,
            plan,
            tokens_before,
            error: error.to_string(),
        });
    }

    pub(super) fn emit(&mut self, event: CompactionEvent) {
        self.compactor.emit(event);
    }
}
