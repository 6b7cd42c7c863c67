//! How a compaction is set up and asked: the models ([`ModelRef`]), the compactor's settings
//! ([`CompactorConfig`], set once) and one run's request ([`CompactRun`]: trigger,
//! instructions, the overflow that started it).

use std::fmt;
use std::sync::Arc;

use panto_model::Trigger;
use panto_provider::{Provider, ProviderError, RequestOptions, ToolSpec};

use crate::bound::RequestBound;
use crate::source::SourceSummarizer;
use crate::window::{KnownWindows, Overflow};

/// The default keep-verbatim budget, in tokens.
pub const DEFAULT_KEEP_TOKENS: u64 = 20_000;

/// The default output limit of a compaction request, in tokens.
pub const DEFAULT_MAX_OUTPUT_TOKENS: u32 = 8_192;

/// A model to ask: a provider and a model name on it.
///
/// The active model and `compaction_model` may share a provider (another model name) or use
/// different providers altogether.
#[derive(Clone)]
#[non_exhaustive]
pub struct ModelRef {
    /// The provider that serves the model.
    pub provider: Arc<dyn Provider>,
    /// The model name, as the provider knows it.
    pub model: String,
    /// The same provider as a [`SourceSummarizer`], when it reads compaction requests from
    /// their items (see [`ModelRef::with_source`]).
    pub(crate) source: Option<Arc<dyn SourceSummarizer>>,
}

impl ModelRef {
    /// A model on a provider.
    pub fn new(provider: Arc<dyn Provider>, model: impl Into<String>) -> ModelRef {
        ModelRef {
            provider,
            model: model.into(),
            source: None,
        }
    }

    /// A model on a provider that summarizes compaction requests from the transcript items
    /// they were rendered from ([`SourceSummarizer`]): the compactor calls
    /// [`SourceSummarizer::summarize_source`] instead of [`Provider::complete`] for them.
    pub fn with_source<P>(provider: Arc<P>, model: impl Into<String>) -> ModelRef
    where
        P: Provider + SourceSummarizer + 'static,
    {
        ModelRef {
            provider: provider.clone(),
            model: model.into(),
            source: Some(provider),
        }
    }
}

impl fmt::Debug for ModelRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ModelRef")
            .field("provider", &self.provider.name())
            .field("model", &self.model)
            .finish()
    }
}

/// The settings of a [`Compactor`](crate::Compactor), given once when it is built
/// ([`Compactor::with_config`](crate::Compactor::with_config)) and the same for every run:
/// budgets and the summarizer's kind. What differs from one run to the next is a
/// [`CompactRun`]; the model's window is a [`KnownWindows`](crate::KnownWindows), which a run
/// takes and gives back updated.
///
/// `#[non_exhaustive]`: start from [`CompactorConfig::new`] (the defaults) and change what you
/// need, so a new setting breaks no caller.
///
/// ```
/// let config = panto_compact::CompactorConfig::new()
///     .with_keep_tokens(8_000)
///     .with_extractive_summaries(true);
/// assert_eq!(config.keep_tokens, 8_000);
/// assert_eq!(config.max_output_tokens, panto_compact::DEFAULT_MAX_OUTPUT_TOKENS);
/// ```
///
/// ```compile_fail,E0639
/// let config = panto_compact::CompactorConfig {
///     keep_tokens: 8_000,
///     max_output_tokens: 4_000,
///     extractive_summaries: false,
///     compaction_strategy: panto_compact::CompactionStrategy::Summary,
///     recall_tool: false,
/// };
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct CompactorConfig {
    /// The keep-verbatim budget in tokens ([`DEFAULT_KEEP_TOKENS`]). An overflow that reports
    /// the context limit caps it at a quarter of the limit for that compaction.
    pub keep_tokens: u64,
    /// The output limit of the compaction request ([`DEFAULT_MAX_OUTPUT_TOKENS`]). A request
    /// whose window is known gets less when input and output would not fit together.
    pub max_output_tokens: u32,
    /// Whether the summarizer quotes the transcript by design (panto's offline summarizer):
    /// then its summaries are not refused as echoes of the prompt or of the last message, nor
    /// as copies of the previous summary, the checks meant for models that copy instead of
    /// summarizing. `false` by default.
    pub extractive_summaries: bool,
    /// How the summary is written: panto's own ([`CompactionStrategy::Summary`], the default)
    /// or the provider's native compaction first ([`CompactionStrategy::Native`]).
    pub compaction_strategy: CompactionStrategy,
    /// Whether the agent offers its model the recall tool ([`crate::RECALL_TOOL`]): then every
    /// summary ends with a note naming it ([`crate::recall_note`]). `false` by default.
    pub recall_tool: bool,
}

