//! One pass of a fold (`Walk`): the parts of some material (whole turns, or the pieces of a
//! turn too large to share a request, `parts.rs`), oldest first, in requests that each carry
//! the summary so far, from where the pass starts to the end of the material.
//!
//! A walk is a value with small steps: cut a part again for a smaller window, make the next
//! request, take its answer (or shrink after a rejection, or ask again with more output), and
//! move on. Every change of plan goes through one path (`Walk::replan`: plan the parts left
//! from where the walk stands, and adopt that plan), and the count of steps shown is computed
//! in one place (`Walk::steps`).

use std::ops::Range;

use panto_transcript::Elision;

use super::ask::{Answer, Failure};
use super::chunk::{ChunkPrompt, Prompt, chunk_prompt};
use super::folding::Fold;
use super::limits::{Overheads, previous_tokens};
use super::parts::{Material, PartSize};
use super::step::Sent;
use super::{MAX_LONGER, MAX_SHRINKS};
use crate::check::Replaced;
use crate::error::CompactError;
use crate::events::CompactionEvent;
use crate::fold::{Chunk, FoldPlan, pack};
use crate::source::RequestSource;

mod shrink;

/// One pass of a fold over `material`, from part `done` on.
pub(super) struct Walk<'m> {
    material: Material<'m>,
    /// The system prompt of its requests (the short form once the window is found small).
    system: String,
    /// What a request costs besides its prompt, for that system prompt.
    sizes: Overheads,
    /// The plan of the parts from `base` on; `next` is its chunk to send.
    plan: FoldPlan,
    base: usize,
    next: usize,
    /// The parts summarized so far.
    done: usize,
    /// Requests of this step rejected as too large, and asked again with more output.
    rejected_here: usize,
    longer_here: usize,
    /// Where the parts were last cut again for a smaller window: once per step.
    recut_at: Option<usize>,
}

/// What comes after an attempt at a step.
enum Then {
    /// The step is done: on to the next.
    Next,
    /// The step is asked again, on a new plan.
    Again,
}

/// One request of the walk, as made: what it covers and what its answer is checked against.
struct Request {
    step: usize,
    steps: usize,
    /// Whether it is the fold's last.
    last: bool,
    /// The turns it holds a part of, their messages, and the messages it derives the ledger of
    /// ([`Sent`]).
    turns: Range<usize>,
    messages: Range<usize>,
    ledger: Range<usize>,
    /// The summary it carries.
    running: Option<String>,
    /// What its answer must not merely copy.
    last_message: String,
    transcript_len: usize,
    /// The bytes of its user prompt.
    prompt_len: usize,
    input_tokens: u64,
    output: u32,
    elisions: Vec<Elision>,
    /// The transcript tokens it carries.
    carried_tokens: u64,
    /// Where the messages of the turns it completes end ([`Sent::whole_until`]).
    whole_until: usize,
}

impl Request {
    /// Says that the request goes out: the item bodies elided in it (`Elided`), and the step
    /// (`Step`).
    fn announce(&self, fold: &mut Fold<'_, '_>) {
        let step = self.step;
        if !self.elisions.is_empty() {
            fold.run.emit(CompactionEvent::Elided {
                step,
                items: self.elisions.len(),
                bytes: self.elisions.iter().map(|e| e.omitted() as u64).sum(),
            });
        }
        fold.run.emit(CompactionEvent::Step {
            step,
            steps: self.steps,
            turns: self.turns.len(),
            input_tokens: self.input_tokens,
            max_output_tokens: self.output,
        });
    }
}

