//! One compaction: plan, request with model fallback, and the atomic append of the result.
//!
//! Native compaction, the other way of writing the summary, is the submodule `native`.

mod native;

use std::collections::HashSet;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::Range;
use std::sync::{Arc, Mutex, PoisonError};

use panto_model::{
    COPIES_MARKED, CompactionEntry, EffectiveContext, Entry, Extra, IdKind, IdSource, KEPT_BY,
    Message, Trigger, UniqueIds, replay,
};
use panto_provider::{Provider, ProviderError, Request, StreamEvent};
use panto_size::{
    BLOCK_OVERHEAD, Heuristic, MESSAGE_OVERHEAD, Sizer, UsageSizer, estimate_request,
};
use panto_store::{SessionLog, Store};
use panto_transcript::{
    Elision, Ledger, TranscriptItem, TurnTranscript, render_request_text, render_request_turns,
    render_transcript_elided, render_turns, strip_ledger, transcript_items,
};
use serde_json::{Value, json};
use tracing::{Instrument, info_span};

use crate::attempt::AttemptFailure;
use crate::check::{Replaced, check_summary};
use crate::config::{
    CompactRun, CompactionStrategy, CompactorConfig, Conversation, ModelRef, min_known, scale,
};
use crate::error::CompactError;
use crate::events::CompactionEvent;
use crate::fold::{FoldBudget, FoldPlan, MIN_OUTPUT_TOKENS, MIN_ROOM, fold};
use crate::ledger::{LEDGER_FIELD, ledger_budget, previous_ledger, rendered_len, with_ledger};
use crate::plan::{
    NotSmaller, NothingToCompact, Plan, keep_budget, manual_keep_budget, plan_and_turns,
};
use crate::prompt::CompactionPrompt;
use crate::record::{RECORD_ONLY_MODEL, record_only_text};
use crate::report::{CompactOutcome, Compacted, CompactionReport, ElidedItem, FoldStep};
use crate::source::RequestSource;

/// A compaction ready to be sent: the plan, the system prompt and the transcript of the
/// summarized prefix, rendered once, turn by turn, and sized. Made by [`Compactor::prepare`].
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Prepared {
    /// What is summarized and what is kept.
    pub plan: Plan,
    /// The system prompt: COMPACTION.md plus any extra instructions.
    pub system: String,
    /// The transcript of the summarized prefix, turn by turn.
    pub transcript: TurnTranscript,
    /// The summarized prefix's turns, as ranges of the context's messages.
    pub turns: Vec<Range<usize>>,
    /// Estimated tokens of each turn's transcript.
    pub turn_tokens: Vec<u64>,
    /// The same estimate before rounding, in tenths of a token ([`Heuristic::text_tenths`]),
    /// so that the size of a run of turns is exact without sizing its text again.
    pub turn_tenths: Vec<u64>,
    /// The latest active summary without its ledger's rendering (the record is merged from
    /// the entry instead), passed as `<previous-summary>` to the first request.
    pub previous_summary: Option<String>,
    /// Estimated tokens of the context before compaction.
    pub tokens_before: u64,
    /// The limit every compaction request must fit, when one is known (see
    /// [`CompactRun::request_limit`]).
    pub limit: Option<u64>,
    /// What the request after the compaction leaves for the summary and its ledger, when the
    /// limit is known: the limit less [`CompactRun::reserved_within`] it and the kept turns.
    pub summary_room: Option<u64>,
}

impl Prepared {
    /// The user prompt of a compaction in one request: the whole prefix's transcript and the
    /// previous summary. (A fold sends slices of the same transcript.)
    pub fn user_prompt(&self) -> String {
        render_request_text(self.transcript.text(), self.previous_summary.as_deref())
    }

    /// [`Prepared::user_prompt`], built in the transcript's own buffer instead of a copy of it
    /// ([`TurnTranscript::into_request`]).
    pub fn into_user_prompt(self) -> String {
        self.transcript
            .into_request(0, self.previous_summary.as_deref())
    }
}

type EventHandler = Box<dyn FnMut(&CompactionEvent) + Send>;

/// A value that is only ever reached through `&mut`, held so that the [`Compactor`] is `Sync`
/// (and the futures that borrow it are `Send`) while its event handler need only be `Send`.
/// The mutex is never locked: [`Mutex::get_mut`] needs no lock.
struct Exclusive<T>(Mutex<T>);

impl<T> Exclusive<T> {
    fn new(value: T) -> Exclusive<T> {
        Exclusive(Mutex::new(value))
    }

    fn get_mut(&mut self) -> &mut T {
        // No lock is ever taken, so no panic can have poisoned it.
        self.0.get_mut().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Runs compactions: holds the models, the prompt, the sizer, the id generator and the event
/// callback.
///
/// Model selection, the same for manual and automatic runs: `compaction_model` when configured,
/// else the active model. When `compaction_model` fails for any reason (any provider error, a
/// summary that fails the checks: empty, one phrase repeated, an echo of the prompt or of the
/// last message, longer than what it replaces), the active model is asked once; when that fails
/// too, the error carries both causes. Nothing is written unless a summary was obtained. Every
/// summary is followed by the ledger of what it replaces ([`with_ledger`]).
pub struct Compactor {
    active: ModelRef,
    compaction_model: Option<ModelRef>,
    config: CompactorConfig,
    prompt: CompactionPrompt,
    sizer: Box<dyn Sizer + Send + Sync>,
    ids: Arc<dyn IdSource>,
    conversation: Option<Conversation>,
    events: Exclusive<Option<EventHandler>>,
    /// What the last fold learned of the window (the largest input accepted, the limit it
    /// ended with), for panto's own record written right after it failed.
    learned: Option<Learned>,
}

impl fmt::Debug for Compactor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Compactor")
            .field("active", &self.active)
            .field("compaction_model", &self.compaction_model)
            .field("config", &self.config)
            .field("prompt_source", &self.prompt.source())
            .finish_non_exhaustive()
    }
}

impl Compactor {
    /// A compactor using `active` for summaries, the built-in prompt, the default budget and
    /// output limit, [`UsageSizer`] and [`UniqueIds`] (the session store's default too, so one
    /// file gets one id format).
    pub fn new(active: ModelRef) -> Compactor {
        Compactor {
            active,
            compaction_model: None,
            config: CompactorConfig::default(),
            prompt: CompactionPrompt::builtin(),
            sizer: Box::new(UsageSizer::default()),
            conversation: None,
            ids: Arc::new(UniqueIds),
            events: Exclusive::new(None),
            learned: None,
        }
    }

    /// Tries `model` first for summaries, with the active model as fallback.
    pub fn with_compaction_model(mut self, model: Option<ModelRef>) -> Compactor {
        self.compaction_model = model;
        self
    }

    /// Sets the budget and output limit.
    pub fn with_config(mut self, config: CompactorConfig) -> Compactor {
        self.config = config;
        self
    }

    /// Sets the compaction prompt (see [`CompactionPrompt::load`]).
    pub fn with_prompt(mut self, prompt: CompactionPrompt) -> Compactor {
        self.prompt = prompt;
        self
    }

    /// Sets how messages are sized for the plan.
    pub fn with_sizer(mut self, sizer: impl Sizer + Send + Sync + 'static) -> Compactor {
        self.sizer = Box::new(sizer);
        self
    }

    /// Sets the id source (inject [`panto_model::SequentialIds`] for deterministic tests; pass
    /// the session's source to share one counter with it).
    pub fn with_ids(mut self, ids: Arc<dyn IdSource>) -> Compactor {
        self.ids = ids;
        self
    }

    /// Calls `handler` with every [`CompactionEvent`].
    pub fn on_event(mut self, handler: impl FnMut(&CompactionEvent) + Send + 'static) -> Compactor {
        self.events = Exclusive::new(Some(Box::new(handler)));
        self
    }

