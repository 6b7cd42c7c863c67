//! Compaction orchestration for panto: decides what to keep, asks a model for the summary, writes
//! the result atomically, and recovers from context overflow with exactly one retry.
//!
//! - [`plan()`] (pure) splits an [`EffectiveContext`] into the
//!   summarized prefix and the kept suffix: the longest run of whole turns within the
//!   keep-verbatim budget, the in-flight turn always kept.
//! - [`CompactionPrompt`] layers `COMPACTION.md` (built-in, user, project; last one wins) and
//!   appends `/compact` instructions to it.
//! - [`Compactor`] runs one compaction: plan, request (with `compaction_model` first and one
//!   fallback to the active model, see [`ModelRef`]), then one conditional
//!   [`SessionLog::append`] of the compaction entry and the kept copies. It reports progress as [`CompactionEvent`]s.
//!   A model's answer that fails the summary checks is a failed attempt; every summary is
//!   followed by the ledger (`panto_transcript::Ledger`) of what it replaces, merged with the
//!   one stored on the previous compaction entry ([`LEDGER_FIELD`], [`ledger_budget`]).
//! - [`Driver`] is a conversation driver: it appends the new messages, sends the request, and on
//!   [`ContextOverflow`](panto_provider::ProviderError::ContextOverflow) compacts once and retries
//!   once; when no model can summarize, it writes panto's own record instead
//!   ([`CompactRun::record_on_failure`]). [`Driver::undo`] makes the context before the latest
//!   compaction current again ([`Undone`]).
//! - [`KnownWindows`] is everything known of the model's window (configured, stated by an
//!   overflow, said by the server, bounded by a request that did not fit, panto's catalogue),
//!   with the rules that combine it: the driver owns one, and a compaction run takes it and
//!   gives it back updated.
//! - [`CompactError`] is the one error type.
//! - Storage is any [`Store`] (re-exported from `panto-store`: the JSONL files of
//!   `panto-session`, SQLite, PostgreSQL, or the in-memory [`MemoryStore`]); the driver and the
//!   compactor write through a [`SessionLog`], one session as this writer last saw it.
//! - With the `test-support` feature, the `testing` module offers a scripted fake provider.
//!
//! The design choice to know: a compaction is one conditional append ([`SessionLog::append`])
//! carrying the whole compaction (the entry, marked `copies_marked`, then every kept copy
//! marked `kept_by`), and `panto_model::replay` honours a compaction only when all its copies
//! follow it. The compactor writes every field replay depends on, so a crash at any byte of
//! the append replays to exactly the old or exactly the new context whatever the store, and an
//! append made stale by another writer writes nothing.
//!
//! No async runtime is linked: futures returned by the [`Provider`] trait are simply awaited,
//! and the futures of [`Driver::send`], [`Driver::compact`] and [`Compactor::compact`] are
//! `Send`, so a turn may run in a spawned task.
//!
//! The names needed to implement a [`Provider`] and a [`Store`] and to run the loop are
//! re-exported here, and the lower crates are reachable whole as [`model`], [`provider`],
//! [`size`] and [`transcript`]: an agent that brings its own provider and keeps its session in
//! memory depends on this crate alone. panto's HTTP adapters (`panto-providers`) and lasting
//! stores (`panto-session`, `panto-store-sqlite`, `panto-store-postgres`) are crates of their
//! own, and the futures need the agent's async runtime, so an agent on those names them too.
//!
//! ```
//! use std::sync::Arc;
//!
//! use panto_compact::{
//!     CompactorConfig, CompactOutcome, Compactor, Driver, EventSink, MemoryLog, Message, ModelRef, Provider,
//!     ProviderError, Request, async_trait,
//! };
//!
//! /// A model that answers every request with the number of messages it saw.
//! struct Counter;
//!
//! #[async_trait]
//! impl Provider for Counter {
//!     fn name(&self) -> &str {
//!         "counter"
//!     }
//!
//!     async fn complete(
//!         &self,
//!         request: &Request,
//!         _events: EventSink<'_>,
//!     ) -> Result<Message, ProviderError> {
//!         Ok(Message::assistant_text(format!("{} messages", request.messages.len())))
//!     }
//! }
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let runtime = tokio::runtime::Builder::new_current_thread().build()?;
//! runtime.block_on(async {
//!     // A keep budget of one token keeps only the turn in flight verbatim.
//!     let compactor = Compactor::new(ModelRef::new(Arc::new(Counter), "counter-1"))
//!         .with_config(CompactorConfig::new().with_keep_tokens(1));
//!     let mut agent = Driver::new(compactor, MemoryLog::memory(), Default::default());
//!     for prompt in ["Here is the bug report. ", "And here is the log. "] {
//!         let prompt = prompt.repeat(100);
//!         let reply = agent.send(vec![Message::user_text(prompt)], &mut |_| {}).await?;
//!         println!("{}", reply.message.text());
//!     }
//!     assert_eq!(agent.context().messages.len(), 4);
//!     assert_eq!(agent.log().entries().len(), 4);
//!     // `/compact`: the counter's answer becomes the summary, the newest turn is kept. (A
//!     // compaction that would not make the conversation smaller is not written.)
//!     let outcome = agent.compact(None).await?;
//!     assert!(matches!(outcome, CompactOutcome::Compacted(_)));
//!     assert!(agent.context().summary().is_some());
//!     Ok(())
//! })
//! # }
//! ```