impl<'m> Walk<'m> {
    /// A walk of `material` from part `from` on, with requests of `system`, planned now.
    ///
    /// # Errors
    /// [`CompactError::NoRoom`] when no request fits the window.
    pub(super) fn start(
        fold: &Fold<'_, '_>,
        material: Material<'m>,
        system: String,
        from: usize,
    ) -> Result<Walk<'m>, CompactError> {
        let sizes = Overheads::of(&system);
        let running = fold.state.so_far.running.as_deref();
        let plan = fold.plan(material.parts, from, sizes.fixed, running)?;
        Ok(Walk {
            material,
            system,
            sizes,
            plan,
            base: from,
            next: 0,
            done: from,
            rejected_here: 0,
            longer_here: 0,
            recut_at: None,
        })
    }

    /// Summarizes the parts to the end, each chunk of the plan with the summary so far as
    /// `<previous-summary>`, oldest first. The plan is kept as made; a request the provider
    /// rejects as too large shrinks the limit and plans the parts left again, at most
    /// [`MAX_SHRINKS`] times in a fold (one more to fall back to what is known to fit, two
    /// when that fall back found the floor smaller, [`super::state::Limits::fall_back`]); a part
    /// larger than a smaller window's requests is cut again, smaller, rather than elided. Gives
    /// the system prompt the walk ended with.
    ///
    /// # Errors
    /// When a step got no summary and cannot go on from panto's record of it.
    pub(super) async fn run(mut self, fold: &mut Fold<'_, '_>) -> Result<String, CompactError> {
        while self.done < self.material.parts.len() {
            let chunk = self.plan.chunks[self.next].clone();
            if self.recut(fold, &chunk)? {
                continue;
            }
            let (prompt, request) = self.request(fold, &chunk)?;
            let answer = self.ask(fold, prompt, &request).await;
            match self.answered(fold, request, answer)? {
                Then::Again => {}
                Then::Next => self.next_step(fold)?,
            }
        }
        Ok(self.system)
    }

    /// The steps of the fold, as shown: those done, those the plan has left, and those planned
    /// for the material after this one.
    fn steps(&self, fold: &Fold<'_, '_>) -> usize {
        fold.state.so_far.folded.steps.len() + self.plan.requests() - self.next
            + fold.state.later_steps
    }

    /// The one way the plan changes: the parts left planned again from where the walk stands
    /// (with the fold's limit and outputs as they are now).
    fn plan_left(&self, fold: &Fold<'_, '_>) -> Result<FoldPlan, CompactError> {
        let running = fold.state.so_far.running.as_deref();
        fold.plan(self.material.parts, self.done, self.sizes.fixed, running)
    }

    /// Adopts `plan`, made from where the walk stands ([`Walk::plan_left`]), and says so when
    /// `cause` is given.
    fn replan(&mut self, fold: &mut Fold<'_, '_>, plan: FoldPlan, cause: Option<String>) {
        (self.plan, self.base, self.next) = (plan, self.done, 0);
        if let Some(cause) = cause {
            let steps = self.steps(fold);
            fold.run.emit(CompactionEvent::Replanned { steps, cause });
        }
    }

    /// When the window shrank below the part `chunk` starts with (it would be elided), its
    /// turn cut again, smaller (once per step; whole again when the leads of smaller parts
    /// leave no room), and the parts left planned again. Whether it was.
    fn recut(&mut self, fold: &mut Fold<'_, '_>, chunk: &Chunk) -> Result<bool, CompactError> {
        let size = PartSize::for_capacity(chunk.capacity);
        let messages = self.material.messages;
        if !chunk.needs_elision()
            || self.recut_at == Some(self.done)
            || !self.material.parts.recut(self.done, Some(size), messages)
        {
            return Ok(false);
        }
        self.recut_at = Some(self.done);
        let again = match self.plan_left(fold) {
            Ok(again) => again,
            Err(_) => {
                self.material.parts.recut(self.done, None, messages);
                self.plan_left(fold)?
            }
        };
        let changed = again.requests() != self.plan.requests() - self.next;
        let cause = "a turn too large for the smaller window is cut smaller".to_owned();
        self.replan(fold, again, changed.then_some(cause));
        Ok(true)
    }

    /// The request for `chunk`: its user prompt, and what it covers; said (`Elided`, `Step`).
    fn request(
        &mut self,
        fold: &mut Fold<'_, '_>,
        chunk: &Chunk,
    ) -> Result<(Prompt, Request), CompactError> {
        let step = fold.state.so_far.folded.steps.len() + 1;
        let steps = self.steps(fold);
        let parts = chunk.turns.start + self.base..chunk.turns.end + self.base;
        let all = &*self.material.parts;
        let (turns, messages) = (all.turns_in(parts.clone()), all.messages(parts.clone()));
        let ledger = all.started(parts.clone());
        let whole_until = all.whole_until(parts.end);
        let all_messages = self.material.messages;
        let chunk_messages = &all_messages[messages.clone()];
        // The summary this request carries (the state moves on when it is answered).
        let running = fold.state.so_far.running.clone();
        let ChunkPrompt {
            text,
            len: prompt_len,
            transcript_len,
            tokens,
            elisions,
            last_body,
        } = chunk_prompt(
            &mut self.material,
            chunk,
            parts.clone(),
            chunk_messages,
            running.as_deref(),
        )?;
        // A piece of a summary is condensed, and condensing it reuses its lines: that is not
        // an echo.
        let extractive = fold.run.compactor.config.extractive_summaries;
        let last_message = if extractive || self.material.carried {
            String::new()
        } else {
            last_body
        };
        // The prompt is sized from the parts' sizes (an elided one, new text, is sized here).
        let input_tokens = self.sizes.base_tokens + tokens;
        let last = self.next + 1 == self.plan.requests() && fold.state.later_steps == 0;
        let output = fold.state.output_for(&self.plan, last, input_tokens);
        let request = Request {
            step,
            steps,
            last,
            turns,
            messages,
            ledger,
            running,
            last_message,
            transcript_len,
            prompt_len,
            input_tokens,
            output,
            elisions,
            carried_tokens: chunk.tokens.min(chunk.capacity),
            whole_until,
        };
        request.announce(fold);
        Ok((text, request))
    }

    /// Asks the models for the summary of `request` (its user prompt `prompt`).
    async fn ask(
        &self,
        fold: &mut Fold<'_, '_>,
        prompt: Prompt,
        request: &Request,
    ) -> Result<Answer, Failure> {
        let running = request.running.as_deref();
        // A summarizer that quotes by design is held to no echo check, and carries the
        // previous summary whole: it is not held to the copy-through check either.
        let extractive = fold.run.compactor.config.extractive_summaries;
        let replaced = Replaced {
            system: if extractive { "" } else { &self.system },
            last_message: &request.last_message,
            previous: if extractive {
                ""
            } else {
                running.unwrap_or("")
            },
            chars: request.transcript_len + running.map_or(0, str::len),
        };
        let source = RequestSource {
            messages: &self.material.messages[request.messages.clone()],
            previous_summary: running,
            prompt_len: request.prompt_len,
        };
        let sizes = (request.input_tokens, request.output);
        fold.ask(&self.system, prompt, sizes, &replaced, source)
            .await
    }

    /// What comes of `answer` to `request`: the step taken (the model's summary, or panto's
    /// record of its turns), or asked again (smaller after a rejection, with more output after
    /// a summary cut at its limit).
    ///
    /// # Errors
    /// When the step got no summary and cannot go on.
    fn answered(
        &mut self,
        fold: &mut Fold<'_, '_>,
        request: Request,
        answer: Result<Answer, Failure>,
    ) -> Result<Then, CompactError> {
        let limits = &fold.state.limits;
        let error = match answer {
            Ok(answer) => {
                let sent = self.sent(request);
                fold.state.take(answer, sent, &self.material);
                return Ok(Then::Next);
            }
            Err(Failure::Overflow { error })
                if limits.shrinks < MAX_SHRINKS || limits.may_fall_back(request.input_tokens) =>
            {
                self.shrink(fold, &request, &error)?;
                return Ok(Then::Again);
            }
            Err(Failure::Overflow { error }) => {
                return Err(CompactError::FoldOverflow {
                    step: request.step,
                    steps: request.steps,
                    shrinks: limits.shrinks,
                    estimated_tokens: request.input_tokens,
                    // The window lies below the request refused, whatever the fold planned in
                    // (the least limit of a request carrying a summary may be above it).
                    limit: (limits.limit)
                        .map(|l| l.min(request.input_tokens + u64::from(request.output) - 1)),
                    error,
                });
            }
            Err(Failure::Truncated { error }) if self.longer_here < MAX_LONGER => {
                if self.longer(fold, &request) {
                    return Ok(Then::Again);
                }
                error
            }
            Err(Failure::Truncated { error } | Failure::Other(error)) => error,
        };
        self.without_summary(fold, request, error)
    }

    /// `request` as it was sent, for the step's record.
    fn sent(&self, request: Request) -> Sent {
        Sent {
            turns: request.turns,
            messages: request.messages,
            ledger: request.ledger,
            input_tokens: request.input_tokens,
            max_output_tokens: request.output,
            elisions: request.elisions,
            rejected: self.rejected_here,
            whole_until: request.whole_until,
        }
    }

    /// A step whose models answered and no answer passed: panto's record of its turns goes on
    /// after the summary so far, and the model is asked for the rest. So when steps follow, or
    /// when a model's summary came before (the last step: the model's account of the turns
    /// before it is kept, never thrown away for panto's record of everything). A fold no
    /// model's summary passed at all fails.
    fn without_summary(
        &mut self,
        fold: &mut Fold<'_, '_>,
        request: Request,
        error: CompactError,
    ) -> Result<Then, CompactError> {
        let used = fold.state.so_far.folded.used.is_some();
        if !error.is_rejected_answer() || self.material.carried || (request.last && !used) {
            return Err(error);
        }
        let (step, steps, last) = (request.step, request.steps, request.last);
        // The compaction's error names both models once both failed in the fold; this step
        // asked only the active model when the compaction model had failed before.
        let cause = match &error {
            CompactError::BothModelsFailed {
                active_model,
                second,
                ..
            } if !fold.state.asked.compaction_model_asked => CompactError::Compaction {
                model: active_model.clone(),
                cause: (**second).clone(),
            }
            .to_string(),
            _ => error.to_string(),
        };
        tracing::warn!(step, %cause, "no model's summary of this step passed, going on from panto's record of its turns");
        fold.run.emit(CompactionEvent::StepRecorded {
            step,
            steps,
            cause: cause.clone(),
        });
        let sent = self.sent(request);
        let at = (step, self.sizes.fixed, last);
        fold.state.record(sent, &self.material, at, &cause);
        Ok(Then::Next)
    }

    /// After the model's summary of `request` stopped at its output limit: the same step asked
    /// again with twice the output (up to the configured output limit), the chunks smaller
    /// where the window needs the room, while the overflow's requests stay within their bound.
    /// The request is not one sent before: its output limit is larger. Whether it is.
    fn longer(&mut self, fold: &mut Fold<'_, '_>, request: &Request) -> bool {
        let output = u64::from(request.output);
        let more = (output * 2).min(fold.run.longest_output(&fold.state));
        let before = fold.state.output.min;
        fold.state.output.min = more;
        let again = self
            .plan_left(fold)
            .ok()
            .filter(|again| more > output && again.output >= more)
            .filter(|again| fold.state.within_bound(again.requests()));
        let Some(again) = again else {
            fold.state.output.min = before;
            return false;
        };
        self.longer_here += 1;
        let step = request.step;
        tracing::warn!(
            step,
            output,
            more,
            "the summary stopped at the output limit, asking again with more output"
        );
        let cause = format!(
            "the summary of step {step} stopped at the output limit of {output} tokens: asking again with {more}"
        );
        self.replan(fold, again, Some(cause));
        true
    }

    /// On to the next step: the fold may try a higher limit, and the plan reserved room for a
    /// running summary of a whole output, so when the summary is shorter the next request
    /// carries more of the transcript and the rest may fit in fewer requests (a change of count
    /// said once). Packed greedily from a later start, the rest never takes more requests than
    /// planned while the summary keeps within that room; panto's record of a step is bounded by
    /// no output, and when the summary carried leaves the next chunk no room the rest is
    /// planned again, in more requests if it must (each then fits).
    fn next_step(&mut self, fold: &mut Fold<'_, '_>) -> Result<(), CompactError> {
        let chunk = &self.plan.chunks[self.next];
        self.done = chunk.turns.end + self.base;
        self.next += 1;
        self.rejected_here = 0;
        self.longer_here = 0;
        let parts = self.material.parts.len();
        let carried = fold
            .state
            .so_far
            .running
            .as_deref()
            .map_or(0, previous_tokens);
        self.weigh_try(fold, carried);
        if self.done >= parts {
            return Ok(());
        }
        let left = self.plan.requests() - self.next;
        let again = self.plan_left(fold)?;
        let next = &self.plan.chunks[self.next];
        let planned = next.turns.len();
        // The plan kept its reserve for the summary carried; panto's record of steps no
        // model's summary passed is not bounded by an output, and may outgrow it: the next
        // chunk would then not fit beside it (a request known too large, refused).
        let over = carried.saturating_sub(self.plan.reserve);
        if again.requests() < left {
            let cause = "the summaries so far are shorter than planned".to_owned();
            self.replan(fold, again, Some(cause));
        } else if next.tokens.min(next.capacity) + over > next.capacity {
            let cause = "the summary so far is longer than planned".to_owned();
            self.replan(fold, again, Some(cause));
        } else if again.requests() == left && again.chunks[0].turns.len() > planned {
            self.replan(fold, again, None);
        }
        Ok(())
    }

    /// Takes the fold's try above its limit ([`Limits::try_higher`]) when it is a tenth
    /// higher, or when it saves a request over the steps left, and never when staying keeps
    /// the overflow's bound that a refused try would break ([`FoldState::stays_within_bound`]).
    /// `carried` is the summary the next request carries.
    ///
    /// [`Limits::try_higher`]: super::state::Limits::try_higher
    /// [`FoldState::stays_within_bound`]: super::state::FoldState::stays_within_bound
    fn weigh_try(&self, fold: &mut Fold<'_, '_>, carried: u64) {
        let Some(at) = fold.state.limits.try_higher() else {
            return;
        };
        let parts = self.material.parts.len();
        let left = self.material.parts.tenths(self.done.min(parts)..parts) / 10;
        let fixed = self.sizes.fixed + carried;
        // Whether the try saves a request over the steps left at the limit (both with the
        // output floor), even if each of its requests carries a tenth less than it leaves
        // room for (the summary carried grows, parts do not fill a request exactly). At the
        // limit the parts left are also packed whole, each request carrying what the next one
        // can beside the summary so far: the room alone misses the request a sliver left over
        // takes (972 tokens and then 37 in a room of 1,003, one request by the room).
        // (A try is open only where the window is found by refusals.)
        let packed_now = (self.done < parts)
            .then(|| self.plan_left(fold).ok())
            .flatten()
            .map_or(0, |p| {
                let capacity = p.chunks[0].capacity;
                pack(&self.material.parts.tokens[self.done..], |_| capacity).len() as u64
            });
        let room = |limit: u64| limit.saturating_sub(fixed + at.floor).max(1);
        let requests = |room: u64| left.div_ceil(room.max(1));
        let at_now = requests(room(at.limit)).max(packed_now);
        let saves = requests(room(at.probe) - room(at.probe) / 10) < at_now;
        if (at.probe > at.limit + at.limit / 10 || saves)
            && !fold.state.stays_within_bound(&at, at_now)
        {
            fold.state.limits.take_try(&at);
        }
    }
}
