//! The sampling and tool options of a request ([`RequestOptions`]): temperature, top-p,
//! reasoning effort and tool choice, each unset by default so the provider's own default holds.

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

    /// Whether no option is set.
    pub fn is_empty(&self) -> bool {
        *self == RequestOptions::default()
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