#![cfg_attr(docsrs, feature(doc_cfg))]

mod attempt;
mod bound;
mod catalogue;
mod check;
mod compactor;
mod config;
mod driver;
mod error;
mod events;
mod fold;
mod ledger;
mod plan;
mod prompt;
mod recall_tool;
mod record;
mod report;
mod source;
#[cfg(any(test, feature = "test-support"))]
pub mod testing;
mod undo;
mod window;

pub use attempt::AttemptFailure;
pub use catalogue::catalogue_checked;
pub use compactor::{
    CLEAR_INPUTS_ABOVE, CLEAR_MIN_FREED_DIVISOR, CLEAR_RESULTS_ABOVE, CLEARING_NOTE,
    CUT_RESULTS_ABOVE_DIVISOR, CUT_RESULTS_TO_DIVISOR, Compactor, MAX_LONGER, MAX_REBASES,
    MAX_SHRINKS, Prepared, REBASED_FIELD, TIERED_TARGET_DIVISOR,
};
pub use config::{
    CompactRun, CompactionStrategy, CompactorConfig, Conversation, DEFAULT_KEEP_TOKENS,
    DEFAULT_MAX_OUTPUT_TOKENS, ModelRef,
};
pub use driver::{
    COLD_SHARE, CacheAware, Clock, Driver, NextRequest, Reply, SharedReply, SharedTurns, Spent,
};
pub use error::{CompactError, Conflict};
pub use events::CompactionEvent;
pub use fold::{
    Chunk, FoldBudget, FoldError, FoldPlan, MIN_OUTPUT_TOKENS, MIN_ROOM, MIN_SMALL_OUTPUT_TOKENS,
    TINY_PROMPT_BELOW, fold, output_floor,
};
pub use ledger::{
    LEDGER_FIELD, MIN_LEDGER_CHARS, ledger_budget, previous_ledger, recall_note, with_ledger,
    with_recall_note,
};
pub use plan::{NotSmaller, NothingToCompact, Plan, keep_budget, manual_keep_budget, plan};
pub use recall_tool::{
    RECALL_ANSWER_CHARS, RECALL_TOOL, RecallAnswer, RecallCall, answer_recall, around_of, beside,
    describe, fetch_answer, recall_tool_spec, search_answer, shown_text,
};
pub use record::RECORD_ONLY_MODEL;
pub use report::{ClearedItem, CompactOutcome, Compacted, CompactionReport, ElidedItem, FoldStep};
pub use source::{RequestSource, SourceSummarizer};
pub use undo::{Undone, undo};
pub use window::{KnownWindows, Overflow, Stated, Window, WindowSource};
// The lower crates, whole, and the names an agent needs most, so that depending on this crate
// alone is enough to implement a provider and a store and to run the loop.
pub use panto_model as model;
pub use panto_model::{
    ContentBlock, EffectiveContext, Entry, IdSource, Message, Role, SequentialIds, Trigger,
    UniqueIds, Usage, encode_line, read_entries, replay,
};
pub use panto_provider as provider;
pub use panto_provider::{
    CacheMode, CacheTtl, EventSink, PromptCache, Provider, ProviderError, ReasoningEffort, Request,
    RequestOptions, StreamEvent, TokenNumbers, ToolChoice, ToolSpec, async_trait,
};
pub use panto_size as size;
pub use panto_size::{Heuristic, Sizer, Truncation, UsageSizer};
pub use panto_store as store;
pub use panto_store::{
    Fetched, Head, Hit, Loaded, MemoryLog, MemoryStore, RecallQuery, Recalled, Record,
    SessionChange, SessionLog, Store, StoreError, Warning, copy_session,
};
pub use panto_transcript as transcript;
pub use panto_transcript::{Ledger, TurnTranscript};
pub use serde_json;

pub use prompt::{
    ADDITIONAL_INSTRUCTIONS_HEADING, BUILTIN_PROMPT, BUILTIN_SHORT_PROMPT, BUILTIN_TINY_PROMPT,
    CompactionPrompt, LayerFile, LayerFileError, MAX_LAYER_FILE_BYTES, SHORT_PROMPT_BELOW,
    read_layer_file,
};

#[cfg(test)]
#[allow(
    clippy::disallowed_methods,
    reason = "tests read and write their fixtures directly"
)]
mod tests;

// The README's example runs as a doctest, so that what crates.io shows compiles and passes.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
mod readme {}
