//! The sampling and tool options of a request ([`RequestOptions`]): temperature, top-p,
//! reasoning effort and tool choice, each unset by default so the provider's own default holds,
//! and how the request uses the prompt cache.

use crate::cache::PromptCache;

/// Options of one request beyond the conversation. Every field is unset by default, which
/// means "the provider's default": an adapter sends only what is set, and each adapter's
/// documentation (and `docs/providers.md`) says which options its protocol cannot carry and
/// therefore ignores.
///
/// Built with [`RequestOptions::new`] and the `with_*` setters, so adding an option later
/// breaks no caller:
///
/// ```
/// use panto_provider::{ReasoningEffort, RequestOptions, ToolChoice};
///
/// let options = RequestOptions::new()
///     .with_temperature(0.2)
///     .with_reasoning_effort(ReasoningEffort::Low)
///     .with_tool_choice(ToolChoice::Tool("read".into()));
/// assert_eq!(options.temperature, Some(0.2));
/// assert_eq!(options.top_p, None);
/// ```
///
/// Beyond the modelled options, an escape hatch: fields the provider's API takes that panto
/// does not model (a beta feature's parameter, `thinking.block_binding`,
/// `context_management`, ...) and headers (a beta flag) travel as they are.
///
/// ```
/// use panto_provider::RequestOptions;
/// use serde_json::json;
///
/// let options = RequestOptions::new()
///     .with_body_field("thinking", json!({"block_binding": {"prefix_mismatch_behavior": "drop_block"}}))
///     .with_header("anthropic-beta", "thinking-binding-controls-2026-08-01");
/// assert_eq!(options.extra_headers.len(), 1);
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct RequestOptions {
    /// Sampling temperature (usually 0 to 1 or 0 to 2, depending on the provider).
    pub temperature: Option<f64>,
    /// Nucleus sampling: the probability mass the next token is drawn from.
    pub top_p: Option<f64>,
    /// How much a reasoning model should think before it answers.
    pub reasoning_effort: Option<ReasoningEffort>,
    /// Whether and which tool the model must call.
    pub tool_choice: Option<ToolChoice>,
    /// Fields added to the request body the adapter renders, after it rendered its own: an
    /// object merges key by key into the field of the same name (recursively, so `thinking`
    /// gains `block_binding` beside the budget the adapter wrote), anything else replaces it.
    /// Adapters send them as they are; the API decides what they mean.
    pub extra_body: serde_json::Map<String, serde_json::Value>,
    /// Headers added to the request, after the protocol's own and the configuration's: a header
    /// of the same name replaces theirs, except `anthropic-beta`, whose comma-separated values
    /// are joined with the adapter's. A header named like a credential is marked sensitive.
    pub extra_headers: Vec<(String, String)>,
    /// How the request uses the provider's prompt cache: on by default (the adapter places its
    /// own breakpoints where its protocol allows), [`PromptCache::off`] to leave it alone.
    pub cache: PromptCache,
}

impl RequestOptions {
    /// No option set: every provider default holds.
    pub fn new() -> RequestOptions {
        RequestOptions::default()
    }

    /// The same options with `temperature` set.
    pub fn with_temperature(mut self, temperature: f64) -> RequestOptions {
        self.temperature = Some(temperature);
        self
    }

    /// The same options with `top_p` set.
    pub fn with_top_p(mut self, top_p: f64) -> RequestOptions {
        self.top_p = Some(top_p);
        self
    }

    /// The same options with `reasoning_effort` set.
    pub fn with_reasoning_effort(mut self, effort: ReasoningEffort) -> RequestOptions {
        self.reasoning_effort = Some(effort);
        self
    }

    /// The same options with `tool_choice` set.
    pub fn with_tool_choice(mut self, choice: ToolChoice) -> RequestOptions {
        self.tool_choice = Some(choice);
        self
    }

    /// The same options with the body field `key` merged into the rendered body (see
    /// [`RequestOptions::extra_body`]); a second call for the same key merges into the first.
    pub fn with_body_field(
        mut self,
        key: impl Into<String>,
        value: serde_json::Value,
    ) -> RequestOptions {
        let key = key.into();
        match self.extra_body.get_mut(&key) {
            Some(existing) => merge_json(existing, value),
            None => {
                self.extra_body.insert(key, value);
            }
        }
        self
    }

    /// The same options with the header `name: value` on the request (see
    /// [`RequestOptions::extra_headers`]).
    pub fn with_header(
        mut self,
        name: impl Into<String>,
        value: impl Into<String>,
    ) -> RequestOptions {
        self.extra_headers.push((name.into(), value.into()));
        self
    }

    /// The same options with `cache` as the request's use of the prompt cache.
    pub fn with_cache(mut self, cache: PromptCache) -> RequestOptions {
        self.cache = cache;
        self
    }

    /// Whether no option is set.
    pub fn is_empty(&self) -> bool {
        *self == RequestOptions::default()
    }
}

/// Merges `patch` into `target`: objects key by key, recursively; any other value replaces.
///
/// This is how [`RequestOptions::extra_body`] reaches a rendered request body, written once
/// here so that every adapter, panto's or another program's, merges the same way.
pub fn merge_json(target: &mut serde_json::Value, patch: serde_json::Value) {
    match (target, patch) {
        (serde_json::Value::Object(target), serde_json::Value::Object(patch)) => {
            for (key, value) in patch {
                match target.get_mut(&key) {
                    Some(existing) => merge_json(existing, value),
                    None => {
                        target.insert(key, value);
                    }
                }
            }
        }
        (target, patch) => *target = patch,
    }
}

/// How much a reasoning model thinks before it answers. Protocols with a named level send the
/// name; those with a token budget send the budget `docs/providers.md` gives for each level.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ReasoningEffort {
    /// Little reasoning: faster and cheaper.
    Low,
    /// The usual balance.
    Medium,
    /// Deep reasoning.
    High,
}

impl ReasoningEffort {
    /// The level's name on the wire: `low`, `medium` or `high`.
    pub fn as_str(self) -> &'static str {
        match self {
            ReasoningEffort::Low => "low",
            ReasoningEffort::Medium => "medium",
            ReasoningEffort::High => "high",
        }
    }
}

/// Whether and which tool the model must call.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ToolChoice {
    /// The model decides (the default of every provider when tools are given).
    Auto,
    /// The model must not call a tool.
    None,
    /// The model must call some tool.
    Required,
    /// The model must call the tool of this name.
    Tool(String),
}
