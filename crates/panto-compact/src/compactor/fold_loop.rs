//! The fold loop: the summarized turns in requests of whole turns, oldest first, each carrying
//! the summary so far, resumable from where it stands (`FoldState`). A request rejected as too
//! large shrinks the limit and re-plans the turns not yet summarized; a window found smaller
//! than planned summarizes the turns that no longer fit, going on from the summary so far.

use panto_model::EffectiveContext;
use panto_provider::ProviderError;

use super::ask::Failure;
use super::chunk::{ChunkPrompt, chunk_prompt, last_body};
use super::limits::{
    envelope_tokens, least_limit, previous_tokens, request_overhead, shrink, states_limit,
};
use super::state::{FoldState, Material, Pieces, split_text};
use super::step::Sent;
use super::{Compactor, MAX_LONGER, MAX_SHRINKS, Prepared, kept_estimate};
use crate::check::Replaced;
use crate::config::CompactRun;
use crate::error::CompactError;
use crate::events::CompactionEvent;
use crate::fold::{FoldPlan, MIN_OUTPUT_TOKENS, MIN_ROOM, fold};
use crate::source::RequestSource;

impl Compactor {
    /// The whole fold, a resumable walk whose state is the summary so far and the record so
    /// far: first the carried summary, in pieces, when it is too large to ride along; then
    /// the prefix's turns; then, when an overflow compaction learned a smaller window than it
    /// planned for and the kept turns would not fit it, the turns that must now be summarized
    /// too, going on from the summary so far (nothing is summarized twice).
    pub(super) async fn fold_all(
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
            &state.budget(fixed, previous.unwrap_or(0)),
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
            kept_estimate(prepared, state.running.as_deref().unwrap_or(""))
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
        let capacity = state.budget(fixed, 0).later_capacity().unwrap_or(MIN_ROOM);
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

    /// The previous summary as material, in pieces that each fit a request, when it is too
    /// large to ride along as `<previous-summary>` (larger than what a later request may carry
    /// of the transcript): `None` when it fits, or when no limit is known.
    fn carried_pieces(&self, state: &FoldState, fixed: u64) -> Option<Pieces> {
        let previous = state.running.as_deref()?;
        let capacity = state.budget(fixed, 0).later_capacity()?;
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
        let mut sizes = Overheads::of(system);
        let mut done = from;
        let mut plan = self.plan_material(material, done, state, &sizes)?;
        // The plan's chunks count turns from `base`; `next` is the chunk to send.
        let (mut base, mut next) = (done, 0);
        let mut rejected_here = 0;
        let mut longer_here = 0;
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
            let ChunkPrompt {
                text: user_prompt,
                transcript_len,
                tokens: prompt_tokens,
                elisions,
            } = chunk_prompt(material, &chunk, turns.clone(), chunk_messages, running)?;
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
            let input_tokens = sizes.base_tokens + prompt_tokens;
            let last = next + 1 == plan.requests() && state.later_steps == 0;
            let output = state.output_for(&plan, last, input_tokens);
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
            let sent = Sent {
                turns: turns.clone(),
                messages,
                input_tokens,
                max_output_tokens: output,
                elisions,
                rejected: rejected_here,
            };
            let failed = match answer {
                Ok(answer) => Ok(answer),
                Err(Failure::Overflow { error }) if state.shrinks < MAX_SHRINKS => {
                    rejected_here += 1;
                    let rejected = Rejected {
                        error: &error,
                        input_tokens,
                        output,
                        carried_tokens: chunk.tokens.min(chunk.capacity),
                        running,
                    };
                    let smaller;
                    (plan, smaller) =
                        self.shrink_after(material, done, &rejected, &mut sizes, system, state)?;
                    (base, next) = (done, 0);
                    tracing::warn!(%error, step, limit = smaller, "compaction request overflowed, shrinking");
                    self.emit(CompactionEvent::Shrinking {
                        step,
                        limit: smaller,
                        steps: state.folded.steps.len() + plan.requests() + state.later_steps,
                        cause: error.to_string(),
                    });
                    continue;
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
                Err(Failure::Truncated { error }) if longer_here < MAX_LONGER => {
                    // The model answered but ran out of output: the same model is asked again
                    // with twice the output, up to the configured output limit, and the chunks
                    // shrink where they must to make the room, while the overflow's requests
                    // stay within their bound. The request is not one sent before: its output
                    // limit is larger.
                    let more = (u64::from(output) * 2).min(self.longest_output(state));
                    let before = state.min_output;
                    state.min_output = more;
                    let again = self
                        .plan_material(material, done, state, &sizes)
                        .ok()
                        .filter(|again| more > u64::from(output) && again.output >= more)
                        .filter(|again| state.within_bound(again.requests()));
                    match again {
                        Some(again) => {
                            longer_here += 1;
                            (plan, base, next) = (again, done, 0);
                            tracing::warn!(
                                step,
                                output,
                                more,
                                "the summary stopped at the output limit, asking again with more output"
                            );
                            self.emit(CompactionEvent::Replanned {
                                steps: state.folded.steps.len()
                                    + plan.requests()
                                    + state.later_steps,
                                cause: format!(
                                    "the summary of step {step} stopped at the output limit of {output} tokens: asking again with {more}"
                                ),
                            });
                            continue;
                        }
                        None => {
                            state.min_output = before;
                            Err(error)
                        }
                    }
                }
                Err(Failure::Truncated { error } | Failure::Other(error)) => Err(error),
            };
            match failed {
                Ok(answer) => state.take(answer, sent, material),
                // The models answered this step, and no answer passed: panto's record of its
                // turns goes on after the summary so far, and the model is asked for the rest.
                // So when steps follow, or when a model's summary came before (the last step:
                // the model's account of the turns before it is kept, never thrown away for
                // panto's record of everything). A fold no model's summary passed at all fails.
                Err(error)
                    if error.is_rejected_answer()
                        && !material.carried
                        && (!last || state.folded.used.is_some()) =>
                {
                    let cause = error.to_string();
                    tracing::warn!(step, %cause, "no model's summary of this step passed, going on from panto's record of its turns");
                    self.emit(CompactionEvent::StepRecorded {
                        step,
                        steps,
                        cause: cause.clone(),
                    });
                    state.record(sent, material, (step, sizes.fixed, last), &cause);
                }
                Err(error) => return Err(error),
            }
            done = turns.end;
            next += 1;
            rejected_here = 0;
            longer_here = 0;
            state.probe_higher();
            // The plan reserved room for a running summary of a whole output; when the
            // summary is shorter, the rest may fit in fewer requests. Such a plan is taken
            // only when it saves a request, and said once.
            if done < material.turns.len() {
                let left = plan.requests() - next;
                let again = self.plan_material(material, done, state, &sizes)?;
                if again.requests() < left {
                    (plan, base, next) = (again, done, 0);
                    self.emit(CompactionEvent::Replanned {
                        steps: state.folded.steps.len() + plan.requests() + state.later_steps,
                        cause: "the summaries so far are shorter than planned".to_owned(),
                    });
                }
            }
        }
        Ok(())
    }

    /// After a request was rejected as too large (`rejected`): the limit shrunk (from the
    /// provider's numbers, else from what is known to fit, never below the least a fold can
    /// work in), the short prompt taken when the window is found below its threshold (unless
    /// the user layered their own), and the turns from `done` on planned again, so that the
    /// next request of this step carries less of the transcript than the one rejected. Gives
    /// the new plan and the new limit.
    fn shrink_after(
        &self,
        material: &Material<'_>,
        done: usize,
        rejected: &Rejected<'_>,
        sizes: &mut Overheads,
        system: &mut String,
        state: &mut FoldState,
    ) -> Result<(FoldPlan, u64), CompactError> {
        let Rejected {
            error,
            input_tokens,
            output,
            carried_tokens,
            running,
        } = *rejected;
        state.shrinks += 1;
        if !states_limit(error) {
            state.upper = Some(state.upper.map_or(input_tokens, |u| u.min(input_tokens)));
        }
        let transcript_tokens =
            input_tokens.saturating_sub(sizes.fixed + running.map_or(0, previous_tokens));
        let mut smaller = shrink(
            state.limit,
            error,
            input_tokens,
            u64::from(output),
            transcript_tokens,
            state.proven,
        );
        let shorter = self
            .prompt
            .system_prompt_for(state.instructions.as_deref(), Some(smaller));
        if shorter.len() < system.len() {
            *system = shorter;
            *sizes = Overheads::of(system);
        }
        // Never below the least limit a fold can work in (a guess may undershoot).
        let least = least_limit(sizes.fixed, running.map_or(0, previous_tokens));
        if smaller < least && least < input_tokens {
            smaller = least;
        }
        loop {
            state.limit = Some(smaller);
            let plan = self.plan_material(material, done, state, sizes)?;
            let first = &plan.chunks[0];
            let again = first.tokens.min(first.capacity);
            if again < carried_tokens {
                return Ok((plan, smaller));
            }
            smaller = smaller.saturating_sub(again - carried_tokens + 1);
        }
    }

    /// The fold of `material`'s turns from `done` on, after the summary so far, for requests of
    /// `sizes`.
    fn plan_material(
        &self,
        material: &Material<'_>,
        done: usize,
        state: &FoldState,
        sizes: &Overheads,
    ) -> Result<FoldPlan, CompactError> {
        let running = state.running.as_deref();
        self.plan_rest(material.turn_tokens, done, state, sizes.fixed, running)
    }

    /// The fold of the turns from `done` on (of turns sized `turn_tokens`), with `previous` as
    /// the first request's summary, within the state's limit and output.
    pub(super) fn plan_rest(
        &self,
        turn_tokens: &[u64],
        done: usize,
        state: &FoldState,
        fixed: u64,
        previous: Option<&str>,
    ) -> Result<FoldPlan, CompactError> {
        let budget = state.budget(fixed, previous.map_or(0, previous_tokens));
        fold(&turn_tokens[done..], &budget).map_err(CompactError::NoRoom)
    }
}

/// What a request of the fold costs besides its user prompt, for the system prompt it is sent
/// with: `fixed` for the plan (the envelope counted, with room for a previous summary), and
/// `base_tokens` for a prompt sized whole (its own size counts the envelope).
struct Overheads {
    fixed: u64,
    base_tokens: u64,
}

impl Overheads {
    fn of(system: &str) -> Overheads {
        let fixed = request_overhead(system);
        Overheads {
            fixed,
            base_tokens: fixed.saturating_sub(envelope_tokens()),
        }
    }
}

/// A request the provider rejected as too large.
#[derive(Clone, Copy)]
struct Rejected<'a> {
    error: &'a ProviderError,
    input_tokens: u64,
    output: u32,
    /// The transcript tokens it carried.
    carried_tokens: u64,
    /// The summary it carried.
    running: Option<&'a str>,
}

