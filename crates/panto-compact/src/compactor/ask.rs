//! The model calls of a fold: the compaction model first, the active model when it fails (and
//! for the rest of the fold), never an input a model already rejected as too large; each
//! answer must have ended by itself and pass the summary checks.

use std::hash::{Hash, Hasher};

use panto_model::{ContentBlock, Message, Usage};
use panto_provider::{
    PromptCache, ProviderError, Request, RequestOptions, StreamEvent, TokenNumbers,
};
use panto_transcript::render_request;
use tracing::{Instrument, info_span};

use super::chunk::Prompt;
use super::folding::Fold;
use crate::attempt::AttemptFailure;
use crate::check::{Replaced, check_summary};
use crate::config::ModelRef;
use crate::error::CompactError;
use crate::events::CompactionEvent;
use crate::source::RequestSource;

/// One request of a fold, as it is asked: its body, its input (hashed when first needed, to
/// recognise it) and size, and what its answer is checked against.
struct Asking<'q> {
    request: Request,
    /// Whether the request's user message holds its prompt: a prompt of whole turns
    /// ([`Prompt::OfSource`]) is written only when a model that reads it is asked or its input
    /// is hashed; a summarizer that reads the source gets the message empty.
    written: bool,
    /// The hash of the input, made only when a rejection is looked up or recorded: most folds
    /// see none, and the input can be the whole transcript (tens of MB).
    input: Option<u64>,
    input_tokens: u64,
    replaced: &'q Replaced<'q>,
    source: RequestSource<'q>,
}

impl Fold<'_, '_> {
    /// Asks `compaction_model` (when configured, and it has not failed in this fold) for one
    /// summary, then the active model when it fails. A model is never sent an input it has
    /// already rejected as too large, and a compaction model that failed is not asked again in
    /// the same fold. Counts every request.
    pub(super) async fn ask(
        &mut self,
        system: &str,
        user_prompt: Prompt,
        (input_tokens, max_output_tokens): (u64, u32),
        replaced: &Replaced<'_>,
        source: RequestSource<'_>,
    ) -> Result<Answer, Failure> {
        let compactor = &*self.run.compactor;
        let (active, first) = (compactor.active.clone(), compactor.compaction_model.clone());
        // A fold's prompt (the compaction prompt and a transcript) is read once and shares no
        // prefix with the conversation's requests: nothing is worth writing to the cache.
        let (text, written) = match user_prompt {
            Prompt::Text(text) => (text, true),
            Prompt::OfSource => (String::new(), false),
        };
        let mut asking = Asking {
            input: None,
            written,
            request: Request::new(
                active.model.clone(),
                system,
                vec![Message::user_text(text)],
                max_output_tokens,
            )
            .with_options(RequestOptions::new().with_cache(PromptCache::off())),
            input_tokens,
            replaced,
            source,
        };
        let first = first.filter(|m| self.may_ask(m, &mut asking));
        self.state.asked.compaction_model_asked = first.is_some();
        if let Some(first) = first {
            match self.ask_one(&first, &mut asking).await {
                Ok(summary) => {
                    return Ok(Answer {
                        summary,
                        used: first,
                        fallback_cause: None,
                    });
                }
                Err(cause) => self.fall_back(&first, &active, cause, asking.input()),
            }
        }
        let asked = &self.state.asked;
        if !asked.rejected.is_empty()
            && asked
                .rejected
                .contains(&(active.model.clone(), asking.input()))
        {
            // Never sent again: the fold shrinks instead.
            let error =
                asked
                    .last_overflow
                    .clone()
                    .unwrap_or_else(|| ProviderError::ContextOverflow {
                        message: "this input was rejected as too large before".to_owned(),
                        numbers: TokenNumbers::default(),
                    });
            return Err(Failure::Overflow { error });
        }
        let result = self.ask_one(&active, &mut asking).await;
        self.answer_of_active(active, result, &mut asking)
    }

    /// Whether the compaction model `model` may be asked for the input of `asking`: it has
    /// not failed in this fold, and did not reject that input.
    fn may_ask(&self, model: &ModelRef, asking: &mut Asking<'_>) -> bool {
        let asked = &self.state.asked;
        asked.compaction_model_failed.is_none()
            && (asked.rejected.is_empty()
                || !asked
                    .rejected
                    .contains(&(model.model.clone(), asking.input())))
    }