    /// Tells the compactor what the conversation's own requests look like (system prompt,
    /// tools, options), which native compaction sends the summarized turns with. The
    /// [`Driver`](crate::Driver) sets it before every compaction.
    #[must_use]
    pub fn with_conversation(mut self, conversation: Conversation) -> Compactor {
        self.conversation = Some(conversation);
        self
    }

    /// [`Compactor::with_conversation`] on a compactor in place (`None` forgets it).
    pub fn set_conversation(&mut self, conversation: Option<Conversation>) {
        self.conversation = conversation;
    }

    /// What the conversation's requests look like, when known.
    pub fn conversation(&self) -> Option<&Conversation> {
        self.conversation.as_ref()
    }

    /// The active model.
    pub fn active(&self) -> &ModelRef {
        &self.active
    }

    /// Replaces the active model (for example after `/model`).
    pub fn set_active(&mut self, active: ModelRef) {
        self.active = active;
    }

    /// The configured compaction model.
    pub fn compaction_model(&self) -> Option<&ModelRef> {
        self.compaction_model.as_ref()
    }

    /// The budget and output limit.
    pub fn config(&self) -> CompactorConfig {
        self.config
    }

    /// The compaction prompt.
    pub fn prompt(&self) -> &CompactionPrompt {
        &self.prompt
    }

    /// Makes the next id (used by the driver for messages appended without one).
    pub(crate) fn next_id(&self, kind: IdKind) -> String {
        self.ids.next_id(kind)
    }

    /// Plans a compaction of `context`, builds its system prompt and renders the transcript
    /// of the summarized prefix (once, turn by turn, each turn sized), without asking any model.
    ///
    /// The budget is `keep_tokens` (the run's own, [`CompactRun::keep_tokens`], when given),
    /// capped at a quarter of the limit the requests must fit ([`CompactRun::request_limit`])
    /// when one is known. A manual compaction without a budget of its own keeps at most half
    /// of the conversation ([`manual_keep_budget`]), so that it always summarizes something.
    /// An overflow compaction must shrink the context, so when that budget would keep every
    /// turn it keeps only the in-flight turn instead. `tokens_before` is the conversation's
    /// size: the sum of the messages' sizes.
    ///
    /// # Errors
    /// [`NothingToCompact`] when nothing lies before the kept suffix.
    pub fn prepare(
        &self,
        context: &EffectiveContext,
        options: &CompactRun,
    ) -> Result<Prepared, NothingToCompact> {
        // One sizing pass gives both the plan's sizes and `tokens_before`: the conversation's
        // size is the sum of its messages' sizes, as the ruler (`panto_size::estimate`)
        // counts it.
        let sizes = self.sizer.message_sizes(&context.messages);
        let tokens_before = sizes.iter().fold(0u64, |t, &s| t.saturating_add(s));
        let limit = options.request_limit(self.config.context_window);
        let mut budget = keep_budget(
            options.keep_tokens.unwrap_or(self.config.keep_tokens),
            limit,
        );
        if options.trigger == Trigger::Manual && options.keep_tokens.is_none() {
            let head = usize::from(context.compaction.is_some()).min(sizes.len());
            let conversation = sizes[head..].iter().fold(0u64, |t, &s| t.saturating_add(s));
            budget = manual_keep_budget(budget, conversation);
        }
        if options.known_limit(self.config.context_window).is_none()
            && let Some(bound) = limit
        {
            // Only a bound is known (the request that overflowed): the window may be far
            // below it, so keep a tenth of it, which a window down to a fifth of the bound
            // still holds beside an in-flight turn of the other half.
            budget = budget.min(bound / 10);
        }
        let (mut p, mut all_turns) = plan_and_turns(context, &sizes, budget);
        if p.is_empty() && options.must_fit() && p.kept_turns > 1 {
            (p, all_turns) = plan_and_turns(context, &sizes, 0);
        }
        if p.is_empty() {
            return Err(NothingToCompact {
                turns: p.kept_turns,
                tokens: p.kept_tokens,
                budget: p.budget,
            });
        }
        // The short built-in form when the window is small (and the user layered no prompt).
        let system = self.prompt.system_prompt_for(options.instructions(), limit);
        let prefix = &context.messages[p.prefix()];
        // The plan's first turns are the prefix's (see `plan_and_turns`).
        all_turns.truncate(p.summarized_turns);
        let prefix_turns = all_turns;
        let mut turn_tenths = Vec::with_capacity(prefix_turns.len());
        // Rendered after the first request's head, so that a fold in one request builds it
        // where the transcript lies (`into_request`).
        let previous_summary = context.summary().map(strip_ledger);
        let transcript = render_request_turns(prefix, &prefix_turns, previous_summary, |turn| {
            turn_tenths.push(Heuristic.text_tenths(turn));
        });
        let summary_room = limit.map(|l| {
            let copies: Vec<Message> = kept_copies(&context.messages[p.kept()]).collect();
            let kept = estimate_request("", &copies);
            l.saturating_sub(options.reserved_within(l))
                .saturating_sub(kept)
        });
        let turn_tokens = turn_tenths.iter().map(|t| t.div_ceil(10)).collect();
        let turns = prefix_turns
            .into_iter()
            .map(|t| t.start + p.head..t.end + p.head)
            .collect();
        Ok(Prepared {
            tokens_before,
            plan: p,
            system,
            transcript,
            turns,
            turn_tokens,
            turn_tenths,
            previous_summary: previous_summary.map(str::to_owned),
            limit,
            summary_room,
        })
    }

    /// Compacts `context` and appends the result to `log` in one conditional append.
    ///
    /// `context` must be the replay of `log` at its head. On success the log's new effective
    /// context is [`Compacted::context`]: the summary block followed by the kept turns.
    ///
    /// # Errors
    /// [`CompactError::Compaction`] or [`CompactError::BothModelsFailed`] when no summary could
    /// be obtained, [`CompactError::Store`] when the append failed (a
    /// [`StoreError::Conflict`](panto_store::StoreError::Conflict) when another writer
    /// appended since `log` last saw the session). In every error case nothing of the
    /// compaction is in effect.
    pub async fn compact<S: Store>(
        &mut self,
        context: &EffectiveContext,
        log: &mut SessionLog<S>,
        options: CompactRun,
    ) -> Result<CompactOutcome, CompactError> {
        let span = info_span!("compaction", trigger = options.trigger.as_str());
        let compacted = match self
            .produce(context, &options)
            .instrument(span.clone())
            .await?
        {
            CompactOutcome::Compacted(c) => c,
            nothing @ CompactOutcome::NothingToCompact(_) => return Ok(nothing),
        };
        let written = log
            .append(&compacted.entries)
            .instrument(info_span!(parent: &span, "write", entries = compacted.entries.len()))
            .await;
        if let Err(e) = written {
            let error = CompactError::Store(e);
            let report = &compacted.report;
            self.emit(CompactionEvent::Failed {
                trigger: report.trigger.clone(),
                fallback: report.fallback,
                plan: report.plan.clone(),
                tokens_before: report.tokens_before,
                error: error.to_string(),
            });
            return Err(error);
        }
        self.emit(CompactionEvent::Finished(Box::new(
            compacted.report.clone(),
        )));
        Ok(CompactOutcome::Compacted(compacted))
    }

    /// Compacts `context` without writing anything (a dry run): the same plan, requests and
    /// fallback as [`Compactor::compact`], and the entries that it would append.
    ///
    /// # Errors
    /// [`CompactError::Compaction`] or [`CompactError::BothModelsFailed`].
    pub async fn dry_run(
        &mut self,
        context: &EffectiveContext,
        options: CompactRun,
    ) -> Result<CompactOutcome, CompactError> {
        let span = info_span!(
            "compaction",
            trigger = options.trigger.as_str(),
            dry_run = true
        );
        let outcome = self.produce(context, &options).instrument(span).await?;
        if let CompactOutcome::Compacted(c) = &outcome {
            self.emit(CompactionEvent::Finished(Box::new(c.report.clone())));
        }
        Ok(outcome)
    }

