//! How a request uses the provider's prompt cache ([`PromptCache`]): whether the adapter may
//! cache at all, whether this request may write new entries, how long entries live, which
//! leading messages stay the same from request to request, and the key that groups a
//! conversation's requests.
//!
//! The caller says what it knows of the conversation (what is stable, what the request is for);
//! each adapter owns its protocol's rules (where a breakpoint may go, how many, which blocks
//! cannot carry one, which parameters a model accepts). `docs/providers.md`, "Prompt caching",
//! says what each protocol does with these.

use std::time::Duration;

/// How a request uses the prompt cache. The default caches: the adapter places its own cache
/// breakpoints where its protocol allows (Anthropic) and sends the conversation's key
/// (`OpenAI`), with the provider's short lifetime.
///
/// ```
/// use panto_provider::{CacheMode, CacheTtl, PromptCache, RequestOptions};
///
/// let options = RequestOptions::new().with_cache(
///     PromptCache::new()
///         .with_ttl(CacheTtl::Long)
///         .with_key("panto-3f9a")
///         .with_stable_messages(1),
/// );
/// assert_eq!(options.cache.mode, CacheMode::ReadWrite);
/// assert_eq!(PromptCache::off().mode, CacheMode::Off);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct PromptCache {
    /// What the adapter may do with the cache.
    pub mode: CacheMode,
    /// How long entries this request writes should live.
    pub ttl: CacheTtl,
    /// How many leading messages stay the same in the requests that follow (a compaction
    /// message at the head of the context, say): a prefix worth an anchor of its own. The
    /// system prompt and the tools are always taken as stable.
    pub stable_messages: usize,
    /// A key shared by every request of one conversation and by no other (`OpenAI`'s
    /// `prompt_cache_key`), so that its requests meet the cache they wrote. It must carry no
    /// secret and nothing a person would recognise (derive it, with a hash); `None` sends none.
    pub key: Option<String>,
}

impl Default for PromptCache {
    fn default() -> PromptCache {
        PromptCache {
            mode: CacheMode::ReadWrite,
            ttl: CacheTtl::Short,
            stable_messages: 0,
            key: None,
        }
    }
}

impl PromptCache {
    /// Caching on, short lifetime, no stable messages, no key.
    pub fn new() -> PromptCache {
        PromptCache::default()
    }

    /// Caching off: the adapter places no cache breakpoint and sends no caching parameter of
    /// its own (what the caller wrote into blocks or the body still goes).
    pub fn off() -> PromptCache {
        PromptCache {
            mode: CacheMode::Off,
            ..PromptCache::default()
        }
    }

    /// The same settings with `mode`.
    #[must_use]
    pub fn with_mode(mut self, mode: CacheMode) -> PromptCache {
        self.mode = mode;
        self
    }

    /// The same settings with `ttl`.
    #[must_use]
    pub fn with_ttl(mut self, ttl: CacheTtl) -> PromptCache {
        self.ttl = ttl;
        self
    }

    /// The same settings with `count` stable leading messages.
    #[must_use]
    pub fn with_stable_messages(mut self, count: usize) -> PromptCache {
        self.stable_messages = count;
        self
    }

    /// The same settings with the conversation's key.
    #[must_use]
    pub fn with_key(mut self, key: impl Into<String>) -> PromptCache {
        self.key = Some(key.into());
        self
    }

    /// Whether the adapter may use the cache at all.
    pub fn is_on(&self) -> bool {
        self.mode != CacheMode::Off
    }
}

/// What a request may do with the prompt cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CacheMode {
    /// Nothing of the adapter's own: no breakpoint, no key, no retention.
    Off,
    /// Read what earlier requests cached, write nothing new that no later request would read:
    /// a request that reuses the conversation's prefix once (a native compaction) and is
    /// followed by none that shares its end.
    ReadOnly,
    /// Read what is cached and write the rest for the next request (a conversation turn).
    ReadWrite,
}

/// How long cache entries should live. Each protocol maps it to what it offers
/// (`docs/providers.md`, "Prompt caching").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum CacheTtl {
    /// The provider's default: Anthropic's 5 minutes (writes cost 1.25× the input price),
    /// `OpenAI`'s in-memory retention (cleared after 5 to 10 idle minutes, always within an
    /// hour).
    #[default]
    Short,
    /// Longer: Anthropic's 1 hour (writes cost 2×, with the `extended-cache-ttl-2025-04-11`
    /// beta), `OpenAI`'s extended retention (`prompt_cache_retention: "24h"`) on the models
    /// that offer it.
    Long,
}

impl CacheTtl {
    /// The name a configuration file uses: `5m` or `1h`.
    pub fn as_str(self) -> &'static str {
        match self {
            CacheTtl::Short => "5m",
            CacheTtl::Long => "1h",
        }
    }

    /// Parses `5m` or `1h`.
    pub fn parse(text: &str) -> Option<CacheTtl> {
        match text {
            "5m" => Some(CacheTtl::Short),
            "1h" => Some(CacheTtl::Long),
            _ => None,
        }
    }

    /// How long after its last use an entry can be counted on, on every protocol: 5 minutes
    /// or 1 hour (Anthropic's lifetimes; `OpenAI` keeps an in-memory entry at least that long
    /// when idle, and an extended one longer). After this much idle time the cache is taken
    /// as cold.
    pub fn lifetime(self) -> Duration {
        match self {
            CacheTtl::Short => Duration::from_secs(5 * 60),
            CacheTtl::Long => Duration::from_secs(60 * 60),
        }
    }
}
