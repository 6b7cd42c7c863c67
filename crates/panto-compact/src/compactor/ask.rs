//! The model calls of a fold: the compaction model first, the active model when it fails (and
//! for the rest of the fold), never an input a model already rejected as too large; each
//! answer must have ended by itself and pass the summary checks.

use std::hash::{Hash, Hasher};

use panto_model::{Message, Usage};
use panto_provider::{PromptCache, ProviderError, Request, RequestOptions, StreamEvent};
use tracing::{Instrument, info_span};

use super::Compactor;
use super::state::FoldState;
use crate::attempt::AttemptFailure;
use crate::check::{Replaced, check_summary};
use crate::config::ModelRef;
use crate::error::CompactError;
use crate::events::CompactionEvent;
use crate::source::RequestSource;

impl Compactor {
    /// Asks `compaction_model` (when configured, and it has not failed in this fold) for one
    /// summary, then the active model when it fails. A model is never sent an input it has
    /// already rejected as too large, and a compaction model that failed is not asked again in
    /// the same fold. Counts every request.
    pub(super) async fn ask_with_fallback(
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
        // A fold's prompt (the compaction prompt and a transcript) is read once and shares no
        // prefix with the conversation's requests: nothing is worth writing to the cache.
        let mut request = Request::new(
            self.active.model.clone(),
            system,
            vec![Message::user_text(user_prompt)],
            max_output_tokens,
        )
        .with_options(RequestOptions::new().with_cache(PromptCache::off()));
        if let Some(first) = self.compaction_model.clone()
            && state.compaction_model_failed.is_none()
            && !state.rejected.contains(&(first.model.clone(), input))
        {
            request.model.clone_from(&first.model);
            state.folded.requests += 1;
            let result = ask(&first, &request, replaced, source, &mut state.folded.usage).await;
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
        let result = ask(&active, &request, replaced, source, &mut state.folded.usage).await;
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
            Err(second) => {
                let truncated = matches!(second, AttemptFailure::TruncatedSummary { .. });
                let error = match (&self.compaction_model, &state.compaction_model_failed) {
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

/// A hash of a request's input, to recognise one sent before.
fn input_hash(text: &str) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    text.hash(&mut hasher);
    hasher.finish()
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
