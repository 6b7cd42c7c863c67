//! One compaction: plan, request with model fallback, and the atomic append of the result.

use std::fmt;
use std::sync::Arc;

use panto_model::{
    CompactionEntry, EffectiveContext, Entry, Extra, KEPT_BY, Message, Trigger, replay,
};
use panto_provider::{Provider, Request, StreamEvent};
use panto_size::{Sizer, UsageSizer, estimate_request};
use panto_transcript::render_request;
use serde_json::Value;
use tracing::{Instrument, info_span};

use crate::error::{AttemptFailure, CompactError};
use crate::events::CompactionEvent;
use crate::ids::{IdGenerator, IdKind, UniqueIds};
use crate::log::SessionLog;
use crate::plan::{Plan, keep_budget, plan};
use crate::prompt::CompactionPrompt;

/// The default keep-verbatim budget, in tokens.
pub const DEFAULT_KEEP_TOKENS: u64 = 20_000;

/// The default output limit of a compaction request, in tokens.
pub const DEFAULT_MAX_OUTPUT_TOKENS: u32 = 8_192;

/// A model to ask: a provider and a model name on it.
///
/// The active model and `compaction_model` may share a provider (another model name) or use
/// different providers altogether.
#[derive(Clone)]
pub struct ModelRef {
    /// The provider that serves the model.
    pub provider: Arc<dyn Provider>,
    /// The model name, as the provider knows it.
    pub model: String,
}

impl ModelRef {
    /// A model on a provider.
    pub fn new(provider: Arc<dyn Provider>, model: impl Into<String>) -> ModelRef {
        ModelRef {
            provider,
            model: model.into(),
        }
    }
}

impl fmt::Debug for ModelRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ModelRef")
            .field("provider", &self.provider.name())
            .field("model", &self.model)
            .finish()
    }
}

/// The numbers a compaction runs with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CompactConfig {
    /// The keep-verbatim budget in tokens ([`DEFAULT_KEEP_TOKENS`]). An overflow that reports
    /// the context limit caps it at a quarter of the limit for that compaction.
    pub keep_tokens: u64,
    /// The output limit of the compaction request ([`DEFAULT_MAX_OUTPUT_TOKENS`]).
    pub max_output_tokens: u32,
}

impl Default for CompactConfig {
    fn default() -> CompactConfig {
        CompactConfig {
            keep_tokens: DEFAULT_KEEP_TOKENS,
            max_output_tokens: DEFAULT_MAX_OUTPUT_TOKENS,
        }
    }
}

/// What one compaction run is asked to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompactOptions {
    /// What started it.
    pub trigger: Trigger,
    /// Extra instructions (`/compact ARGS`), appended to the system prompt.
    pub instructions: Option<String>,
    /// The context limit an overflow error reported, which caps the keep budget.
    pub context_limit: Option<u64>,
}

impl CompactOptions {
    /// A manual compaction (`/compact`, `panto compact`), with optional extra instructions.
    pub fn manual(instructions: Option<String>) -> CompactOptions {
        CompactOptions {
            trigger: Trigger::Manual,
            instructions,
            context_limit: None,
        }
    }

    /// An automatic compaction after a context overflow, with the limit the provider reported.
    pub fn overflow(context_limit: Option<u64>) -> CompactOptions {
        CompactOptions {
            trigger: Trigger::Overflow,
            instructions: None,
            context_limit,
        }
    }

    fn instructions(&self) -> Option<&str> {
        self.instructions
            .as_deref()
            .map(str::trim)
            .filter(|i| !i.is_empty())
    }
}

/// Why a compaction had nothing to do: every turn is kept verbatim. A normal outcome.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NothingToCompact {
    /// Turns in the conversation (after the compaction message, if any).
    pub turns: usize,
    /// Their estimated tokens.
    pub tokens: u64,
    /// The keep budget they fit.
    pub budget: u64,
}

impl fmt::Display for NothingToCompact {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.turns {
            0 => f.write_str("nothing to compact: the conversation is empty"),
            1 => f.write_str(
                "nothing to compact: the conversation is a single turn, which is always kept verbatim",
            ),
            n => write!(
                f,
                "nothing to compact: all {n} turns (about {} tokens) fit the keep-verbatim budget of {} tokens",
                self.tokens, self.budget
            ),
        }
    }
}