/// How a compaction's summary is written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CompactionStrategy {
    /// panto's own summary: the transcript of the summarized turns, folded through as many
    /// requests as the window needs, with `compaction_model` and one fallback.
    #[default]
    Summary,
    /// The provider compacts the summarized turns itself (Anthropic's on-demand compaction,
    /// `OpenAI`'s `/responses/compact`), with the active model; the entry carries its payload,
    /// which goes back to that protocol byte for byte. Any failure (a provider without native
    /// compaction included) falls back to panto's summary.
    Native,
    /// No model: in the turns before the kept suffix, tool results larger than a placeholder,
    /// images and old thinking are replaced by placeholders that name the originals' ids
    /// (docs/session.md, "Clearings"). The summary in effect is carried on unchanged.
    Clear,
    /// A clearing first; panto's summary (of the cleared conversation) only when the clearing
    /// frees too little or leaves the next request above its target (docs/compaction.md,
    /// "Clearing and tiers").
    Tiered,
}

impl CompactionStrategy {
    /// Every strategy, in the order they are listed: the one list every other is made from
    /// (the CLI's configuration key, its errors and `panto config`). Adding a strategy:
    /// docs/architecture.md, "Adding a strategy".
    pub const ALL: [CompactionStrategy; 4] = [
        CompactionStrategy::Summary,
        CompactionStrategy::Tiered,
        CompactionStrategy::Clear,
        CompactionStrategy::Native,
    ];

    /// The names of [`CompactionStrategy::ALL`], in order.
    pub const NAMES: [&'static str; CompactionStrategy::ALL.len()] = {
        let mut names = [""; CompactionStrategy::ALL.len()];
        let mut i = 0;
        while i < names.len() {
            names[i] = CompactionStrategy::ALL[i].as_str();
            i += 1;
        }
        names
    };

    /// The name in configuration files: `summary`, `tiered`, `clear` or `native`.
    pub const fn as_str(self) -> &'static str {
        match self {
            CompactionStrategy::Summary => "summary",
            CompactionStrategy::Native => "native",
            CompactionStrategy::Clear => "clear",
            CompactionStrategy::Tiered => "tiered",
        }
    }

    /// What the strategy does, in a line for a person.
    pub const fn help(self) -> &'static str {
        match self {
            CompactionStrategy::Summary => {
                "panto's own summary, folded through as many requests as the window needs"
            }
            CompactionStrategy::Native => {
                "the provider's native compaction, with panto's summary when it fails"
            }
            CompactionStrategy::Clear => {
                "old tool results, images and thinking replaced by placeholders; no model asked"
            }
            CompactionStrategy::Tiered => {
                "a clearing first, panto's summary only when the clearing is not enough"
            }
        }
    }

    /// The strategy named `name` ([`CompactionStrategy::as_str`]), if any.
    pub fn parse(name: &str) -> Option<CompactionStrategy> {
        CompactionStrategy::ALL
            .into_iter()
            .find(|s| s.as_str() == name)
    }
}

/// What the conversation's own requests look like: the system prompt, the tools, the options
/// and the output limit. Native compaction sends the summarized turns with exactly these, as
/// Anthropic requires for the thinking of the kept turns to stay valid ("Compaction and
/// preserved thinking"); the [`Driver`](crate::Driver) gives them to every run it makes
/// ([`CompactRun::with_conversation`]).
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct Conversation {
    /// The agent's system prompt.
    pub system: String,
    /// The tools offered to the model.
    pub tools: Vec<ToolSpec>,
    /// The request options (reasoning effort, ...).
    pub options: RequestOptions,
    /// The output limit of conversation requests.
    pub max_output_tokens: u32,
}

impl Conversation {
    /// A conversation with the system prompt `system`, no tools, no options, and the default
    /// output limit.
    pub fn new(system: impl Into<String>) -> Conversation {
        Conversation {
            system: system.into(),
            max_output_tokens: DEFAULT_MAX_OUTPUT_TOKENS,
            ..Conversation::default()
        }
    }

    /// The same with `tools`.
    #[must_use]
    pub fn with_tools(mut self, tools: Vec<ToolSpec>) -> Conversation {
        self.tools = tools;
        self
    }

