//! Messages, roles, content blocks and usage: the Contract 1 shapes in memory.
//!
//! Every struct keeps the fields it does not know in `extra` as their exact text, so a value read
//! from a session file and written back gives the same bytes for them. (De)serialisation is
//! hand-written in [`crate::serde_impl`] so that one pass over the bytes builds the typed value,
//! with no intermediate buffering.
//!
//! Why one file: these are the shapes of Contract 1's messages, each short, read together against
//! docs/session.md; splitting them would scatter the contract.

use serde_json::Value;

pub use crate::json::{Extra, RawJson};
pub use crate::name::Name;

/// Who wrote a message. The system prompt is configuration, never part of the session.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// The person, or tool results sent on their behalf.
    User,
    /// The model.
    Assistant,
}

impl Role {
    /// The wire name: `user` or `assistant`.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::User => "user",
            Role::Assistant => "assistant",
        }
    }
}

/// One message of the conversation, with the entry-level fields panto reads.
///
/// Invariant: `content` of a message read from a file may be empty (validation reports it);
/// panto never writes a message with empty content.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Message {
    /// The entry id, when the file carries one. panto fills it when it appends.
    pub id: Option<Name>,
    /// The author.
    pub role: Role,
    /// The content blocks, in order.
    pub content: Vec<ContentBlock>,
    /// The model that wrote an assistant message.
    pub model: Option<Name>,
    /// Why the model stopped, in the one vocabulary of [`stop_reason`](crate::stop_reason)
    /// (`end_turn`, `tool_use`, `max_tokens`, ...): the adapters normalise each protocol's own
    /// words to it, and a message read from a file keeps whatever text the file had.
    pub stop_reason: Option<Name>,
    /// Token accounting of the request that produced an assistant message.
    pub usage: Option<Usage>,
    /// Fields panto does not model, kept verbatim.
    pub extra: Extra,
}

impl Message {
    /// A message with the given role and blocks and nothing else.
    pub fn new(role: Role, content: Vec<ContentBlock>) -> Message {
        Message {
            id: None,
            role,
            content,
            model: None,
            stop_reason: None,
            usage: None,
            extra: Extra::new(),
        }
    }

    /// The message with entry id `id`.
    #[must_use]
    pub fn with_id(mut self, id: impl Into<Name>) -> Message {
        self.id = Some(id.into());
        self
    }

    /// The message marked as written by `model`.
    #[must_use]
    pub fn with_model(mut self, model: impl Into<Name>) -> Message {
        self.model = Some(model.into());
        self
    }

    /// The message with the provider's stop reason.
    #[must_use]
    pub fn with_stop_reason(mut self, stop_reason: impl Into<Name>) -> Message {
        self.stop_reason = Some(stop_reason.into());
        self
    }

    /// The message with the token accounting of the request that produced it.
    #[must_use]
    pub fn with_usage(mut self, usage: Usage) -> Message {
        self.usage = Some(usage);
        self
    }

    /// A user message holding one text block.
    pub fn user_text(text: impl Into<String>) -> Message {
        Message::new(Role::User, vec![ContentBlock::text(text)])
    }

    /// An assistant message holding one text block.
    pub fn assistant_text(text: impl Into<String>) -> Message {
        Message::new(Role::Assistant, vec![ContentBlock::text(text)])
    }

    /// The user message that carries a compaction summary at the head of an effective context.
    pub fn compaction(summary: impl Into<String>) -> Message {
        Message::new(
            Role::User,
            vec![ContentBlock::Compaction(CompactionBlock::new(summary))],
        )
    }

    /// The ids of the tool calls this message makes, in order.
    pub fn tool_use_ids(&self) -> impl Iterator<Item = &str> {
        self.content.iter().filter_map(|b| match b {
            ContentBlock::ToolUse(u) => Some(u.id.as_str()),
            _ => None,
        })
    }

    /// The tool-call ids this message answers with tool results, in order.
    pub fn tool_result_ids(&self) -> impl Iterator<Item = &str> {
        self.content.iter().filter_map(|b| match b {
            ContentBlock::ToolResult(r) => Some(r.tool_use_id.as_str()),
            _ => None,
        })
    }

