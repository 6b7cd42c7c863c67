//! The tiered strategy (`compaction_strategy = "tiered"`): a clearing first (`clear.rs`), and
//! panto's summary of the cleared conversation only when the clearing is not enough
//! (docs/compaction.md, "Clearing and tiers"). A composition of the two strategies, not an engine of its
//! own: the summary is the summary strategy's, run over the context the clearing made (never
//! written), and what is appended is one entry, the clearing's or the summary's.
//!
//! Not enough means, in one rule with the proactive compaction's headroom: the clearing frees
//! less than a tenth of the window (of the conversation when no window is known), so that a
//! clearing that barely helps is not made again at the next send; or it leaves the
//! conversation above its room ([`Run::tiered_room`]): half the window (the verbatim
//! conversation never settles above half of it: its oldest part is summarized) and, for a
//! proactive compaction, what the request may hold under half the threshold it crossed
//! ([`CompactRun::target_tokens`](crate::CompactRun::target_tokens)) once the system prompt,
//! the tools and the reply's room are counted.
//!
//! When the clearing is not enough, the summary reads only what the clearing could not bring
//! under that room: its kept turns take the room less a share for the summary
//! ([`TIERED_SUMMARY_SHARE`]), when that is more than the usual quarter of the window, so the
//! model is asked about the oldest turns alone (and never about the cleared output, which it
//! sees as placeholders).

use panto_model::{Entry, Message, replay};
use panto_size::Heuristic;
use panto_transcript::{Ledger, strip_ledger};

use super::Prepared;
use super::clear::clearing;
use super::run::Run;
use super::write::{CLEARED_FIELD, chars_within, cleared_json};
use crate::config::{CompactionStrategy, min_known};
use crate::error::CompactError;
use crate::events::CompactionEvent;
use crate::ledger::{ledger_budget, rendered_len, with_recall_note};
use crate::report::{CompactOutcome, Compacted};

/// A clearing that frees less than the window divided by this (a tenth) is not written alone.
pub const CLEAR_MIN_FREED_DIVISOR: u64 = 10;

/// The conversation after a tiered compaction stays under the window divided by this (half).
pub const TIERED_TARGET_DIVISOR: u64 = 2;

/// A tiered run's summary keeps verbatim the room under its target less the room divided by
/// this (a quarter, for the summary and its ledger), when that is more than the summary
/// strategy's own budget: the model then reads only the oldest turns.
pub(super) const TIERED_SUMMARY_SHARE: u64 = 4;

/// A clearing's rendering of its ledger takes at most what it freed divided by this (half:
/// about what a summary of the same prefix renders, an eighth of its characters; with a
/// quarter, `quality --strategies` found tiered's later summary starting from too small a
/// record, 78% of the needles against the summary's 85%).
pub(super) const CLEARING_LEDGER_SHARE: u64 = 2;

/// The clearing of `prepared`'s older turns when it is enough, else the summary of the
/// conversation it cleared.
///
/// # Errors
/// The summary's, when the clearing is not enough and no summary was obtained; or
/// [`CompactError::NotSmaller`].
pub(super) async fn produce(
    run: &mut Run<'_>,
    prepared: Prepared,
) -> Result<Compacted, CompactError> {
    let cleared = match clearing(run, &prepared) {
        Ok(cleared) => cleared,
        Err(CompactError::NothingToClear { .. }) => {
            run.started(&prepared);
            return Box::pin(super::summary::produce(run, prepared)).await;
        }
        Err(e) => return Err(e),
    };
    let report = &cleared.report;
    let Some(reason) = run.clearing_shortfall(&prepared, report.tokens_before, report.tokens_after)
    else {
        return run.check_smaller(cleared);
    };
    run.emit(CompactionEvent::ClearingNotEnough {
        tokens_before: report.tokens_before,
        tokens_after: report.tokens_after,
        cleared: report.cleared.len(),
        reason,
    });
    let room = run.tiered_room(run.clearing_limit(&prepared));
    summarize_cleared(run, cleared, room).await
}

/// The summary of the conversation `cleared` made (its compaction leading it, never written),
/// with what was cleared recorded on it and the conversation's size before the clearing. With
/// a `room` for the conversation after it, the summary keeps verbatim all of it but a share
/// ([`TIERED_SUMMARY_SHARE`]), so that the model reads only the oldest turns.
async fn summarize_cleared(
    run: &mut Run<'_>,
    cleared: Compacted,
    room: Option<u64>,
) -> Result<Compacted, CompactError> {
    // The caller's sizes measured the uncleared messages.
    let mut options = run.options.clone();
    options.sizes = None;
    options.verbatim_budget = room.map(|r| r - r / TIERED_SUMMARY_SHARE);
    let windows = run.windows;
    let mut sub = Run::new(&mut *run.compactor, &cleared.context, &options, &windows);
    // A summary that is not smaller is this run's fallback, not its failure.
    sub.not_smaller_is_failure = false;
    let outcome = Box::pin(sub.produce_with(CompactionStrategy::Summary)).await;
    run.taught = std::mem::take(&mut sub.taught);
    let mut summary = match outcome {
        Ok(CompactOutcome::Compacted(c)) => *c,
        // Every turn left fits the budget: the clearing is all there is to do.
        Ok(CompactOutcome::NothingToCompact(nothing)) => {
            return run.cleared_alone(cleared, nothing.to_string());
        }
        // The summary (with the ledger of the originals) is larger than the cleared turns it
        // would replace: the clearing alone is the smaller context, and an overflow's retry
        // may fit it (`quality --strategies` found a send that failed without this).
        Err(CompactError::NotSmaller(n)) => {
            return run.cleared_alone(cleared, n.to_string());
        }
        Err(e) => return Err(e),
    };
    let before = cleared.report.tokens_before;
    if let Some(Entry::Compaction(entry)) = summary.entries.first_mut() {
        entry.tokens_before = Some(before);
        entry
            .extra
            .insert(CLEARED_FIELD.into(), cleared_json(&cleared.report.cleared));
    }
    summary.context = replay(summary.entries.iter().cloned());
    summary.report.tokens_before = before;
    summary.report.cleared = cleared.report.cleared;
    Ok(summary)
}