    /// The same with `options`.
    #[must_use]
    pub fn with_options(mut self, options: RequestOptions) -> Conversation {
        self.options = options;
        self
    }

    /// The same with the output limit `tokens`.
    #[must_use]
    pub fn with_max_output_tokens(mut self, tokens: u32) -> Conversation {
        self.max_output_tokens = tokens;
        self
    }
}

impl CompactorConfig {
    /// The defaults ([`CompactorConfig::default`]), to change with the `with_*` setters.
    pub fn new() -> CompactorConfig {
        CompactorConfig::default()
    }

    /// The config with a keep-verbatim budget of `tokens`.
    #[must_use]
    pub fn with_keep_tokens(mut self, tokens: u64) -> CompactorConfig {
        self.keep_tokens = tokens;
        self
    }

    /// The config with an output limit of `tokens` for compaction requests.
    #[must_use]
    pub fn with_max_output_tokens(mut self, tokens: u32) -> CompactorConfig {
        self.max_output_tokens = tokens;
        self
    }

    /// The config saying whether the summarizer quotes the transcript by design.
    #[must_use]
    pub fn with_extractive_summaries(mut self, extractive: bool) -> CompactorConfig {
        self.extractive_summaries = extractive;
        self
    }

    /// The config with the compaction strategy `strategy`.
    #[must_use]
    pub fn with_compaction_strategy(mut self, strategy: CompactionStrategy) -> CompactorConfig {
        self.compaction_strategy = strategy;
        self
    }

    /// The config saying whether the agent offers its model the recall tool.
    #[must_use]
    pub fn with_recall_tool(mut self, offered: bool) -> CompactorConfig {
        self.recall_tool = offered;
        self
    }
}

impl Default for CompactorConfig {
    fn default() -> CompactorConfig {
        CompactorConfig {
            keep_tokens: DEFAULT_KEEP_TOKENS,
            max_output_tokens: DEFAULT_MAX_OUTPUT_TOKENS,
            extractive_summaries: false,
            compaction_strategy: CompactionStrategy::Summary,
            recall_tool: false,
        }
    }
}

/// One compaction run, as asked: what started it, the user's extra instructions, and the
/// overflow it answers. Made per call ([`CompactRun::manual`], [`CompactRun::after_overflow`]);
/// the settings that hold for every run are the [`CompactorConfig`], and what is known of the
/// window is the [`KnownWindows`] the run is given.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct CompactRun {
    /// What started it.
    pub trigger: Trigger,
    /// Extra instructions (`/compact ARGS`), appended to the system prompt.
    pub instructions: Option<String>,
    /// For an overflow: the request the provider refused, and the numbers it gave. The run
    /// teaches the window what it says ([`KnownWindows::overflowed`]) before it plans, and it
    /// bounds the run's requests.
    pub overflow: Option<Overflow>,
    /// What the conversation's next request holds besides the summary and the kept turns, in
    /// estimated tokens: the agent's system prompt and its tools. With a known window it sizes
    /// the summary's output and the ledger's rendering, so that the request after the
    /// compaction fits. `None` counts as 0 (the `Driver` always sets it).
    pub reserved_tokens: Option<u64>,
    /// The output limit of the conversation's requests: room for the reply is kept beside the
    /// request after the compaction ([`CompactRun::reserved_within`]). `None` counts as 0.
    pub reply_tokens: Option<u64>,
    /// This run's keep-verbatim budget, given explicitly (`panto compact --keep-tokens N`):
    /// it replaces [`CompactorConfig::keep_tokens`], and a manual run does not cap it at half
    /// of the conversation ([`manual_keep_budget`](crate::manual_keep_budget)). A known
    /// window still caps it at a quarter of the window.
    pub keep_tokens: Option<u64>,
    /// Whether the compaction is written even when it would not make the conversation
    /// smaller ([`NotSmaller`](crate::NotSmaller)); `false` by default.
    pub force: bool,
    /// Whether panto's own record is written when no model could summarize
    /// ([`CompactError::no_summary_obtained`](crate::CompactError::no_summary_obtained)): the
    /// same plan and append, the summary made by panto alone, marked `degraded`. Overflow
    /// recovery sets it, so that the conversation goes on; `false` by default.
    pub record_on_failure: bool,
    /// The sizes of the context's messages as the ruler measured them
    /// ([`panto_size::Measured::sizes`]), one per message, when the caller has them: the
    /// `Driver` measures the context once on an overflow and hands them on. A compactor that
    /// sizes with the ruler (its default sizer) plans with them instead of sizing again.
    pub sizes: Option<Arc<[u64]>>,
    /// What the conversation's own requests look like (system prompt, tools, options), which
    /// native compaction sends the summarized turns with; the [`Driver`](crate::Driver) sets it
    /// on every run.
    pub conversation: Option<Conversation>,
    /// The size, in estimated tokens, that the request after the compaction should stay under,
    /// below what it must fit: a proactive compaction leaves headroom under the threshold it
    /// crossed (the [`Driver`](crate::Driver) sets half of it), so that the next sends do not
    /// compact again. The summary's kept turns and ledger rendering, and a tiered run's choice
    /// between clearing and summarizing, are budgeted from it. `None`: only the window.
    pub target_tokens: Option<u64>,
    /// A tiered run's summary of the conversation its clearing made: the keep-verbatim budget,
    /// above a quarter of the window when the tiered target leaves room for it, so that the
    /// model reads only the oldest turns the clearing could not bring under the target
    /// (`compactor/tiered.rs`). `None` for every other run.
    pub(crate) verbatim_budget: Option<u64>,
}

