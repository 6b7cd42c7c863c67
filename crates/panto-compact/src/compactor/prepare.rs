//! The plan and rendering of a compaction ([`Compactor::prepare`]): the kept suffix within the
//! budget the window allows, the system prompt, and the transcript of the summarized prefix,
//! rendered once, turn by turn, and sized.

use std::borrow::Cow;
use std::ops::Range;

use panto_model::{CompactionEntry, EffectiveContext, Message, Trigger};
use panto_size::Heuristic;
use panto_transcript::{TurnTranscript, render_request_turns, strip_ledger, turn_ends_with};

use super::state::FLOOR_TINY_BELOW;
use super::{Compactor, Prepared, kept_tokens};
use crate::config::CompactRun;
use crate::plan::{NothingToCompact, keep_budget, manual_keep_budget, plan_and_turns};
use crate::prompt::form_limit;
use crate::window::KnownWindows;

impl Compactor {
    /// Plans a compaction of `context`, builds its system prompt and sizes the transcript of
    /// the summarized prefix turn by turn, without asking any model and without keeping the
    /// transcript: each turn is rendered and sized in one buffer, and a fold renders what each
    /// request sends when it sends it ([`Compactor::prepare_request`] keeps it).
    ///
    /// `windows` is what is known of the window before the run (the run's overflow is learned
    /// on a copy, [`CompactRun::teach`]). The budget is `keep_tokens` (the run's own,
    /// [`CompactRun::keep_tokens`], when given), capped at a quarter of the limit the requests
    /// must fit ([`KnownWindows::limit`]) when one is known. A manual compaction without a
    /// budget of its own keeps at most half of the conversation ([`manual_keep_budget`]), so
    /// that it always summarizes something.
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
        self.prepare_with(context, options, windows, false)
            .map(|(prepared, _)| prepared)
    }

    /// [`Compactor::prepare`], and the user prompt of the compaction in one request (the
    /// previous summary and the whole prefix's transcript), rendered as the turns are sized,
    /// in one buffer: what `panto transcript` prints.
    ///
    /// # Errors
    /// [`NothingToCompact`] when nothing lies before the kept suffix.
    pub fn prepare_request(
        &self,
        context: &EffectiveContext,
        options: &CompactRun,
        windows: &KnownWindows,
    ) -> Result<(Prepared, String), NothingToCompact> {
        let (prepared, transcript) = self.prepare_with(context, options, windows, true)?;
        let transcript = transcript.unwrap_or_default();
        let prompt = transcript.into_request(0, prepared.previous_summary.as_deref());
        Ok((prepared, prompt))
    }

    /// [`Compactor::prepare`], with the transcript rendered whole and kept when `keep`.
    fn prepare_with(
        &self,
        context: &EffectiveContext,
        options: &CompactRun,
        windows: &KnownWindows,
        keep: bool,
    ) -> Result<(Prepared, Option<TurnTranscript>), NothingToCompact> {
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
        let budget = self.budget(context, options, &windows, &sizes);
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
        // The short built-in form when the window is small (and the user layered no prompt),
        // the tiny one when it is tiny as stated, or as estimated when none is stated.
        let form = form_limit(limit, windows.form_window(FLOOR_TINY_BELOW));
        let system = self.prompt.system_prompt_for(options.instructions(), form);
        let prefix = &context.messages[p.prefix()];
        // The plan's first turns are the prefix's (see `plan_and_turns`).
        all_turns.truncate(p.summarized_turns);
        let prefix_turns = all_turns;
        // A clearing made when no summary was active carries only a note, which is no summary.
        let previous_summary = (context.compaction.as_ref())
            .and_then(CompactionEntry::summary_text)
            .map(strip_ledger);
        let (transcript, turn_ends, turn_tenths) =
            render(prefix, &prefix_turns, previous_summary, keep);
        let kept_tokens = kept_tokens(context, &p);
        let summary_room = limit.map(|l| {
            l.saturating_sub(options.reserved_within(l, &windows))
                .saturating_sub(kept_tokens)
        });
        let turn_tokens = turn_tenths.iter().map(|t| t.div_ceil(10)).collect();
        let turns = prefix_turns
            .into_iter()
            .map(|t| t.start + p.head..t.end + p.head)
            .collect();
        let prepared = Prepared {
            tokens_before,
            plan: p,
            system,
            turn_ends,
            turns,
            turn_tokens,
            turn_tenths,
            previous_summary: previous_summary.map(str::to_owned),
            limit,
            summary_room,
            kept_tokens,
        };
        Ok((prepared, transcript))
    }

    /// The keep-verbatim budget of `options` over `context` (of message `sizes`), within what
    /// `windows` (which learned the run's overflow) says of the window.
    fn budget(
        &self,
        context: &EffectiveContext,
        options: &CompactRun,
        windows: &KnownWindows,
        sizes: &[u64],
    ) -> u64 {
        let limit = windows.limit();
        let keep = options.keep_tokens.unwrap_or(self.config.keep_tokens);
        let mut budget = keep_budget(keep, limit).max(options.verbatim_budget.unwrap_or(0));
        if options.trigger == Trigger::Manual && options.keep_tokens.is_none() {
            let head = usize::from(context.compaction.is_some()).min(sizes.len());
            let conversation = sizes[head..].iter().fold(0u64, |t, &s| t.saturating_add(s));
            budget = manual_keep_budget(budget, conversation);
        }
        if options.known_limit(windows).is_none()
            && let Some(bound) = limit
        {
            // Only a bound is known (the request that overflowed): the window may be far
            // below it, so keep a tenth of it, which a window down to a fifth of the bound
            // still holds beside an in-flight turn of the other half.
            budget = budget.min(bound / 10);
        }
        budget
    }
}

/// The end of each turn's part of the transcript of the prefix `messages`, turn by turn
/// (`turns`), and each turn's size in tenths of a token; with the transcript itself when
/// `keep`, rendered after the request's head (with the `previous` summary), so that the
/// request of the whole prefix is built where the transcript lies (`into_request`).
fn render(
    messages: &[Message],
    turns: &[Range<usize>],
    previous: Option<&str>,
    keep: bool,
) -> (Option<TurnTranscript>, Vec<usize>, Vec<u64>) {
    let mut tenths = Vec::with_capacity(turns.len());
    let size = |turn: &str| tenths.push(Heuristic.text_tenths(turn));
    if keep {
        let transcript = render_request_turns(messages, turns, previous, size);
        let ends = transcript.ends().to_vec();
        (Some(transcript), ends, tenths)
    } else {
        let ends = turn_ends_with(messages, turns, size);
        (None, ends, tenths)
    }
}
