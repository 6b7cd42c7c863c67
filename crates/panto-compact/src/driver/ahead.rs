//! The model's window and compacting ahead of a request: what the driver knows of the window,
//! its estimate of the next request against it, and proactive compaction (trigger `auto`).

use std::sync::Arc;

use panto_size::{Measured, RequestEstimate};
use panto_store::Store;

use super::recover::OnceMore;
use super::{Driver, tools_text};
use crate::config::{CompactRun, CompactionStrategy};
use crate::error::CompactError;
use crate::events::CompactionEvent;
use crate::report::{CompactOutcome, CompactionReport};
use crate::window::{KnownWindows, Window};

/// panto's estimate of the next request of a [`Driver`] ([`Driver::next_request`]): its input
/// in parts, the room kept for the reply, and the window it must fit.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct NextRequest {
    /// The input: the system prompt, the tools, the summary and the messages, which add up to
    /// its total (the one ruler, `panto_size::estimate`).
    pub input: RequestEstimate,
    /// The room kept for the reply: the output limit, at most an eighth of the window when the
    /// window is known, unless the server counts the output against it
    /// ([`KnownWindows::reply_room`](crate::KnownWindows::reply_room), as a compaction keeps
    /// it).
    pub reply_tokens: u64,
    /// The model's window, when known ([`Driver::window`]).
    pub window: Option<Window>,
    /// The share of the window above which the driver compacts ahead, when on: the configured
    /// one as the prompt cache moves it (earlier when the cache is cold, later when it is
    /// warm; docs/compaction.md, "Compaction that respects the cache").
    pub auto_compact: Option<f64>,
}

impl NextRequest {
    /// The input and the reply's room together: what the request takes of the window.
    pub fn total(&self) -> u64 {
        self.input.total().saturating_add(self.reply_tokens)
    }

    /// The input size above which the driver compacts ahead: the configured share of the
    /// window, when both are known.
    pub fn threshold(&self) -> Option<u64> {
        Some(share_of(self.window?.tokens, self.auto_compact?))
    }

    /// Whether the driver compacts before sending this request.
    pub fn compacts_ahead(&self) -> bool {
        self.threshold().is_some_and(|t| self.input.total() > t)
    }
}

/// `share` of `tokens`, rounded down.
fn share_of(tokens: u64, share: f64) -> u64 {
    // A share is in (0, 1] (`Driver::with_auto_compact`), so the product fits.
    #[expect(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss,
        reason = "a share of a token count, rounded down, is a token count"
    )]
    let part = (tokens as f64 * share).floor() as u64;
    part.min(tokens)
}

impl<S: Store> Driver<S> {
    /// Turns proactive compaction on (`Some(share)`) or off (`None`, the default): before each
    /// request, when panto's estimate of it ([`Driver::estimate`]) exceeds `share` of the
    /// model's window ([`Driver::window`]), the driver compacts first (the same compaction as
    /// after an overflow, with trigger `auto`), then sends; a request still estimated larger
    /// than the window is not sent ([`CompactError::ExceedsWindow`]). Without a known window
    /// it says so once ([`CompactionEvent::WindowUnknown`]) and compacts only after an
    /// overflow. A share is a fraction of the window: one above 1 counts as 1, and one that is
    /// not above 0 (or not a number) turns it off.
    pub fn with_auto_compact(mut self, share: Option<f64>) -> Driver<S> {
        self.set_auto_compact(share);
        self
    }

    /// Sets proactive compaction as [`Driver::with_auto_compact`] does.
    pub fn set_auto_compact(&mut self, share: Option<f64>) {
        self.auto_compact = share.filter(|s| *s > 0.0).map(|s| s.min(1.0));
    }

    /// The share of the window above which a request is compacted ahead, when on.
    pub fn auto_compact(&self) -> Option<f64> {
        self.auto_compact
    }

    /// The driver, knowing `window` too (a window the agent persisted from an earlier
    /// conversation, [`Driver::learned_window`], or one the server reported): see
    /// [`Driver::learn_window`].
    pub fn with_window(mut self, window: Window) -> Driver<S> {
        self.learn_window(window);
        self
    }