impl CompactRun {
    /// A manual compaction (`/compact`, `panto compact`), with optional extra instructions.
    pub fn manual(instructions: Option<String>) -> CompactRun {
        CompactRun {
            trigger: Trigger::Manual,
            instructions,
            overflow: None,
            reserved_tokens: None,
            reply_tokens: None,
            keep_tokens: None,
            force: false,
            record_on_failure: false,
            sizes: None,
            conversation: None,
            target_tokens: None,
            verbatim_budget: None,
        }
    }

    /// An automatic compaction after a context overflow that stated the limit `stated` (when
    /// `Some`), of a request whose size is not known ([`CompactRun::after_overflow`] knows it).
    pub fn overflow(stated: Option<u64>) -> CompactRun {
        CompactRun {
            trigger: Trigger::Overflow,
            overflow: Some(Overflow::stating(stated)),
            ..CompactRun::manual(None)
        }
    }

    /// A proactive compaction (trigger `auto`): the next request was estimated above the
    /// configured share of the model's window, so the conversation is compacted before it is
    /// sent. The window it is given bounds every compaction request and caps the keep budget at
    /// a quarter of it, like a limit an overflow stated; like an overflow compaction, it keeps
    /// only the turn in flight when the budget would keep every turn, and it plans the request
    /// after it to fit the window.
    pub fn auto() -> CompactRun {
        CompactRun {
            trigger: Trigger::Auto,
            ..CompactRun::manual(None)
        }
    }

    /// Whether this run must leave a conversation whose next request fits the known limit
    /// (an overflow compaction, whose request is sent again, and a proactive one, whose
    /// request is sent next): when its keep budget would keep every turn it keeps only the
    /// turn in flight, and when the kept turns and the summary would not fit, it summarizes
    /// more of them. A manual run, or an agent's own trigger, compacts as asked.
    pub fn must_fit(&self) -> bool {
        matches!(self.trigger, Trigger::Overflow | Trigger::Auto)
    }

    /// An automatic compaction after `error` (a context overflow) answered a request that panto
    /// estimated at `estimated_tokens`: the provider's numbers and the estimate bound the
    /// compaction requests.
    pub fn after_overflow(error: &ProviderError, estimated_tokens: u64) -> CompactRun {
        CompactRun {
            trigger: Trigger::Overflow,
            overflow: Some(Overflow::new(error, estimated_tokens)),
            ..CompactRun::manual(None)
        }
    }

    /// The run with what the conversation's next request holds besides the summary and the
    /// kept turns: its system prompt and tools, and its output limit (see
    /// [`CompactRun::reserved_tokens`], [`CompactRun::reply_tokens`]).
    #[must_use]
    pub fn with_reserved_tokens(mut self, tokens: u64, reply: u64) -> CompactRun {
        self.reserved_tokens = Some(tokens);
        self.reply_tokens = Some(reply);
        self
    }

    /// What the conversation's request after a compaction holds besides the summary and the
    /// kept turns, within a window of `limit` of which `windows` is known: the system prompt
    /// and tools, and the room for the reply ([`KnownWindows::reply_room`]: the whole reply
    /// when the server counts it against the window, else at most an eighth of the window).
    pub fn reserved_within(&self, limit: u64, windows: &KnownWindows) -> u64 {
        let reply = windows.reply_room(self.reply_tokens.unwrap_or(0), limit);
        self.reserved_tokens.unwrap_or(0) + reply
    }

