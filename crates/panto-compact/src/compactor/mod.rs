//! The compactor: one compaction from plan to append.
//!
//! One file per job. Here, the type ([`Compactor`]: its models, settings and events), the plan
//! and rendering of a run ([`Compactor::prepare`]) and the run itself (`produce`: plan, fold or
//! native compaction, build, write). The fold loop, a resumable walk over the summarized turns
//! (`fold_loop.rs`), keeps where it stands in a `FoldState` (`state.rs`) and takes each step's
//! answer, or panto's record of a step no summary passed, in `step.rs`; each request's prompt
//! is made in `chunk.rs`, what it costs and how a rejection shrinks the limit in `limits.rs`,
//! and the model calls, with the fallback from the compaction model to the active one, in
//! `ask.rs`. What is written (the summary with its ledger, the entry and the copies, panto's
//! own record when no model answered) is `write.rs`, and its append, after another writer's
//! prompts when one came first, `rebase.rs`; native compaction, the other way of writing the
//! summary, is `native.rs`.

mod ask;
mod chunk;
mod fold_loop;
mod limits;
mod native;
mod parts;
mod rebase;
mod state;
mod step;
#[cfg(test)]
mod tests;
mod write;

pub use rebase::{MAX_REBASES, REBASED_FIELD};

use std::borrow::Cow;
use std::fmt;
use std::ops::Range;
use std::sync::{Arc, Mutex, PoisonError};

use panto_model::{EffectiveContext, IdKind, IdSource, KEPT_BY, Message, Trigger, UniqueIds};
use panto_size::{Heuristic, Sizer, UsageSizer, estimate};
use panto_store::{SessionLog, Store};
use panto_transcript::{TurnTranscript, render_request_text, render_request_turns, strip_ledger};
use serde_json::Value;
use tracing::{Instrument, info_span};

use crate::config::{
    CompactRun, CompactionStrategy, CompactorConfig, Conversation, ModelRef, min_known,
};
use crate::error::CompactError;
use crate::events::CompactionEvent;
use crate::fold::MIN_OUTPUT_TOKENS;
use crate::ledger::with_ledger;
use crate::plan::{
    NotSmaller, NothingToCompact, Plan, keep_budget, manual_keep_budget, plan_and_turns,
};
use crate::prompt::CompactionPrompt;
use crate::report::CompactOutcome;
use crate::window::KnownWindows;
use state::{FoldState, Folded, Taught};

