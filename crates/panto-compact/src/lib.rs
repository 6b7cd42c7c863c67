//! Compaction orchestration for panto: decides what to keep, asks a model for the summary, writes
//! the result atomically, and recovers from context overflow with exactly one retry.
//!
//! - [`plan()`] (pure) splits an [`EffectiveContext`](panto_model::EffectiveContext) into the
//!   summarized prefix and the kept suffix: the longest run of whole turns within the
//!   keep-verbatim budget, the in-flight turn always kept.
//! - [`CompactionPrompt`] layers `COMPACTION.md` (built-in, user, project; last one wins) and
//!   appends `/compact` instructions to it.
//! - [`Compactor`] runs one compaction: plan, request (with `compaction_model` first and one
//!   fallback to the active model, see [`ModelRef`]), then one [`SessionLog::append`] of the
//!   compaction entry and the kept copies. It reports progress as [`CompactionEvent`]s.
//! - [`Driver`] is a conversation driver: it appends the new messages, sends the request, and on
//!   [`ContextOverflow`](panto_provider::ProviderError::ContextOverflow) compacts once and retries
//!   once.
//! - [`CompactError`] is the one error type; [`MemoryLog`] the in-memory [`SessionLog`].
//! - With the `test-support` feature, the `testing` module offers a scripted fake provider.
//!
//! The design choice to know: storage is a one-method trait ([`SessionLog`]) whose single call
//! carries the whole compaction (the entry, then every kept copy marked `kept_by`), and
//! `panto_model::replay` honours a compaction only when all its copies follow it. So a crash at
//! any byte of the append replays to exactly the old or exactly the new context, and this crate
//! never needs to know how the log is stored.
//!
//! No async runtime is linked: futures returned by the [`Provider`](panto_provider::Provider)
//! trait are simply awaited.

#![cfg_attr(docsrs, feature(doc_cfg))]

mod compactor;
mod driver;
mod error;
mod events;
mod fold;
mod ids;
mod log;
mod plan;
mod prompt;
#[cfg(any(test, feature = "test-support"))]
pub mod testing;

pub use compactor::{
    CompactConfig, CompactOptions, CompactOutcome, Compacted, CompactionReport, Compactor,
    DEFAULT_KEEP_TOKENS, DEFAULT_MAX_OUTPUT_TOKENS, ElidedItem, FoldStep, MAX_SHRINKS, ModelRef,
    NothingToCompact, Prepared,
};
pub use driver::{Driver, Reply};
pub use error::{AttemptFailure, CompactError, LogError};
pub use events::CompactionEvent;
pub use fold::{Chunk, FoldBudget, FoldError, FoldPlan, MIN_ROOM, fold};
pub use ids::{IdGenerator, IdKind, SequentialIds, UniqueIds};
pub use log::{MemoryLog, SessionLog};
pub use plan::{Plan, keep_budget, plan};
pub use prompt::{
    ADDITIONAL_INSTRUCTIONS_HEADING, BUILTIN_PROMPT, CompactionPrompt, LayerFile, LayerFileError,
    MAX_LAYER_FILE_BYTES, read_layer_file,
};

#[cfg(test)]
mod tests;
