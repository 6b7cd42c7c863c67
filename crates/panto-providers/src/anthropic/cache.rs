//! Where the Anthropic adapter places its cache breakpoints (`cache_control`), within the rules
//! of Anthropic's "Prompt caching" page
//! (<https://platform.claude.com/docs/en/build-with-claude/prompt-caching>):
//!
//! - a breakpoint caches the prefix `tools`, `system`, `messages` (in that order) up to and
//!   including the block that carries it; a request may carry at most 4 (the request-level
//!   `cache_control` of automatic caching takes one of them);
//! - a prefix shorter than the model's minimum cacheable length is not cached (no error, the
//!   slot is wasted), so no breakpoint goes where the prefix is shorter
//!   ([`minimum_cacheable_tokens`]);
//! - thinking blocks cannot carry `cache_control` (they are cached as part of the prefix), nor
//!   can an empty text block; panto never marks a block it sends byte for byte either;
//! - a hit is looked for at the breakpoint and at most 20 blocks before it, so a request whose
//!   new blocks outnumber that (a long tool loop) needs a breakpoint where the previous request
//!   ended: the bridge;
//! - `ttl: "1h"` (beta `extended-cache-ttl-2025-04-11`) keeps an entry an hour; entries with
//!   the longer lifetime must come before those with the shorter one.
//!
//! The anchors, in the order they are worth a slot: the latest block (it writes the
//! conversation for the next request), the bridge when more than 20 blocks separate it from the
//! latest, the end of `tools` and `system`, the end of the stable leading messages (a compaction
//! block), and the bridge otherwise. A read-only request (a native compaction, which no later
//! request extends) takes only anchors that earlier requests wrote: `system`, the stable
//! messages and the bridge. The caller's own breakpoints are kept and counted; past the fourth,
//! they are dropped, since the API would refuse the whole request.

use panto_model::ContentBlock;
use panto_provider::{CacheMode, CacheTtl, Request};
use panto_size::Heuristic;
use serde_json::{Map, Value, json};

/// The `anthropic-beta` value of the 1-hour cache lifetime.
pub const EXTENDED_CACHE_TTL_BETA: &str = "extended-cache-ttl-2025-04-11";

/// The most breakpoints one request may carry.
pub const MAX_BREAKPOINTS: usize = 4;

/// How many blocks before a breakpoint the API looks for a cache hit (the breakpoint's own
/// block the first of them).
pub const LOOKBACK_BLOCKS: usize = 20;

/// The minimum cacheable prompt length of `model`'s family, in tokens ("Cache limitations";
/// where pages disagree, the larger): 512 for Claude Opus 5, Fable 5 and Mythos 5; 4,096 for
/// Opus 4.5, 4.6 and 4.7 and Haiku 4.5; 2,048 for Haiku 3 and 3.5; 1,024 for the others
/// (Sonnet, Opus 4 and 4.1) and for a model panto does not know.
pub fn minimum_cacheable_tokens(model: &str) -> u64 {
    let model = model.to_ascii_lowercase();
    let has = |names: &[&str]| names.iter().any(|n| model.contains(n));
    if has(&["opus-5", "fable-5", "mythos-5"]) {
        512
    } else if has(&["opus-4-5", "opus-4-6", "opus-4-7", "haiku-4-5"]) {
        4096
    } else if has(&["3-haiku", "3-5-haiku", "haiku-3"]) {
        2048
    } else {
        1024
    }
}

/// A block of the request in prefix order, as the placement sees it.
#[derive(Debug)]
struct Slot {
    at: Where,
    /// Estimated tokens of the prefix up to and including this block.
    prefix: u64,
    /// Whether a breakpoint may go on it.
    markable: bool,
    /// Whether it is a block of an assistant message.
    assistant: bool,
}

/// Where a block sits in the body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Where {
    Tool(usize),
    System,
    Block(usize, usize),
}

