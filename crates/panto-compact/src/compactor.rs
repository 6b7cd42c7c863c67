//! One compaction: plan, request with model fallback, and the atomic append of the result.

use std::fmt;
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

use crate::check::{Replaced, check_summary};
use crate::config::{CompactRun, CompactorConfig, ModelRef, min_known, scale};
use crate::error::{AttemptFailure, CompactError};
use crate::events::CompactionEvent;
use crate::fold::{FoldBudget, FoldPlan, MIN_OUTPUT_TOKENS, fold};
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
    /// The latest active summary, passed as `<previous-summary>` to the first request.
    pub previous_summary: Option<String>,
    /// Estimated tokens of the context before compaction.
    pub tokens_before: u64,
    /// The limit every compaction request must fit, when one is known (see
    /// [`CompactRun::request_limit`]).
    pub limit: Option<u64>,
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
    events: Exclusive<Option<EventHandler>>,
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
            ids: Arc::new(UniqueIds),
            events: Exclusive::new(None),
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
        if p.is_empty() && options.trigger == Trigger::Overflow && p.kept_turns > 1 {
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
        let previous_summary = context.summary();
        let transcript = render_request_turns(prefix, &prefix_turns, previous_summary, |turn| {
            turn_tenths.push(Heuristic.text_tenths(turn));
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
        let prepared = match info_span!("plan").in_scope(|| self.prepare(context, options)) {
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
        let mut prepared = prepared;
        let mut result = self.fold(context, &mut prepared).await;
        // An overflow compaction whose own requests taught it a smaller window than its plan
        // assumed (the provider stated no limit) plans again within that window, once, when
        // the kept turns and the summary would not fit it: else the retry could only overflow.
        if let Ok(folded) = &result
            && options.trigger == Trigger::Overflow
            && let Some(learned) = folded.limit
            && prepared.limit.is_none_or(|l| learned < l)
            && kept_estimate(context, &prepared, &folded.summary) > learned
        {
            let tighter = CompactRun {
                context_limit: Some(learned),
                provider_tokens: None,
                ..options.clone()
            };
            if let Ok(again) = self.prepare(context, &tighter) {
                tracing::info!(
                    limit = learned,
                    "the window is smaller than planned, planning again"
                );
                prepared = again;
                let requests = folded.requests;
                result = self.fold(context, &mut prepared).await.map(|mut f| {
                    f.requests += requests;
                    f
                });
            }
        }
        match result {
            Ok(folded) => {
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

    /// Walks the fold: each chunk of whole turns is summarized with the summary so far as
    /// `<previous-summary>`, oldest first; the last summary is the result. A request the
    /// provider rejects as too large shrinks the limit (from the provider's numbers, else by
    /// half) and re-plans the turns not yet summarized, at most [`MAX_SHRINKS`] times.
    async fn fold(
        &mut self,
        context: &EffectiveContext,
        prepared: &mut Prepared,
    ) -> Result<Folded, CompactError> {
        // No request allows less than the floor; the plan makes room for it.
        let max_output = u64::from(self.config.max_output_tokens.max(MIN_OUTPUT_TOKENS));
        let fixed = request_overhead(&prepared.system);
        // `fixed` counts the envelope for the plan; a prompt's own size counts it again.
        let base = fixed.saturating_sub(envelope_tokens());
        let mut limit = prepared.limit;
        let mut running = prepared.previous_summary.clone();
        let mut ledger = previous_ledger(context);
        // The budget of the ledger's rendering after the final summary; the record itself
        // (`ledger`, stored on the entry) is merged whole.
        let budget = ledger_budget(
            self.config.max_output_tokens,
            rendered_len(context),
            prepared.transcript.text().len(),
            prepared.limit,
        );
        let mut done = 0;
        let mut shrinks = 0;
        let mut rejected_here = 0;
        let mut folded = Folded::default();
        let mut plan = self.plan_rest(prepared, done, limit, fixed, running.as_deref())?;
        self.emit(CompactionEvent::Folding {
            steps: plan.requests(),
            limit,
            transcript_tokens: plan.total,
        });
        while done < prepared.turns.len() {
            let chunk = plan.chunks[0].clone();
            let step = folded.steps.len() + 1;
            let steps = folded.steps.len() + plan.requests();
            let turns = chunk.turns.start + done..chunk.turns.end + done;
            let messages = prepared.turns[turns.start].start..prepared.turns[turns.end - 1].end;
            let chunk_messages = &context.messages[messages.clone()];
            // The chunk's transcript is a slice of the one rendered by `prepare`, unless a
            // body must be elided. The last request of the fold is built in that transcript's
            // own buffer (moved, not copied); an earlier one copies its slice once.
            let (user_prompt, transcript_len, prompt_tokens, elisions) =
                if chunk.needs_elision() {
                    let (text, elisions) = elide_to_fit(chunk_messages, chunk.capacity)
                        .ok_or_else(|| CompactError::TurnTooLarge {
                            tokens: chunk.tokens,
                            capacity: chunk.capacity,
                        })?;
                    let prompt = render_request_text(&text, running.as_deref());
                    let tokens = Heuristic.text(&prompt);
                    (prompt, text.len(), tokens, elisions)
                } else {
                    if prepared.transcript.len() != prepared.turns.len() {
                        // An earlier last request took the transcript and overflowed.
                        prepared.transcript = render_prefix(context, &prepared.turns);
                    }
                    let len = prepared.transcript.turns(turns.clone()).len();
                    // Exact: the envelope's cost and the turns' add up to the prompt's.
                    let envelope = render_request_text("", running.as_deref());
                    let tenths = Heuristic.text_tenths(&envelope)
                        + prepared.turn_tenths[turns.clone()].iter().sum::<u64>();
                    let tokens = tenths.div_ceil(10);
                    let prompt = if turns.end == prepared.turns.len() {
                        std::mem::take(&mut prepared.transcript)
                            .into_request(turns.start, running.as_deref())
                    } else {
                        render_request_text(
                            prepared.transcript.turns(turns.clone()),
                            running.as_deref(),
                        )
                    };
                    (prompt, len, tokens, Vec::new())
                };
            let extractive = self.config.extractive_summaries;
            let last_message = if extractive {
                String::new()
            } else {
                last_body(chunk_messages)
            };
            let replaced = Replaced {
                system: if extractive { "" } else { &prepared.system },
                last_message: &last_message,
                // A summarizer that quotes by design carries the previous summary whole: it
                // is not held to the copy-through check either.
                previous: if extractive {
                    ""
                } else {
                    running.as_deref().unwrap_or("")
                },
                chars: transcript_len + running.as_deref().map_or(0, str::len),
            };
            // The prompt is sized from the turns' sizes of `prepare` (an elided one, new text,
            // is sized here).
            let input_tokens = base + prompt_tokens;
            let last = plan.chunks.len() == 1;
            // The plan leaves every request at least the floor (`FoldPlan`'s invariants).
            let output = match limit {
                None => max_output,
                Some(l) if last => max_output.min(l.saturating_sub(input_tokens)),
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
            let source = RequestSource::new(chunk_messages, running.as_deref());
            let answer = self
                .ask_with_fallback(
                    &prepared.system,
                    user_prompt,
                    output,
                    &replaced,
                    source,
                    &mut folded.requests,
                )
                .await;
            match answer {
                Ok(answer) => {
                    let summary_tokens = Heuristic.text(&answer.summary);
                    folded.fallback_cause = answer.fallback_cause.clone().or(folded.fallback_cause);
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
                    folded.elided.extend(elisions.into_iter().map(|e| {
                        let message = messages.start + e.message;
                        ElidedItem {
                            message,
                            message_id: context.messages[message].id.as_deref().map(str::to_owned),
                            block: e.block,
                            bytes: e.bytes,
                            kept: e.kept,
                        }
                    }));
                    folded.used = Some(answer.used);
                    ledger = Ledger::merge(&ledger, &Ledger::from_messages(chunk_messages));
                    // The ledger goes with the final summary only: the next chunk's request
                    // carries the model's text, so the fold's plan is not changed by it.
                    running = Some(strip_ledger(&answer.summary).to_owned());
                    done = turns.end;
                    rejected_here = 0;
                    if done < prepared.turns.len() {
                        plan = self.plan_rest(prepared, done, limit, fixed, running.as_deref())?;
                    }
                }
                Err(Failure::Overflow { error }) if shrinks < MAX_SHRINKS => {
                    shrinks += 1;
                    rejected_here += 1;
                    let transcript_tokens = input_tokens
                        .saturating_sub(fixed + running.as_deref().map_or(0, previous_tokens));
                    let smaller = shrink(
                        limit,
                        &error,
                        input_tokens,
                        u64::from(output),
                        transcript_tokens,
                    );
                    tracing::warn!(%error, step, limit = smaller, "compaction request overflowed, shrinking");
                    limit = Some(smaller);
                    plan = self.plan_rest(prepared, done, limit, fixed, running.as_deref())?;
                    self.emit(CompactionEvent::Shrinking {
                        step,
                        limit: smaller,
                        steps: folded.steps.len() + plan.requests(),
                        cause: error.to_string(),
                    });
                }
                Err(Failure::Overflow { error }) => {
                    return Err(CompactError::FoldOverflow {
                        step,
                        steps,
                        shrinks,
                        estimated_tokens: input_tokens,
                        limit,
                        error,
                    });
                }
                Err(Failure::Other(e)) => return Err(e),
            }
        }
        folded.summary = with_ledger(&running.unwrap_or_default(), &ledger, budget);
        folded.ledger = ledger;
        folded.limit = limit;
        Ok(folded)
    }

    /// The fold of the turns from `done` on, with `previous` as the first request's summary.
    fn plan_rest(
        &self,
        prepared: &Prepared,
        done: usize,
        limit: Option<u64>,
        fixed: u64,
        previous: Option<&str>,
    ) -> Result<FoldPlan, CompactError> {
        let budget = FoldBudget::new(
            limit,
            fixed,
            previous.map_or(0, previous_tokens),
            u64::from(self.config.max_output_tokens.max(MIN_OUTPUT_TOKENS)),
        );
        fold(&prepared.turn_tokens[done..], &budget).map_err(CompactError::NoRoom)
    }

    /// Asks `compaction_model` (when configured) for one summary, then the active model once
    /// when it fails. Counts every request in `requests`.
    async fn ask_with_fallback(
        &mut self,
        system: &str,
        user_prompt: String,
        max_output_tokens: u32,
        replaced: &Replaced<'_>,
        source: RequestSource<'_>,
        requests: &mut usize,
    ) -> Result<Answer, Failure> {
        let (first, second) = match &self.compaction_model {
            Some(m) => (m.clone(), Some(self.active.clone())),
            None => (self.active.clone(), None),
        };
        let mut request = Request::new(
            first.model.clone(),
            system,
            vec![Message::user_text(user_prompt)],
            max_output_tokens,
        );
        *requests += 1;
        let cause = match ask(&first, &request, replaced, source).await {
            Ok(summary) => {
                return Ok(Answer {
                    summary,
                    used: first,
                    fallback_cause: None,
                });
            }
            Err(cause) => cause,
        };
        let Some(active) = second else {
            return Err(match cause {
                AttemptFailure::Provider(error) if error.is_context_overflow() => {
                    Failure::Overflow { error }
                }
                cause => Failure::Other(CompactError::Compaction {
                    model: first.model.clone(),
                    cause,
                }),
            });
        };
        tracing::warn!(model = %first.model, %cause, "compaction model failed, falling back to the active model");
        self.emit(CompactionEvent::FallingBack {
            failed_model: first.model.clone(),
            cause: cause.clone(),
            model: active.model.clone(),
        });
        request.model.clone_from(&active.model);
        *requests += 1;
        match ask(&active, &request, replaced, source).await {
            Ok(summary) => Ok(Answer {
                summary,
                used: active,
                fallback_cause: Some(cause),
            }),
            Err(AttemptFailure::Provider(error)) if error.is_context_overflow() => {
                Err(Failure::Overflow { error })
            }
            Err(second) => Err(Failure::Other(CompactError::BothModelsFailed {
                compaction_model: first.model.clone(),
                first: Box::new(cause),
                active_model: active.model.clone(),
                second: Box::new(second),
            })),
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
        let before = previous_ledger(context);
        let budget = ledger_budget(
            self.config.max_output_tokens,
            rendered_len(context),
            prepared.transcript.text().len(),
            prepared.limit,
        );
        let ledger = Ledger::merge(&before, &Ledger::from_items(&items));
        let summary = with_ledger(
            &record_only_text(failure, previous, &items, budget / 2),
            &ledger,
            budget,
        );
        let compacted = self.build(
            context,
            options,
            prepared,
            Folded {
                summary,
                ledger,
                degraded: Some(failure.to_string()),
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

/// How many times one fold shrinks its limit after a compaction request overflowed anyway.
pub const MAX_SHRINKS: usize = 3;

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
    /// The limit the fold ended with (lower than planned after a shrink).
    limit: Option<u64>,
}

/// The estimated tokens of the context after a compaction: `summary` and the kept turns.
fn kept_estimate(context: &EffectiveContext, prepared: &Prepared, summary: &str) -> u64 {
    let mut after = vec![Message::compaction(summary)];
    after.extend(context.messages[prepared.plan.kept()].iter().cloned());
    estimate_request("", &after)
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

/// The transcript of the summarized prefix whose turns are `turns` (ranges of the context's
/// messages), rendered turn by turn.
fn render_prefix(context: &EffectiveContext, turns: &[Range<usize>]) -> TurnTranscript {
    let head = turns.first().map_or(0, |t| t.start);
    let end = turns.last().map_or(head, |t| t.end);
    let relative: Vec<Range<usize>> = turns.iter().map(|t| t.start - head..t.end - head).collect();
    render_turns(&context.messages[head..end], &relative)
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
fn request_overhead(system: &str) -> u64 {
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
/// when they explain the rejection, else the transcript room halved. Always below what failed.
fn shrink(
    limit: Option<u64>,
    error: &ProviderError,
    input: u64,
    output: u64,
    transcript: u64,
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
    let smaller = match from_numbers {
        Some(l) if l < sent => l.min(halved.max(l * 9 / 10)),
        _ => halved,
    };
    min_known(limit, Some(smaller))
        .unwrap_or(smaller)
        .min(sent.saturating_sub(1))
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
