//! What a driver's requests cost, and whether the prompt cache is warm: the replies and
//! compactions it paid for, priced by the one function of `panto_model` (`usage_cost`), and
//! the clock by which it knows how long the conversation has been idle.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use panto_model::{CacheRates, Cost, Message, Prices, usage_cost};
use panto_store::Store;

use super::Driver;
use crate::report::CompactionReport;

/// The part of the configured share at which a conversation whose cache went cold is
/// compacted ahead (see `cache_aware_share`).
pub const COLD_SHARE: f64 = 0.75;

/// Which parts of the cache-aware proactive rule a driver applies
/// ([`Driver::with_cache_aware_parts`]; docs/compaction.md, "Compaction that respects the
/// cache"): compacting earlier once the cache has gone cold, and waiting past the share while
/// it is warm. By default only the cold part: measured over windows of 24,000 to 64,000 and
/// three patterns of pauses (`cargo xtask bench cost --sweep`), it never cost more than the
/// plain share and saved up to 12.5%, while the warm wait cost up to 6.2% more.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct CacheAware {
    /// Compact at [`COLD_SHARE`] of the share when the conversation has been idle past the
    /// cache's lifetime.
    pub cold: bool,
    /// Wait past the share while the cache holds a large prefix, on a model whose cache writes
    /// cost a premium.
    pub warm: bool,
    /// When the warm wait moved the share, compact to the headroom of the configured share (half
    /// of it) rather than of the waited one, so that the waited compaction keeps no more than a
    /// plain one. Off in every preset: measured (`cargo xtask bench cost --sweep-warm`), it
    /// halves the warm wait's extra cost at small windows but still costs more than the plain
    /// share (docs/compaction.md).
    pub warm_keeps_share: bool,
}

impl CacheAware {
    /// The default: the cold part alone.
    pub const DEFAULT: CacheAware = CacheAware {
        cold: true,
        warm: false,
        warm_keeps_share: false,
    };

    /// Both parts on.
    pub const ON: CacheAware = CacheAware {
        cold: true,
        warm: true,
        warm_keeps_share: false,
    };

    /// Both parts off: the configured share whatever the cache holds.
    pub const OFF: CacheAware = CacheAware {
        cold: false,
        warm: false,
        warm_keeps_share: false,
    };

    /// With the cold part on or off.
    pub const fn with_cold(mut self, cold: bool) -> CacheAware {
        self.cold = cold;
        self
    }

    /// With the warm part on or off.
    pub const fn with_warm(mut self, warm: bool) -> CacheAware {
        self.warm = warm;
        self
    }

    /// With a warm wait's compaction keeping the configured share's headroom, or the waited
    /// share's (see [`CacheAware::warm_keeps_share`]).
    pub const fn with_warm_keeps_share(mut self, keeps: bool) -> CacheAware {
        self.warm_keeps_share = keeps;
        self
    }
}

impl Default for CacheAware {
    fn default() -> CacheAware {
        CacheAware::DEFAULT
    }
}

/// A monotonic clock: the time since some fixed instant. The driver reads it to know how long
/// the conversation has been idle (a benchmark or a test gives a virtual one).
pub type Clock = Arc<dyn Fn() -> Duration + Send + Sync>;

/// What a driver has paid for and when it last asked.
pub(super) struct Accounts {
    pub(super) prices: Prices,
    pub(super) replies: Cost,
    pub(super) compactions: Cost,
    /// The cache writes of the first reply after the latest compaction, when it came.
    pub(super) after_compaction: Option<u64>,
    /// Whether the next reply is the first after a compaction.
    pub(super) compacted: bool,
    pub(super) clock: Clock,
    pub(super) last_sent: Option<Duration>,
    /// Whether the latest reply's request found or left most of its input in the cache (its
    /// usage says so): a large prefix is cached.
    pub(super) large_prefix_cached: bool,
    /// Which parts of the cache-aware rule apply (the cold one by default).
    pub(super) cache_aware: CacheAware,
}