/// What the conversation says about the request's blocks: how many lead it unchanged from
/// request to request (counted in rendered message blocks).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Stable {
    /// Rendered message blocks of the stable leading messages, when they could be told apart.
    pub(super) blocks: Option<usize>,
}

/// Places the adapter's breakpoints in `body` (the request body as sent, the caller's extra
/// fields merged in), and makes the caller's own acceptable: at most four in all, lifetimes
/// longest first. `tokens_of` estimates a block that is not plain JSON (a piece spliced in
/// byte for byte, named by its placeholder).
pub(super) fn place_breakpoints(
    body: &mut Value,
    request: &Request,
    stable: Stable,
    tokens_of: &dyn Fn(&Value) -> u64,
) {
    let Value::Object(map) = body else { return };
    let mut existing = count_existing(map);
    if existing > MAX_BREAKPOINTS {
        drop_excess(map, existing - MAX_BREAKPOINTS);
        existing = MAX_BREAKPOINTS;
    }
    let cache = &request.options.cache;
    if cache.is_on() {
        let slots = slots(map, tokens_of);
        let minimum = minimum_cacheable_tokens(&request.model);
        let chosen = choose(
            &slots,
            cache.mode,
            stable,
            minimum,
            MAX_BREAKPOINTS - existing,
        );
        let marker = marker(cache.ttl);
        for at in chosen {
            mark(map, at, &marker);
        }
    }
    order_lifetimes(map);
}

/// The `cache_control` value of a breakpoint with lifetime `ttl`.
fn marker(ttl: CacheTtl) -> Value {
    match ttl {
        CacheTtl::Long => json!({"type": "ephemeral", "ttl": "1h"}),
        _ => json!({"type": "ephemeral"}),
    }
}

/// Whether a body asks for the 1-hour lifetime anywhere (and so needs its beta).
pub(super) fn uses_long_lifetime(request: &Request) -> bool {
    (request.options.cache.is_on() && request.options.cache.ttl == CacheTtl::Long)
        || serde_json::to_string(&request.options.extra_body).is_ok_and(|t| t.contains("\"1h\""))
        || request.messages.iter().any(|m| {
            m.content.iter().any(|b| {
                block_extra(b)
                    .and_then(|e| e.get("cache_control"))
                    .and_then(|c| c.get("ttl"))
                    .and_then(Value::as_str)
                    == Some("1h")
            })
        })
}

fn block_extra(block: &ContentBlock) -> Option<&panto_model::Extra> {
    match block {
        ContentBlock::Text(t) => Some(&t.extra),
        ContentBlock::ToolUse(u) => Some(&u.extra),
        ContentBlock::ToolResult(r) => Some(&r.extra),
        ContentBlock::Image(i) => Some(&i.extra),
        _ => None,
    }
}

/// The breakpoints already in the body: the caller's own, and the request-level one of
/// automatic caching.
fn count_existing(map: &Map<String, Value>) -> usize {
    usize::from(map.contains_key("cache_control"))
        + every_block(map)
            .filter(|b| b.get("cache_control").is_some())
            .count()
}

/// Every block that may carry `cache_control`, in prefix order: the tools, the system blocks,
/// the message blocks.
fn every_block(map: &Map<String, Value>) -> impl Iterator<Item = &Value> {
    let list = |key: &str| map.get(key).and_then(Value::as_array).into_iter().flatten();
    let messages = list("messages")
        .filter_map(|m| m.get("content").and_then(Value::as_array))
        .flatten();
    list("tools").chain(list("system")).chain(messages)
}

