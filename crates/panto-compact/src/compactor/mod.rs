//! The compactor: one compaction from plan to append.
//!
//! One file per job. Here, the type ([`Compactor`]: its models, settings and events) and its
//! public calls; the plan and rendering of a run (`prepare.rs`); one run, with everything that
//! holds only for it (`run.rs`: the window as the run knows it, what it learns); the seam
//! between a run and the ways of writing its summary (`strategy.rs`: the one dispatch point,
//! and the steps to add a strategy); the strategies, panto's summary (`summary.rs`) and the
//! provider's native compaction (`native.rs`). The summary folds the prefix through as many
//! requests as the window needs (a `Fold`, `folding.rs`), in passes, each a walk over the
//! summarized turns (`walk.rs`), which keeps
//! where it stands in a `FoldState` (`state.rs`) and takes each step's answer, or panto's
//! record of a step no summary passed, in `step.rs`; what it walks, the transcript in parts
//! (`parts.rs`); each request's prompt (`chunk.rs`), what it costs and how a rejection shrinks
//! the limit (`limits.rs`); and the model calls, with the fallback from the compaction model to
//! the active one (`ask.rs`). What is written (the summary with its ledger, the entry and the
//! copies) is `write.rs`; panto's own record when no model summarized the whole prefix (the
//! models' summary so far, then panto's record of the turns after it) is `failed.rs`; and the
//! append, after
//! another writer's prompts when they came first, `rebase.rs`.

mod ask;
mod chunk;
mod clear;
mod failed;
mod folding;
mod limits;
mod native;
mod parts;
mod prepare;
mod rebase;
mod run;
mod state;
mod step;
mod strategy;
mod summary;
#[cfg(test)]
mod tests;
mod tiered;
mod walk;
mod write;

pub use rebase::{MAX_REBASES, REBASED_FIELD};

use std::fmt;
use std::ops::Range;
use std::sync::{Arc, Mutex, PoisonError};

use panto_model::{EffectiveContext, IdKind, IdSource, KEPT_BY, Message, UniqueIds};
use panto_size::{Heuristic, Sizer, UsageSizer, estimate};
use panto_store::{SessionLog, Store};
use serde_json::Value;
use tracing::{Instrument, info_span};

use crate::config::{CompactRun, CompactorConfig, ModelRef};
use crate::error::CompactError;
use crate::events::CompactionEvent;
use crate::plan::Plan;
use crate::prompt::CompactionPrompt;
use crate::report::CompactOutcome;
use crate::window::KnownWindows;
use run::Run;

pub use clear::{
    CLEAR_INPUTS_ABOVE, CLEAR_RESULTS_ABOVE, CLEARING_NOTE, CUT_RESULTS_ABOVE_DIVISOR,
    CUT_RESULTS_TO_DIVISOR,
};
pub use tiered::{CLEAR_MIN_FREED_DIVISOR, TIERED_TARGET_DIVISOR};

// The crate's tests size a compaction request as the fold does.
#[cfg(test)]
pub(crate) use limits::request_overhead;

/// A compaction ready to be sent: the plan, the system prompt and the sizes of the transcript
/// of the summarized prefix, turn by turn. Made by [`Compactor::prepare`].
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Prepared {
    /// What is summarized and what is kept.
    pub plan: Plan,
    /// The system prompt: COMPACTION.md plus any extra instructions.
    pub system: String,
    /// Where each turn's part of the summarized prefix's transcript ends in that transcript,
    /// in bytes (the transcript itself is not kept: a fold renders what a request sends).
    pub turn_ends: Vec<usize>,
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
    /// The length in bytes of the summarized prefix's transcript.
    pub fn transcript_len(&self) -> usize {
        self.turn_ends.last().copied().unwrap_or(0)
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
/// summary is followed by the ledger of what it replaces ([`with_ledger`](crate::with_ledger)).
pub struct Compactor {
    active: ModelRef,
    compaction_model: Option<ModelRef>,
    config: CompactorConfig,
    prompt: CompactionPrompt,
    /// How messages are sized; `None` for the ruler ([`UsageSizer`]), whose sizes a caller
    /// that measured the context may hand over ([`CompactRun::sizes`]).
    sizer: Option<Box<dyn Sizer + Send + Sync>>,
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
            sizer: None,
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

    /// The id source.
    pub(crate) fn ids(&self) -> &dyn IdSource {
        &*self.ids
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
        let mut run = Run::new(self, context, &options, windows);
        let produced = run.produce().instrument(span.clone()).await;
        let outcome = match produced {
            Ok(CompactOutcome::Compacted(c)) => run.append(log, *c, &span).await,
            Ok(nothing) => Ok(nothing),
            // Boxed: the record's future is large, and this branch is rare.
            Err(failure) if options.record_on_failure && failure.no_summary_obtained() => {
                Box::pin(run.write_record(log, failure)).await
            }
            Err(error) => Err(error),
        };
        run.teach(windows);
        outcome
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
        let mut run = Run::new(self, context, &options, windows);
        let produced = run.produce().instrument(span).await;
        if let Ok(CompactOutcome::Compacted(c)) = &produced {
            run.emit(CompactionEvent::Finished(Box::new(c.report.clone())));
        }
        run.teach(windows);
        produced
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
/// above a request the provider took (then the fold goes on at that size, trying no higher),
/// or, nothing taken yet, the guess above the least limit a fold can work in that follows the
/// second rejection (then the fold goes on at that least). So a provider that states no limit
/// rejects at most three compaction requests, four when even that least is too large (the
/// fold then fails), or when that third refusal made the output floor smaller and the size
/// the fold went on at carried more input than was taken, which a server counting the input
/// only refuses (the fold then goes on at the input taken; `Limits::fall_back`).
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