impl FoldState {
    /// The output limit of a request of `input_tokens` in `plan` (the `last` of the fold, or
    /// not). The plan leaves every request at least the floor (`FoldPlan`'s invariants).
    fn output_for(&self, plan: &FoldPlan, last: bool, input_tokens: u64) -> u32 {
        let most = self.max_output.max(self.min_output);
        let output = match self.limit {
            None => most,
            Some(l) if last => most.min(l.saturating_sub(input_tokens)),
            Some(l) => plan.output.min(l.saturating_sub(input_tokens)),
        }
        .max(self.min_output);
        u32::try_from(output).unwrap_or(u32::MAX)
    }

    /// After an answer: a limit guessed after a rejection that stated none is likely below the
    /// window, so while rejections are left the next requests try higher, half way (in
    /// proportion: the geometric mean) up to the smallest input rejected and at most half again
    /// what fits; a failed try costs a request and sends the limit back to what is known to
    /// fit, never to an input sent before.
    fn probe_higher(&mut self) {
        if let (Some(upper), Some(limit)) = (self.upper, self.limit)
            && self.shrinks < MAX_SHRINKS
        {
            let between = (self.proven as f64 * upper as f64).sqrt() as u64;
            let probe = between.min(self.proven + self.proven / 2) + u64::from(MIN_OUTPUT_TOKENS);
            if probe > limit + limit / 10 {
                self.limit = Some(probe);
            }
        }
    }
}
