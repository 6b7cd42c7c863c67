//! Anthropic's prompt caching, as "Prompt caching"
//! (<https://platform.claude.com/docs/en/build-with-claude/prompt-caching>) states it:
//!
//! - "Cache prefixes are created in the following order: `tools`, `system`, then `messages`";
//!   a breakpoint (`cache_control`) caches the prefix up to and including its block, and a hit
//!   needs that prefix unchanged ("100% identical prompt segments");
//! - "You can define up to 4 cache breakpoints"; the request-level `cache_control` of automatic
//!   caching is one, on the last cacheable block;
//! - "Thinking blocks cannot be explicitly marked with `cache_control`", nor can empty text
//!   blocks;
//! - "The minimum cacheable prompt length" depends on the model: a shorter prefix "will not be
//!   cached, even if marked", without an error;
//! - "the system automatically checks for cache hits at all previous content block boundaries
//!   (up to approximately 20 blocks before your explicit breakpoint)";
//! - "The cache has a minimum 5-minute lifetime" refreshed on each use, or 1 hour with
//!   `"ttl": "1h"` (beta `extended-cache-ttl-2025-04-11`); "cache entries with longer TTL must
//!   appear before shorter TTLs";
//! - usage: `cache_creation_input_tokens` (written), `cache_read_input_tokens` (read),
//!   `input_tokens` (after the last breakpoint), and `cache_creation` split by lifetime.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::{Value, json};

use super::{Billed, Entry, Refusal, canonical, chain, tokens_of};

/// The beta that enables the 1-hour lifetime.
const LONG_TTL_BETA: &str = "extended-cache-ttl-2025-04-11";

/// The most breakpoints a request may carry.
const MAX_BREAKPOINTS: usize = 4;

/// How many blocks a hit is looked for back from a breakpoint, its own included.
const LOOKBACK: usize = 20;

/// One breakpoint of a request, as the emulator read it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Breakpoint {
    /// The block it sits on, counted in prefix order (tools, system blocks, message blocks).
    pub block: usize,
    /// Whether it asks for the 1-hour lifetime.
    pub long: bool,
}

/// One block of a request in prefix order.
struct Block<'a> {
    piece: String,
    tokens: u64,
    markers: Vec<(&'a Value, String)>,
    kind: Option<&'a str>,
    empty_text: bool,
}

/// The emulated cache of one Anthropic account and model.
#[derive(Debug)]
pub struct AnthropicCache {
    entries: HashMap<u64, Entry>,
    /// The model's minimum cacheable prompt length, in the emulator's tokens.
    pub minimum: u64,
}

impl AnthropicCache {
    /// An empty cache for a model whose minimum cacheable length is `minimum`.
    pub fn new(minimum: u64) -> AnthropicCache {
        AnthropicCache {
            entries: HashMap::new(),
            minimum,
        }
    }

    /// The request's breakpoints, checked against the rules that refuse a request.
    ///
    /// # Errors
    /// The refusal the API answers: more than four breakpoints, one on a thinking or empty
    /// text block, a lifetime it does not know or without its beta, lifetimes out of order.
    pub fn breakpoints(body: &Value, betas: &[&str]) -> Result<Vec<Breakpoint>, Refusal> {
        let blocks = blocks(body);
        let mut found = Vec::new();
        for (i, block) in blocks.iter().enumerate() {
            for (marker, place) in &block.markers {
                if matches!(block.kind, Some("thinking" | "redacted_thinking")) {
                    return Err(Refusal::bad_request(format!(
                        "{place}.cache_control: Extra inputs are not permitted"
                    )));
                }
                if block.empty_text {
                    return Err(Refusal::bad_request(format!(
                        "{place}: cache_control cannot be set for empty text blocks"
                    )));
                }
                found.push(Breakpoint {
                    block: i,
                    long: lifetime(marker, place, betas)?,
                });
            }
        }
        if let Some(marker) = body.get("cache_control") {
            found.push(Breakpoint {
                block: blocks.len().saturating_sub(1),
                long: lifetime(marker, "cache_control", betas)?,
            });
        }
        if found.len() > MAX_BREAKPOINTS {
            return Err(Refusal::bad_request(format!(
                "A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. Found {}.",
                found.len()
            )));
        }
        found.sort_by_key(|b| b.block);
        if let Some(pair) = found.windows(2).find(|w| !w[0].long && w[1].long) {
            return Err(Refusal::bad_request(format!(
                "a cache_control with ttl 1h (block {}) must not come after one with ttl 5m (block {})",
                pair[1].block, pair[0].block
            )));
        }
        Ok(found)
    }