    /// Plans, folds the prefix through as many requests as the window needs, and builds the
    /// append.
    async fn produce(
        &mut self,
        context: &EffectiveContext,
        options: &CompactRun,
    ) -> Result<CompactOutcome, CompactError> {
        let mut prepared = match info_span!("plan").in_scope(|| self.prepare(context, options)) {
            Ok(p) => p,
            Err(nothing) => {
                tracing::info!(%nothing, "nothing to compact");
                return Ok(CompactOutcome::NothingToCompact(nothing));
            }
        };
        let first_model = self
            .compaction_model
            .as_ref()
            .unwrap_or(&self.active)
            .model
            .clone();
        self.emit(CompactionEvent::Started {
            trigger: options.trigger.clone(),
            model: first_model,
            plan: prepared.plan.clone(),
            tokens_before: prepared.tokens_before,
        });
        if self.config.compaction_strategy == CompactionStrategy::Native {
            match native::ask(self, context, options, &prepared)
                .instrument(info_span!("native"))
                .await
            {
                Ok(native) => {
                    prepared.plan = native.plan.clone();
                    let folded = Folded {
                        summary: with_ledger(&native.summary, &native.ledger, native.ledger_budget),
                        ledger: native.ledger.clone(),
                        used: Some(self.active.clone()),
                        requests: 1,
                        ..Folded::default()
                    };
                    let compacted = self.build(context, options, prepared, folded);
                    let compacted = native::finish(compacted, &native, context);
                    return Ok(CompactOutcome::Compacted(Box::new(compacted)));
                }
                Err(cause) => {
                    tracing::warn!(%cause, "native compaction failed, writing panto's summary");
                    self.emit(CompactionEvent::NativeFailed {
                        cause: cause.to_string(),
                    });
                }
            }
        }
        let mut state = FoldState::new(context, &prepared, self.config.max_output_tokens);
        state.instructions = options.instructions().map(str::to_owned);
        let folded = self
            .fold_all(context, options, &mut prepared, &mut state)
            .await;
        self.learned = Some(Learned {
            proven: state.proven,
            limit: state.limit,
            failures: state.failures.clone(),
        });
        match folded {
            Ok(()) => {
                let folded = self.finish(context, options, &prepared, state);
                let compacted = self.build(context, options, prepared, folded);
                // A compaction that leaves the conversation no smaller is not written, unless
                // the run forces it.
                let report = &compacted.report;
                if !options.force
                    && let Err(not_smaller) =
                        NotSmaller::check(report.tokens_before, report.tokens_after)
                {
                    let error = CompactError::NotSmaller(not_smaller);
                    self.emit(CompactionEvent::Failed {
                        trigger: options.trigger.clone(),
                        fallback: report.fallback,
                        plan: report.plan.clone(),
                        tokens_before: report.tokens_before,
                        error: error.to_string(),
                    });
                    return Err(error);
                }
                Ok(CompactOutcome::Compacted(Box::new(compacted)))
            }
            Err(error) => {
                self.emit(CompactionEvent::Failed {
                    trigger: options.trigger.clone(),
                    fallback: self.compaction_model.is_some(),
                    plan: prepared.plan.clone(),
                    tokens_before: prepared.tokens_before,
                    error: error.to_string(),
                });
                Err(error)
            }
        }
    }

    /// The whole fold, a resumable walk whose state is the summary so far and the record so
    /// far: first the carried summary, in pieces, when it is too large to ride along; then
    /// the prefix's turns; then, when an overflow compaction learned a smaller window than it
    /// planned for and the kept turns would not fit it, the turns that must now be summarized
    /// too, going on from the summary so far (nothing is summarized twice).
    async fn fold_all(
        &mut self,
        context: &EffectiveContext,
        options: &CompactRun,
        prepared: &mut Prepared,
        state: &mut FoldState,
    ) -> Result<(), CompactError> {
        state.max_output = self.max_output(prepared.summary_room);
        let fixed = request_overhead(&prepared.system);
        let mut carried = self.carried_pieces(state, fixed);
        let carried_steps = match &carried {
            Some(pieces) => {
                // The previous summary is the material now; the turns follow its summary.
                state.running = None;
                self.plan_rest(&pieces.turn_tokens, 0, state, fixed, None)?
                    .requests()
            }
            None => 0,
        };
        let previous = if carried.is_some() {
            // The summary of the pieces is at most one output.
            Some(state.max_output + state.max_output / 4)
        } else {
            state.running.as_deref().map(previous_tokens)
        };
        let turns_plan = fold(
            &prepared.turn_tokens,
            &FoldBudget::new(state.limit, fixed, previous.unwrap_or(0), state.max_output),
        )
        .map_err(CompactError::NoRoom)?;
        self.emit(CompactionEvent::Folding {
            steps: carried_steps + turns_plan.requests(),
            limit: state.limit,
            transcript_tokens: turns_plan.total,
        });
        if let Some(pieces) = &mut carried {
            state.later_steps = turns_plan.requests();
            let mut material = pieces.material();
            let mut system = prepared.system.clone();
            self.fold_material(&mut material, 0, &mut system, state)
                .await?;
            state.later_steps = 0;
            // The turns were planned for a summary of a whole output; said again when the one
            // the pieces came to needs another count.
            let turns = self.plan_rest(
                &prepared.turn_tokens,
                0,
                state,
                fixed,
                state.running.as_deref(),
            )?;
            if turns.requests() != turns_plan.requests() {
                self.emit(CompactionEvent::Replanned {
                    steps: state.folded.steps.len() + turns.requests(),
                    cause: "the earlier summary came out shorter than planned".to_owned(),
                });
            }
        }
        let mut system = prepared.system.clone();
        let mut material = Material::prefix(context, prepared);
        self.fold_material(&mut material, 0, &mut system, state)
            .await?;

        if !options.must_fit() {
            return Ok(());
        }
        // The request after the compaction must fit what is known of the window: keep fewer
        // turns and summarize the ones that no longer fit after the summary so far; then, if
        // the summary itself is too large, condense it.
        let Some(target) = self.retry_target(options, prepared, state) else {
            return Ok(());
        };
        let retry = |prepared: &Prepared, state: &FoldState| {
            kept_estimate(context, prepared, state.running.as_deref().unwrap_or(""))
                + options.reserved_within(target)
        };
        if retry(prepared, state) <= target {
            return Ok(());
        }
        let tighter = CompactRun {
            context_limit: Some(target),
            provider_tokens: None,
            ..options.clone()
        };
        let from = prepared.turns.len();
        if let Ok(again) = self.prepare(context, &tighter)
            && again.plan.head == prepared.plan.head
            && again.turns.len() >= from
            && again.turns[..from] == prepared.turns[..]
        {
            *prepared = again;
        } else {
            return Ok(());
        }
        state.max_output = self.max_output(prepared.summary_room);
        let mut system = prepared.system.clone();
        let fixed = request_overhead(&system);
        if from < prepared.turns.len() {
            tracing::info!(
                limit = target,
                turns = prepared.turns.len() - from,
                "the window is smaller than planned: summarizing more turns, going on from the summary so far"
            );
            let rest = self.plan_rest(
                &prepared.turn_tokens,
                from,
                state,
                fixed,
                state.running.as_deref(),
            )?;
            self.emit(CompactionEvent::Replanned {
                steps: state.folded.steps.len() + rest.requests(),
                cause: format!(
                    "the window is smaller than planned, so {} more turns are summarized after the summary so far",
                    prepared.turns.len() - from
                ),
            });
            let mut material = Material::prefix(context, prepared);
            self.fold_material(&mut material, from, &mut system, state)
                .await?;
        }
        if retry(prepared, state) <= target {
            return Ok(());
        }
        // The summary so far is itself too large for the request after it: condense it.
        let Some(running) = state.running.take() else {
            return Ok(());
        };
        let capacity = FoldBudget::new(state.limit, fixed, 0, state.max_output)
            .later_capacity()
            .unwrap_or(MIN_ROOM);
        let mut pieces = Pieces::new(split_text(&running, capacity - capacity / 10));
        let steps = self
            .plan_rest(&pieces.turn_tokens, 0, state, fixed, None)?
            .requests();
        self.emit(CompactionEvent::Replanned {
            steps: state.folded.steps.len() + steps,
            cause: "the summary is too large for the window: condensing it".to_owned(),
        });
        let mut material = pieces.material();
        self.fold_material(&mut material, 0, &mut system, state)
            .await
    }