    /// Records `window` ([`KnownWindows::learn`]): a configured one
    /// ([`WindowSource::Configured`](crate::WindowSource::Configured)), one the server said, one
    /// persisted from an earlier conversation.
    pub fn learn_window(&mut self, window: Window) {
        self.windows.learn(window);
    }

    /// The driver, knowing `windows` (every source at once: see [`Driver::set_windows`]).
    pub fn with_windows(mut self, windows: KnownWindows) -> Driver<S> {
        self.set_windows(windows);
        self
    }

    /// Replaces everything known of the window with `windows`: for another model, whose window
    /// the old one's say nothing of.
    pub fn set_windows(&mut self, windows: KnownWindows) {
        self.windows = windows;
    }

    /// Everything known of the model's window: given (configured, said by the server,
    /// persisted, the catalogue's), learned from overflows and silently truncated requests, and
    /// from the compactions the driver ran. The driver owns it; every compaction run takes it
    /// and gives it back updated.
    pub fn windows(&self) -> KnownWindows {
        self.windows
    }

    /// The model's window as far as the driver knows it: the smallest of those known
    /// ([`KnownWindows::window`]), with its source.
    pub fn window(&self) -> Option<Window> {
        self.windows.window()
    }

    /// The window learned from requests (the limit an overflow stated, or the bound a request
    /// that did not fit taught), for the agent to persist and give back with
    /// [`Driver::with_window`] next time, so that a new conversation with the same model starts
    /// knowing it.
    pub fn learned_window(&self) -> Option<Window> {
        self.windows.learned()
    }

    /// panto's estimate of the next request: its input in parts (the system prompt, the tools
    /// and the context), the room kept for the reply, and the window it must fit, with the
    /// share above which it is compacted ahead.
    pub fn next_request(&self) -> NextRequest {
        let window = self.window();
        let reply = u64::from(self.max_output_tokens);
        let reply_tokens = window.map_or(reply, |w| self.windows.reply_room(reply, w.tokens));
        NextRequest {
            input: self.estimate(),
            reply_tokens,
            window,
            auto_compact: self.auto_compact.map(|share| match window {
                Some(w) => self.cache_aware_share(share, w.tokens, reply_tokens),
                None => share,
            }),
        }
    }

    /// Proactive compaction: compacts when the next request is estimated above the configured
    /// share of the window, and refuses a request estimated larger than the window. Returns
    /// the compaction's report when one was written.
    pub(super) async fn compact_ahead(&mut self) -> Result<Option<CompactionReport>, CompactError> {
        let Some(share) = self.auto_compact else {
            return Ok(None);
        };
        let Some(window) = self.window() else {
            if !self.said_no_window {
                self.said_no_window = true;
                self.compactor.emit(CompactionEvent::WindowUnknown);
            }
            return Ok(None);
        };
        // Measured once: the estimate, and the sizes the compaction plans with.
        let measured = Measured::new(&self.context.messages);
        let estimated_tokens = measured
            .estimate(&self.system, &tools_text(&self.tools))
            .total();
        let sizes: Arc<[u64]> = measured.sizes().into();
        let reply = self
            .windows
            .reply_room(u64::from(self.max_output_tokens), window.tokens);
        let in_force = self.cache_aware_share(share, window.tokens, reply);
        let threshold_tokens = share_of(window.tokens, in_force);
        if estimated_tokens <= threshold_tokens {
            return Ok(None);
        }
        if self.ahead_lost && estimated_tokens <= window.tokens {
            // This turn's compaction ahead lost to another writer already: the request fits,
            // so it goes as it is rather than ask for another summary that may lose again.
            self.compactor.emit(CompactionEvent::AheadSkipped {
                reason: "a compaction ahead of this turn lost to another writer already".to_owned(),
                sending: true,
            });
            return Ok(None);
        }
        self.check_unchanged().await?;
        tracing::info!(
            estimated_tokens,
            threshold_tokens,
            window = window.tokens,
            "above the share of the window, compacting ahead"
        );
        self.compactor.emit(CompactionEvent::CompactingAhead {
            estimated_tokens,
            threshold_tokens,
            window,
        });
        // Headroom: the request after the compaction stays under half the threshold, so that
        // the next sends do not compact again (docs/compaction.md, "Clearing and tiers").
        let target_tokens = share_of(window.tokens, self.headroom_share(share, in_force)) / 2;
        let run = CompactRun::auto()
            .with_sizes(sizes)
            .with_target_tokens(target_tokens);
        let outcome = self.compact_with(run).await;
        let outcome = self.ahead_once_more(outcome, window, target_tokens).await;
        let estimated_tokens = self.estimate().total();
        let fits = estimated_tokens <= window.tokens;
        let skipped = match outcome {
            Ok(CompactOutcome::Compacted(c)) if fits => return Ok(Some(c.report)),
            Ok(CompactOutcome::Compacted(c)) => {
                return Err(CompactError::ExceedsWindow {
                    estimated_tokens,
                    window,
                    compaction: None,
                    by_clearing: c.report.strategy == CompactionStrategy::Clear,
                });
            }
            // Another writer appended: that is the caller's to resolve, not a reason to send.
            Err(e @ CompactError::Store(_)) => {
                self.ahead_lost = e.conflict().is_some();
                return Err(e);
            }
            Ok(CompactOutcome::NothingToCompact(nothing)) => {
                (nothing.to_string(), CompactError::NothingToCompact(nothing))
            }
            Err(e) => (e.to_string(), e),
        };
        let (reason, error) = skipped;
        self.compactor.emit(CompactionEvent::AheadSkipped {
            reason,
            sending: fits,
        });
        if fits {
            Ok(None)
        } else {
            Err(CompactError::ExceedsWindow {
                estimated_tokens,
                window,
                compaction: Some(Box::new(error)),
                by_clearing: false,
            })
        }
    }