    /// The summary, when this message is a compaction message (its first block is a compaction).
    pub fn compaction_summary(&self) -> Option<&str> {
        match self.content.first() {
            Some(ContentBlock::Compaction(c)) => Some(&c.summary),
            _ => None,
        }
    }

    /// All text blocks joined by newlines (handy for display and tests).
    pub fn text(&self) -> String {
        let mut out = String::new();
        for block in &self.content {
            if let ContentBlock::Text(t) = block {
                if !out.is_empty() {
                    out.push('\n');
                }
                out.push_str(&t.text);
            }
        }
        out
    }

    /// The session id of the compaction that duplicated this message as a kept turn, if any.
    ///
    /// Kept copies carry `"kept_by": "<compaction id>"`; their `usage` was measured against the
    /// context before that compaction, so sizing must not difference it against newer usage.
    pub fn kept_by(&self) -> Option<&str> {
        self.extra.get(KEPT_BY).and_then(Value::as_str)
    }

    /// Whether this message is a kept copy whose thinking stays valid after its compaction
    /// ([`THINKING_KEPT`] names the compaction that kept it).
    pub fn thinking_kept(&self) -> bool {
        match (
            self.kept_by(),
            self.extra.get(THINKING_KEPT).and_then(Value::as_str),
        ) {
            (Some(by), Some(valid)) => by == valid,
            _ => false,
        }
    }

    /// Whether a provider refused the thinking of the messages before this one
    /// ([`THINKING_RESET`]).
    pub fn thinking_reset(&self) -> bool {
        self.extra.get(THINKING_RESET) == Some(&Value::Bool(true))
    }
}

/// The extra field that marks a message entry as a kept copy written by a compaction.
pub const KEPT_BY: &str = "kept_by";

/// The extra field of a kept copy whose thinking stays valid after its compaction: it holds
/// the id of that compaction (the copy's `kept_by`). A native compaction that met its
/// provider's conditions writes it (Anthropic's on-demand compaction keeps the thinking of the
/// turns after it valid). On any other kept copy, and on a copy kept again by a later
/// compaction (whose `kept_by` then differs), the thinking was produced before a prefix that
/// has since changed.
pub const THINKING_KEPT: &str = "thinking_kept";

/// The extra field of a message (`true`) saying that a provider refused the thinking of the
/// messages before it as bound to a different conversation, so that every later request leaves
/// that thinking out. An adapter sets it on the reply it got after such a refusal; stored
/// with the reply, the choice survives a restart.
pub const THINKING_RESET: &str = "thinking_reset";

/// The field of a compaction entry (and of the compaction block replay makes from it) that
/// holds a native compaction's payload: `{"protocol": ..., "model": ..., "payload": [...]}`,
/// the items exactly as the provider returned them (see [`CompactionBlock::native_payload`]).
pub const NATIVE: &str = "native";

/// The field of a block that a clearing put in place of an old one (a tool result's
/// placeholder, an image's): the id of the clearing. Adapters never send it.
pub const CLEARED: &str = "cleared";

/// How the text of a placeholder a clearing put in place of a tool result starts: the ledger
/// reads nothing from such a text (the clearing recorded the original's).
pub const CLEARED_PREFIX: &str = "[tool result cleared";

/// How a string a clearing put in place of a large argument of an old tool call starts (the
/// call keeps its keys; issue 37, point 8): the ledger reads no identifier from it (the
/// clearing recorded the original's).
pub const CLEARED_INPUT_PREFIX: &str = "[argument cleared";

/// The field of a tool result that a clearing cut in the kept turns (a result of the turn in
/// flight too large for the window: its head and a note): the id of the clearing. Adapters
/// never send it.
pub const CUT: &str = "cut";

/// How the note after a cut tool result's head starts (on a line of its own).
pub const CUT_PREFIX: &str = "[tool result cut";

/// How the text a clearing put in place of an image starts: not something the user said (the
/// ledger reads nothing from it, and never takes it for a request).
pub const CLEARED_IMAGE_PREFIX: &str = "[image cleared";

