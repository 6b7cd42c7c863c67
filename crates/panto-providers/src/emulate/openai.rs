//! `OpenAI`'s automatic prompt caching, as "Prompt caching"
//! (<https://developers.openai.com/api/docs/guides/prompt-caching>) states it for the models
//! before GPT-5.6:
//!
//! - "Caching is enabled automatically for prompts that are 1024 tokens or longer", and "cache
//!   hits occur in increments of 128 tokens" from there; "the entire request prefix is
//!   cacheable: messages, images, tools", matched exactly from the start;
//! - "Requests are routed to a machine based on a hash of the initial prefix of the prompt"
//!   (about the first 256 tokens), combined with `prompt_cache_key` when given: a cache
//!   written under one key is not met under another;
//! - in-memory entries are "typically cleared within 5 to 10 minutes of inactivity" (5 here);
//!   `prompt_cache_retention: "24h"` keeps them up to 24 hours on the models that offer it,
//!   the only retention of GPT-5.5 and later ("This model is compatible only with 24h extended
//!   prompt caching" answers `in_memory` there);
//! - usage: `prompt_tokens_details.cached_tokens` (Chat Completions) and
//!   `input_tokens_details.cached_tokens` (Responses), inside the prompt's count.

use std::collections::HashMap;
use std::time::Duration;

use panto_transcript::cut::{self, Budget, Cut};
use serde_json::{Value, json};

use super::{Billed, Refusal, canonical};
use crate::shared::{Retention, retention_offered};

/// The shortest prompt that is cached, in tokens.
const MINIMUM: u64 = 1024;

/// The step of a cache hit beyond the minimum, in tokens.
const STEP: u64 = 128;

/// The bytes of the prompt's start that route it (about 256 tokens).
const ROUTING_BYTES: usize = 1024;

/// How many prompts a route keeps.
const KEPT: usize = 8;

/// Which `OpenAI` protocol a request speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpenAiFlavor {
    /// Chat Completions: `messages`, usage `prompt_tokens`.
    Chat,
    /// Responses: `instructions` and `input`, usage `input_tokens`.
    Responses,
}

/// One prompt a machine holds.
#[derive(Debug)]
struct Held {
    text: String,
    expires: Duration,
}

/// The emulated caches of `OpenAI`'s machines, by route.
#[derive(Debug, Default)]
pub struct OpenAiCache {
    routes: HashMap<String, Vec<Held>>,
}

impl OpenAiCache {
    /// Empty caches.
    pub fn new() -> OpenAiCache {
        OpenAiCache::default()
    }

    /// Checks `body` at time `now`, reads and writes the cache as the API would, and says how
    /// its input is billed.
    ///
    /// # Errors
    /// A retention the model does not offer, or one the API does not know.
    pub fn check(
        &mut self,
        body: &Value,
        flavor: OpenAiFlavor,
        now: Duration,
    ) -> Result<Billed, Refusal> {
        let model = body.get("model").and_then(Value::as_str).unwrap_or("");
        let lifetime = retention(body, model)?;
        let text = prompt_text(body, flavor);
        let total = text.len() as u64 / 4;
        let key = body
            .get("prompt_cache_key")
            .and_then(Value::as_str)
            .unwrap_or("");
        let head = cut::head(&text, Budget::bytes(ROUTING_BYTES), Cut::Char);
        let route = format!("{key}\u{0}{}", super::chain(0, head));
        let held = self.routes.entry(route).or_default();
        held.retain(|h| h.expires > now);
        let common = held
            .iter_mut()
            .map(|h| {
                let n = common_prefix(&h.text, &text);
                if n > 0 {
                    h.expires = h.expires.max(now + lifetime);
                }
                n
            })
            .max()
            .unwrap_or(0) as u64
            / 4;
        let cached = if total >= MINIMUM && common >= MINIMUM {
            MINIMUM + (common.min(total) - MINIMUM) / STEP * STEP
        } else {
            0
        };
        if total >= MINIMUM {
            held.push(Held {
                text,
                expires: now + lifetime,
            });
            if held.len() > KEPT {
                held.remove(0);
            }
        }
        Ok(Billed {
            input: total - cached,
            cache_read: cached,
            ..Billed::default()
        })
    }

    /// The `usage` object of an answer billed as `billed`, with `output` tokens.
    pub fn usage(billed: &Billed, output: u64, flavor: OpenAiFlavor) -> Value {
        let prompt = billed.total();
        match flavor {
            OpenAiFlavor::Chat => json!({
                "prompt_tokens": prompt,
                "completion_tokens": output,
                "total_tokens": prompt + output,
                "prompt_tokens_details": {"cached_tokens": billed.cache_read},
            }),
            OpenAiFlavor::Responses => json!({
                "input_tokens": prompt,
                "output_tokens": output,
                "total_tokens": prompt + output,
                "input_tokens_details": {"cached_tokens": billed.cache_read},
            }),
        }
    }
}

/// How long the request's prompt stays cached, refusing a retention the model does not offer.
fn retention(body: &Value, model: &str) -> Result<Duration, Refusal> {
    let offered = retention_offered(model);
    let long = Duration::from_secs(24 * 3600);
    let short = Duration::from_secs(300);
    match (
        body.get("prompt_cache_retention").map(Value::as_str),
        offered,
    ) {
        (None, Retention::Extended) => Ok(long),
        (None | Some(Some("in_memory")), Retention::InMemory | Retention::Both) => Ok(short),
        (Some(Some("in_memory")), Retention::Extended) => Err(Refusal::bad_request(
            "This model is compatible only with 24h extended prompt caching",
        )),
        (Some(Some("24h")), Retention::Both | Retention::Extended) => Ok(long),
        (Some(Some("24h")), Retention::InMemory) => Err(Refusal::bad_request(format!(
            "prompt_cache_retention: extended prompt caching is not supported for model {model}"
        ))),
        _ => Err(Refusal::bad_request(
            "prompt_cache_retention: Input should be 'in_memory' or '24h'",
        )),
    }
}

/// The prompt as compared for a prefix match: the tools, then the instructions, then the
/// conversation, each item's canonical JSON on a line.
fn prompt_text(body: &Value, flavor: OpenAiFlavor) -> String {
    let mut text = String::new();
    let mut push = |v: &Value| {
        text.push_str(&canonical(v));
        text.push('\n');
    };
    if let Some(tools) = body.get("tools") {
        push(tools);
    }
    let items = match flavor {
        OpenAiFlavor::Chat => "messages",
        OpenAiFlavor::Responses => {
            if let Some(instructions) = body.get("instructions") {
                push(instructions);
            }
            "input"
        }
    };
    for item in body
        .get(items)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        push(item);
    }
    text
}

/// The length in bytes of the longest common prefix of two texts.
fn common_prefix(a: &str, b: &str) -> usize {
    a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count()
}