    /// Asks `model` once, counted; a model that answered (whatever the checks made of its
    /// answer) took the input, so the window holds at least that much; a failure is recorded.
    async fn ask_one(
        &mut self,
        model: &ModelRef,
        asking: &mut Asking<'_>,
    ) -> Result<String, AttemptFailure> {
        asking.request.model.clone_from(&model.model);
        if model.source.is_none() {
            asking.write();
        }
        self.state.so_far.folded.requests += 1;
        let spent = &mut self.state.so_far.folded.usage;
        let result = ask(
            model,
            &asking.request,
            asking.replaced,
            asking.source,
            spent,
        )
        .await;
        if result
            .as_ref()
            .err()
            .is_none_or(AttemptFailure::is_rejected_summary)
        {
            let limits = &mut self.state.limits;
            limits.proven = limits.proven.max(asking.input_tokens);
            let output = u64::from(asking.request.max_output_tokens);
            limits.proven_total = limits.proven_total.max(asking.input_tokens + output);
        }
        if let Err(cause) = &result {
            let failure = format!("{}: {cause}", model.model);
            self.state.asked.failures.push(failure);
        }
        result
    }

    /// The compaction model `first` failed with `cause` on the input of hash `input`: it is
    /// not asked again in this fold (nor that input, when too large), and the `active` model is
    /// asked instead; said (`FallingBack`).
    fn fall_back(
        &mut self,
        first: &ModelRef,
        active: &ModelRef,
        cause: AttemptFailure,
        input: u64,
    ) {
        if let AttemptFailure::Provider(error) = &cause
            && error.is_context_overflow()
        {
            let asked = &mut self.state.asked;
            asked.rejected.insert((first.model.clone(), input));
        }
        tracing::warn!(model = %first.model, %cause, "compaction model failed, falling back to the active model for the rest of this compaction");
        self.run.emit(CompactionEvent::FallingBack {
            failed_model: first.model.clone(),
            cause: cause.clone(),
            model: active.model.clone(),
        });
        self.state.asked.compaction_model_failed = Some(cause);
    }

    /// What the `active` model's `result` for the input of `asking` makes of the step: its
    /// summary, a rejection to shrink after (the input is never sent to it again), a summary
    /// cut at the output limit, or the compaction's error (with the compaction model's cause,
    /// when it failed first).
    fn answer_of_active(
        &mut self,
        active: ModelRef,
        result: Result<String, AttemptFailure>,
        asking: &mut Asking<'_>,
    ) -> Result<Answer, Failure> {
        let asked = &mut self.state.asked;
        let second = match result {
            Ok(summary) => {
                return Ok(Answer {
                    summary,
                    used: active,
                    fallback_cause: asked.compaction_model_failed.clone(),
                });
            }
            Err(AttemptFailure::Provider(error)) if error.is_context_overflow() => {
                asked
                    .rejected
                    .insert((active.model.clone(), asking.input()));
                asked.last_overflow = Some(error.clone());
                return Err(Failure::Overflow { error });
            }
            Err(second) => second,
        };
        let truncated = matches!(second, AttemptFailure::TruncatedSummary { .. });
        let first = self.run.compactor.compaction_model.as_ref();
        let error = match (first, &asked.compaction_model_failed) {
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
        };
        Err(if truncated {
            Failure::Truncated { error }
        } else {
            Failure::Other(error)
        })
    }
}

/// One summary, and who wrote it.
pub(super) struct Answer {
    pub(super) summary: String,
    pub(super) used: ModelRef,
    pub(super) fallback_cause: Option<AttemptFailure>,
}

/// Why one chunk got no summary: too large for the model that was asked last (the fold may
/// shrink and try again), or anything else (the fold fails).
pub(super) enum Failure {
    Overflow {
        error: ProviderError,
    },
    /// The active model's summary stopped at the output limit; `error` is the compaction's
    /// error when the fold cannot give it more output.
    Truncated {
        error: CompactError,
    },
    Other(CompactError),
}

impl Asking<'_> {
    /// Writes the request's prompt into its user message, when it is not written yet: the
    /// request of the source's messages after the summary it carries, as the text a request of
    /// whole turns carries.
    fn write(&mut self) {
        if !self.written {
            let prompt = render_request(self.source.messages, self.source.previous_summary);
            self.request.messages = vec![Message::user_text(prompt)];
            self.written = true;
        }
    }

    /// The hash of the request's input (its messages' text), to recognise one sent before;
    /// made once, when first asked for.
    fn input(&mut self) -> u64 {
        self.write();
        let request = &self.request;
        *self.input.get_or_insert_with(|| {
            let mut hasher = std::collections::hash_map::DefaultHasher::new();
            for message in &request.messages {
                for block in &message.content {
                    if let ContentBlock::Text(t) = block {
                        t.text.hash(&mut hasher);
                    }
                }
            }
            hasher.finish()
        })
    }
}

/// Asks one model for the summary, which must have ended by itself (not at the output limit)
/// and pass the checks. The answer's usage, whatever the checks make of it, is added to `spent`.
async fn ask(
    model: &ModelRef,
    request: &Request,
    replaced: &Replaced<'_>,
    source: RequestSource<'_>,
    spent: &mut Option<Usage>,
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
    if let Some(usage) = &answer.usage {
        spent.get_or_insert_with(Usage::default).accumulate(usage);
    }
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
