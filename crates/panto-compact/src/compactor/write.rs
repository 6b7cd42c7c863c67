//! What a compaction writes: the summary with the ledger rendered after it, within what the
//! request after the compaction leaves; the entry and the kept copies marked `kept_by`; and,
//! when no model could summarize, panto's own record in their place.

use panto_model::{
    CLEARING, COPIES_MARKED, CompactionEntry, Entry, Extra, IdKind, KEPT_BY, Message, NO_SUMMARY,
    STRATEGY, replay,
};
use panto_size::Heuristic;
use panto_transcript::{Ledger, strip_ledger};
use serde_json::{Value, json};

use super::clear::{CLEARING_NOTE, Cleared};
use super::run::Run;
use super::state::{FoldState, Folded, SoFar};
use super::{Prepared, kept_estimate};
use crate::config::CompactionStrategy;
use crate::error::CompactError;
use crate::ledger::{LEDGER_FIELD, previous_ledger, with_ledger, with_recall_note};
use crate::plan::{NotSmaller, Plan};
use crate::record::RECORD_ONLY_MODEL;
use crate::report::{ClearedItem, Compacted, CompactionReport};

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
    pub(super) fn rendering_budget(
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
            + self.reserved_within(limit)
            // A blank line between the summary and the rendering, and a margin for rounding.
            + 16;
        chars_within(limit.saturating_sub(used), ledger, natural)
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
    /// (or, with none, [`CLEARING_NOTE`] and `no_summary`) followed by the rendering of the
    /// ledger of the cleared originals merged over the active one (so the identifiers of what
    /// was cleared stay in the context: issue 37, point 8), then a copy of every message of the
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
        // The summary carried without the ledger rendered into it: the rendering after it is
        // the merged ledger's, what was cleared included.
        let text = carried.as_deref().map_or(CLEARING_NOTE, strip_ledger);
        let ledger = Ledger::merge(
            &previous_ledger(context),
            &Ledger::from_messages(&cleared.originals),
        );
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
        // The context after it, sized as one (a sizer that reads usage shares spans), first
        // with the text alone to find the copies' size.
        let mut after = Vec::with_capacity(copies.len() + 1);
        after.push(Message::compaction(text));
        after.extend(copies.iter().cloned());
        let sum = |sizes: &[u64]| sizes.iter().fold(0u64, |t, &s| t.saturating_add(s));
        let copies_tokens = sum(&self.compactor.message_sizes(&after)[1..]);
        let budget = self.clearing_rendering_budget(prepared, text, &ledger, copies_tokens);
        let summary = if budget == 0 {
            text.to_owned()
        } else {
            with_ledger(text, &ledger, budget)
        };
        let summary = with_recall_note(&summary, self.compactor.config.recall_tool);
        after[0] = Message::compaction(summary.as_str());
        let tokens_after = sum(&self.compactor.message_sizes(&after));
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
            if self.not_smaller_is_failure {
                let failed = (report.plan.clone(), report.tokens_before, report.fallback);
                self.failed(failed, &error);
            }
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
}

/// The characters of a ledger's rendering that fit `target` tokens: at most `natural`, found by
/// measuring the rendering, a few times at most.
pub(super) fn chars_within(target: u64, ledger: &Ledger, natural: usize) -> usize {
    let mut chars = natural.min(usize::try_from(target.saturating_mul(4)).unwrap_or(usize::MAX));
    for _ in 0..6 {
        let tokens = Heuristic.text(&ledger.render_within(chars));
        if tokens <= target || chars == 0 {
            break;
        }
        let scaled = u128::from(chars as u64) * u128::from(target) * 9 / (10 * u128::from(tokens));
        chars = usize::try_from(scaled).unwrap_or(0);
    }
    chars
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
