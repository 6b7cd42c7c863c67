//! The pieces panto's adapters are made of, for a provider of your own: the wire preparation
//! every protocol shares, and the rule of which thinking may be sent back.
//!
//! A custom `Provider` that renders its requests from [`prepare_conversation`] and classifies
//! its error answers with `classify_response` (crate root) behaves like panto's adapters: the
//! compaction block as the same user text, every tool call answered exactly once, roles that
//! alternate, and [`ProviderError::ContextOverflow`](panto_provider::ProviderError) for exactly
//! the answers panto's adapters read as an overflow, which is what overflow recovery needs.

use panto_model::Message;

pub use crate::prepare::{INTERRUPTED, compaction_text, orphan_text};
pub use crate::thinking::{
    THINKING_BINDING_BETA, ThinkingReplay, is_signed_thinking, thinking_replay,
};

/// The conversation rewritten for the wire (see the `prepare` rules in `docs/providers.md`):
/// compaction blocks as user text worded by [`compaction_text`], every tool call answered
/// exactly once in the message after it (a synthetic error result, [`INTERRUPTED`], for an
/// interrupted call), orphan results as text ([`orphan_text`]), misplaced and empty blocks
/// dropped, consecutive messages of one role merged. `native` names the protocol whose native
/// compaction blocks are kept as they are (`panto_model::NATIVE_ANTHROPIC`,
/// `panto_model::NATIVE_OPENAI_RESPONSES`); any other is replaced by its readable summary or
/// left out. The caller's messages are not modified.
pub fn prepare_conversation(messages: &[Message], native: Option<&str>) -> Vec<Message> {
    crate::prepare::prepare(messages, &compaction_text, native)
}