// The crate's tests size a compaction request as the fold does.
#[cfg(test)]
pub(crate) use limits::request_overhead;

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
    /// The limit every compaction request must fit, when one is known
    /// ([`KnownWindows::limit`] of the windows the run was given).
    pub limit: Option<u64>,
    /// What the request after the compaction leaves for the summary and its ledger, when the
    /// limit is known: the limit less [`CompactRun::reserved_within`] it and the kept turns.
    pub summary_room: Option<u64>,
    /// The kept turns as the ruler sizes the compaction's copies of them (marked `kept_by`, so
    /// that the usage of their originals, which measured the context before the compaction,
    /// is not trusted): sized once, and with the summary's own size the context after the
    /// compaction.
    pub kept_tokens: u64,
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
    /// How messages are sized; `None` for the ruler ([`UsageSizer`]), whose sizes a caller
    /// that measured the context may hand over ([`CompactRun::sizes`]).
    sizer: Option<Box<dyn Sizer + Send + Sync>>,
    ids: Arc<dyn IdSource>,
    conversation: Option<Conversation>,
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
            sizer: None,
            conversation: None,
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
        self.sizer = Some(Box::new(sizer));
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
    /// `windows` is what is known of the window before the run (the run's overflow is learned
    /// on a copy, [`CompactRun::teach`]). The budget is `keep_tokens` (the run's own,
    /// [`CompactRun::keep_tokens`], when given), capped at a quarter of the limit the requests
    /// must fit ([`KnownWindows::limit`]) when one is known. A manual compaction without a budget of its own keeps at most half
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
        windows: &KnownWindows,
    ) -> Result<Prepared, NothingToCompact> {
        let mut windows = *windows;
        options.teach(&mut windows);
        // One sizing pass gives both the plan's sizes and `tokens_before`: the conversation's
        // size is the sum of its messages' sizes, as the ruler (`panto_size::estimate`)
        // counts it.
        let sizes = match (&self.sizer, &options.sizes) {
            (None, Some(sizes)) if sizes.len() == context.messages.len() => Cow::Borrowed(&**sizes),
            _ => Cow::Owned(self.message_sizes(&context.messages)),
        };
        let tokens_before = sizes.iter().fold(0u64, |t, &s| t.saturating_add(s));
        let limit = windows.limit();
        let mut budget = keep_budget(
            options.keep_tokens.unwrap_or(self.config.keep_tokens),
            limit,
        );
        if options.trigger == Trigger::Manual && options.keep_tokens.is_none() {
            let head = usize::from(context.compaction.is_some()).min(sizes.len());
            let conversation = sizes[head..].iter().fold(0u64, |t, &s| t.saturating_add(s));
            budget = manual_keep_budget(budget, conversation);
        }
        if options.known_limit(&windows).is_none()
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
        let kept_tokens = kept_tokens(context, &p);
        let summary_room = limit.map(|l| {
            l.saturating_sub(options.reserved_within(l))
                .saturating_sub(kept_tokens)
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
            kept_tokens,
        })
    }

    /// Compacts `context` and appends the result to `log` in one conditional append.
    ///
    /// `context` must be the replay of `log` at its head. On success the log's new effective
    /// context is [`Compacted::context`](crate::Compacted::context): the summary block followed
    /// by the kept turns.
    ///
    /// `windows` is everything known of the model's window; the run takes it and gives it back
    /// updated, whatever the outcome: what its overflow said ([`CompactRun::teach`]), a limit a
    /// compaction request was refused with, the largest request the model took. A
    /// [`Driver`](crate::Driver) passes its own; an agent persists what it learned
    /// ([`KnownWindows::learned`]).
    ///
    /// # Errors
    /// [`CompactError::Compaction`] or [`CompactError::BothModelsFailed`] when no summary could
    /// be obtained (unless the run writes panto's record then,
    /// [`CompactRun::record_on_failure`]: that error is returned when the record cannot be
    /// written either), [`CompactError::Store`] when the append failed (a
    /// [`StoreError::Conflict`](panto_store::StoreError::Conflict) when another writer
    /// appended since `log` last saw the session). In every error case nothing of the
    /// compaction is in effect.
    pub async fn compact<S: Store>(
        &mut self,
        context: &EffectiveContext,
        log: &mut SessionLog<S>,
        options: CompactRun,
        windows: &mut KnownWindows,
    ) -> Result<CompactOutcome, CompactError> {
        let span = info_span!("compaction", trigger = options.trigger.as_str());
        options.teach(windows);
        let known = *windows;
        let mut taught = Taught::default();
        let produced = self
            .produce(context, &options, &known, &mut taught)
            .instrument(span.clone())
            .await;
        taught.teach(windows);
        let mut compacted = match produced {
            Ok(CompactOutcome::Compacted(c)) => c,
            Ok(nothing @ CompactOutcome::NothingToCompact(_)) => return Ok(nothing),
            Err(failure) if options.record_on_failure && failure.no_summary_obtained() => {
                let run = (&options, &known);
                return self.write_record(context, log, run, taught, failure).await;
            }
            Err(error) => return Err(error),
        };
        let entries = compacted.entries.len();
        let written = self
            .write(log, &mut compacted)
            .instrument(info_span!(parent: &span, "write", entries))
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
    /// fallback as [`Compactor::compact`], and the entries that it would append. `windows`
    /// comes back updated as with [`Compactor::compact`].
    ///
    /// # Errors
    /// [`CompactError::Compaction`] or [`CompactError::BothModelsFailed`].
    pub async fn dry_run(
        &mut self,
        context: &EffectiveContext,
        options: CompactRun,
        windows: &mut KnownWindows,
    ) -> Result<CompactOutcome, CompactError> {
        let span = info_span!(
            "compaction",
            trigger = options.trigger.as_str(),
            dry_run = true
        );
        options.teach(windows);
        let known = *windows;
        let mut taught = Taught::default();
        let produced = self
            .produce(context, &options, &known, &mut taught)
            .instrument(span)
            .await;
        taught.teach(windows);
        let outcome = produced?;
        if let CompactOutcome::Compacted(c) = &outcome {
            self.emit(CompactionEvent::Finished(Box::new(c.report.clone())));
        }
        Ok(outcome)
    }

    /// Plans, folds the prefix through as many requests as the window needs, and builds the
    /// append. What the run learns of the window goes to `taught`.
    async fn produce(
        &mut self,
        context: &EffectiveContext,
        options: &CompactRun,
        windows: &KnownWindows,
        taught: &mut Taught,
    ) -> Result<CompactOutcome, CompactError> {
        let plan = || self.prepare(context, options, windows);
        let mut prepared = match info_span!("plan").in_scope(plan) {
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
                    prepared.kept_tokens = kept_tokens(context, &prepared.plan);
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
        state.request_bound = options.request_bound(windows);
        let folded = self
            .fold_all(context, (options, windows), &mut prepared, &mut state)
            .await;
        *taught = Taught::of(&state);
        match folded {
            Ok(()) => {
                let folded = self.finish((options, windows), &prepared, state);
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

    /// The limit the request after the compaction must fit, in estimated tokens, when
    /// anything is known of it: the stated or configured window (or the smaller one a
    /// rejection taught); when the provider stated none, the largest request it accepted (a
    /// conversation request before, or a compaction request now), since all that is known of
    /// the window is that it is above what the provider took and below what it rejected.
    fn retry_target(
        &self,
        (options, windows): (&CompactRun, &KnownWindows),
        prepared: &Prepared,
        state: &FoldState,
    ) -> Option<u64> {
        match options.known_limit(windows) {
            Some(known) => Some(known.min(state.limit.unwrap_or(known))),
            // Nothing is known of a window that never refused a request (a manual compaction
            // with none configured): no constraint.
            None if prepared.limit.is_none() => None,
            None => {
                let proven = state.proven.max(windows.accepted.unwrap_or(0));
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

    /// The most output a request of the fold may allow after a model's summary stopped at its
    /// limit: the configured output limit (the fold's own keeps the final summary within what
    /// the request after the compaction leaves; one that comes out larger is condensed).
    fn longest_output(&self, state: &FoldState) -> u64 {
        u64::from(self.config.max_output_tokens).max(state.max_output)
    }

    /// The size of each message of `messages`, by this compactor's sizer.
    fn message_sizes(&self, messages: &[Message]) -> Vec<u64> {
        match &self.sizer {
            Some(sizer) => sizer.message_sizes(messages),
            None => UsageSizer::default().message_sizes(messages),
        }
    }

    pub(crate) fn emit(&mut self, event: CompactionEvent) {
        if let Some(handler) = self.events.get_mut() {
            handler(&event);
        }
    }
}

/// How many times one fold shrinks its limit after a compaction request overflowed anyway:
/// the third rejection ends the fold ([`CompactError::FoldOverflow`]), unless it was a try
/// above a request the provider took: then the fold goes on at that size, trying no higher. So
/// a provider that states no limit rejects at most three compaction requests.
pub const MAX_SHRINKS: usize = 2;

/// How many times one step of a fold asks the active model again after its summary stopped at
/// the output limit, each time with twice the output (up to the configured output limit), the
/// chunks smaller where the window needs the room: 256 tokens become 512, then 1,024. A small
/// model that rambles on a tight window gets the room to finish; one that cannot is a failed
/// attempt after the third answer. Each retry is a request of its own (the same input at most
/// with a larger output limit, never a body sent before), so during an overflow it is sent only
/// while the overflow's requests stay within their bound (`2 + ceil(conversation / (window /
/// 2))`, 3 more when the provider stated no limit).
pub const MAX_LONGER: usize = 2;

/// The estimated tokens of the context after a compaction: `summary` and the kept turns,
/// sized as the copies will be ([`Prepared::kept_tokens`], sized once).
///
/// Exactly the ruler's estimate of the compaction message and the copies: the copies, marked
/// `kept_by`, give the ruler no usage to anchor on, so its estimate is the sum of the
/// messages' sizes, and the compaction message before them changes none of theirs.
fn kept_estimate(prepared: &Prepared, summary: &str) -> u64 {
    Heuristic
        .message(&Message::compaction(summary))
        .saturating_add(prepared.kept_tokens)
}

/// The ruler's size of the turns `plan` keeps, as the compaction's copies of them
/// ([`Prepared::kept_tokens`]).
fn kept_tokens(context: &EffectiveContext, plan: &Plan) -> u64 {
    let copies: Vec<Message> = kept_copies(&context.messages[plan.kept()]).collect();
    estimate("", "", &copies).total()
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
