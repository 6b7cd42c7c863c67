//! Overflow recovery: after a context overflow, or a reply the provider truncated silently,
//! learn what it taught of the window, compact once, and send once more.

use panto_model::Role;
use panto_provider::{EventSink, ProviderError, TokenNumbers};
use panto_size::{Measured, Truncation, estimate};
use panto_store::Store;

use super::{Driver, Reply, tools_text};
use crate::compactor::MAX_REBASES;
use crate::config::{CompactRun, CompactionStrategy};
use crate::error::CompactError;
use crate::events::CompactionEvent;
use crate::plan::NothingToCompact;
use crate::report::{CompactOutcome, CompactionReport};
use crate::window::Overflow;

impl<S: Store> Driver<S> {
    /// Overflow recovery after `overflow` (an error, or the silent `truncation` said as one,
    /// which is reported first): learns what the overflow taught of the window, compacts once
    /// (up to [`MAX_REBASES`] times more when other writers' prompts joined the kept turns and
    /// the retry no longer fits with them), and sends once more.
    pub(super) async fn recover(
        &mut self,
        overflow: ProviderError,
        truncation: Option<Truncation>,
        stream: EventSink<'_>,
    ) -> Result<Reply, CompactError> {
        // The context is measured once: the request that overflowed, the one the provider
        // accepted before, and the sizes the compactor plans with all come from it.
        let measured = Measured::new(&self.context.messages);
        let tools = tools_text(&self.tools);
        let overflowed_tokens = measured.estimate(&self.system, &tools).total();
        if let Some(truncation) = truncation {
            self.compactor.emit(CompactionEvent::SilentTruncation {
                truncation,
                estimated_tokens: overflowed_tokens,
            });
        }
        tracing::info!(%overflow, "context overflow, compacting once");
        // With the request's output budget, which judges a limit the overflow stated.
        let run = CompactRun::after_overflow(&overflow, overflowed_tokens)
            .with_sizes(measured.sizes().into())
            .with_reserved_tokens(self.reserved_tokens(), u64::from(self.max_output_tokens));
        // What the overflow taught (the limit it stated, else a bound below the request), and
        // the largest request the provider took before it.
        run.teach(&mut self.windows);
        self.windows.accepted = self.accepted_tokens(&measured, &tools);
        let limit = run.known_limit(&self.windows);
        let mut report = match self.compact_for_retry(run, 0).await {
            Ok(Ok(report)) => report,
            Ok(Err(nothing)) => {
                return Err(CompactError::OverflowNothingToCompact { overflow, nothing });
            }
            Err(e) => {
                return Err(CompactError::OverflowCompactionFailed {
                    overflow,
                    compaction: Box::new(e),
                });
            }
        };
        // Other writers' prompts, taken in after the kept turns when they came first
        // (`rebase.rs`), were not in the plan, which sized the kept turns to leave the retry
        // within the limit: when the retry no longer fits with them, compact once more from the
        // context as written (the model's summary carried on, never thrown away). Up to
        // [`MAX_REBASES`] times: a compaction once more may be overtaken too (three writers at a
        // window of 1,500 that counts the output: the second compaction summarized a turn of
        // 67 tokens, took in another prompt of 67, and the retry stayed at 1,050 tokens for
        // the 1,000 the reply leaves, about one run in twenty), and then each one after it
        // leaves room beside its kept turns for as much again as the others' latest messages
        // took. Nothing more to compact leaves the compaction as it is for the check below.
        let mut once_more = OnceMore::default();
        loop {
            let fits = self.retry_fits(self.estimate().total(), overflowed_tokens, limit);
            let Some(spare) = once_more.next(self, report.rebased, fits) else {
                break;
            };
            let measured = Measured::new(&self.context.messages);
            let again = CompactRun::after_overflow(&overflow, overflowed_tokens)
                .with_sizes(measured.sizes().into());
            match self.compact_for_retry(again, spare).await {
                Ok(Ok(next)) => report = next,
                Ok(Err(_)) => break,
                Err(e) => {
                    return Err(CompactError::OverflowCompactionFailed {
                        overflow,
                        compaction: Box::new(e),
                    });
                }
            }
        }
        let before = (overflow, overflowed_tokens, limit);
        self.retry(before, report, stream).await
    }

    /// The overflow compaction of `run` (the reserve, with `spare` tokens more, conversation
    /// and panto's record on failure added) over the context: its report, the context replaced
    /// by the compacted one; or why there was nothing to compact.
    ///
    /// # Errors
    /// The compaction's, when it failed; nothing of it is written then.
    async fn compact_for_retry(
        &mut self,
        run: CompactRun,
        spare: u64,
    ) -> Result<Result<CompactionReport, NothingToCompact>, CompactError> {
        let reserved = self.reserved_tokens().saturating_add(spare);
        let run = run
            .with_reserved_tokens(reserved, u64::from(self.max_output_tokens))
            .with_conversation(self.conversation())
            // No model could summarize: keep the conversation alive with panto's own record.
            .with_record_on_failure(true);
        let outcome = self
            .compactor
            .compact(&self.context, &mut self.log, run, &mut self.windows)
            .await?;
        Ok(match outcome {
            CompactOutcome::Compacted(c) => {
                let c = *c;
                self.context = c.context;
                self.count_compaction(&c.report);
                Ok(c.report)
            }
            CompactOutcome::NothingToCompact(nothing) => Err(nothing),
        })
    }

    /// The estimated tokens of the context's latest `n` messages: the other writers' messages
    /// a compaction took in after its kept turns.
    fn latest_tokens(&self, n: usize) -> u64 {
        let messages = &self.context.messages;
        let from = messages.len().saturating_sub(n);
        estimate("", "", &messages[from..]).messages
    }