    /// The run with the ruler's sizes of the context's messages (see [`CompactRun::sizes`]).
    #[must_use]
    pub fn with_sizes(mut self, sizes: Arc<[u64]>) -> CompactRun {
        self.sizes = Some(sizes);
        self
    }

    /// The run, recorded with `trigger` (an agent's own reason to compact,
    /// `Trigger::Other("nightly".into())`, say). The trigger is what the entry says; only
    /// `overflow` and `auto` change how the run compacts ([`CompactRun::must_fit`]), and only
    /// `manual` caps its keep budget at half of the conversation.
    #[must_use]
    pub fn with_trigger(mut self, trigger: Trigger) -> CompactRun {
        self.trigger = trigger;
        self
    }

    /// The options with extra instructions for the system prompt.
    #[must_use]
    pub fn with_instructions(mut self, instructions: impl Into<String>) -> CompactRun {
        self.instructions = Some(instructions.into());
        self
    }

    /// The run with its own keep-verbatim budget (see [`CompactRun::keep_tokens`]).
    #[must_use]
    pub fn with_keep_tokens(mut self, tokens: u64) -> CompactRun {
        self.keep_tokens = Some(tokens);
        self
    }

    /// The run, written even when it would not make the conversation smaller (`--force`,
    /// `/compact --force`) when `force` is true.
    #[must_use]
    pub fn with_force(mut self, force: bool) -> CompactRun {
        self.force = force;
        self
    }

    /// The run, with what the conversation's own requests look like (see
    /// [`CompactRun::conversation`]).
    #[must_use]
    pub fn with_conversation(mut self, conversation: Conversation) -> CompactRun {
        self.conversation = Some(conversation);
        self
    }

    /// The run, leaving the request after it under `tokens` (see
    /// [`CompactRun::target_tokens`]).
    #[must_use]
    pub fn with_target_tokens(mut self, tokens: u64) -> CompactRun {
        self.target_tokens = Some(tokens);
        self
    }

    /// The run, writing panto's own record when no model could summarize (see
    /// [`CompactRun::record_on_failure`]) when `record` is true.
    #[must_use]
    pub fn with_record_on_failure(mut self, record: bool) -> CompactRun {
        self.record_on_failure = record;
        self
    }

    /// Teaches `windows` what this run's overflow said (nothing for other runs); learning it
    /// twice changes nothing.
    pub fn teach(&self, windows: &mut KnownWindows) {
        if let Some(overflow) = &self.judged_overflow() {
            windows.overflowed(overflow);
        }
    }

    /// The run's overflow, with the output budget of the conversation's request when the run
    /// knows it ([`CompactRun::reply_tokens`]): what judges the limit it stated
    /// ([`Overflow::believed`]).
    fn judged_overflow(&self) -> Option<Overflow> {
        self.overflow.map(|o| match (o.budget, self.reply_tokens) {
            (None, Some(reply)) => o.with_budget(reply),
            _ => o,
        })
    }

    /// Whether this run answers an overflow that stated no limit, or one its own numbers
    /// contradict ([`Overflow::believed`]): then only a window stated below the request that
    /// overflowed is known ([`KnownWindows::known_limit`]).
    pub(crate) fn after_unstated_overflow(&self) -> bool {
        self.judged_overflow()
            .is_some_and(|o| o.believed().is_none())
    }

    /// The limit this run knows, in panto's estimated tokens, of `windows` (which learned the
    /// run's overflow, [`CompactRun::teach`]): see [`KnownWindows::known_limit`].
    pub fn known_limit(&self, windows: &KnownWindows) -> Option<u64> {
        windows.known_limit(self.after_unstated_overflow())
    }

    /// For an overflow whose size is known, what bounds its requests ([`RequestBound`]);
    /// `None` for other triggers and when the overflowed request's size is unknown.
    pub(crate) fn request_bound(&self, windows: &KnownWindows) -> Option<RequestBound> {
        if self.trigger != Trigger::Overflow {
            return None;
        }
        let overflow = self.overflow?;
        let conversation = overflow.counted.or(overflow.estimated)?;
        Some(RequestBound::new(conversation, windows.stated_window()))
    }

    pub(crate) fn instructions(&self) -> Option<&str> {
        self.instructions
            .as_deref()
            .map(str::trim)
            .filter(|i| !i.is_empty())
    }
}

pub(crate) fn min_known(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}