    /// The limit the request after the compaction must fit, in estimated tokens, when
    /// anything is known of it: the stated or configured window (or the smaller one a
    /// rejection taught); when the provider stated none, the largest request it accepted (a
    /// conversation request before, or a compaction request now), since all that is known of
    /// the window is that it is above what the provider took and below what it rejected.
    fn retry_target(
        &self,
        options: &CompactRun,
        prepared: &Prepared,
        state: &FoldState,
    ) -> Option<u64> {
        match options.known_limit(self.config.context_window) {
            Some(known) => Some(known.min(state.limit.unwrap_or(known))),
            // Nothing is known of a window that never refused a request (a manual compaction
            // with none configured): no constraint.
            None if prepared.limit.is_none() => None,
            None => {
                let proven = state.proven.max(options.accepted_tokens.unwrap_or(0));
                let bound = min_known(state.limit, prepared.limit);
                (proven > 0).then(|| bound.map_or(proven, |b| proven.min(b)))
            }
        }
    }

    /// The output limit of the fold's requests: the configured one, never below the floor,
    /// and at most half of what the request after the compaction leaves for the summary (the
    /// rest is for the ledger's rendering).
    fn max_output(&self, summary_room: Option<u64>) -> u64 {
        let floor = u64::from(MIN_OUTPUT_TOKENS);
        let configured = u64::from(self.config.max_output_tokens).max(floor);
        summary_room.map_or(configured, |room| configured.min((room / 2).max(floor)))
    }