    /// Checks `body` (with the `anthropic-beta` values `betas`) at time `now`, reads and writes
    /// the cache as the API would, and says how its input is billed.
    ///
    /// # Errors
    /// As [`AnthropicCache::breakpoints`].
    pub fn check(
        &mut self,
        body: &Value,
        betas: &[&str],
        now: Duration,
    ) -> Result<Billed, Refusal> {
        let breakpoints = AnthropicCache::breakpoints(body, betas)?;
        self.entries.retain(|_, e| e.expires > now);
        let blocks = blocks(body);
        let mut hashes = Vec::with_capacity(blocks.len());
        let mut prefix = Vec::with_capacity(blocks.len());
        let (mut hash, mut total) = (0u64, 0u64);
        for block in &blocks {
            hash = chain(hash, &block.piece);
            total += block.tokens;
            hashes.push(hash);
            prefix.push(total);
        }
        let cacheable: Vec<Breakpoint> = breakpoints
            .into_iter()
            .filter(|b| prefix[b.block] >= self.minimum)
            .collect();
        // Reads: the longest prefix found cached, looking back from each breakpoint.
        let mut read = 0;
        for b in &cacheable {
            let from = b.block.saturating_sub(LOOKBACK - 1);
            if let Some(j) = (from..=b.block)
                .rev()
                .find(|&j| self.entries.contains_key(&hashes[j]))
                && let Some(entry) = self.entries.get_mut(&hashes[j])
            {
                entry.expires = now + entry.lifetime;
                read = read.max(entry.tokens);
            }
        }
        // Writes: each breakpoint's prefix beyond what is read or written already.
        let mut billed = Billed {
            cache_read: read,
            ..Billed::default()
        };
        let mut covered = read;
        for b in &cacheable {
            let lifetime = if b.long { 3600 } else { 300 };
            let tokens = prefix[b.block];
            if tokens > covered {
                if b.long {
                    billed.cache_write_long += tokens - covered;
                } else {
                    billed.cache_write += tokens - covered;
                }
                covered = tokens;
            }
            let entry = self.entries.entry(hashes[b.block]).or_insert(Entry {
                tokens,
                expires: now,
                lifetime: Duration::from_secs(lifetime),
            });
            entry.lifetime = entry.lifetime.max(Duration::from_secs(lifetime));
            entry.expires = now + entry.lifetime;
        }
        billed.input = total - covered;
        Ok(billed)
    }

    /// The `usage` object of an answer billed as `billed`, with `output` tokens.
    pub fn usage(billed: &Billed, output: u64) -> Value {
        json!({
            "input_tokens": billed.input,
            "cache_creation_input_tokens": billed.cache_write + billed.cache_write_long,
            "cache_read_input_tokens": billed.cache_read,
            "cache_creation": {
                "ephemeral_5m_input_tokens": billed.cache_write,
                "ephemeral_1h_input_tokens": billed.cache_write_long,
            },
            "output_tokens": output,
        })
    }
}

/// Whether a marker asks for the 1-hour lifetime; refused when it is not a marker the API
/// knows, or asks for an hour without the beta.
fn lifetime(marker: &Value, place: &str, betas: &[&str]) -> Result<bool, Refusal> {
    if marker.get("type").and_then(Value::as_str) != Some("ephemeral") {
        return Err(Refusal::bad_request(format!(
            "{place}.cache_control.type: Input should be 'ephemeral'"
        )));
    }
    match marker.get("ttl").map(|t| t.as_str()) {
        None | Some(Some("5m")) => Ok(false),
        Some(Some("1h")) if betas.contains(&LONG_TTL_BETA) => Ok(true),
        Some(Some("1h")) => Err(Refusal::bad_request(format!(
            "{place}.cache_control.ttl: the 1h lifetime requires the anthropic-beta header {LONG_TTL_BETA}"
        ))),
        _ => Err(Refusal::bad_request(format!(
            "{place}.cache_control.ttl: Input should be '5m' or '1h'"
        ))),
    }
}

/// The request's blocks in prefix order: each tool, each system block, each message block.
fn blocks(body: &Value) -> Vec<Block<'_>> {
    let mut out = Vec::new();
    let list = |key: &str| {
        body.get(key)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
    };
    for (i, tool) in list("tools").enumerate() {
        out.push(block(tool, "tool", format!("tools.{i}")));
    }
    match body.get("system") {
        Some(Value::String(text)) => out.push(Block {
            piece: format!(
                "system:{}",
                canonical(&json!([{"type": "text", "text": text}]))
            ),
            tokens: tokens_of(&json!({"type": "text", "text": text})),
            markers: Vec::new(),
            kind: Some("text"),
            empty_text: text.is_empty(),
        }),
        Some(Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                // A list of one text block is the same prompt as the string.
                let mut b = block(item, "system", format!("system.{i}"));
                if items.len() == 1 {
                    b.piece = format!("system:{}", canonical(&json!([item])));
                }
                out.push(b);
            }
        }
        _ => {}
    }
    for (m, message) in list("messages").enumerate() {
        let role = message.get("role").and_then(Value::as_str).unwrap_or("");
        match message.get("content") {
            Some(Value::Array(content)) => {
                for (b, item) in content.iter().enumerate() {
                    out.push(block(item, role, format!("messages.{m}.content.{b}")));
                }
            }
            Some(text) => out.push(block(text, role, format!("messages.{m}.content"))),
            None => {}
        }
    }
    out
}

/// One block, with its own marker and those of the blocks it holds (a tool result's content).
fn block<'a>(value: &'a Value, role: &str, place: String) -> Block<'a> {
    let mut markers: Vec<(&Value, String)> = value
        .get("cache_control")
        .map(|m| (m, place.clone()))
        .into_iter()
        .collect();
    if let Some(inner) = value.get("content").and_then(Value::as_array) {
        for (i, item) in inner.iter().enumerate() {
            if let Some(m) = item.get("cache_control") {
                markers.push((m, format!("{place}.content.{i}")));
            }
        }
    }
    let kind = value.get("type").and_then(Value::as_str);
    Block {
        piece: format!("{role}:{}", canonical(value)),
        tokens: tokens_of(value),
        markers,
        kind,
        empty_text: kind == Some("text")
            && value
                .get("text")
                .and_then(Value::as_str)
                .is_some_and(str::is_empty),
    }
}