    /// After a compaction ahead, `outcome`: other writers' messages taken in after its kept
    /// turns when they came first (`rebase.rs`) were not in its plan, and when the request no
    /// longer fits the `window` with them, compacts once more from the context as written (the
    /// model's summary carried on), up to [`MAX_REBASES`](crate::MAX_REBASES) times, within the same
    /// `target_tokens`; each after the first leaves room beside its kept turns for as much
    /// again as the others' latest messages took. The rule of an overflow's recovery
    /// (`recover.rs`), ahead of the request: three writers whose replies carry thinking, at a
    /// window stated as 750 tokens, took in another writer's reply of 447 tokens, and the
    /// request (771 tokens) was refused as larger than the window, "the newest turn is too
    /// large on its own". Gives the latest compaction, or the error of one once more (a
    /// conflict is the caller's to resolve; any other leaves the compaction before it).
    async fn ahead_once_more(
        &mut self,
        mut outcome: Result<CompactOutcome, CompactError>,
        window: Window,
        target_tokens: u64,
    ) -> Result<CompactOutcome, CompactError> {
        let mut once_more = OnceMore::default();
        loop {
            let rebased = match &outcome {
                Ok(CompactOutcome::Compacted(c)) => c.report.rebased,
                _ => return outcome,
            };
            let fits = self.estimate().total() <= window.tokens;
            let Some(spare) = once_more.next(self, rebased, fits) else {
                break;
            };
            let measured = Measured::new(&self.context.messages);
            let again = CompactRun::auto()
                .with_sizes(measured.sizes().into())
                .with_target_tokens(target_tokens)
                .with_reserved_tokens(
                    self.reserved_tokens().saturating_add(spare),
                    u64::from(self.max_output_tokens),
                );
            match self.compact_with(again).await {
                Ok(CompactOutcome::NothingToCompact(_)) => break,
                Err(e) if e.conflict().is_none() => break,
                next => outcome = next,
            }
        }
        outcome
    }

    /// Refuses to begin a compaction ahead when another writer appended since this driver read
    /// the session: a summary of the context as read would lose its append (or be written
    /// after messages it never saw), so the turn says so before a model is asked; its caller
    /// reloads and sends again, and the turn then compacts ahead no more while its request
    /// fits (one head read, only on a turn that compacts ahead).
    async fn check_unchanged(&mut self) -> Result<(), CompactError> {
        let found = self
            .log
            .store()
            .head(self.log.session())
            .await
            .map_err(CompactError::Store)?;
        if found == self.log.head() {
            return Ok(());
        }
        self.ahead_lost = true;
        let store = self.log.store();
        Err(CompactError::Store(panto_store::StoreError::conflict(
            &store.location(),
            self.log.session(),
            self.log.head(),
            found,
        )))
    }
}