/// One content block. Unknown block types are kept as [`ContentBlock::Other`].
#[derive(Clone, Debug, PartialEq)]
pub enum ContentBlock {
    /// Plain text.
    Text(TextBlock),
    /// The model's visible reasoning, with the provider's signature when it gave one.
    Thinking(ThinkingBlock),
    /// A tool call made by the assistant.
    ToolUse(ToolUseBlock),
    /// The answer to a tool call, sent in a user message.
    ToolResult(ToolResultBlock),
    /// An image.
    Image(ImageBlock),
    /// The summary that stands in for everything before it.
    Compaction(CompactionBlock),
    /// A block type panto does not model (for example `redacted_thinking`), kept verbatim.
    Other(OtherBlock),
}

impl ContentBlock {
    /// A text block.
    pub fn text(text: impl Into<String>) -> ContentBlock {
        ContentBlock::Text(TextBlock::new(text))
    }

    /// A tool call block; `input` is a `Value` or exact JSON text ([`RawJson`]).
    pub fn tool_use(
        id: impl Into<String>,
        name: impl Into<Name>,
        input: impl Into<RawJson>,
    ) -> ContentBlock {
        ContentBlock::ToolUse(ToolUseBlock::new(id, name, input))
    }

    /// A tool result block with string content.
    pub fn tool_result(
        tool_use_id: impl Into<String>,
        content: impl Into<String>,
        is_error: bool,
    ) -> ContentBlock {
        ContentBlock::ToolResult(ToolResultBlock::new(
            tool_use_id,
            ToolResultContent::Text(content.into()),
            Some(is_error),
        ))
    }

    /// The clearing that put this block in place of an old one ([`CLEARED`]), or that cleared
    /// the large arguments of this call, if any.
    pub fn cleared_by(&self) -> Option<&str> {
        let extra = match self {
            ContentBlock::Text(t) => &t.extra,
            ContentBlock::ToolResult(r) => &r.extra,
            ContentBlock::ToolUse(u) => &u.extra,
            _ => return None,
        };
        extra.get(CLEARED).and_then(Value::as_str)
    }

    /// The wire name of the block type.
    pub fn type_name(&self) -> &str {
        match self {
            ContentBlock::Text(_) => "text",
            ContentBlock::Thinking(_) => "thinking",
            ContentBlock::ToolUse(_) => "tool_use",
            ContentBlock::ToolResult(_) => "tool_result",
            ContentBlock::Image(_) => "image",
            ContentBlock::Compaction(_) => "compaction",
            ContentBlock::Other(o) => &o.kind,
        }
    }
}

/// `{"type":"text","text":...}`
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct TextBlock {
    /// The text.
    pub text: String,
    /// Unmodelled fields (for example `cache_control`, `citations`).
    pub extra: Extra,
}

impl TextBlock {
    /// A text block with no other fields.
    pub fn new(text: impl Into<String>) -> TextBlock {
        TextBlock {
            text: text.into(),
            extra: Extra::new(),
        }
    }
}

/// `{"type":"thinking","thinking":...,"signature":...}`
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct ThinkingBlock {
    /// The reasoning text.
    pub thinking: String,
    /// The provider's opaque signature, which must be sent back unchanged.
    pub signature: Option<String>,
    /// Unmodelled fields.
    pub extra: Extra,
}

impl ThinkingBlock {
    /// A thinking block, with the provider's signature when it gave one.
    pub fn new(thinking: impl Into<String>, signature: Option<String>) -> ThinkingBlock {
        ThinkingBlock {
            thinking: thinking.into(),
            signature,
            extra: Extra::new(),
        }
    }
}

/// `{"type":"tool_use","id":...,"name":...,"input":{...}}`
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct ToolUseBlock {
    /// The call id that the matching tool result names.
    pub id: String,
    /// The tool name.
    pub name: Name,
    /// The arguments, any JSON value (normally an object), kept as the exact text it was read
    /// or built as: panto carries it without looking inside, so no nesting depth or number
    /// spelling is lost. It dereferences to a `serde_json::Value` for code that looks inside.
    pub input: RawJson,
    /// Unmodelled fields.
    pub extra: Extra,
}

