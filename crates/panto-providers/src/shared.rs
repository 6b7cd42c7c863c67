//! Protocol pieces more than one adapter uses, written once: the key header, tool arguments as JSON strings, the cached-prompt usage arithmetic, the `OpenAI` caching parameters, the
//! stop-reason mapping and the assembly of an assistant message.

use panto_model::stop_reason;
use panto_model::{ContentBlock, Message, Name, Role, Usage};
use panto_provider::{CacheTtl, ReasoningEffort, Request, RequestOptions, ToolChoice};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::{Map, Value, json};

use crate::secret::ApiKey;

/// Puts the key into header `name` (after `prefix`, such as `Bearer `), marked sensitive so
/// that the HTTP stack never logs it. An empty key sends no header: keyless local servers.
pub(crate) fn key_header(headers: &mut HeaderMap, name: HeaderName, prefix: &str, key: &ApiKey) {
    if key.is_empty() {
        return;
    }
    // The transport refuses, when it is built, a key that cannot go in a header.
    if let Ok(mut value) = HeaderValue::from_str(&format!("{prefix}{}", key.expose())) {
        value.set_sensitive(true);
        headers.insert(name, value);
    }
}

/// Tool arguments as the JSON string the `OpenAI` protocols carry. A string input is arguments
/// that did not parse when they arrived, sent back exactly as received.
pub(crate) fn arguments(input: &Value) -> String {
    match input {
        Value::String(raw) => raw.clone(),
        Value::Null => "{}".to_owned(),
        other => other.to_string(),
    }
}

/// Parses tool arguments; text that is not JSON is kept as a string so that it survives.
pub(crate) fn parse_arguments(raw: &str) -> Value {
    if raw.trim().is_empty() {
        return json!({});
    }
    serde_json::from_str(raw).unwrap_or_else(|_| Value::String(raw.to_owned()))
}

/// Usage on the Contract 1 names from a protocol that counts the cached part inside the
/// prompt: `input_tokens` is the prompt minus its cached part, read (`cached`, which goes to
/// `cache_read_input_tokens`) or written (`written`, `OpenAI`'s `cache_write_tokens` from
/// GPT-5.6 on, which goes to `cache_creation_input_tokens`); each is absent when the server did
/// not report it. Counts larger than the prompt are read as the whole prompt.
pub(crate) fn cached_prompt_usage(
    prompt: u64,
    output: u64,
    cached: Option<u64>,
    written: Option<u64>,
) -> Usage {
    let cached = cached.map(|c| c.min(prompt));
    let written = written.map(|w| w.min(prompt - cached.unwrap_or(0)));
    let mut usage = Usage::new(prompt - cached.unwrap_or(0) - written.unwrap_or(0), output);
    usage.cache_read_input_tokens = cached;
    usage.cache_creation_input_tokens = written;
    usage
}

/// The caching parameters of the `OpenAI` protocols (Chat Completions and Responses): the
/// conversation's `prompt_cache_key`, and `prompt_cache_retention: "24h"` when the request
/// asks for the long lifetime and the model offers extended retention
/// ([`extended_retention`]). Nothing when caching is off.
pub(crate) fn insert_cache_params(request: &Request, body: &mut Map<String, Value>) {
    let cache = &request.options.cache;
    if !cache.is_on() {
        return;
    }
    if let Some(key) = &cache.key {
        body.insert("prompt_cache_key".into(), json!(key));
    }
    if cache.ttl == CacheTtl::Long && extended_retention(&request.model) {
        body.insert("prompt_cache_retention".into(), json!("24h"));
    }
}

/// The prompt cache retentions `OpenAI` offers for a model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Retention {
    /// In memory only (the default).
    InMemory,
    /// In memory (the default) or extended, `"24h"`.
    Both,
    /// Extended only, the default (GPT-5.5 and later).
    Extended,
}

/// Whether `OpenAI` offers extended prompt cache retention (`"24h"`) for `model`: the models the
/// "Prompt caching" guide lists (GPT-4.1, GPT-5, GPT-5-Codex, the GPT-5.1 family, GPT-5.2,
/// GPT-5.3-Codex, GPT-5.4; dated releases of each included), and GPT-5.5 and every later model,
/// for which it is the only retention.
pub(crate) fn extended_retention(model: &str) -> bool {
    retention_offered(model) != Retention::InMemory
}

