//! The fold loop: the summarized turns in requests of parts (whole turns, or the pieces of a
//! turn too large to share a request, `parts.rs`), oldest first, each carrying the summary so
//! far, resumable from where it stands (`FoldState`). A request rejected as too large shrinks
//! the limit and re-plans the parts not yet summarized; a window found smaller than planned
//! summarizes the turns that no longer fit, going on from the summary so far.

use panto_model::EffectiveContext;
use panto_provider::ProviderError;

use super::ask::Failure;
use super::chunk::{ChunkPrompt, chunk_prompt, last_body};
use super::limits::{envelope_tokens, least_limit, previous_tokens, request_overhead, shrink};
use super::parts::{Material, PartSize, Parts, Pieces, prefix_parts, split_text};
use super::state::FoldState;
use super::step::Sent;
use super::{Compactor, MAX_LONGER, MAX_SHRINKS, Prepared, kept_estimate};
use crate::check::Replaced;
use crate::config::CompactRun;
use crate::error::CompactError;
use crate::events::CompactionEvent;
use crate::fold::{FoldPlan, MIN_ROOM, fold};
use crate::source::RequestSource;
use crate::window::{KnownWindows, Stated, Window, WindowSource};

impl Compactor {
    /// The whole fold, a resumable walk whose state is the summary so far and the record so
    /// far: first the carried summary, in pieces, when it is too large to ride along; then
    /// the prefix's turns; then, when an overflow compaction learned a smaller window than it
    /// planned for and the kept turns would not fit it, the turns that must now be summarized
    /// too, going on from the summary so far (nothing is summarized twice).
    pub(super) async fn fold_all(
        &mut self,
        context: &EffectiveContext,
        (options, windows): (&CompactRun, &KnownWindows),
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
                self.plan_rest(&pieces.parts, 0, state, fixed, None)?
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
        let mut parts = prefix_parts(prepared, state, fixed);
        let turns_plan = fold(
            &parts.tokens,
            &state.budget(fixed + parts.allowance(), previous.unwrap_or(0)),
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
            let turns = self.plan_rest(&parts, 0, state, fixed, state.running.as_deref())?;
            if turns.requests() != turns_plan.requests() {
                self.emit(CompactionEvent::Replanned {
                    steps: state.folded.steps.len() + turns.requests(),
                    cause: "the earlier summary came out shorter than planned".to_owned(),
                });
            }
        }
        let mut system = prepared.system.clone();
        let mut material = Material {
            messages: &context.messages,
            parts: &mut parts,
            carried: false,
        };
        self.fold_material(&mut material, 0, &mut system, state)
            .await?;

        if !options.must_fit() {
            return Ok(());
        }
        // The request after the compaction must fit what is known of the window: keep fewer
        // turns and summarize the ones that no longer fit after the summary so far; then, if
        // the summary itself is too large, condense it.
        let Some(target) = self.retry_target((options, windows), prepared, state) else {
            return Ok(());
        };
        let retry = |prepared: &Prepared, state: &FoldState| {
            kept_estimate(prepared, state.running.as_deref().unwrap_or(""))
                + options.reserved_within(target)
        };
        if retry(prepared, state) <= target {
            return Ok(());
        }
        // Planned again within the target, as a window stated for the run.
        let tighter = KnownWindows::new().with(Window::new(target, WindowSource::Configured));
        let from = prepared.turns.len();
        if let Ok(again) = self.prepare(context, options, &tighter)
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
            let mut parts = prefix_parts(prepared, state, fixed);
            let from = parts.first_of(from);
            let rest = self.plan_rest(&parts, from, state, fixed, state.running.as_deref())?;
            self.emit(CompactionEvent::Replanned {
                steps: state.folded.steps.len() + rest.requests(),
                cause: format!(
                    "the window is smaller than planned, so {} more turns are summarized after the summary so far",
                    prepared.turns.len() - parts.turns_in(from..parts.len()).start
                ),
            });
            let mut material = Material {
                messages: &context.messages,
                parts: &mut parts,
                carried: false,
            };
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
            .plan_rest(&pieces.parts, 0, state, fixed, None)?
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

    /// Summarizes the parts of `material` from part `from` on, going on from the summary so
    /// far in `state`: each chunk of parts with the summary so far as `<previous-summary>`,
    /// oldest first. The plan is kept as made; a request the provider rejects as too large
    /// shrinks the limit (from the provider's numbers, else from what is known), always to a
    /// smaller input, and re-plans the parts not yet summarized, at most [`MAX_SHRINKS`] times
    /// in a fold (one more to fall back to what is known to fit); each plan change is
    /// announced once ([`CompactionEvent::Shrinking`]). A part larger than a smaller window's
    /// requests is cut again, smaller, rather than elided.
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
        // Where the parts were last cut again for a smaller window: once per step.
        let mut recut_at = None;
        while done < material.parts.len() {
            let chunk = plan.chunks[next].clone();
            if chunk.needs_elision()
                && recut_at != Some(done)
                && material.parts.recut(
                    done,
                    Some(PartSize::for_capacity(chunk.capacity)),
                    material.messages,
                )
            {
                // The window shrank below a part: its turn is cut smaller rather than elided,
                // unless the leads of smaller parts leave no room at all: then it is elided.
                recut_at = Some(done);
                let again = match self.plan_material(material, done, state, &sizes) {
                    Ok(again) => again,
                    Err(_) => {
                        material.parts.recut(done, None, material.messages);
                        self.plan_material(material, done, state, &sizes)?
                    }
                };
                if again.requests() != plan.requests() - next {
                    self.emit(CompactionEvent::Replanned {
                        steps: state.folded.steps.len() + again.requests() + state.later_steps,
                        cause: "a turn too large for the smaller window is cut smaller".to_owned(),
                    });
                }
                (plan, base, next) = (again, done, 0);
                continue;
            }
            let step = state.folded.steps.len() + 1;
            let steps = state.folded.steps.len() + plan.requests() - next + state.later_steps;
            let parts = chunk.turns.start + base..chunk.turns.end + base;
            let turns = material.parts.turns_in(parts.clone());
            let messages = material.parts.messages(parts.clone());
            let ledger = material.parts.started(parts.clone());
            let chunk_messages = &material.messages[messages.clone()];
            // The summary this request carries (the state moves on when it is answered).
            let carried_summary = state.running.clone();
            let running = carried_summary.as_deref();
            let ChunkPrompt {
                text: user_prompt,
                transcript_len,
                tokens: prompt_tokens,
                elisions,
            } = chunk_prompt(material, &chunk, parts.clone(), chunk_messages, running)?;
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
                ledger,
                input_tokens,
                max_output_tokens: output,
                elisions,
                rejected: rejected_here,
            };
            let failed = match answer {
                Ok(answer) => Ok(answer),
                Err(Failure::Overflow { error })
                    if state.shrinks < MAX_SHRINKS || state.may_fall_back(input_tokens) =>
                {
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
            done = parts.end;
            next += 1;
            rejected_here = 0;
            longer_here = 0;
            state.probe_higher();
            // The plan reserved room for a running summary of a whole output; when the
            // summary is shorter, the next request carries more of the transcript, and the
            // rest may fit in fewer requests (a change of count said once). Packed greedily
            // from a later start, the rest never takes more requests than planned.
            if done < material.parts.len() {
                let left = plan.requests() - next;
                let again = self.plan_material(material, done, state, &sizes)?;
                let planned = plan.chunks[next].turns.len();
                if again.requests() < left {
                    (plan, base, next) = (again, done, 0);
                    self.emit(CompactionEvent::Replanned {
                        steps: state.folded.steps.len() + plan.requests() + state.later_steps,
                        cause: "the summaries so far are shorter than planned".to_owned(),
                    });
                } else if again.requests() == left && again.chunks[0].turns.len() > planned {
                    (plan, base, next) = (again, done, 0);
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
        if let ProviderError::ContextOverflow {
            limit: Some(limit),
            input_tokens: counted,
            ..
        } = error
        {
            state.stated = Some(Stated::new(*limit).with_counts(*counted, input_tokens));
        } else {
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
        let least = least_limit(
            sizes.fixed + material.parts.allowance(),
            running.map_or(0, previous_tokens),
        );
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
        self.plan_rest(material.parts, done, state, sizes.fixed, running)
    }

    /// The fold of `parts` from part `done` on, with `previous` as the first request's summary,
    /// within the state's limit and output, for requests of `fixed` tokens besides (and the
    /// parts' lead and tail).
    pub(super) fn plan_rest(
        &self,
        parts: &Parts,
        done: usize,
        state: &FoldState,
        fixed: u64,
        previous: Option<&str>,
    ) -> Result<FoldPlan, CompactError> {
        let budget = state.budget(
            fixed + parts.allowance(),
            previous.map_or(0, previous_tokens),
        );
        fold(&parts.tokens[done..], &budget).map_err(CompactError::NoRoom)
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