impl ToolUseBlock {
    /// A tool call; `input` is a `Value` or exact JSON text ([`RawJson`]).
    pub fn new(
        id: impl Into<String>,
        name: impl Into<Name>,
        input: impl Into<RawJson>,
    ) -> ToolUseBlock {
        ToolUseBlock {
            id: id.into(),
            name: name.into(),
            input: input.into(),
            extra: Extra::new(),
        }
    }
}

/// `{"type":"tool_result","tool_use_id":...,"content":...,"is_error":...}`
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct ToolResultBlock {
    /// The id of the tool call this answers.
    pub tool_use_id: String,
    /// The result: a string or a list of blocks (text and images).
    pub content: ToolResultContent,
    /// Whether the tool failed. `None` when the field is absent.
    pub is_error: Option<bool>,
    /// Unmodelled fields.
    pub extra: Extra,
}

impl ToolResultBlock {
    /// The answer to the tool call `tool_use_id`; `is_error` is `None` to leave the field out.
    pub fn new(
        tool_use_id: impl Into<String>,
        content: ToolResultContent,
        is_error: Option<bool>,
    ) -> ToolResultBlock {
        ToolResultBlock {
            tool_use_id: tool_use_id.into(),
            content,
            is_error,
            extra: Extra::new(),
        }
    }

    /// Whether the result reports a failure.
    pub fn failed(&self) -> bool {
        self.is_error == Some(true)
    }
}

/// The content of a tool result: a plain string, or a list of blocks.
#[derive(Clone, Debug, PartialEq)]
pub enum ToolResultContent {
    /// `"content": "..."`
    Text(String),
    /// `"content": [{"type":"text",...}, {"type":"image",...}]`
    Blocks(Vec<ContentBlock>),
}

impl ToolResultContent {
    /// The textual content: the string, or the text blocks joined by newlines.
    pub fn text(&self) -> String {
        match self {
            ToolResultContent::Text(s) => s.clone(),
            ToolResultContent::Blocks(blocks) => {
                let mut out = String::new();
                for b in blocks {
                    if let ContentBlock::Text(t) = b {
                        if !out.is_empty() {
                            out.push('\n');
                        }
                        out.push_str(&t.text);
                    }
                }
                out
            }
        }
    }

    /// Whether there is no content at all.
    pub fn is_empty(&self) -> bool {
        match self {
            ToolResultContent::Text(s) => s.is_empty(),
            ToolResultContent::Blocks(b) => b.is_empty(),
        }
    }
}

/// `{"type":"image","source":{...}}`
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct ImageBlock {
    /// The image source as the Anthropic API shapes it (`base64` with `media_type`, or `url`).
    pub source: Value,
    /// Unmodelled fields.
    pub extra: Extra,
}

impl ImageBlock {
    /// An image with the given source (`{"type":"base64","media_type":...,"data":...}` or
    /// `{"type":"url","url":...}`).
    pub fn new(source: Value) -> ImageBlock {
        ImageBlock {
            source,
            extra: Extra::new(),
        }
    }

    /// The media type named by the source, when it names one.
    pub fn media_type(&self) -> Option<&str> {
        self.source.get("media_type").and_then(Value::as_str)
    }
}

/// `{"type":"compaction","summary":...}`: the seed that replaces all earlier context.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct CompactionBlock {
    /// The summary text.
    pub summary: String,
    /// Unmodelled fields.
    pub extra: Extra,
}

impl CompactionBlock {
    /// A compaction block holding `summary`.
    pub fn new(summary: impl Into<String>) -> CompactionBlock {
        CompactionBlock {
            summary: summary.into(),
            extra: Extra::new(),
        }
    }

    /// The protocol of the native compaction this block carries ([`NATIVE`]), such as
    /// [`NATIVE_ANTHROPIC`] or [`NATIVE_OPENAI_RESPONSES`].
    pub fn native_protocol(&self) -> Option<&str> {
        self.extra
            .get(NATIVE)
            .and_then(|n| n.get("protocol"))
            .and_then(Value::as_str)
    }