    /// The previous summary as material, in pieces that each fit a request, when it is too
    /// large to ride along as `<previous-summary>` (larger than what a later request may carry
    /// of the transcript): `None` when it fits, or when no limit is known.
    fn carried_pieces(&self, state: &FoldState, fixed: u64) -> Option<Pieces> {
        let previous = state.running.as_deref()?;
        let capacity = FoldBudget::new(state.limit, fixed, 0, state.max_output).later_capacity()?;
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

    /// Summarizes the turns of `material` from turn `from` on, going on from the summary so far
    /// in `state`: each chunk of whole turns with the summary so far as `<previous-summary>`,
    /// oldest first. The plan is kept as made; a request the provider rejects as too large
    /// shrinks the limit (from the provider's numbers, else by half), always to a smaller
    /// input, and re-plans the turns not yet summarized, at most [`MAX_SHRINKS`] times in a
    /// fold; each plan change is announced once ([`CompactionEvent::Shrinking`]).
    async fn fold_material(
        &mut self,
        material: &mut Material<'_>,
        from: usize,
        system: &mut String,
        state: &mut FoldState,
    ) -> Result<(), CompactError> {
        let mut fixed = request_overhead(system);
        // `fixed` counts the envelope for the plan; a prompt's own size counts it again.
        let mut base_tokens = fixed.saturating_sub(envelope_tokens());
        let mut done = from;
        let mut plan = self.plan_rest(
            material.turn_tokens,
            done,
            state,
            fixed,
            state.running.as_deref(),
        )?;
        // The plan's chunks count turns from `base`; `next` is the chunk to send.
        let (mut base, mut next) = (done, 0);
        let mut rejected_here = 0;
        while done < material.turns.len() {
            let chunk = plan.chunks[next].clone();
            let step = state.folded.steps.len() + 1;
            let steps = state.folded.steps.len() + plan.requests() - next + state.later_steps;
            let turns = chunk.turns.start + base..chunk.turns.end + base;
            let messages = material.turns[turns.start].start..material.turns[turns.end - 1].end;
            let chunk_messages = &material.messages[messages.clone()];
            // The summary this request carries (the state moves on when it is answered).
            let carried_summary = state.running.clone();
            let running = carried_summary.as_deref();
            // The chunk's transcript is a slice of the one rendered once, unless a body must
            // be elided. The last request is built in that transcript's own buffer (moved,
            // not copied); an earlier one copies its slice once.
            let (user_prompt, transcript_len, prompt_tokens, elisions) =
                if chunk.needs_elision() {
                    let (text, elisions) = elide_to_fit(chunk_messages, chunk.capacity)
                        .ok_or_else(|| CompactError::TurnTooLarge {
                            tokens: chunk.tokens,
                            capacity: chunk.capacity,
                        })?;
                    let prompt = render_request_text(&text, running);
                    let tokens = Heuristic.text(&prompt);
                    (prompt, text.len(), tokens, elisions)
                } else {
                    if material.transcript.len() != material.turns.len() {
                        // An earlier last request took the transcript and overflowed.
                        *material.transcript = render_prefix(material.messages, material.turns);
                    }
                    let len = material.transcript.turns(turns.clone()).len();
                    // Exact: the envelope's cost and the turns' add up to the prompt's.
                    let envelope = render_request_text("", running);
                    let tenths = Heuristic.text_tenths(&envelope)
                        + material.turn_tenths[turns.clone()].iter().sum::<u64>();
                    let tokens = tenths.div_ceil(10);
                    let prompt = if turns.end == material.turns.len() {
                        std::mem::take(material.transcript).into_request(turns.start, running)
                    } else {
                        render_request_text(material.transcript.turns(turns.clone()), running)
                    };
                    (prompt, len, tokens, Vec::new())
                };
            let extractive = self.config.extractive_summaries;
            // A piece of a summary is condensed, and condensing it reuses its lines: that is
            // not an echo.
            let last_message = if extractive || material.carried {
                String::new()
            } else {
                last_body(chunk_messages)
            };
            let replaced = Replaced {
                system: if extractive { "" } else { system.as_str() },
                last_message: &last_message,
                // A summarizer that quotes by design carries the previous summary whole: it
                // is not held to the copy-through check either.
                previous: if extractive {
                    ""
                } else {
                    running.unwrap_or("")
                },
                chars: transcript_len + running.map_or(0, str::len),
            };
            // The prompt is sized from the turns' sizes (an elided one, new text, is sized
            // here).
            let input_tokens = base_tokens + prompt_tokens;
            let last = next + 1 == plan.requests() && state.later_steps == 0;
            // The plan leaves every request at least the floor (`FoldPlan`'s invariants).
            let output = match state.limit {
                None => state.max_output,
                Some(l) if last => state.max_output.min(l.saturating_sub(input_tokens)),
                Some(l) => plan.output.min(l.saturating_sub(input_tokens)),
            }
            .max(u64::from(MIN_OUTPUT_TOKENS));
            let output = u32::try_from(output).unwrap_or(u32::MAX);
            if !elisions.is_empty() {
                self.emit(CompactionEvent::Elided {
                    step,
                    items: elisions.len(),
                    bytes: elisions.iter().map(|e| e.omitted() as u64).sum(),
                });
            }
            self.emit(CompactionEvent::Step {
                step,
                steps,
                turns: turns.len(),
                input_tokens,
                max_output_tokens: output,
            });
            let source = RequestSource::new(chunk_messages, running);
            let answer = self
                .ask_with_fallback(
                    &system.clone(),
                    user_prompt,
                    (input_tokens, output),
                    &replaced,
                    source,
                    state,
                )
                .await;
            match answer {
                Ok(answer) => {
                    let summary_tokens = Heuristic.text(&answer.summary);
                    let folded = &mut state.folded;
                    folded.fallback_cause = answer
                        .fallback_cause
                        .clone()
                        .or(folded.fallback_cause.take());
                    folded.steps.push(FoldStep {
                        turns: turns.clone(),
                        messages: messages.clone(),
                        model: answer.used.model.clone(),
                        fallback: answer.fallback_cause.is_some(),
                        input_tokens,
                        max_output_tokens: output,
                        summary_tokens,
                        elided: elisions.len(),
                        rejected: rejected_here,
                    });
                    if !material.carried {
                        folded.elided.extend(elisions.into_iter().map(|e| {
                            let message = messages.start + e.message;
                            ElidedItem {
                                message,
                                message_id: material.messages[message]
                                    .id
                                    .as_deref()
                                    .map(str::to_owned),
                                block: e.block,
                                bytes: e.bytes,
                                kept: e.kept,
                            }
                        }));
                        state.ledger =
                            Ledger::merge(&state.ledger, &Ledger::from_messages(chunk_messages));
                    }
                    folded.used = Some(answer.used);
                    // The ledger goes with the final summary only: the next chunk's request
                    // carries the model's text, so the fold's plan is not changed by it.
                    state.running = Some(strip_ledger(&answer.summary).to_owned());
                    done = turns.end;
                    next += 1;
                    rejected_here = 0;
                    // A limit guessed after a rejection that stated none is likely below the
                    // window: while rejections are left, the next requests try higher, half way
                    // (in proportion) up to the smallest input rejected and at most half again
                    // what fits; a rejection goes back to what is known to fit, never to an
                    // input sent before.
                    if let (Some(upper), Some(limit)) = (state.upper, state.limit)
                        && state.shrinks < MAX_SHRINKS
                    {
                        // Half way in proportion (the geometric mean), at most half again what
                        // fits: a failed try costs a request, and sends the limit back.
                        let between = (state.proven as f64 * upper as f64).sqrt() as u64;
                        let probe = between.min(state.proven + state.proven / 2)
                            + u64::from(MIN_OUTPUT_TOKENS);
                        if probe > limit + limit / 10 {
                            state.limit = Some(probe);
                        }
                    }
                    // The plan reserved room for a running summary of a whole output; when the
                    // summary is shorter, the rest may fit in fewer requests. Such a plan is
                    // taken only when it saves a request, and said once.
                    if done < material.turns.len() {
                        let left = plan.requests() - next;
                        let again = self.plan_rest(
                            material.turn_tokens,
                            done,
                            state,
                            fixed,
                            state.running.as_deref(),
                        )?;
                        if again.requests() < left {
                            (plan, base, next) = (again, done, 0);
                            self.emit(CompactionEvent::Replanned {
                                steps: state.folded.steps.len()
                                    + plan.requests()
                                    + state.later_steps,
                                cause: "the summaries so far are shorter than planned".to_owned(),
                            });
                        }
                    }
                }
                Err(Failure::Overflow { error }) if state.shrinks < MAX_SHRINKS => {
                    state.shrinks += 1;
                    rejected_here += 1;
                    if !states_limit(&error) {
                        state.upper =
                            Some(state.upper.map_or(input_tokens, |u| u.min(input_tokens)));
                    }
                    let carried_tokens = chunk.tokens.min(chunk.capacity);
                    let transcript_tokens =
                        input_tokens.saturating_sub(fixed + running.map_or(0, previous_tokens));
                    let mut smaller = shrink(
                        state.limit,
                        &error,
                        input_tokens,
                        u64::from(output),
                        transcript_tokens,
                        state.proven,
                    );
                    // A window found below the short prompt's threshold gets the short prompt
                    // from now on (unless the user layered their own).
                    let shorter = self
                        .prompt
                        .system_prompt_for(state.instructions.as_deref(), Some(smaller));
                    if shorter.len() < system.len() {
                        *system = shorter;
                        fixed = request_overhead(system);
                        base_tokens = fixed.saturating_sub(envelope_tokens());
                    }
                    // Never below the least limit a fold can work in (a guess may undershoot).
                    let least = least_limit(fixed, running.map_or(0, previous_tokens));
                    if smaller < least && least < input_tokens {
                        smaller = least;
                    }
                    // A shrink always shrinks the input: the next request of this step carries
                    // less of the transcript than the one rejected.
                    loop {
                        state.limit = Some(smaller);
                        plan = self.plan_rest(
                            material.turn_tokens,
                            done,
                            state,
                            fixed,
                            state.running.as_deref(),
                        )?;
                        let first = &plan.chunks[0];
                        let again = first.tokens.min(first.capacity);
                        if again < carried_tokens {
                            break;
                        }
                        smaller = smaller.saturating_sub(again - carried_tokens + 1);
                    }
                    (base, next) = (done, 0);
                    tracing::warn!(%error, step, limit = smaller, "compaction request overflowed, shrinking");
                    self.emit(CompactionEvent::Shrinking {
                        step,
                        limit: smaller,
                        steps: state.folded.steps.len() + plan.requests() + state.later_steps,
                        cause: error.to_string(),
                    });
                }
                Err(Failure::Overflow { error }) => {
                    return Err(CompactError::FoldOverflow {
                        step,
                        steps,
                        shrinks: state.shrinks,
                        estimated_tokens: input_tokens,
                        limit: state.limit,
                        error,
                    });
                }
                Err(Failure::Other(e)) => return Err(e),
            }
        }
        Ok(())
    }

    /// The fold of the turns from `done` on (of turns sized `turn_tokens`), with `previous` as
    /// the first request's summary, within the state's limit and output.
    fn plan_rest(
        &self,
        turn_tokens: &[u64],
        done: usize,
        state: &FoldState,
        fixed: u64,
        previous: Option<&str>,
    ) -> Result<FoldPlan, CompactError> {
        let budget = FoldBudget::new(
            state.limit,
            fixed,
            previous.map_or(0, previous_tokens),
            state.max_output,
        );
        fold(&turn_tokens[done..], &budget).map_err(CompactError::NoRoom)
    }

    /// The summary of the fold with the ledger rendered after it, within what the request
    /// after the compaction leaves (its limit less what it holds besides the summary: the
    /// agent's system prompt, tools and reply, and the kept turns), and never more than the
    /// rendering's natural size ([`ledger_budget`]).
    fn finish(
        &self,
        context: &EffectiveContext,
        options: &CompactRun,
        prepared: &Prepared,
        state: FoldState,
    ) -> Folded {
        let retry_limit = self.retry_target(options, prepared, &state);
        let FoldState {
            running,
            ledger,
            mut folded,
            limit,
            natural_ledger_chars,
            failures,
            ..
        } = state;
        folded.failures = failures;
        let text = running.unwrap_or_default();
        let budget = self.rendering_budget(
            context,
            prepared,
            options,
            retry_limit,
            &text,
            &ledger,
            natural_ledger_chars,
        );
        folded.summary = with_ledger(&text, &ledger, budget);
        folded.ledger = ledger;
        folded.limit = limit;
        folded
    }

    /// The characters of the ledger's rendering after `text`: at most `natural`, and, when the
    /// retry's limit is known, what leaves the retry within it (found by measuring the
    /// rendering, a few times at most).
    #[allow(clippy::too_many_arguments)]
    fn rendering_budget(
        &self,
        context: &EffectiveContext,
        prepared: &Prepared,
        options: &CompactRun,
        limit: Option<u64>,
        text: &str,
        ledger: &Ledger,
        natural: usize,
    ) -> usize {
        let Some(limit) = limit else {
            return natural;
        };
        let used = kept_estimate(context, prepared, text)
            + options.reserved_within(limit)
            // A blank line between the summary and the rendering, and a margin for rounding.
            + 16;
        let target = limit.saturating_sub(used);
        let mut chars =
            natural.min(usize::try_from(target.saturating_mul(4)).unwrap_or(usize::MAX));
        for _ in 0..6 {
            let tokens = Heuristic.text(&ledger.render_within(chars));
            if tokens <= target || chars == 0 {
                break;
            }
            let scaled =
                u128::from(chars as u64) * u128::from(target) * 9 / (10 * u128::from(tokens));
            chars = usize::try_from(scaled).unwrap_or(0);
        }
        chars
    }

    /// Asks `compaction_model` (when configured, and it has not failed in this fold) for one
    /// summary, then the active model when it fails. A model is never sent an input it has
    /// already rejected as too large, and a compaction model that failed is not asked again in
    /// the same fold. Counts every request.
    async fn ask_with_fallback(
        &mut self,
        system: &str,
        user_prompt: String,
        (input_tokens, max_output_tokens): (u64, u32),
        replaced: &Replaced<'_>,
        source: RequestSource<'_>,
        state: &mut FoldState,
    ) -> Result<Answer, Failure> {
        let input = input_hash(&user_prompt);
        // A model that answered (whatever the checks made of its answer) took the input: the
        // window holds at least that much.
        let took = |state: &mut FoldState, model: &str, result: &Result<String, AttemptFailure>| {
            if result
                .as_ref()
                .err()
                .is_none_or(AttemptFailure::is_rejected_summary)
            {
                state.proven = state.proven.max(input_tokens);
            }
            if let Err(cause) = result {
                state.failures.push(format!("{model}: {cause}"));
            }
        };
        let mut request = Request::new(
            self.active.model.clone(),
            system,
            vec![Message::user_text(user_prompt)],
            max_output_tokens,
        );
        if let Some(first) = self.compaction_model.clone()
            && state.compaction_model_failed.is_none()
            && !state.rejected.contains(&(first.model.clone(), input))
        {
            request.model.clone_from(&first.model);
            state.folded.requests += 1;
            let result = ask(&first, &request, replaced, source).await;
            took(state, &first.model, &result);
            let cause = match result {
                Ok(summary) => {
                    return Ok(Answer {
                        summary,
                        used: first,
                        fallback_cause: None,
                    });
                }
                Err(cause) => cause,
            };
            if let AttemptFailure::Provider(error) = &cause
                && error.is_context_overflow()
            {
                state.rejected.insert((first.model.clone(), input));
            }
            tracing::warn!(model = %first.model, %cause, "compaction model failed, falling back to the active model for the rest of this compaction");
            self.emit(CompactionEvent::FallingBack {
                failed_model: first.model.clone(),
                cause: cause.clone(),
                model: self.active.model.clone(),
            });
            state.compaction_model_failed = Some(cause);
        }
        let active = self.active.clone();
        if state.rejected.contains(&(active.model.clone(), input)) {
            // Never sent again: the fold shrinks instead.
            let error =
                state
                    .last_overflow
                    .clone()
                    .unwrap_or_else(|| ProviderError::ContextOverflow {
                        message: "this input was rejected as too large before".to_owned(),
                        input_tokens: None,
                        limit: None,
                    });
            return Err(Failure::Overflow { error });
        }
        request.model.clone_from(&active.model);
        state.folded.requests += 1;
        let result = ask(&active, &request, replaced, source).await;
        took(state, &active.model, &result);
        match result {
            Ok(summary) => Ok(Answer {
                summary,
                used: active,
                fallback_cause: state.compaction_model_failed.clone(),
            }),
            Err(AttemptFailure::Provider(error)) if error.is_context_overflow() => {
                state.rejected.insert((active.model.clone(), input));
                state.last_overflow = Some(error.clone());
                Err(Failure::Overflow { error })
            }
            Err(second) => Err(Failure::Other(
                match (&self.compaction_model, &state.compaction_model_failed) {
                    (Some(first), Some(cause)) => CompactError::BothModelsFailed {
                        compaction_model: first.model.clone(),
                        first: Box::new(cause.clone()),
                        active_model: active.model.clone(),
                        second: Box::new(second),
                    },
                    _ => CompactError::Compaction {
                        model: active.model.clone(),
                        cause: second,
                    },
                },
            )),
        }
    }

    /// Builds the append: the compaction entry, then the kept copies marked `kept_by`.
    fn build(
        &mut self,
        context: &EffectiveContext,
        options: &CompactRun,
        prepared: Prepared,
        folded: Folded,
    ) -> Compacted {
        let Folded {
            summary,
            used,
            fallback_cause,
            steps,
            requests,
            elided,
            ledger,
            degraded,
            failures,
            limit: _,
        } = folded;
        let used = used.unwrap_or_else(|| self.active.clone());
        let (model, provider) = match &degraded {
            Some(_) => (RECORD_ONLY_MODEL.to_owned(), "panto".to_owned()),
            None => (used.model.clone(), used.provider.name().to_owned()),
        };
        let id = self.ids.next_id(IdKind::Compaction);
        let copies: Vec<Message> = context.messages[prepared.plan.kept()]
            .iter()
            .map(|m| {
                let mut copy = m.clone();
                copy.id = Some(self.ids.next_id(IdKind::Message).into());
                copy.extra
                    .insert(KEPT_BY.to_owned(), Value::from(id.as_str()));
                copy
            })
            .collect();
        let mut after = Vec::with_capacity(copies.len() + 1);
        after.push(Message::compaction(summary.clone()));
        after.extend(copies.iter().cloned());
        // Measured as `tokens_before` was: the sum of the messages' sizes by the same sizer
        // (with the default one, the ruler's `conversation`).
        let tokens_after = self
            .sizer
            .message_sizes(&after)
            .iter()
            .fold(0u64, |t, &s| t.saturating_add(s));

        let plan = prepared.plan;
        let mut extra = Extra::new();
        if !copies.is_empty() {
            // The copies follow in the same append: replay waits for all of them, so a crash
            // that cuts the append replays to the old context (whatever the store).
            extra.insert(COPIES_MARKED.into(), true.into());
        }
        extra.insert("provider".into(), provider.as_str().into());
        if let Some(cause) = &degraded {
            extra.insert("degraded".into(), true.into());
            extra.insert("degraded_error".into(), cause.as_str().into());
        }
        extra.insert("fallback".into(), fallback_cause.is_some().into());
        if let Some(cause) = &fallback_cause {
            extra.insert("fallback_error".into(), cause.to_string().into());
        }
        extra.insert("keep_tokens".into(), plan.budget.into());
        extra.insert("kept_turns".into(), (plan.kept_turns as u64).into());
        extra.insert(
            "summarized_turns".into(),
            (plan.summarized_turns as u64).into(),
        );
        extra.insert(
            "summarized_messages".into(),
            (plan.prefix().len() as u64).into(),
        );
        extra.insert("requests".into(), (requests as u64).into());
        if steps.len() > 1 {
            extra.insert("fold_steps".into(), (steps.len() as u64).into());
        }
        if !elided.is_empty() {
            let items: Vec<Value> = elided
                .iter()
                .map(|e| {
                    json!({"message": e.message_id, "block": e.block, "bytes": e.bytes, "kept": e.kept})
                })
                .collect();
            extra.insert("elided".into(), Value::Array(items));
        }
        if !ledger.is_empty() {
            extra.insert(LEDGER_FIELD.into(), ledger.to_json());
        }
        let instructions = options.instructions().map(str::to_owned);
        let mut entry = CompactionEntry::new(summary.clone())
            .with_id(id.clone())
            .with_trigger(options.trigger.clone())
            .with_model(model.clone())
            .with_tokens(prepared.tokens_before, tokens_after)
            .with_kept_messages(copies.len() as u64)
            .with_extra(extra);
        entry.instructions.clone_from(&instructions);
        let mut entries = Vec::with_capacity(copies.len() + 1);
        entries.push(Entry::Compaction(entry));
        entries.extend(copies.into_iter().map(Entry::Message));
        let new_context = replay(entries.iter().cloned());
        Compacted {
            entries,
            context: new_context,
            report: CompactionReport {
                id,
                summary,
                trigger: options.trigger.clone(),
                model,
                provider,
                fallback: fallback_cause.is_some(),
                fallback_cause,
                instructions,
                truncated: false,
                tokens_before: prepared.tokens_before,
                tokens_after,
                plan,
                steps,
                requests,
                elided,
                degraded,
                failed_attempts: failures,
                native: None,
                usage: None,
            },
        }
    }

    /// Compacts `context` with no model: the summary is panto's own record (the previous
    /// summary, the ledger of the prefix merged with the previous one, and the last words of the
    /// assistant in the prefix), marked as such, and appended to `log` like any compaction.
    /// Overflow recovery uses it when no model could write a summary (`failure`), so that the
    /// conversation goes on instead of dying; the entry says `degraded: true`.
    ///
    /// # Errors
    /// [`CompactError::Store`] when the append failed, [`CompactError::NotSmaller`] when the
    /// record would not make the conversation smaller (and the run does not force it); nothing
    /// is in effect then.
    pub async fn compact_record_only<S: Store>(
        &mut self,
        context: &EffectiveContext,
        log: &mut SessionLog<S>,
        options: &CompactRun,
        failure: &CompactError,
    ) -> Result<CompactOutcome, CompactError> {
        let prepared = match self.prepare(context, options) {
            Ok(p) => p,
            Err(nothing) => return Ok(CompactOutcome::NothingToCompact(nothing)),
        };
        let prefix = &context.messages[prepared.plan.prefix()];
        let items = transcript_items(prefix);
        let previous = prepared.previous_summary.as_deref().map(strip_ledger);
        let mut state = FoldState::new(context, &prepared, self.config.max_output_tokens);
        // What the fold that failed learned of the window bounds the record too.
        if let Some(learned) = self.learned.take() {
            state.proven = learned.proven;
            state.limit = min_known(state.limit, learned.limit);
            state.failures = learned.failures;
        }
        let natural = state.natural_ledger_chars;
        let limit = self.retry_target(options, &prepared, &state);
        let ledger = Ledger::merge(&state.ledger, &Ledger::from_items(&items));
        // The record's own text takes half of what the request after it leaves (of the natural
        // size when nothing is known of the window); the ledger's rendering fits the rest.
        let room = limit.map_or(natural, |l| {
            let used = kept_estimate(context, &prepared, "") + options.reserved_within(l);
            usize::try_from(l.saturating_sub(used).saturating_mul(3)).unwrap_or(usize::MAX)
        });
        let text = record_only_text(failure, previous, &items, room / 2);
        let budget =
            self.rendering_budget(context, &prepared, options, limit, &text, &ledger, natural);
        let summary = with_ledger(&text, &ledger, budget);
        let compacted = self.build(
            context,
            options,
            prepared,
            Folded {
                summary,
                ledger,
                degraded: Some(failure.to_string()),
                failures: state.failures,
                ..Folded::default()
            },
        );
        if !options.force {
            NotSmaller::check(
                compacted.report.tokens_before,
                compacted.report.tokens_after,
            )
            .map_err(CompactError::NotSmaller)?;
        }
        tracing::warn!(%failure, "no model could summarize; wrote panto's own record instead");
        log.append(&compacted.entries)
            .await
            .map_err(CompactError::Store)?;
        self.emit(CompactionEvent::Finished(Box::new(
            compacted.report.clone(),
        )));
        Ok(CompactOutcome::Compacted(Box::new(compacted)))
    }

    pub(crate) fn emit(&mut self, event: CompactionEvent) {
        if let Some(handler) = self.events.get_mut() {
            handler(&event);
        }
    }
}

/// How many times one fold shrinks its limit after a compaction request overflowed anyway:
/// the third rejection ends the fold ([`CompactError::FoldOverflow`]), so a provider that
/// states no limit rejects at most three compaction requests.
pub const MAX_SHRINKS: usize = 2;

/// Where a fold stands: the summary so far, the record so far, what was sent, and what the
/// fold learned (a smaller limit, inputs a model rejected, a compaction model that failed).
/// Everything a fold needs to go on from where it is.
struct FoldState {
    /// The summary so far (the model's text, no ledger): `<previous-summary>` of the next
    /// request.
    running: Option<String>,
    /// The whole record so far: the previous entry's, merged with every chunk summarized.
    ledger: Ledger,
    /// The steps, requests, elisions and models so far.
    folded: Folded,
    /// The limit every request must fit (smaller after a shrink).
    limit: Option<u64>,
    /// The output limit of the fold's requests ([`Compactor::max_output`]).
    max_output: u64,
    /// How often the limit was shrunk after a rejection.
    shrinks: usize,
    /// Inputs rejected as too large, by model: never sent to that model again.
    rejected: HashSet<(String, u64)>,
    /// The last rejection, which a repeated input would get again.
    last_overflow: Option<ProviderError>,
    /// Why the compaction model failed, once it has: it is not asked again in this fold.
    compaction_model_failed: Option<AttemptFailure>,
    /// Steps planned for the material after the one being folded (the turns after the
    /// carried summary's pieces), so that the count shown is the whole fold's.
    later_steps: usize,
    /// The natural size of the ledger's rendering ([`ledger_budget`] of what was there and
    /// what is summarized).
    natural_ledger_chars: usize,
    /// The smallest input the provider rejected as too large without stating its limit: the
    /// window is below it (and above `proven`).
    upper: Option<u64>,
    /// Every failed attempt so far, as `model: cause`.
    failures: Vec<String>,
    /// The run's extra instructions, for a system prompt chosen again for a smaller window.
    instructions: Option<String>,
    /// The largest request the provider accepted (input and output), in estimated tokens:
    /// once a rejection has shown the window below the planned limit, only this much is known
    /// to fit.
    proven: u64,
}

impl FoldState {
    /// The start of a fold of `prepared`: the previous summary and record, nothing sent.
    fn new(context: &EffectiveContext, prepared: &Prepared, max_output_tokens: u32) -> FoldState {
        FoldState {
            running: prepared.previous_summary.clone(),
            ledger: previous_ledger(context),
            folded: Folded::default(),
            limit: prepared.limit,
            max_output: u64::from(max_output_tokens.max(MIN_OUTPUT_TOKENS)),
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
        }
    }
}

/// What a fold walks: messages split in turns, with each turn's size and the transcript
/// rendered turn by turn; either the summarized prefix of the context, or the pieces of a
/// previous summary too large to ride along.
struct Material<'a> {
    messages: &'a [Message],
    /// The turns, as ranges of `messages`.
    turns: &'a [Range<usize>],
    turn_tokens: &'a [u64],
    turn_tenths: &'a [u64],
    transcript: &'a mut TurnTranscript,
    /// Whether these are a previous summary's pieces: no ledger to derive, no elision to
    /// record, no echo to refuse.
    carried: bool,
}

