//! What a compaction writes: the summary with the ledger rendered after it, within what the
//! request after the compaction leaves; the entry and the kept copies marked `kept_by`; and,
//! when no model could summarize, panto's own record in their place.

use panto_model::{
    CLEARING, COPIES_MARKED, CompactionEntry, Entry, Extra, IdKind, KEPT_BY, Message, NO_SUMMARY,
    STRATEGY, replay,
};
use panto_size::Heuristic;
use panto_store::{SessionLog, Store, StoreError};
use panto_transcript::{Ledger, strip_ledger, transcript_items};
use serde_json::{Value, json};

use super::clear::{CLEARING_NOTE, Cleared};
use super::run::Run;
use super::state::{FoldState, Folded, SoFar, Taught};
use super::{Prepared, kept_estimate};
use crate::config::{CompactionStrategy, min_known};
use crate::error::CompactError;
use crate::events::CompactionEvent;
use crate::ledger::{LEDGER_FIELD, previous_ledger, with_ledger, with_recall_note};
use crate::plan::{NotSmaller, Plan};
use crate::record::{RECORD_ONLY_MODEL, head_within, record_only_text, step_record_text};
use crate::report::{ClearedItem, CompactOutcome, Compacted, CompactionReport, FoldStep};

impl Run<'_> {
    /// The summary of the fold with the ledger rendered after it, within what the request
    /// after the compaction leaves (its limit less what it holds besides the summary: the
    /// agent's system prompt, tools and reply, and the kept turns), and never more than the
    /// rendering's natural size ([`ledger_budget`]).
    pub(super) fn finish(&self, prepared: &Prepared, state: FoldState) -> Folded {
        let retry_limit = self.retry_target(prepared, &state);
        let SoFar {
            running,
            ledger,
            mut folded,
            natural_ledger_chars,
            ..
        } = state.so_far;
        folded.failures = state.asked.failures;
        let text = running.unwrap_or_default();
        let budget =
            self.rendering_budget(prepared, retry_limit, &text, &ledger, natural_ledger_chars);
        folded.summary = with_ledger(&text, &ledger, budget);
        folded.ledger = ledger;
        folded
    }

    /// The characters of the ledger's rendering after `text`: at most `natural`, and, when the
    /// retry's limit is known, what leaves the retry within it (found by measuring the
    /// rendering, a few times at most).
    fn rendering_budget(
        &self,
        prepared: &Prepared,
        limit: Option<u64>,
        text: &str,
        ledger: &Ledger,
        natural: usize,
    ) -> usize {
        let Some(limit) = limit else {
            return natural;
        };
        let used = kept_estimate(prepared, text)
            + self.options.reserved_within(limit)
            // A blank line between the summary and the rendering, and a margin for rounding.
            + 16;
        let target = limit.saturating_sub(used);
        let mut chars =
            natural.min(usize::try_from(target.saturating_mul(4)).unwrap_or(usize::MAX));
        for _ in 0..6 {
            let tokens = Heuristic.text(&ledger.render_within(chars));
            if tokens <= target || chars == 0 {
                break;
            }
            let scaled =
                u128::from(chars as u64) * u128::from(target) * 9 / (10 * u128::from(tokens));
            chars = usize::try_from(scaled).unwrap_or(0);
        }
        chars
    }

    /// Builds the append: the compaction entry, then the kept copies marked `kept_by`.
    pub(super) fn build(&mut self, prepared: Prepared, mut folded: Folded) -> Compacted {
        let options = self.options;
        let compactor = &*self.compactor;
        folded.summary = with_recall_note(&folded.summary, compactor.config.recall_tool);
        let used = folded.used.clone();
        let used = used.unwrap_or_else(|| compactor.active.clone());
        let (model, provider) = match &folded.degraded {
            Some(_) => (RECORD_ONLY_MODEL.to_owned(), "panto".to_owned()),
            None => (used.model.clone(), used.provider.name().to_owned()),
        };
        let id = compactor.ids.next_id(IdKind::Compaction);
        let copies = self.copies(&prepared, &id);
        let tokens_after = self.tokens_after(&prepared, &folded.summary, &copies);
        let extra = entry_extra(&prepared.plan, &folded, &provider, copies.len());
        let instructions = options.instructions().map(str::to_owned);
        let mut entry = CompactionEntry::new(folded.summary.clone())
            .with_id(id.clone())
            .with_trigger(options.trigger.clone())
            .with_model(model.clone())
            .with_tokens(prepared.tokens_before, tokens_after)
            .with_kept_messages(copies.len() as u64)
            .with_extra(extra);
        entry.instructions.clone_from(&instructions);
        let mut entries = Vec::with_capacity(copies.len() + 1);
        entries.push(Entry::Compaction(entry));
        entries.extend(copies.into_iter().map(Entry::Message));
        let new_context = replay(entries.iter().cloned());
        let Folded {
            summary,
            fallback_cause,
            steps,
            requests,
            elided,
            degraded,
            failures,
            usage,
            ..
        } = folded;
        Compacted {
            entries,
            context: new_context,
            report: CompactionReport {
                id,
                summary,
                trigger: options.trigger.clone(),
                model,
                provider,
                fallback: fallback_cause.is_some(),
                fallback_cause,
                instructions,
                truncated: false,
                tokens_before: prepared.tokens_before,
                tokens_after,
                plan: prepared.plan,
                steps,
                requests,
                elided,
                degraded,
                failed_attempts: failures,
                native: None,
                usage,
                strategy: CompactionStrategy::Summary,
                cleared: Vec::new(),
                rebased: 0,
            },
        }
    }

    /// Builds a clearing's append (`clear.rs`): the entry `id`, carrying the active summary
    /// unchanged (or, with none, [`CLEARING_NOTE`] and `no_summary`), with the ledger of the
    /// cleared originals merged over the active one, then a copy of every message of the
    /// conversation as `cleared` made it, marked `kept_by`.
    pub(super) fn build_clearing(
        &mut self,
        prepared: &Prepared,
        id: String,
        cleared: Cleared,
    ) -> Compacted {
        let context = self.context;
        let carried = context
            .compaction
            .as_ref()
            .and_then(CompactionEntry::summary_text)
            .map(str::to_owned);
        let summary = carried.clone().unwrap_or_else(|| CLEARING_NOTE.to_owned());
        let ids = &self.compactor.ids;
        let copies: Vec<Message> = cleared
            .messages
            .into_iter()
            .map(|mut m| {
                m.id = Some(ids.next_id(IdKind::Message).into());
                m.extra.insert(KEPT_BY.to_owned(), Value::from(id.as_str()));
                m
            })
            .collect();
        let mut after = Vec::with_capacity(copies.len() + 1);
        after.push(Message::compaction(summary.as_str()));
        after.extend(copies.iter().cloned());
        let tokens_after = self
            .compactor
            .message_sizes(&after)
            .iter()
            .fold(0u64, |t, &s| t.saturating_add(s));
        let ledger = Ledger::merge(
            &previous_ledger(context),
            &Ledger::from_messages(&cleared.originals),
        );
        let mut extra = Extra::new();
        if !copies.is_empty() {
            extra.insert(COPIES_MARKED.into(), true.into());
        }
        extra.insert(STRATEGY.into(), CLEARING.into());
        extra.insert("provider".into(), CLEARING_MODEL.into());
        if carried.is_none() {
            extra.insert(NO_SUMMARY.into(), true.into());
        }
        extra.insert("keep_tokens".into(), prepared.plan.budget.into());
        extra.insert(CLEARED_FIELD.into(), cleared_json(&cleared.items));
        if !ledger.is_empty() {
            extra.insert(LEDGER_FIELD.into(), ledger.to_json());
        }
        let trigger = self.options.trigger.clone();
        let entry = CompactionEntry::new(summary.as_str())
            .with_id(id.as_str())
            .with_trigger(trigger.clone())
            .with_model(CLEARING_MODEL)
            .with_tokens(prepared.tokens_before, tokens_after)
            .with_kept_messages(copies.len() as u64)
            .with_extra(extra);
        let mut entries = Vec::with_capacity(copies.len() + 1);
        entries.push(Entry::Compaction(entry));
        entries.extend(copies.into_iter().map(Entry::Message));
        let context = replay(entries.iter().cloned());
        let mut report = CompactionReport::new(
            id,
            summary,
            trigger,
            CLEARING_MODEL,
            CLEARING_MODEL,
            prepared.plan.clone(),
        )
        .with_tokens(prepared.tokens_before, tokens_after);
        report.requests = 0;
        report.strategy = CompactionStrategy::Clear;
        report.cleared = cleared.items;
        Compacted::new(entries, context, report)
    }

    /// `compacted`, unless it would not make the conversation smaller and the run does not
    /// force it: then [`CompactError::NotSmaller`], said as the run's failure.
    ///
    /// # Errors
    /// [`CompactError::NotSmaller`].
    pub(super) fn check_smaller(
        &mut self,
        compacted: Compacted,
    ) -> Result<Compacted, CompactError> {
        let report = &compacted.report;
        if !self.options.force
            && let Err(not_smaller) = NotSmaller::check(report.tokens_before, report.tokens_after)
        {
            let error = CompactError::NotSmaller(not_smaller);
            let failed = (report.plan.clone(), report.tokens_before, report.fallback);
            self.failed(failed, &error);
            return Err(error);
        }
        Ok(compacted)
    }

    /// The kept turns of `prepared` as the compaction `id` copies them: new ids, marked
    /// `kept_by`.
    fn copies(&self, prepared: &Prepared, id: &str) -> Vec<Message> {
        let ids = &self.compactor.ids;
        self.context.messages[prepared.plan.kept()]
            .iter()
            .map(|m| {
                let mut copy = m.clone();
                copy.id = Some(ids.next_id(IdKind::Message).into());
                copy.extra.insert(KEPT_BY.to_owned(), Value::from(id));
                copy
            })
            .collect()
    }

    /// The size of the context after the compaction (`summary` and the `copies`), measured as
    /// `tokens_before` was: the sum of the messages' sizes by the same sizer. The ruler sized
    /// the copies once, in `prepare` (their ids and `kept_by` are not counted), so its sum is
    /// the summary's size and theirs.
    fn tokens_after(&self, prepared: &Prepared, summary: &str, copies: &[Message]) -> u64 {
        let Some(sizer) = &self.compactor.sizer else {
            return kept_estimate(prepared, summary);
        };
        let mut after = Vec::with_capacity(copies.len() + 1);
        after.push(Message::compaction(summary));
        after.extend(copies.iter().cloned());
        sizer
            .message_sizes(&after)
            .iter()
            .fold(0u64, |t, &s| t.saturating_add(s))
    }

    /// Writes panto's own record of `context` after a run in which no model could summarize
    /// it whole (`failure`), for a run that asks for it ([`CompactRun::record_on_failure`]).
    ///
    /// When the failed fold had taken steps of the prefix's turns, nothing the models gave is
    /// thrown away: the summary so far (their summaries, with panto's record of any step none
    /// passed) goes on, within what the request after the record leaves, followed by panto's
    /// record of only the turns no step covered (a step of its own, `recorded`); the entry
    /// names the model that answered and counts every request the fold made. Otherwise it is
    /// panto's record alone: the previous summary, the ledger of the prefix merged with the
    /// previous one, and the last words of the assistant in the prefix, marked as such
    /// (`degraded: true`). Either is planned as the run was (with the windows it was given,
    /// the failed fold's plan when it had one), with fewer turns kept when what is known of
    /// the window cannot hold the kept turns beside a record, and appended to `log` like any
    /// compaction, so that the conversation goes on instead of dying. What the failed fold
    /// learned of the window (`taught`) bounds the record too.
    ///
    /// # Errors
    /// `failure` when the record cannot be written either (nothing to compact, not smaller
    /// unless the run forces it, the append refused); nothing is in effect then.
    pub(super) async fn write_record<S: Store>(
        &mut self,
        log: &mut SessionLog<S>,
        failure: CompactError,
    ) -> Result<CompactOutcome, CompactError> {
        let (context, options) = (self.context, self.options);
        let partial = self.partial.take();
        // What the failed fold sent and what it cost, counted whatever is kept of it.
        let spent = partial.as_deref().map_or((0, None), |(_, so_far)| {
            (so_far.folded.requests, so_far.folded.usage.clone())
        });
        // Only a summary a model gave is kept (steps panto recorded alone are recorded again).
        let partial = partial.and_then(|partial| {
            let (prepared, so_far) = *partial;
            let covered = so_far.covered.clone()?;
            so_far
                .folded
                .used
                .is_some()
                .then_some((prepared, so_far, covered))
        });
        let (prepared, partial) = match partial {
            Some((prepared, so_far, covered)) => (prepared, Some((so_far, covered))),
            None => match self.compactor.prepare(context, options, &self.windows) {
                Ok(prepared) => (prepared, None),
                Err(_) => return Err(failure),
            },
        };
        let taught = std::mem::take(&mut self.taught);
        let (prepared, state, limit) = self.record_plan(prepared, &taught);
        let natural = state.so_far.natural_ledger_chars;
        // What the request after the record leaves for it (the record's text and its ledger).
        let room = limit.map(|l| {
            let used = kept_estimate(&prepared, "") + options.reserved_within(l);
            l.saturating_sub(used)
        });
        let summarized = prepared.plan.prefix();
        let record = match partial {
            Some((so_far, covered)) => {
                let from = covered.until.clamp(summarized.start, summarized.end);
                let rest = &context.messages[from..summarized.end];
                let mut folded = so_far.folded;
                // A pass that condensed the summary after it, unfinished, is left out: the
                // summary it condensed is kept instead.
                folded.steps.truncate(covered.steps);
                folded.ledger = Ledger::merge(&so_far.ledger, &Ledger::from_messages(rest));
                folded.failures.clone_from(&taught.failures);
                let summary = match room {
                    Some(r) => head_within(&covered.summary, r / 2),
                    None => covered.summary,
                };
                let text = if rest.is_empty() {
                    summary
                } else {
                    let chars = room.map_or(natural, |r| {
                        usize::try_from(r.saturating_mul(3) / 2).unwrap_or(usize::MAX)
                    });
                    self.record_rest(
                        &prepared,
                        &mut folded,
                        (from, rest),
                        &summary,
                        chars,
                        &failure,
                    )
                };
                let budget =
                    self.rendering_budget(&prepared, limit, &text, &folded.ledger, natural);
                folded.summary = with_ledger(&text, &folded.ledger, budget);
                tracing::warn!(%failure, steps = covered.steps, "the fold could not finish; kept the models' summary so far and wrote panto's record of the turns after it");
                folded
            }
            None => {
                let prefix = &context.messages[summarized.clone()];
                let items = transcript_items(prefix);
                let previous = prepared.previous_summary.as_deref().map(strip_ledger);
                let ledger = Ledger::merge(&state.so_far.ledger, &Ledger::from_items(&items));
                // The record's own text takes half of what the request after it leaves (of the
                // natural size when nothing is known of the window); the ledger's rendering
                // fits the rest.
                let chars = room.map_or(natural, |r| {
                    usize::try_from(r.saturating_mul(3)).unwrap_or(usize::MAX)
                });
                let text = record_only_text(&failure, previous, &items, chars / 2);
                let budget = self.rendering_budget(&prepared, limit, &text, &ledger, natural);
                tracing::warn!(%failure, "no model could summarize; wrote panto's own record instead");
                Folded {
                    summary: with_ledger(&text, &ledger, budget),
                    ledger,
                    degraded: Some(failure.to_string()),
                    failures: taught.failures.clone(),
                    requests: spent.0,
                    usage: spent.1,
                    ..Folded::default()
                }
            }
        };
        self.taught = taught;
        let mut compacted = self.build(prepared, record);
        let report = &compacted.report;
        if !options.force && NotSmaller::check(report.tokens_before, report.tokens_after).is_err() {
            return Err(failure);
        }
        match self.compactor.write(log, &mut compacted).await {
            Ok(()) => {}
            // Another writer appended: that, not the models, is why nothing was written.
            Err(e @ StoreError::Conflict { .. }) => return Err(CompactError::Store(e)),
            Err(_) => return Err(failure),
        }
        self.emit(CompactionEvent::Finished(Box::new(
            compacted.report.clone(),
        )));
        Ok(CompactOutcome::Compacted(Box::new(compacted)))
    }

    /// The plan of panto's record (`prepared`, the failed fold's or the run's), with the fold's
    /// state as `taught` left it and the limit the request after the record must fit. When
    /// that limit cannot hold the kept turns beside a record (a window learned smaller than
    /// the keep budget), the planner is asked again within it: fewer turns are kept, and the
    /// record covers the rest, so that the retry fits.
    fn record_plan(
        &self,
        prepared: Prepared,
        taught: &Taught,
    ) -> (Prepared, FoldState, Option<u64>) {
        let max_output_tokens = self.compactor.config.max_output_tokens;
        let state_of = |prepared: &Prepared| {
            let mut state = FoldState::new(self.context, prepared, max_output_tokens);
            state.limits.proven = taught.proven;
            state.limits.limit = min_known(state.limits.limit, taught.limit);
            state
        };
        let state = state_of(&prepared);
        let limit = self.record_target(&prepared, &state);
        let Some(l) = limit.filter(|_| self.options.must_fit()) else {
            return (prepared, state, limit);
        };
        // The record needs room of its own: a quarter of the limit at least.
        let needed = kept_estimate(&prepared, "") + self.options.reserved_within(l) + l / 4;
        if needed <= l {
            return (prepared, state, limit);
        }
        match self.prepare_within(l) {
            Some(again)
                if again.plan.head == prepared.plan.head
                    && again.plan.keep_from > prepared.plan.keep_from =>
            {
                tracing::info!(
                    limit = l,
                    kept_before = prepared.plan.kept_tokens,
                    kept = again.plan.kept_tokens,
                    "the window is smaller than the keep budget: keeping fewer turns"
                );
                let state = state_of(&again);
                let limit = self.record_target(&again, &state);
                (again, state, limit)
            }
            _ => (prepared, state, limit),
        }
    }

    /// The limit the request after panto's record must fit ([`Run::retry_target`]); when the
    /// window stated none and no request was taken, the limit the failed fold came down to
    /// (below every input it was refused), for a run that must fit: a record sized for no
    /// window, its kept turns planned for a window far larger, would overflow again.
    fn record_target(&self, prepared: &Prepared, state: &FoldState) -> Option<u64> {
        let fits = self
            .options
            .must_fit()
            .then_some(state.limits.limit)
            .flatten();
        self.retry_target(prepared, state).or(fits)
    }

    /// The summary so far (`summary`) followed by panto's record of the turns no step covered
    /// (`rest`, from message `from`), in about `chars` characters of lines, said as a step of
    /// its own in `folded` (`StepRecorded`).
    fn record_rest(
        &mut self,
        prepared: &Prepared,
        folded: &mut Folded,
        (from, rest): (usize, &[Message]),
        summary: &str,
        chars: usize,
        failure: &CompactError,
    ) -> String {
        let step = folded.steps.len() + 1;
        let cause = failure.to_string();
        let text = step_record_text(Some(summary), rest, step, &cause, chars);
        let first = prepared
            .turns
            .iter()
            .position(|t| t.start >= from)
            .unwrap_or(prepared.turns.len());
        folded.steps.push(FoldStep {
            turns: first..prepared.turns.len(),
            messages: from..from + rest.len(),
            model: RECORD_ONLY_MODEL.to_owned(),
            fallback: false,
            input_tokens: 0,
            max_output_tokens: 0,
            summary_tokens: Heuristic.text(&text),
            elided: 0,
            rejected: 0,
            recorded: Some(cause.clone()),
        });
        self.emit(CompactionEvent::StepRecorded {
            step,
            steps: step,
            cause,
        });
        text
    }
}