/// A compaction ready to be sent: the plan and the prompts. Made by [`Compactor::prepare`].
#[derive(Clone, Debug, PartialEq)]
pub struct Prepared {
    /// What is summarized and what is kept.
    pub plan: Plan,
    /// The system prompt: COMPACTION.md plus any extra instructions.
    pub system: String,
    /// The user prompt: the transcript of the summarized prefix and the previous summary.
    pub user_prompt: String,
    /// Estimated tokens of the context before compaction.
    pub tokens_before: u64,
}

impl Prepared {
    /// The compaction request for `model`: one user message, no tools.
    pub fn request(&self, model: &str, max_output_tokens: u32) -> Request {
        Request::new(
            model,
            self.system.clone(),
            vec![Message::user_text(self.user_prompt.clone())],
            max_output_tokens,
        )
    }
}

/// What a finished compaction did.
#[derive(Clone, Debug, PartialEq)]
pub struct CompactionReport {
    /// The id of the compaction entry.
    pub id: String,
    /// The new summary.
    pub summary: String,
    /// What started it.
    pub trigger: Trigger,
    /// The model that wrote the summary.
    pub model: String,
    /// The name of its provider.
    pub provider: String,
    /// Whether `compaction_model` failed and the active model wrote the summary.
    pub fallback: bool,
    /// Why `compaction_model` failed, when the fallback ran.
    pub fallback_cause: Option<AttemptFailure>,
    /// The extra instructions of the run.
    pub instructions: Option<String>,
    /// Whether the model stopped at the output limit (the summary may be cut short).
    pub truncated: bool,
    /// Estimated tokens of the context before.
    pub tokens_before: u64,
    /// Estimated tokens of the context after (summary plus kept turns).
    pub tokens_after: u64,
    /// The retention plan: turns and messages summarized and kept.
    pub plan: Plan,
}

/// A compaction's result: what to append, and the context it produces.
#[derive(Clone, Debug, PartialEq)]
pub struct Compacted {
    /// The append: the compaction entry, then a copy of every kept message marked `kept_by`.
    pub entries: Vec<Entry>,
    /// The effective context after the append (the replay of `entries`).
    pub context: EffectiveContext,
    /// What was done.
    pub report: CompactionReport,
}

/// The outcome of a compaction run that did not fail.
#[derive(Clone, Debug, PartialEq)]
pub enum CompactOutcome {
    /// A summary was made (and, for [`Compactor::compact`], written).
    Compacted(Box<Compacted>),
    /// Every turn is kept verbatim; nothing was asked or written.
    NothingToCompact(NothingToCompact),
}

type EventHandler = Box<dyn FnMut(&CompactionEvent) + Send>;

/// Runs compactions: holds the models, the prompt, the sizer, the id generator and the event
/// callback.
///
/// Model selection, the same for manual and automatic runs: `compaction_model` when configured,
/// else the active model. When `compaction_model` fails for any reason (any provider error, an
/// empty summary), the active model is asked once; when that fails too, the error carries both
/// causes. Nothing is written unless a summary was obtained.
pub struct Compactor {
    active: ModelRef,
    compaction_model: Option<ModelRef>,
    config: CompactConfig,
    prompt: CompactionPrompt,
    sizer: Box<dyn Sizer + Send + Sync>,
    ids: Box<dyn IdGenerator>,
    events: Option<EventHandler>,
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
    /// output limit, [`UsageSizer`] and [`UniqueIds`].
    pub fn new(active: ModelRef) -> Compactor {
        Compactor {
            active,
            compaction_model: None,
            config: CompactConfig::default(),
            prompt: CompactionPrompt::builtin(),
            sizer: Box::new(UsageSizer::default()),
            ids: Box::new(UniqueIds::new()),
            events: None,
        }
    }

    /// Tries `model` first for summaries, with the active model as fallback.
    pub fn with_compaction_model(mut self, model: Option<ModelRef>) -> Compactor {
        self.compaction_model = model;
        self
    }