impl<'a> Material<'a> {
    /// The summarized prefix of `context` as `prepared` planned it.
    fn prefix(context: &'a EffectiveContext, prepared: &'a mut Prepared) -> Material<'a> {
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
struct Pieces {
    messages: Vec<Message>,
    turns: Vec<Range<usize>>,
    turn_tokens: Vec<u64>,
    turn_tenths: Vec<u64>,
    transcript: TurnTranscript,
}

impl Pieces {
    fn new(pieces: Vec<String>) -> Pieces {
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

    fn material(&mut self) -> Material<'_> {
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
fn split_text(text: &str, max_tokens: u64) -> Vec<String> {
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

/// A hash of a request's input, to recognise one sent before.
fn input_hash(text: &str) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    text.hash(&mut hasher);
    hasher.finish()
}

/// What a fold learned of the window and the models, kept for panto's own record when the
/// fold failed.
struct Learned {
    proven: u64,
    limit: Option<u64>,
    failures: Vec<String>,
}

/// What a fold produced.
#[derive(Default)]
struct Folded {
    summary: String,
    used: Option<ModelRef>,
    fallback_cause: Option<AttemptFailure>,
    steps: Vec<FoldStep>,
    requests: usize,
    elided: Vec<ElidedItem>,
    ledger: Ledger,
    degraded: Option<String>,
    /// Every failed attempt, as `model: cause`.
    failures: Vec<String>,
    /// The limit the fold ended with (lower than planned after a shrink).
    limit: Option<u64>,
}

/// The estimated tokens of the context after a compaction: `summary` and the kept turns,
/// sized as the copies will be (marked `kept_by`, so that the usage their originals carry,
/// which measured the context before the compaction, is not trusted).
fn kept_estimate(context: &EffectiveContext, prepared: &Prepared, summary: &str) -> u64 {
    let mut after = vec![Message::compaction(summary)];
    after.extend(kept_copies(&context.messages[prepared.plan.kept()]));
    estimate_request("", &after)
}

/// `kept` as the compaction's copies of them are sized: marked `kept_by`.
fn kept_copies(kept: &[Message]) -> impl Iterator<Item = Message> + '_ {
    kept.iter().map(|m| {
        let mut copy = m.clone();
        copy.extra
            .insert(KEPT_BY.to_owned(), Value::from("pending"));
        copy
    })
}

/// The body of the last transcript item of `messages`: what the summary must not merely copy.
fn last_body(messages: &[Message]) -> String {
    let Some(last) = messages.len().checked_sub(1) else {
        return String::new();
    };
    // The last item comes from the last message; its tool names do not matter here.
    match transcript_items(&messages[last..]).pop() {
        Some(
            TranscriptItem::Text { text, .. }
            | TranscriptItem::Thinking { text, .. }
            | TranscriptItem::ToolResult { text, .. }
            | TranscriptItem::Summary { text },
        ) => text,
        _ => String::new(),
    }
}

/// The transcript of the turns `turns` (ranges of `messages`), rendered turn by turn.
fn render_prefix(messages: &[Message], turns: &[Range<usize>]) -> TurnTranscript {
    let head = turns.first().map_or(0, |t| t.start);
    let end = turns.last().map_or(head, |t| t.end);
    let relative: Vec<Range<usize>> = turns.iter().map(|t| t.start - head..t.end - head).collect();
    render_turns(&messages[head..end], &relative)
}

/// One summary, and who wrote it.
struct Answer {
    summary: String,
    used: ModelRef,
    fallback_cause: Option<AttemptFailure>,
}

/// Why one chunk got no summary: too large for the model that was asked last (the fold may
/// shrink and try again), or anything else (the fold fails).
enum Failure {
    Overflow { error: ProviderError },
    Other(CompactError),
}

/// The estimated tokens of a compaction request besides its user prompt's text: the system
/// prompt, and the overhead of the system part and of the one user message.
/// The envelope (the intro line and the tags, with room for a previous summary) counts too.
pub(crate) fn request_overhead(system: &str) -> u64 {
    Heuristic.text(system) + 2 * MESSAGE_OVERHEAD + BLOCK_OVERHEAD + envelope_tokens()
}

/// The estimated tokens of the request envelope with room for a previous summary (counted in
/// [`request_overhead`]).
fn envelope_tokens() -> u64 {
    Heuristic.text(&render_request_text("", Some("")))
}

/// The estimated tokens a previous summary adds to a request.
fn previous_tokens(summary: &str) -> u64 {
    // Escaping adds at most one backslash per reserved line start; a token each is ample.
    Heuristic.text(summary) + summary.lines().count() as u64 / 8 + 1
}

/// The limit after a compaction request of `input` estimated tokens (with output `output` and
/// a transcript of `transcript` tokens) overflowed with `error`: from the provider's numbers
/// when they explain the rejection. Else the window lies somewhere below the rejected input:
/// when a request of `proven` input tokens was accepted before, the limit goes back to what
/// is known to fit (later requests may try higher again, see `fold_material`); else to a
/// quarter of the rejected input, so that the rejections a fold allows reach a window a
/// sixteenth of the first request. Always below what failed.
fn shrink(
    limit: Option<u64>,
    error: &ProviderError,
    input: u64,
    output: u64,
    transcript: u64,
    proven: u64,
) -> u64 {
    let sent = input + output;
    let (reported, counted) = match error {
        ProviderError::ContextOverflow {
            limit,
            input_tokens,
            ..
        } => (*limit, *input_tokens),
        _ => (None, None),
    };
    let from_numbers = reported.map(|l| match counted {
        Some(n) if n > 0 => scale(l, input, n),
        _ => l,
    });
    let halved = sent.saturating_sub(transcript / 2 + 1);
    let guess = if proven > 0 && proven < input {
        proven + u64::from(MIN_OUTPUT_TOKENS)
    } else {
        input / 4
    };
    let smaller = match from_numbers {
        Some(l) if l < sent => l.min(halved.max(l * 9 / 10)),
        _ => guess,
    };
    min_known(limit, Some(smaller))
        .unwrap_or(smaller)
        .min(sent.saturating_sub(1))
}

/// The least limit a fold can plan in: the fixed part, the summary carried (or the reserve of
/// a later request), the output floor and the least transcript ([`fold`]'s `NoRoom` rule).
fn least_limit(fixed: u64, previous: u64) -> u64 {
    let floor = u64::from(MIN_OUTPUT_TOKENS);
    fixed + (previous + floor + MIN_ROOM).max(floor + floor / 4 + floor + MIN_ROOM)
}

/// Whether an overflow error stated the limit.
fn states_limit(error: &ProviderError) -> bool {
    matches!(error, ProviderError::ContextOverflow { limit: Some(_), .. })
}

/// The transcript of `messages` (one turn too large for any request) with its item bodies
/// elided until it fits `capacity` estimated tokens: the largest body cap that fits, found by
/// bisection. `None` when even the markers alone do not fit.
fn elide_to_fit(messages: &[Message], capacity: u64) -> Option<(String, Vec<Elision>)> {
    let render = |max_body: usize| {
        let mut out = String::new();
        let elided = render_transcript_elided(&mut out, messages, max_body);
        (out, elided)
    };
    let fits = |text: &str| Heuristic.text(text) <= capacity;
    let (smallest, elided) = render(0);
    if !fits(&smallest) {
        return None;
    }
    let (mut lo, mut hi) = (0usize, 1usize);
    let mut best = (smallest, elided);
    // Grow the cap until it no longer fits, then bisect between the last fit and the miss.
    loop {
        let (text, elided) = render(hi);
        if !fits(&text) || elided.is_empty() {
            if fits(&text) {
                return Some((text, elided));
            }
            break;
        }
        lo = hi;
        best = (text, elided);
        hi *= 2;
    }
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        let (text, elided) = render(mid);
        if fits(&text) {
            lo = mid;
            best = (text, elided);
        } else {
            hi = mid;
        }
    }
    Some(best)
}

/// Asks one model for the summary, which must have ended by itself (not at the output limit)
/// and pass the checks.
async fn ask(
    model: &ModelRef,
    request: &Request,
    replaced: &Replaced<'_>,
    source: RequestSource<'_>,
) -> Result<String, AttemptFailure> {
    let span = info_span!("request", provider = model.provider.name(), model = %model.model);
    let answer = match &model.source {
        Some(summarizer) => span.in_scope(|| summarizer.summarize_source(request, source)),
        None => {
            let mut ignore = |_: StreamEvent<'_>| {};
            model
                .provider
                .complete(request, &mut ignore)
                .instrument(span)
                .await
        }
    }
    .map_err(AttemptFailure::Provider)?;
    // The adapters normalise stop reasons (`panto_model::stop_reason`), so one spelling is
    // enough. An answer cut at the limit may end anywhere, the account of the newest turns
    // first: it is not a summary.
    if answer.stop_reason.as_deref() == Some(panto_model::stop_reason::MAX_TOKENS) {
        let failure = AttemptFailure::TruncatedSummary {
            max_output_tokens: request.max_output_tokens,
        };
        tracing::warn!(model = %model.model, %failure, "summary rejected");
        return Err(failure);
    }
    let summary = answer.text().trim().to_owned();
    if let Err(failure) = check_summary(&summary, replaced) {
        tracing::warn!(model = %model.model, %failure, "summary rejected");
        return Err(failure);
    }
    Ok(summary)
}