/// The model and provider a clearing's entry names: panto itself, no model was asked.
pub(super) const CLEARING_MODEL: &str = "panto";

/// The field of a compaction entry that lists what a clearing cleared (docs/session.md,
/// "Clearings").
pub(super) const CLEARED_FIELD: &str = "cleared";

/// The `cleared` field of an entry: each cleared item's id, message, block, kind and size.
pub(super) fn cleared_json(items: &[ClearedItem]) -> Value {
    Value::Array(
        items
            .iter()
            .map(|c| json!({"id": c.id, "message": c.message, "block": c.block, "kind": c.kind, "bytes": c.bytes}))
            .collect(),
    )
}

/// The fields of a compaction entry besides its summary: how it was made (`provider`, the
/// fallback, a degraded record), what it kept and summarized under `plan`, its requests and
/// steps, what it elided, and the ledger; `copies_marked` when `copies` follow it.
fn entry_extra(plan: &Plan, folded: &Folded, provider: &str, copies: usize) -> Extra {
    let mut extra = Extra::new();
    if copies > 0 {
        // The copies follow in the same append: replay waits for all of them, so a crash that
        // cuts the append replays to the old context (whatever the store).
        extra.insert(COPIES_MARKED.into(), true.into());
    }
    extra.insert("provider".into(), provider.into());
    if let Some(cause) = &folded.degraded {
        extra.insert("degraded".into(), true.into());
        extra.insert("degraded_error".into(), cause.as_str().into());
    }
    let fallback = &folded.fallback_cause;
    extra.insert("fallback".into(), fallback.is_some().into());
    if let Some(cause) = fallback {
        extra.insert("fallback_error".into(), cause.to_string().into());
    }
    extra.insert("keep_tokens".into(), plan.budget.into());
    extra.insert("kept_turns".into(), (plan.kept_turns as u64).into());
    let summarized = plan.summarized_turns as u64;
    extra.insert("summarized_turns".into(), summarized.into());
    let messages = plan.prefix().len() as u64;
    extra.insert("summarized_messages".into(), messages.into());
    extra.insert("requests".into(), (folded.requests as u64).into());
    let steps = &folded.steps;
    if steps.len() > 1 {
        extra.insert("fold_steps".into(), (steps.len() as u64).into());
    }
    // The steps whose turns no model's summary covered: panto's record of them went on.
    let recorded: Vec<Value> = (1..=steps.len() as u64)
        .zip(steps)
        .filter(|(_, s)| s.recorded.is_some())
        .map(|(i, _)| Value::from(i))
        .collect();
    if !recorded.is_empty() {
        extra.insert("recorded_steps".into(), Value::Array(recorded));
    }
    if !folded.elided.is_empty() {
        let items = folded.elided.iter().map(|e| {
            json!({"message": e.message_id, "block": e.block, "bytes": e.bytes, "kept": e.kept})
        });
        extra.insert("elided".into(), Value::Array(items.collect()));
    }
    if !folded.ledger.is_empty() {
        extra.insert(LEDGER_FIELD.into(), folded.ledger.to_json());
    }
    // What the summary cost (docs/session.md): the fold's answers, summed.
    let usage = folded.usage.as_ref();
    if let Some(value) = usage.and_then(|u| serde_json::to_value(u).ok()) {
        extra.insert("usage".into(), value);
    }
    extra
}
