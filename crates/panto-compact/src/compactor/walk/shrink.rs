//! The walk's steps after a compaction request was refused as too large: what the refusal
//! taught (`Limits::refused`), the smaller limit (from the provider's numbers, what is known to
//! fit, or a guess, never below the least a fold can work in), the form of the requests within
//! it, and the parts left planned (cut again for the smaller requests when the window is found
//! only by refusals).

use panto_provider::ProviderError;

use super::{Request, Walk};
use crate::compactor::MAX_SHRINKS;
use crate::compactor::folding::Fold;
use crate::compactor::limits::{Overheads, least_limit, previous_tokens, shrink};
use crate::compactor::parts::PartSize;
use crate::error::CompactError;
use crate::events::CompactionEvent;
use crate::fold::{FoldPlan, output_floor};

impl Walk<'_> {
    /// After `request` was rejected as too large (`error`): the limit shrunk and the parts left
    /// planned again, so that the next request of this step carries less of the transcript;
    /// said (`Shrinking`).
    pub(super) fn shrink(
        &mut self,
        fold: &mut Fold<'_, '_>,
        request: &Request,
        error: &ProviderError,
    ) -> Result<(), CompactError> {
        self.rejected_here += 1;
        let (plan, smaller) = self.shrink_after(fold, request, error)?;
        self.replan(fold, plan, None);
        tracing::warn!(%error, step = request.step, limit = smaller, "compaction request overflowed, shrinking");
        let steps = self.steps(fold);
        fold.run.emit(CompactionEvent::Shrinking {
            step: request.step,
            limit: smaller,
            steps,
            cause: error.to_string(),
        });
        Ok(())
    }

    /// The limit shrunk after `request` was rejected (from the provider's numbers, else from
    /// what is known to fit, never below the least a fold can work in), the short prompt taken
    /// when the window is found below its threshold (unless the user layered their own), and
    /// the parts left planned within it, so that the next request carries less of the
    /// transcript than the one rejected. Gives the new plan and the new limit.
    fn shrink_after(
        &mut self,
        fold: &mut Fold<'_, '_>,
        request: &Request,
        error: &ProviderError,
    ) -> Result<(FoldPlan, u64), CompactError> {
        let input_tokens = request.input_tokens;
        let running = request.running.as_deref();
        let output = u64::from(request.output);
        let believed = fold.state.limits.refused(error, input_tokens, output);
        let carried = running.map_or(0, previous_tokens);
        let transcript_tokens = input_tokens.saturating_sub(self.sizes.fixed + carried);
        // What is known to fit matters only where the refusal stated no limit believed.
        let limits = &mut fold.state.limits;
        let known = (limits.proven > 0 && believed.is_none()).then(|| limits.fall_back());
        let guess = shrink(
            limits.limit,
            believed,
            input_tokens,
            output,
            transcript_tokens,
            known,
        );
        let form = self.take_form(fold, guess);
        let least = self.least_limit(form, carried);
        let sent = (input_tokens, output);
        let mut smaller = fold.state.limits.settle(guess, least, sent, believed);
        // The least limit of the parts as `fill` cuts them again, once, while the fold may
        // still try higher (`Limits::try_higher`): after its last shrink a plan at the least
        // would carry the rest a sliver a step (a window of 600 tokens: 20 steps of 64 tokens
        // of transcript, 24 requests for 13), where panto's record takes it.
        let mut raise = (fold.state.limits.shrinks <= MAX_SHRINKS).then_some(Least {
            form,
            carried,
            below: input_tokens,
        });
        loop {
            fold.state.limits.limit = Some(smaller);
            fold.state.limits.tried = false;
            let mut plan = self.plan_left(fold)?;
            if fold.state.limits.upper.is_some() {
                plan = self.fill(fold, plan, raise.take())?;
                smaller = fold.state.limits.limit.unwrap_or(smaller);
            }
            let first = &plan.chunks[0];
            let again = first.tokens.min(first.capacity);
            if again < request.carried_tokens {
                return Ok((plan, smaller));
            }
            smaller = smaller.saturating_sub(again - request.carried_tokens + 1);
        }
    }

    /// The form of the fold's requests within `limit` ([`Limits::form`]), its system prompt
    /// taken when shorter than the walk's (unless the user layered their own).
    fn take_form(&mut self, fold: &Fold<'_, '_>, limit: u64) -> Option<u64> {
        let instructions = fold.state.instructions.as_deref();
        let limits = &fold.state.limits;
        let form = limits.form(Some(limit));
        let shorter = fold
            .run
            .compactor
            .prompt
            .system_prompt_for(instructions, limits.prompt_form(Some(limit)));
        if shorter.len() < self.system.len() {
            self.system = shorter;
            self.sizes = Overheads::of(&self.system);
        }
        form
    }

    /// The least limit a request of the walk works in, for the `form` and a summary carried
    /// of `carried` tokens ([`least_limit`]).
    fn least_limit(&self, form: Option<u64>, carried: u64) -> u64 {
        least_limit(
            self.sizes.fixed + self.material.parts.allowance(),
            carried,
            output_floor(form),
        )
    }

    /// `plan`, made after a shrink below a window found only by refusals, with the parts left
    /// cut again for its requests (parts an eighth of the smallest request's capacity, where
    /// their turns allow; of the next request's when the leads of parts that small leave no
    /// room), so that its chunks fill the smaller requests: parts cut for a larger window
    /// leave a request a part that does not fit beside the one before, and the fold a step
    /// that carries a fraction of what it could (13 tokens of transcript beside a whole tool
    /// result, when the cut for the smallest was undone). The plan again of those parts.
    ///
    /// A cut measures its leads again, and they may take a few tokens more than the least
    /// limit was set for: then, given `raise`, the limit goes up to the least of the parts as
    /// cut ([`Walk::plan_cut`]) rather than back to whole turns, which left the first request
    /// 13 tokens of transcript where a tool loop carries thinking (a window of 1,100 tokens
    /// that states no limit, 11 requests for the 10).
    fn fill(
        &mut self,
        fold: &mut Fold<'_, '_>,
        plan: FoldPlan,
        raise: Option<Least>,
    ) -> Result<FoldPlan, CompactError> {
        let least = plan.chunks.iter().map(|c| c.capacity).min().unwrap_or(0);
        let first = plan.chunks.first().map_or(0, |c| c.capacity);
        let messages = self.material.messages;
        let size = PartSize::for_capacity(least);
        if !self.material.parts.recut(self.done, Some(size), messages) {
            return Ok(plan);
        }
        if let Ok(plan) = self.plan_cut(fold, raise.as_ref()) {
            return Ok(plan);
        }
        // The leads of parts that small leave no room: parts for the next request (the
        // first chunk, which carries no summary yet, or the summary so far), then whole again
        // (as `Walk::recut`).
        if first > least {
            let size = PartSize::for_capacity(first);
            self.material.parts.recut(self.done, Some(size), messages);
            if let Ok(plan) = self.plan_cut(fold, raise.as_ref()) {
                return Ok(plan);
            }
        }
        self.material.parts.recut(self.done, None, messages);
        self.plan_left(fold)
    }

    /// The plan of the parts left as now cut; when it finds no room, and the limit is below
    /// the least limit of these parts (`raise`: for its form and summary carried) that stays
    /// below the refused input, the plan at that least instead (the limit raised to it, as
    /// [`Limits::settle`](crate::compactor::state::Limits::settle) never goes below the least).
    fn plan_cut(
        &self,
        fold: &mut Fold<'_, '_>,
        raise: Option<&Least>,
    ) -> Result<FoldPlan, CompactError> {
        let plan = self.plan_left(fold);
        let Some(raise) = raise.filter(|_| plan.is_err()) else {
            return plan;
        };
        let least = self.least_limit(raise.form, raise.carried);
        let limit = fold.state.limits.limit;
        if limit.is_some_and(|l| l < least) && least < raise.below {
            fold.state.limits.limit = Some(least);
            let raised = self.plan_left(fold);
            if raised.is_ok() {
                return raised;
            }
            fold.state.limits.limit = limit;
        }
        plan
    }
}

/// What [`Walk::fill`] may raise the limit to: the least limit of the parts as cut again, for
/// the requests' `form` and a summary carried of `carried` tokens, while it stays `below` the
/// refused input.
struct Least {
    form: Option<u64>,
    carried: u64,
    below: u64,
}
