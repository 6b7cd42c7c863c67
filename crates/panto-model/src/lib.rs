//! The message model of panto: what a conversation is, independent of any provider or storage.
//!
//! - [`Message`], [`ContentBlock`] (with the first-class [`CompactionBlock`]) and [`Usage`] are
//!   the Contract 1 shapes; [`Entry`] is one line of a session file. Their short names (ids,
//!   models, stop reasons, tool names) are [`Name`]s, kept in place when they fit.
//! - [`decode_line`] / [`entries`] read JSONL with errors that name line, column and field;
//!   [`encode_line`] writes it back. Unknown fields and tool arguments are kept as their exact
//!   JSON text ([`RawJson`], [`Extra`]), so they survive the round trip byte for byte and no
//!   nesting depth makes a line unreadable.
//! - [`turns`] splits messages into whole turns (Contract 2), pairing results with calls through
//!   [`CallIndex`]; [`validate`] reports protocol problems as values.
//! - [`replay`] turns entries into the [`EffectiveContext`]: the latest compaction block followed
//!   by the entries after it, less the compactions an undo entry made void ([`UndoEntry`]).
//!   A clearing is a compaction entry that summarizes nothing ([`CLEARING`]).
//! - [`usage_cost`] turns a reply's usage into what it cost ([`Cost`]: cache-weighted tokens
//!   with each provider's [`CacheRates`], and money with the user's [`Prices`]).
//! - [`Item`]: a block of a message or a compaction's summary or ledger, with a stable id
//!   ([`Items`] walks a session's entries into them, [`ItemRef`] resolves an id): what recall
//!   finds, `panto show` prints and a clearing placeholder names.
//! - [`IdSource`] names entries that have none, one format for every entry of a session file:
//!   [`UniqueIds`] by default, [`SequentialIds`] in tests.
//!
//! The one design choice to know: a compaction is its own entry followed by duplicated kept turns
//! marked `kept_by`, and replay honours it only when all of them are present, so an append cut
//! short by a crash leaves the previous context intact. A compaction written by another program,
//! whose copies are not marked, is read by Contract 1's plain rule instead.
//!
//! This crate is pure: no IO, no async runtime, no network. The one exception to determinism is
//! [`UniqueIds`], which reads the clock and the process id (never a file) and which nothing in
//! the crate calls itself.
//!
//! ```
//! use panto_model::{Role, read_entries, replay, turns};
//!
//! let session = br#"{"type":"message","id":"m1","role":"user","content":[{"type":"text","text":"old question"}]}
//! {"type":"message","id":"m2","role":"assistant","content":[{"type":"text","text":"old answer"}]}
//! {"type":"compaction","id":"c1","summary":"The user asked an old question.","kept_messages":0}
//! {"type":"message","id":"m3","role":"user","content":[{"type":"text","text":"new question"}]}
//! "#;
//! let entries = read_entries(session)?;
//! let context = replay(entries);
//! // The latest compaction's summary leads, followed by what came after it.
//! assert_eq!(context.summary(), Some("The user asked an old question."));
//! assert_eq!(context.messages.len(), 2);
//! assert_eq!(context.messages[1].role, Role::User);
//! assert_eq!(context.messages[1].text(), "new question");
//! assert_eq!(turns(&context.messages).len(), 2);
//! # Ok::<(), panto_model::DecodeError>(())
//! ```

#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(feature = "proptest")]
pub mod arbitrary;
mod calls;
mod cost;
mod decode;
mod entry;
mod ids;
mod item;
mod json;
mod message;
mod name;
mod replay;
mod serde_impl;
pub mod stop_reason;
mod turns;
mod validate;

pub use calls::CallIndex;
pub use cost::{
    CacheRates, Cost, CostCounter, CostReport, CostRow, CostRowKind, Price, Prices, usage_cost,
};
pub use decode::{
    BOM, DecodeError, Decoded, Entries, decode_line, decode_line_checked, encode_line,
    encode_lines, entries, from_json, read_entries, read_entries_lossy,
};
pub use entry::{
    CLEARING, COPIES_MARKED, CompactionEntry, Entry, NO_SUMMARY, STRATEGY, Trigger, UndoEntry,
    UnknownEntry,
};
pub use ids::{IdKind, IdSource, SequentialIds, UniqueIds};
pub use item::{Item, ItemKind, ItemRef, Items, LEDGER, Match, context_items};
pub use message::{
    CLEARED, CLEARED_IMAGE_PREFIX, CLEARED_INPUT_PREFIX, CLEARED_PREFIX, CUT, CUT_PREFIX,
    CompactionBlock, ContentBlock, Extra, ImageBlock, KEPT_BY, Message, NATIVE, NATIVE_ANTHROPIC,
    NATIVE_OPENAI_RESPONSES, Name, OtherBlock, RawJson, Role, THINKING_KEPT, THINKING_RESET,
    TextBlock, ThinkingBlock, ToolResultBlock, ToolResultContent, ToolUseBlock, Usage,
};
pub use replay::{EffectiveContext, Replayer, Skipped, replay, undone};
pub use turns::{allowed_cuts, turns};
pub use validate::{Problem, validate};

// The README's example runs as a doctest, so that what crates.io shows compiles and passes.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
mod readme {}

#[cfg(test)]
mod tests;
