//! Native compaction: a provider that summarizes a conversation itself and returns a payload to
//! send back instead of the summarized messages ([`NativeCompaction`]), asked through
//! [`Provider::compact_natively`](crate::Provider::compact_natively).

use panto_model::{RawJson, Usage};

/// What a provider's own compaction returned: the items to send back in place of the
/// summarized messages, exactly as received, and what is known about them.
///
/// `#[non_exhaustive]`: built with [`NativeCompaction::new`] and the `with_*` setters.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct NativeCompaction {
    /// The protocol the payload belongs to, and the only one it may be sent to
    /// (`panto_model::NATIVE_ANTHROPIC`, `panto_model::NATIVE_OPENAI_RESPONSES`).
    pub protocol: String,
    /// The items, each the exact JSON text the provider returned: Anthropic's content blocks
    /// (the signed `compaction` block), `OpenAI`'s output window (the kept user messages and the
    /// `compaction` item). Sent back unmodified, in order, at the head of the conversation.
    pub items: Vec<RawJson>,
    /// The readable summary, when the provider gives one (Anthropic's `content`; `OpenAI`'s
    /// item is opaque).
    pub summary: Option<String>,
    /// The model that wrote it, as the provider named it.
    pub model: Option<String>,
    /// What the compaction cost, on the Contract 1 names; the provider's other usage fields
    /// (Anthropic's `iterations`) are kept in its `extra`.
    pub usage: Option<Usage>,
}

impl NativeCompaction {
    /// A compaction of `protocol` returning `items`.
    pub fn new(protocol: impl Into<String>, items: Vec<RawJson>) -> NativeCompaction {
        NativeCompaction {
            protocol: protocol.into(),
            items,
            summary: None,
            model: None,
            usage: None,
        }
    }

    /// The same with a readable summary.
    #[must_use]
    pub fn with_summary(mut self, summary: impl Into<String>) -> NativeCompaction {
        self.summary = Some(summary.into());
        self
    }

    /// The same naming the model that wrote it.
    #[must_use]
    pub fn with_model(mut self, model: impl Into<String>) -> NativeCompaction {
        self.model = Some(model.into());
        self
    }

    /// The same with its usage.
    #[must_use]
    pub fn with_usage(mut self, usage: Usage) -> NativeCompaction {
        self.usage = Some(usage);
        self
    }
}