    /// The items of the native compaction this block carries, each as the exact JSON text the
    /// provider returned: Anthropic's content blocks (the `compaction` block) or `OpenAI`'s
    /// output items (the kept user messages and the `compaction` item). `None` when the block
    /// carries no native payload, or one that is not a list.
    pub fn native_payload(&self) -> Option<Vec<RawJson>> {
        let native = self.extra.get_raw(NATIVE)?;
        let fields: std::collections::HashMap<String, Box<serde_json::value::RawValue>> =
            serde_json::from_str(native.json()).ok()?;
        let items: Vec<Box<serde_json::value::RawValue>> =
            serde_json::from_str(fields.get("payload")?.get()).ok()?;
        items
            .into_iter()
            .map(|item| RawJson::from_text(item.get().to_owned()).ok())
            .collect()
    }
}

/// A block of a type panto does not model, kept whole.
///
/// Among them are the providers' native compaction blocks: a `compaction` block without a
/// `summary` (Contract 1's compaction block is the one with a `summary`) is Anthropic's
/// server-side compaction block (`content`, `signature`, `tool_changes`, ...) or an `OpenAI`
/// Responses compaction item (`encrypted_content`, ...), read here whole and written back
/// byte for byte ([`OtherBlock::native_compaction`] tells them apart).
///
/// Equality compares the type and the fields, not where `type` stood among them.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct OtherBlock {
    /// Its `type`.
    pub kind: String,
    /// Every other field.
    pub fields: Extra,
    /// Where `type` stood among the block's keys when it was read (0 when first, which is
    /// where panto writes it for the blocks it builds); at most `fields.len()`. The block is
    /// written back with `type` at the same place, so its key order survives a round trip.
    pub type_index: usize,
}

impl PartialEq for OtherBlock {
    fn eq(&self, other: &OtherBlock) -> bool {
        self.kind == other.kind && self.fields == other.fields
    }
}

impl OtherBlock {
    /// A block of type `kind` with the given fields (its `type` is not among them).
    pub fn new(kind: impl Into<String>, fields: Extra) -> OtherBlock {
        OtherBlock {
            kind: kind.into(),
            fields,
            type_index: 0,
        }
    }

    /// The protocol of a provider's native compaction block: `Some("openai-responses")` for a
    /// `compaction` block with `encrypted_content` (an `OpenAI` Responses compaction item),
    /// `Some("anthropic")` for any other `compaction` block without a `summary` (Anthropic's
    /// server-side compaction block, whose readable summary is its `content`), `None` for
    /// every other block.
    pub fn native_compaction(&self) -> Option<&'static str> {
        if self.kind != "compaction" {
            return None;
        }
        Some(if self.fields.contains_key("encrypted_content") {
            NATIVE_OPENAI_RESPONSES
        } else {
            NATIVE_ANTHROPIC
        })
    }

    /// The readable summary of a native compaction block, when it has one (Anthropic's
    /// `content`; an `OpenAI` compaction item is opaque).
    pub fn native_summary(&self) -> Option<&str> {
        match self.native_compaction() {
            Some(NATIVE_ANTHROPIC) => self.fields.get("content").and_then(Value::as_str),
            _ => None,
        }
    }
}

/// The protocol name of Anthropic's native compaction (the Messages API's `compaction` block).
pub const NATIVE_ANTHROPIC: &str = "anthropic";

/// The protocol name of `OpenAI` Responses' native compaction (the `compaction` item).
pub const NATIVE_OPENAI_RESPONSES: &str = "openai-responses";