/// The retentions `OpenAI` offers for `model` (see [`extended_retention`]).
pub(crate) fn retention_offered(model: &str) -> Retention {
    const LISTED: &[&str] = &[
        "gpt-4.1",
        "gpt-5",
        "gpt-5-codex",
        "gpt-5.1",
        "gpt-5.1-codex",
        "gpt-5.1-codex-mini",
        "gpt-5.1-codex-max",
        "gpt-5.1-chat-latest",
        "gpt-5.2",
        "gpt-5.3-codex",
        "gpt-5.4",
    ];
    let model = model
        .rsplit('/')
        .next()
        .unwrap_or(model)
        .to_ascii_lowercase();
    let later = model.strip_prefix("gpt-").is_some_and(|version| {
        let mut parts = version.splitn(2, '.');
        let major = parts.next().and_then(|m| m.parse::<u32>().ok());
        let minor = parts
            .next()
            .and_then(|m| m.split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|m| m.parse::<u32>().ok());
        match (major, minor) {
            (Some(m), _) if m > 5 => true,
            (Some(5), Some(n)) => n >= 5,
            _ => false,
        }
    });
    if later {
        return Retention::Extended;
    }
    let listed = LISTED.iter().any(|name| {
        model == *name
            || model
                .strip_prefix(name)
                .is_some_and(|rest| rest.starts_with("-20"))
    });
    if listed {
        Retention::Both
    } else {
        Retention::InMemory
    }
}

/// How one protocol names its stop reasons, for [`stop_reason`].
pub(crate) struct StopReasons {
    /// The reason of a natural end, which is `tool_use` when the answer calls tools.
    pub(crate) end: &'static str,
    /// The protocol's other reasons and the session-file name of each.
    pub(crate) map: &'static [(&'static str, &'static str)],
}

/// Maps a protocol's stop reason onto the one vocabulary of [`panto_model::stop_reason`]
/// (Anthropic's names, which the session file uses); a reason with no mapping is kept as the
/// protocol said it.
pub(crate) fn map_stop_reason(reasons: &StopReasons, reason: &str, has_calls: bool) -> Name {
    if reason == reasons.end {
        return if has_calls {
            stop_reason::TOOL_USE
        } else {
            stop_reason::END_TURN
        }
        .into();
    }
    reasons
        .map
        .iter()
        .find(|(from, _)| *from == reason)
        .map_or(reason, |(_, to)| to)
        .into()
}

/// Whether the content calls a tool.
pub(crate) fn has_calls(content: &[ContentBlock]) -> bool {
    content
        .iter()
        .any(|b| matches!(b, ContentBlock::ToolUse(_)))
}

/// The assistant message of an answer; an answer with no content gets one empty text block,
/// since a message always has one.
pub(crate) fn assistant(mut content: Vec<ContentBlock>) -> Message {
    if content.is_empty() {
        content.push(ContentBlock::text(""));
    }
    Message::new(Role::Assistant, content)
}

/// The thinking budget in tokens that stands for a reasoning effort in protocols that take a
/// budget rather than a level (Anthropic, Gemini): 1,024, 8,192 or 24,576.
pub(crate) fn reasoning_budget(effort: ReasoningEffort) -> u32 {
    match effort {
        ReasoningEffort::Low => 1024,
        ReasoningEffort::Medium => 8192,
        // High, and any level added later, gets the largest budget.
        _ => 24_576,
    }
}

/// Puts the temperature and top-p the options set into `map` (the body, or Gemini's
/// generation config), top-p under `top_p_name`.
pub(crate) fn insert_sampling(
    options: &RequestOptions,
    map: &mut Map<String, Value>,
    top_p_name: &str,
) {
    if let Some(t) = options.temperature {
        map.insert("temperature".into(), json!(t));
    }
    if let Some(p) = options.top_p {
        map.insert(top_p_name.into(), json!(p));
    }
}

/// The tool choice to send: the request's, unless the request offers no tools (every protocol
/// refuses a choice among no tools).
pub(crate) fn tool_choice(request: &Request) -> Option<&ToolChoice> {
    request
        .options
        .tool_choice
        .as_ref()
        .filter(|_| !request.tools.is_empty())
}