    /// Whether a retry of `estimated_tokens` may be sent after a request of
    /// `overflowed_tokens` overflowed with `limit` known: smaller than that request, and within
    /// the limit with the room for its reply when the server counts the output (the room the
    /// compaction kept, `KnownWindows::reply_room`).
    fn retry_fits(
        &self,
        estimated_tokens: u64,
        overflowed_tokens: u64,
        limit: Option<u64>,
    ) -> bool {
        let counted = |l: u64| estimated_tokens.saturating_add(self.counted_reply(l)) > l;
        estimated_tokens < overflowed_tokens && !limit.is_some_and(counted)
    }

    /// The room for the reply counted against `limit`: the reply budget within what the
    /// window leaves when the server counts the output, else none.
    fn counted_reply(&self, limit: u64) -> u64 {
        match self.windows.counts_output {
            Some(true) => self
                .windows
                .reply_room(u64::from(self.max_output_tokens), limit),
            _ => 0,
        }
    }

    /// The one retry after the compaction `report` wrote, of a request that overflowed with
    /// `overflow` at `overflowed_tokens` when `limit` was the known one: sent only when smaller
    /// than that request and within the limit; another overflow is surfaced (its stated limit
    /// learned), never compacted again.
    async fn retry(
        &mut self,
        (overflow, overflowed_tokens, limit): (ProviderError, u64, Option<u64>),
        report: CompactionReport,
        stream: EventSink<'_>,
    ) -> Result<Reply, CompactError> {
        // The progress check (`Driver::retry_fits`).
        let estimated_tokens = self.estimate().total();
        let by_clearing = report.strategy == CompactionStrategy::Clear;
        if !self.retry_fits(estimated_tokens, overflowed_tokens, limit) {
            // What is too large: the newest turn alone, or also turns kept with it (the
            // compaction kept more, or other writers' messages joined it).
            let newest_turn_alone = report.plan.kept_turns <= 1 && report.rebased == 0;
            return Err(CompactError::OverflowNoProgress {
                overflow,
                estimated_tokens,
                overflowed_tokens,
                limit,
                by_clearing,
                newest_turn_alone,
                // At most the reply budget, a `u32`.
                reply_room: limit.map_or(0, |l| {
                    u32::try_from(self.counted_reply(l)).unwrap_or(u32::MAX)
                }),
            });
        }
        self.compactor.emit(CompactionEvent::Retrying {
            estimated_tokens,
            overflowed_tokens,
        });
        match self.complete(&mut *stream, "retry").await {
            Ok(reply) => self.accept(reply, Some(report)).await,
            Err(error @ ProviderError::ContextOverflow { .. }) => {
                let overflow = Overflow::new(&error, estimated_tokens)
                    .with_budget(u64::from(self.max_output_tokens));
                if overflow.believed().is_some() {
                    // The limit it stated, scaled by the retry's counts.
                    self.windows.overflowed(&overflow);
                }
                Err(CompactError::OverflowAfterCompaction {
                    // The context the retry sent, estimated above.
                    estimated_tokens,
                    error,
                    by_clearing,
                    reply_tokens: self.max_output_tokens,
                })
            }
            Err(e) => Err(CompactError::Provider(e)),
        }
    }

    /// panto's estimate of the request that produced the latest reply in the context (the
    /// messages before it, `measured` with the rest, and `tools` as their text): the provider
    /// accepted that much. A reply is known to have been produced here when it carries the
    /// provider's usage and is not a kept copy (whose request was another context).
    fn accepted_tokens(&self, measured: &Measured<'_>, tools: &str) -> Option<u64> {
        let at = self.context.messages.iter().rposition(|m| {
            m.role == Role::Assistant && m.usage.is_some() && m.kept_by().is_none()
        })?;
        Some(measured.estimate_first(at, &self.system, tools).total())
    }
}

/// The rule of the compactions once more after a compaction that other writers' messages
/// overtook (taken in after its kept turns, `rebase.rs`): one shared by an overflow's recovery
/// and a compaction ahead (`ahead.rs`).
#[derive(Default)]
pub(super) struct OnceMore {
    round: usize,
    spare: u64,
}

impl OnceMore {
    /// Whether to compact once more after a compaction that took in `rebased` messages, the
    /// next request fitting or not (`fits`): not when it took in none, when the request fits,
    /// or after [`MAX_REBASES`] rounds. When it is due, the tokens to reserve beside its kept
    /// turns: none the first time; after that, as much as the others' latest messages took
    /// (the most seen), since a writer overtaken twice is likely to be overtaken again.
    pub(super) fn next<S: Store>(
        &mut self,
        driver: &Driver<S>,
        rebased: usize,
        fits: bool,
    ) -> Option<u64> {
        if rebased == 0 || fits || self.round == MAX_REBASES {
            return None;
        }
        if self.round > 0 {
            self.spare = self.spare.max(driver.latest_tokens(rebased));
        }
        self.round += 1;
        tracing::info!(
            rebased,
            spare = self.spare,
            "other writers' messages joined the kept turns and the request no longer fits: compacting once more"
        );
        Some(self.spare)
    }
}

/// A silent truncation said as the overflow it is: the provider took less than the request and
/// stated no limit.
pub(super) fn truncated_overflow(truncation: &Truncation) -> ProviderError {
    ProviderError::ContextOverflow {
        message: format!(
            "the server answered, but counted only {} input tokens for a request that holds at least {} (it counted {} for the request before): it cut the request to fit its context window and said nothing",
            truncation.counted, truncation.floor, truncation.previous
        ),
        numbers: TokenNumbers::default(),
    }
}