impl Default for Accounts {
    fn default() -> Accounts {
        let start = Instant::now();
        Accounts {
            prices: Prices::new(),
            replies: Cost::default(),
            compactions: Cost::default(),
            after_compaction: None,
            compacted: false,
            clock: Arc::new(move || start.elapsed()),
            last_sent: None,
            large_prefix_cached: false,
            cache_aware: CacheAware::DEFAULT,
        }
    }
}

impl fmt::Debug for Accounts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Accounts")
            .field("replies", &self.replies)
            .field("compactions", &self.compactions)
            .field("last_sent", &self.last_sent)
            .finish_non_exhaustive()
    }
}

/// What a driver's requests cost so far ([`Driver::spent`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Spent {
    /// The conversation's replies.
    pub replies: Cost,
    /// The compactions' own requests (their summaries).
    pub compactions: Cost,
    /// The cache writes of the first reply after the latest compaction: what the compaction
    /// made the next request write again.
    pub written_after_compaction: Option<u64>,
}

impl Spent {
    /// Replies and compactions together.
    pub fn total(&self) -> Cost {
        self.replies + self.compactions
    }
}

impl<S: Store> Driver<S> {
    /// The driver, pricing its requests with `prices` (the user's `[prices]`; without, costs
    /// are in tokens only).
    pub fn with_prices(mut self, prices: Prices) -> Driver<S> {
        self.accounts.prices = prices;
        self
    }

    /// The driver, moving the share it compacts ahead at with the prompt cache (`true`, the
    /// default, [`CacheAware::DEFAULT`]; docs/compaction.md, "Compaction that respects the
    /// cache") or not (`false`: the configured share whatever the cache holds).
    pub fn with_cache_aware_compaction(self, aware: bool) -> Driver<S> {
        self.with_cache_aware_parts(if aware {
            CacheAware::DEFAULT
        } else {
            CacheAware::OFF
        })
    }

    /// The driver, applying the parts `parts` of the cache-aware rule (to measure each alone:
    /// `cargo xtask bench cost --sweep`).
    pub fn with_cache_aware_parts(mut self, parts: CacheAware) -> Driver<S> {
        self.accounts.cache_aware = parts;
        self
    }

    /// The driver, reading the time from `clock` (to know how long the conversation has been
    /// idle, and so whether the provider's cache is still warm).
    pub fn with_clock(mut self, clock: Clock) -> Driver<S> {
        self.accounts.clock = clock;
        self
    }

    /// What this driver's requests cost so far: every reply it received and every compaction
    /// it ran, weighed by `panto_model::usage_cost` (cache-weighted tokens, and money with
    /// prices).
    pub fn spent(&self) -> Spent {
        Spent {
            replies: self.accounts.replies,
            compactions: self.accounts.compactions,
            written_after_compaction: self.accounts.after_compaction,
        }
    }

    /// How long since this driver last sent a request, when it has sent one.
    pub fn idle(&self) -> Option<Duration> {
        let now = (self.accounts.clock)();
        self.accounts.last_sent.map(|t| now.saturating_sub(t))
    }

    /// Whether the provider's prompt cache is known to be cold: caching is on, and the
    /// conversation has been idle longer than the cache's lifetime. Unknown (nothing sent yet
    /// by this driver) is not cold.
    pub fn cache_cold(&self) -> bool {
        let cache = &self.options.cache;
        cache.is_on() && self.idle().is_some_and(|idle| idle >= cache.ttl.lifetime())
    }

    /// Whether the provider's prompt cache is known to hold a large prefix of the next request:
    /// caching is on, the latest reply's usage shows at least half of its input read from or
    /// written to the cache, and the conversation has been idle less than the cache's lifetime.
    pub fn cache_warm(&self) -> bool {
        self.options.cache.is_on()
            && self.accounts.large_prefix_cached
            && self.accounts.last_sent.is_some()
            && !self.cache_cold()
    }