/// Drops the last `excess` breakpoints of the caller's: the API refuses a request with more
/// than four.
fn drop_excess(map: &mut Map<String, Value>, mut excess: usize) {
    tracing::warn!(
        excess,
        "the request carries more than {MAX_BREAKPOINTS} cache breakpoints; the last are left out"
    );
    let mut visit = |block: &mut Value| {
        if excess > 0
            && let Some(o) = block.as_object_mut()
            && o.remove("cache_control").is_some()
        {
            excess -= 1;
        }
    };
    for key in ["messages", "system", "tools"] {
        let Some(list) = map.get_mut(key).and_then(Value::as_array_mut) else {
            continue;
        };
        for item in list.iter_mut().rev() {
            if key == "messages" {
                if let Some(content) = item.get_mut("content").and_then(Value::as_array_mut) {
                    content.iter_mut().rev().for_each(&mut visit);
                }
            } else {
                visit(item);
            }
        }
    }
    if excess > 0 {
        map.remove("cache_control");
    }
}

/// The request's blocks in prefix order, with the prefix size at each.
fn slots(map: &Map<String, Value>, tokens_of: &dyn Fn(&Value) -> u64) -> Vec<Slot> {
    let heuristic = Heuristic;
    let mut prefix = 0;
    let mut out = Vec::new();
    if let Some(tools) = map.get("tools").and_then(Value::as_array) {
        for (i, tool) in tools.iter().enumerate() {
            prefix += heuristic.text(&tool.to_string());
            out.push(Slot {
                at: Where::Tool(i),
                prefix,
                markable: tool.is_object(),
                assistant: false,
            });
        }
    }
    match map.get("system") {
        Some(Value::String(s)) if !s.is_empty() => {
            prefix += heuristic.text(s);
            out.push(Slot {
                at: Where::System,
                prefix,
                markable: true,
                assistant: false,
            });
        }
        Some(Value::Array(blocks)) if !blocks.is_empty() => {
            prefix += blocks
                .iter()
                .map(|b| heuristic.text(&b.to_string()))
                .sum::<u64>();
            out.push(Slot {
                at: Where::System,
                prefix,
                markable: blocks.last().is_some_and(markable),
                assistant: false,
            });
        }
        _ => {}
    }
    let messages = map.get("messages").and_then(Value::as_array);
    for (m, message) in messages.into_iter().flatten().enumerate() {
        let assistant = message.get("role").and_then(Value::as_str) == Some("assistant");
        let content = message.get("content").and_then(Value::as_array);
        for (b, block) in content.into_iter().flatten().enumerate() {
            prefix += tokens_of(block);
            out.push(Slot {
                at: Where::Block(m, b),
                prefix,
                markable: markable(block),
                assistant,
            });
        }
    }
    out
}

/// Whether a block may carry a breakpoint: an object panto renders (not a piece sent byte for
/// byte), not thinking, not an empty text.
fn markable(block: &Value) -> bool {
    let Some(kind) = block.get("type").and_then(Value::as_str) else {
        return false;
    };
    match kind {
        "text" => block
            .get("text")
            .and_then(Value::as_str)
            .is_some_and(|t| !t.is_empty()),
        "image" | "tool_use" | "tool_result" | "document" | "search_result" => true,
        _ => false,
    }
}

/// The anchors for a request of `mode`, at most `budget`, none where the prefix is shorter
/// than `minimum`.
fn choose(
    slots: &[Slot],
    mode: CacheMode,
    stable: Stable,
    minimum: u64,
    budget: usize,
) -> Vec<Where> {
    let usable = |i: usize| slots[i].markable && slots[i].prefix >= minimum;
    // The last markable slot at or before index `end` (exclusive).
    let last_before = |end: usize| (0..end.min(slots.len())).rev().find(|&i| usable(i));
    let messages_start = slots
        .iter()
        .position(|s| matches!(s.at, Where::Block(..)))
        .unwrap_or(slots.len());
    let latest = last_before(slots.len()).filter(|&i| i >= messages_start);
    let head = last_before(messages_start);
    let stable_end = stable
        .blocks
        .filter(|&n| n > 0)
        .and_then(|n| last_before(messages_start + n))
        .filter(|&i| i >= messages_start);
    let bridge = previous_end(slots).and_then(|end| last_before(end + 1));
    let far = match (bridge, latest) {
        (Some(b), Some(l)) => l - b >= LOOKBACK_BLOCKS,
        _ => false,
    };
    let order: Vec<Option<usize>> = match mode {
        CacheMode::Off => Vec::new(),
        CacheMode::ReadOnly => vec![bridge, head, stable_end],
        _ => vec![latest, bridge.filter(|_| far), head, stable_end, bridge],
    };
    let mut chosen: Vec<usize> = Vec::new();
    for i in order.into_iter().flatten() {
        if chosen.len() == budget {
            break;
        }
        if !chosen.contains(&i) {
            chosen.push(i);
        }
    }
    chosen.into_iter().map(|i| slots[i].at).collect()
}