impl Run<'_> {
    /// The characters of the ledger's rendering after a clearing's `text` (the summary it
    /// carries, or the note), followed by copies of `copies_tokens` tokens: the natural budget
    /// of a summary of the same prefix ([`ledger_budget`]), within half of what the
    /// clearing frees ([`CLEARING_LEDGER_SHARE`]) and, when a window is known, of what leaves
    /// the request after the clearing within a tiered run's target (half the window, and the
    /// run's own target), so that what it adds never makes a clearing that was enough not
    /// enough; but never less than the rendering the context holds (a chain does not shrink
    /// its record) unless the window itself has no room for it. 0 when no room is left.
    pub(super) fn clearing_rendering_budget(
        &self,
        prepared: &Prepared,
        text: &str,
        ledger: &Ledger,
        copies_tokens: u64,
    ) -> usize {
        let natural = ledger_budget(
            self.compactor.config.max_output_tokens,
            rendered_len(self.context),
            prepared.transcript.text().len(),
            None,
        );
        // The text with the recall tool's note after the rendering, as written.
        let noted = with_recall_note(text, self.compactor.config.recall_tool);
        let text_tokens = Heuristic.message(&Message::compaction(noted.as_str()));
        // A share of what the clearing freed: the record of the cleared output is never more
        // than a fraction of it, so a clearing that frees little stays small.
        let freed = prepared
            .tokens_before
            .saturating_sub(copies_tokens + text_tokens);
        // Never less than the rendering already in the context (a clearing chained after a
        // summary or a clearing does not shrink its record), unless the window itself says so.
        let carried = self
            .context
            .summary()
            .map_or(0, |s| Heuristic.text(&s[strip_ledger(s).len()..]));
        let mut room = freed / CLEARING_LEDGER_SHARE;
        let limit = self.clearing_limit(prepared);
        let copies = copies_tokens + text_tokens + 16;
        if let Some(tiered) = self.tiered_room(limit) {
            room = room.min(tiered.saturating_sub(copies));
        }
        room = room.max(carried);
        if let Some(limit) = limit {
            room = room.min(limit.saturating_sub(copies + self.reserved_within(limit)));
        }
        chars_within(room, ledger, natural)
    }

    /// `cleared` written alone after all, for `reason` (said as `ClearedAlone`).
    ///
    /// # Errors
    /// [`CompactError::NotSmaller`].
    fn cleared_alone(
        &mut self,
        cleared: Compacted,
        reason: String,
    ) -> Result<Compacted, CompactError> {
        self.emit(CompactionEvent::ClearedAlone { reason });
        self.check_smaller(cleared)
    }

    /// Why a clearing that leaves the conversation at `after` tokens (from `before`) is not
    /// enough for this run, or `None` when it is (see the module docs).
    pub(super) fn clearing_shortfall(
        &self,
        prepared: &Prepared,
        before: u64,
        after: u64,
    ) -> Option<String> {
        let limit = self.clearing_limit(prepared);
        let freed = before.saturating_sub(after);
        let base = limit.unwrap_or(before);
        if freed.saturating_mul(CLEAR_MIN_FREED_DIVISOR) < base {
            let of = if limit.is_some() {
                "the window"
            } else {
                "the conversation"
            };
            return Some(format!(
                "it frees about {freed} tokens, less than a tenth of {of} ({base})"
            ));
        }
        let room = self.tiered_room(limit)?;
        (after > room).then(|| {
            format!(
                "the conversation would stay about {after} tokens, above the target of {room} \
                 (half the window, and a proactive run's headroom)"
            )
        })
    }

    /// The most the conversation may hold after a tiered compaction, in estimated tokens, when
    /// anything bounds it: half of the window `limit` (the conversation, not the request: the
    /// window holds the system prompt, the tools and the reply besides), and for a run with a
    /// target of its own (a proactive one) that target less what the request holds besides the
    /// conversation, so that the headroom the driver asked for holds.
    pub(super) fn tiered_room(&self, limit: Option<u64>) -> Option<u64> {
        let own = self
            .options
            .target_tokens
            .map(|t| t.saturating_sub(self.reserved_within(limit.unwrap_or(t))));
        min_known(limit.map(|l| l / TIERED_TARGET_DIVISOR), own)
    }

    /// The window a clearing is measured against, in panto's estimated tokens: the known
    /// limit, else (after an overflow that stated none) what is known to fit.
    pub(super) fn clearing_limit(&self, prepared: &Prepared) -> Option<u64> {
        self.options.known_limit(&self.windows).or_else(|| {
            prepared
                .limit
                .map(|bound| self.windows.accepted.map_or(bound, |a| a.min(bound)))
        })
    }
}