/// Token accounting for one request, on the assistant message it produced.
///
/// The input total of the request is `input_tokens + cache_read_input_tokens +
/// cache_creation_input_tokens` (Anthropic splits cached input out of `input_tokens`).
///
/// Built with [`Usage::new`] and the setters:
///
/// ```
/// let usage = panto_model::Usage::new(1_000, 200).with_cache_read(4_000);
/// assert_eq!(usage.input_total(), 5_000);
/// ```
///
/// The struct is `#[non_exhaustive]`, like every model struct that may gain fields: a struct
/// literal does not compile outside this crate, so adding a field breaks no dependent.
///
/// ```compile_fail,E0639
/// let usage = panto_model::Usage {
///     input_tokens: 1_000,
///     output_tokens: 200,
///     cache_read_input_tokens: None,
///     cache_creation_input_tokens: None,
///     extra: panto_model::Extra::new(),
/// };
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Usage {
    /// Uncached input tokens.
    pub input_tokens: u64,
    /// Generated tokens.
    pub output_tokens: u64,
    /// Input tokens read from the prompt cache.
    pub cache_read_input_tokens: Option<u64>,
    /// Input tokens written to the prompt cache.
    pub cache_creation_input_tokens: Option<u64>,
    /// Unmodelled fields (for example `service_tier`).
    pub extra: Extra,
}

impl Usage {
    /// A usage record with just input and output.
    pub fn new(input_tokens: u64, output_tokens: u64) -> Usage {
        Usage {
            input_tokens,
            output_tokens,
            ..Usage::default()
        }
    }

    /// The record with `tokens` input tokens read from the prompt cache (`None`: not reported).
    #[must_use]
    pub fn with_cache_read(mut self, tokens: impl Into<Option<u64>>) -> Usage {
        self.cache_read_input_tokens = tokens.into();
        self
    }

    /// The record with `tokens` input tokens written to the prompt cache (`None`: not
    /// reported).
    #[must_use]
    pub fn with_cache_creation(mut self, tokens: impl Into<Option<u64>>) -> Usage {
        self.cache_creation_input_tokens = tokens.into();
        self
    }

    /// Adds `other` to this record: every count, the cache figures where either reports them,
    /// and the long-lifetime share of the writes ([`Usage::cache_creation_long`]). For the
    /// usage of several requests made as one (a compaction's fold, say).
    pub fn accumulate(&mut self, other: &Usage) {
        fn add(a: Option<u64>, b: Option<u64>) -> Option<u64> {
            match (a, b) {
                (None, None) => None,
                (a, b) => Some(a.unwrap_or(0).saturating_add(b.unwrap_or(0))),
            }
        }
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
        self.cache_read_input_tokens =
            add(self.cache_read_input_tokens, other.cache_read_input_tokens);
        self.cache_creation_input_tokens = add(
            self.cache_creation_input_tokens,
            other.cache_creation_input_tokens,
        );
        let long = self
            .cache_creation_long()
            .saturating_add(other.cache_creation_long());
        if long > 0 {
            let written = self.cache_creation_input_tokens.unwrap_or(0);
            self.extra.insert(
                "cache_creation".into(),
                serde_json::json!({
                    "ephemeral_5m_input_tokens": written.saturating_sub(long),
                    "ephemeral_1h_input_tokens": long,
                }),
            );
        }
    }

    /// Of the cache writes, those written with the long lifetime: Anthropic's
    /// `cache_creation.ephemeral_1h_input_tokens`, kept in [`Usage::extra`] as the API sent
    /// it (0 when absent).
    pub fn cache_creation_long(&self) -> u64 {
        self.extra
            .get("cache_creation")
            .and_then(|c| c.get("ephemeral_1h_input_tokens"))
            .and_then(Value::as_u64)
            .unwrap_or(0)
    }

    /// The whole input of the request: uncached plus cache reads plus cache writes.
    pub fn input_total(&self) -> u64 {
        self.input_tokens
            .saturating_add(self.cache_read_input_tokens.unwrap_or(0))
            .saturating_add(self.cache_creation_input_tokens.unwrap_or(0))
    }
}

/// `with_extra` for the types that keep their unmodelled fields in `extra`.
macro_rules! with_extra {
    ($($ty:ident),*) => {$(
        impl $ty {
            /// The value with `extra` as its unmodelled fields, written back verbatim.
            #[must_use]
            pub fn with_extra(mut self, extra: Extra) -> $ty {
                self.extra = extra;
                self
            }
        }
    )*};
}

with_extra!(
    Message,
    TextBlock,
    ThinkingBlock,
    ToolUseBlock,
    ToolResultBlock,
    ImageBlock,
    CompactionBlock,
    Usage
);