/// The slot where the request before this one ended: the last block before the last assistant
/// message (a request's reply is the assistant message that follows it).
fn previous_end(slots: &[Slot]) -> Option<usize> {
    let last_reply = slots.iter().rposition(|s| s.assistant)?;
    let first = (0..=last_reply)
        .rev()
        .take_while(|&i| slots[i].assistant && same_message(slots[i].at, slots[last_reply].at))
        .last()?;
    first.checked_sub(1)
}

/// Whether two blocks belong to one message.
fn same_message(a: Where, b: Where) -> bool {
    matches!((a, b), (Where::Block(x, _), Where::Block(y, _)) if x == y)
}

/// Puts `marker` on the block at `at` (the system prompt becomes a list of one text block).
fn mark(map: &mut Map<String, Value>, at: Where, marker: &Value) {
    let block = match at {
        Where::Tool(i) => map
            .get_mut("tools")
            .and_then(Value::as_array_mut)
            .and_then(|t| t.get_mut(i)),
        Where::System => {
            if let Some(Value::String(text)) = map.get("system") {
                let text = text.clone();
                map.insert("system".into(), json!([{"type": "text", "text": text}]));
            }
            map.get_mut("system")
                .and_then(Value::as_array_mut)
                .and_then(|s| s.last_mut())
        }
        Where::Block(m, b) => map
            .get_mut("messages")
            .and_then(Value::as_array_mut)
            .and_then(|ms| ms.get_mut(m))
            .and_then(|m| m.get_mut("content"))
            .and_then(Value::as_array_mut)
            .and_then(|c| c.get_mut(b)),
    };
    if let Some(Value::Object(o)) = block {
        o.insert("cache_control".into(), marker.clone());
    }
}

/// Makes lifetimes non-increasing in prefix order: a 1-hour breakpoint after a 5-minute one
/// would be refused, so it is given the shorter lifetime.
fn order_lifetimes(map: &mut Map<String, Value>) {
    let mut short_seen = false;
    let mut visit = |block: &mut Value| {
        let Some(cc) = block
            .get_mut("cache_control")
            .and_then(Value::as_object_mut)
        else {
            return;
        };
        let long = cc.get("ttl").and_then(Value::as_str) == Some("1h");
        if long && short_seen {
            cc.insert("ttl".into(), json!("5m"));
        } else if !long {
            short_seen = true;
        }
    };
    for key in ["tools", "system", "messages"] {
        let Some(list) = map.get_mut(key).and_then(Value::as_array_mut) else {
            continue;
        };
        for item in list.iter_mut() {
            if key == "messages" {
                if let Some(content) = item.get_mut("content").and_then(Value::as_array_mut) {
                    content.iter_mut().for_each(&mut visit);
                }
            } else {
                visit(item);
            }
        }
    }
    // Automatic caching's breakpoint sits on the last block: after every other.
    if let Some(top) = map.get_mut("cache_control").and_then(Value::as_object_mut)
        && short_seen
        && top.get("ttl").and_then(Value::as_str) == Some("1h")
    {
        top.insert("ttl".into(), json!("5m"));
    }
}