    /// The share of the window above which the driver compacts ahead, `share` being the
    /// configured one, given the prompt cache and the parts of the rule in force
    /// ([`CacheAware`]; docs/compaction.md, "Compaction that respects the cache"):
    /// - cold (idle past the cache's lifetime, [`Driver::cache_cold`]): [`COLD_SHARE`] of
    ///   `share`, earlier, since the next request writes its whole prompt anyway and a
    ///   compaction now loses no read (the default);
    /// - warm, with the warm part on (not the default: measured, it costs more than it saves),
    ///   on a model whose cache writes cost more than plain input (Anthropic, `OpenAI` from
    ///   GPT-5.6, `panto_model::CacheRates`): halfway from `share` to the most the request may
    ///   take of `window` with `reply_tokens` kept for the reply, later, since the next request
    ///   reads its prefix from the cache ([`Driver::cache_warm`]) and compacting would make it
    ///   write a new one at that premium;
    /// - otherwise (caching off, a provider that reports no caching, nothing sent yet by
    ///   this driver): `share`.
    pub(super) fn cache_aware_share(&self, share: f64, window: u64, reply_tokens: u64) -> f64 {
        let parts = self.accounts.cache_aware;
        if !(parts.cold || parts.warm)
            || !self.options.cache.is_on()
            || !self.accounts.large_prefix_cached
        {
            return share;
        }
        if self.cache_cold() {
            return if parts.cold {
                share * COLD_SHARE
            } else {
                share
            };
        }
        // Waiting saves rewriting the prefix at a premium; where writes cost the plain input
        // price, it only makes every request read a larger one (measured: docs/compaction.md).
        let premium = CacheRates::for_model(&self.compactor.active().model).write > 1.0;
        if !parts.warm || !self.cache_warm() || !premium {
            return share;
        }
        #[expect(
            clippy::cast_precision_loss,
            reason = "a share of a window, for a threshold in tokens"
        )]
        let most = 1.0 - reply_tokens as f64 / window.max(1) as f64;
        share.max((share + most) / 2.0).min(most.max(share))
    }

    /// The share whose headroom (half of it) a compaction ahead at `in_force` (the share
    /// [`Driver::cache_aware_share`] gave for the configured `share`) compacts to: the share in
    /// force, or the configured one after a warm wait when [`CacheAware::warm_keeps_share`].
    pub(super) fn headroom_share(&self, share: f64, in_force: f64) -> f64 {
        if in_force > share && self.accounts.cache_aware.warm_keeps_share {
            share
        } else {
            in_force
        }
    }

    /// Notes that a request is being sent now.
    pub(super) fn note_sent(&mut self) {
        self.accounts.last_sent = Some((self.accounts.clock)());
    }

    /// Counts a reply (the compactions before it were counted when they were written,
    /// [`Driver::count_compaction`]).
    pub(super) fn count_reply(&mut self, reply: &Message) {
        self.accounts.large_prefix_cached = reply.usage.as_ref().is_some_and(|u| {
            let cached =
                u.cache_read_input_tokens.unwrap_or(0) + u.cache_creation_input_tokens.unwrap_or(0);
            cached > 0 && cached * 2 >= u.input_total()
        });
        if let Some(usage) = &reply.usage {
            let model = reply
                .model
                .as_deref()
                .unwrap_or(&self.compactor.active().model);
            let cost = usage_cost(usage, Some(model), &self.accounts.prices);
            if std::mem::take(&mut self.accounts.compacted) {
                self.accounts.after_compaction = Some(cost.cache_write_tokens);
            }
            self.accounts.replies += cost;
        }
    }

    /// Counts a compaction's own requests, when it is written: paid for whatever comes after
    /// it (a retry that overflows again, a compaction once more that replaces it).
    pub(super) fn count_compaction(&mut self, report: &CompactionReport) {
        self.accounts.compacted = true;
        if let Some(usage) = &report.usage {
            let cost = usage_cost(usage, Some(&report.model), &self.accounts.prices);
            self.accounts.compactions += cost;
        }
    }
}