    /// Sets the budget and output limit.
    pub fn with_config(mut self, config: CompactConfig) -> Compactor {
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

    /// Sets the id generator (inject [`crate::SequentialIds`] for deterministic tests).
    pub fn with_ids(mut self, ids: impl IdGenerator + 'static) -> Compactor {
        self.ids = Box::new(ids);
        self
    }

    /// Calls `handler` with every [`CompactionEvent`].
    pub fn on_event(mut self, handler: impl FnMut(&CompactionEvent) + Send + 'static) -> Compactor {
        self.events = Some(Box::new(handler));
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
    pub fn config(&self) -> CompactConfig {
        self.config
    }

    /// The compaction prompt.
    pub fn prompt(&self) -> &CompactionPrompt {
        &self.prompt
    }

    /// Makes the next id (used by the driver for messages appended without one).
    pub(crate) fn next_id(&mut self, kind: IdKind) -> String {
        self.ids.next_id(kind)
    }

    /// Plans a compaction of `context` and builds its prompts, without asking any model.
    ///
    /// The budget is `keep_tokens`, capped at a quarter of `options.context_limit`. An
    /// overflow compaction must shrink the context, so when that budget would keep every turn
    /// it keeps only the in-flight turn instead.
    ///
    /// # Errors
    /// [`NothingToCompact`] when nothing lies before the kept suffix.
    pub fn prepare(
        &self,
        context: &EffectiveContext,
        options: &CompactOptions,
    ) -> Result<Prepared, NothingToCompact> {
        let sizes = self.sizer.message_sizes(&context.messages);
        let budget = keep_budget(self.config.keep_tokens, options.context_limit);
        let mut p = plan(context, &sizes, budget);
        if p.is_empty() && options.trigger == Trigger::Overflow && p.kept_turns > 1 {
            p = plan(context, &sizes, 0);
        }
        if p.is_empty() {
            return Err(NothingToCompact {
                turns: p.kept_turns,
                tokens: p.kept_tokens,
                budget: p.budget,
            });
        }
        let system = self.prompt.system_prompt(options.instructions());
        let user_prompt = render_request(&context.messages[p.prefix()], context.summary());
        Ok(Prepared {
            plan: p,
            system,
            user_prompt,
            tokens_before: estimate_request("", &context.messages),
        })
    }

    /// Compacts `context` and appends the result to `log` in one call.
    ///
    /// `context` must be the replay of `log`. On success the log's new effective context is
    /// [`Compacted::context`]: the summary block followed by the kept turns.
    ///
    /// # Errors
    /// [`CompactError::Compaction`] or [`CompactError::BothModelsFailed`] when no summary could
    /// be obtained, [`CompactError::Log`] when the append failed. In every error case nothing
    /// of the compaction is in effect.
    pub async fn compact<L: SessionLog + ?Sized>(
        &mut self,
        context: &EffectiveContext,
        log: &mut L,
        options: CompactOptions,
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
        let written = span.in_scope(|| {
            info_span!("write", entries = compacted.entries.len())
                .in_scope(|| log.append(&compacted.entries))
        });
        if let Err(e) = written {
            let error = CompactError::Log(e);
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
    pub async fn summarize(
        &mut self,
        context: &EffectiveContext,
        options: CompactOptions,
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

    /// Plans, asks the models, and builds the append.
    async fn produce(
        &mut self,
        context: &EffectiveContext,
        options: &CompactOptions,
    ) -> Result<CompactOutcome, CompactError> {
        let prepared = match info_span!("plan").in_scope(|| self.prepare(context, options)) {
            Ok(p) => p,
            Err(nothing) => {
                tracing::info!(%nothing, "nothing to compact");
                return Ok(CompactOutcome::NothingToCompact(nothing));
            }
        };
        let (first, second) = match &self.compaction_model {
            Some(m) => (m.clone(), Some(self.active.clone())),
            None => (self.active.clone(), None),
        };
        self.emit(CompactionEvent::Started {
            trigger: options.trigger.clone(),
            model: first.model.clone(),
            plan: prepared.plan.clone(),
            tokens_before: prepared.tokens_before,
        });
        let max_output = self.config.max_output_tokens;
        let attempt = match ask(&first, &prepared, max_output).await {
            Ok(summary) => Ok((summary, first, None)),
            Err(cause) => match second {
                None => Err(CompactError::Compaction {
                    model: first.model.clone(),
                    cause,
                }),
                Some(active) => {
                    tracing::warn!(model = %first.model, %cause, "compaction model failed, falling back to the active model");
                    self.emit(CompactionEvent::FallingBack {
                        failed_model: first.model.clone(),
                        cause: cause.clone(),
                        model: active.model.clone(),
                    });
                    match ask(&active, &prepared, max_output).await {
                        Ok(summary) => Ok((summary, active, Some(cause))),
                        Err(second) => Err(CompactError::BothModelsFailed {
                            compaction_model: first.model.clone(),
                            first: Box::new(cause),
                            active_model: active.model.clone(),
                            second: Box::new(second),
                        }),
                    }
                }
            },
        };
        let ((summary, truncated), used, fallback_cause) = match attempt {
            Ok(ok) => ok,
            Err(error) => {
                self.emit(CompactionEvent::Failed {
                    trigger: options.trigger.clone(),
                    fallback: self.compaction_model.is_some(),
                    plan: prepared.plan.clone(),
                    tokens_before: prepared.tokens_before,
                    error: error.to_string(),
                });
                return Err(error);
            }
        };
        let compacted = self.build(
            context,
            options,
            prepared,
            summary,
            truncated,
            &used,
            fallback_cause,
        );
        Ok(CompactOutcome::Compacted(Box::new(compacted)))
    }

    /// Builds the append: the compaction entry, then the kept copies marked `kept_by`.
    #[allow(clippy::too_many_arguments)]
    fn build(
        &mut self,
        context: &EffectiveContext,
        options: &CompactOptions,
        prepared: Prepared,
        summary: String,
        truncated: bool,
        used: &ModelRef,
        fallback_cause: Option<AttemptFailure>,
    ) -> Compacted {
        let id = self.ids.next_id(IdKind::Compaction);
        let copies: Vec<Message> = context.messages[prepared.plan.kept()]
            .iter()
            .map(|m| {
                let mut copy = m.clone();
                copy.id = Some(self.ids.next_id(IdKind::Message));
                copy.extra
                    .insert(KEPT_BY.to_owned(), Value::from(id.as_str()));
                copy
            })
            .collect();
        let mut after = Vec::with_capacity(copies.len() + 1);
        after.push(Message::compaction(summary.clone()));
        after.extend(copies.iter().cloned());
        let tokens_after = estimate_request("", &after);

        let plan = prepared.plan;
        let mut extra = Extra::new();
        extra.insert("provider".into(), used.provider.name().into());
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
        if truncated {
            extra.insert("truncated".into(), true.into());
        }
        let instructions = options.instructions().map(str::to_owned);
        let entry = CompactionEntry {
            id: Some(id.clone()),
            summary: summary.clone(),
            trigger: Some(options.trigger.clone()),
            model: Some(used.model.clone()),
            instructions: instructions.clone(),
            tokens_before: Some(prepared.tokens_before),
            tokens_after: Some(tokens_after),
            kept_messages: Some(copies.len() as u64),
            extra,
        };
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
                model: used.model.clone(),
                provider: used.provider.name().to_owned(),
                fallback: fallback_cause.is_some(),
                fallback_cause,
                instructions,
                truncated,
                tokens_before: prepared.tokens_before,
                tokens_after,
                plan,
            },
        }
    }

    fn emit(&mut self, event: CompactionEvent) {
        if let Some(handler) = &mut self.events {
            handler(&event);
        }
    }
}

/// Asks one model for the summary: `(summary, truncated)`.
async fn ask(
    model: &ModelRef,
    prepared: &Prepared,
    max_output_tokens: u32,
) -> Result<(String, bool), AttemptFailure> {
    let request = prepared.request(&model.model, max_output_tokens);
    let span = info_span!("request", provider = model.provider.name(), model = %model.model);
    let mut ignore = |_: StreamEvent<'_>| {};
    let answer = model
        .provider
        .complete(&request, &mut ignore)
        .instrument(span)
        .await
        .map_err(AttemptFailure::Provider)?;
    let summary = answer.text().trim().to_owned();
    if summary.is_empty() {
        return Err(AttemptFailure::EmptySummary);
    }
    let truncated = matches!(answer.stop_reason.as_deref(), Some("max_tokens" | "length"));
    Ok((summary, truncated))
}
