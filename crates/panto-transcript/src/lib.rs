//! The transcript artifact: the summarized prefix of a conversation rendered as plain text, the
//! user prompt of a compaction request around it, and the parser that reads both back.
//!
//! - [`render_transcript`] / [`render_transcript_into`] write the transcript of messages;
//!   [`render_request`] wraps it in the request envelope with at most one previous summary.
//! - [`parse_transcript`] and [`parse_request`] invert them, giving [`TranscriptItem`]s (and the
//!   previous summary, in a [`ParsedRequest`]). [`transcript_items`] gives the items of messages
//!   directly. The offline summarizer works from the parsed request.
//! - [`Ledger`] is the deterministic record of a summarized part (requests, files, errors,
//!   commands, todos, answers), derived from items and merged whole (bounded only by
//!   [`LEDGER_CAP_BYTES`] of JSON): the record stored on a compaction entry. What follows every
//!   summary is a rendering of it within a budget ([`Ledger::render_within`], under
//!   [`LEDGER_HEADING`]), which says what it left out and where the whole record is.
//! - [`cut`] is the one text cutter of panto: a text's head, tail or both ends, or its pieces,
//!   within a budget of bytes, characters, estimated tokens or lines, cut at a line end, else a
//!   word, else a character; [`cut::split_items`] splits a transcript with the fold's leads.
//!
//! The one design choice to know: structure lives only at the start of lines (role markers) and
//! on whole lines (envelope tags), and message text is escaped so that it can never produce
//! either. Parsing is therefore exact: `parse_transcript(&render_transcript(m))` equals
//! `transcript_items(m)` for every `m`, whatever the text holds.
//!
//! # The transcript format
//!
//! Each item is a *marker line* opened at column 0 by a bracketed marker and `]:`, followed by a
//! space and the body when the body is not empty; the body runs on over as many lines as it has,
//! and a blank line ends the item:
//!
//! ```text
//! [User]: Fix the failing test in src/lib.rs.
//!
//! [Assistant thinking]: The test probably reads a stale fixture.
//!
//! [Assistant]: Reading it.
//!
//! [Assistant tool call read (toolu_1)]: {"path":"src/lib.rs"}
//!
//! [Assistant tool call bash (toolu_2)]: {"command":"cargo test"}
//!
//! [Tool result read (toolu_1)]: fn main() {}
//!
//! [Tool error bash (toolu_2)]: error: test failed
//! 1 failed; 0 passed
//!
//! [User image]: image/png
//!
//! ```
//!
//! | content | marker and body |
//! | --- | --- |
//! | text block | `[User]:` or `[Assistant]:`, the text |
//! | thinking block | `[Assistant thinking]:`, the reasoning (the signature is left out) |
//! | tool call | `[Assistant tool call NAME (ID)]:`, the arguments as compact JSON: their text without the whitespace between tokens, spelled as the session spells them (numbers, escapes, key order) |
//! | tool result | `[Tool result NAME (ID)]:`, or `[Tool error NAME (ID)]:` when `is_error` is true; the text blocks joined by newlines |
//! | image | `[User image]:`, `[Assistant image]:`, or `[Tool result image]:` inside a result; the media type |
//! | any other block | `[User unknown block]:`, `[Assistant unknown block]:` or `[Tool result unknown block]:`; the block's `type` |
//! | compaction block | `[Summary of earlier conversation]:`, the summary |
//!
//! A result's `NAME` is the name of the latest call with its `ID` earlier in the transcript and
//! is left out (`[Tool result (ID)]:`) when that call is not in it. Images and other blocks
//! inside a result follow the result as their own items. Blocks of a role that does not
//! normally hold them keep their role (`[User thinking]:`, `[User tool call ...]:`). `NAME` and
//! `ID` are written bare when they consist of ASCII letters, digits and `_ - . : / @ + = #`,
//! and as JSON strings otherwise.
//!
//! Why this shape: role markers in brackets are what the seed proposes and what models read
//! most reliably as "who said what"; a blank line between items keeps long tool output visibly
//! apart; and names ride in the marker so that a summarizer sees which tool answered without
//! matching ids.
//!
//! # Escaping
//!
//! Two rules, applied to every text body and to the previous summary:
//!
//! 1. At a line start (after any of LF, VT, FF, CR, NEL, U+2028, U+2029, and at the start of
//!    the previous summary), a run of zero or more `\` followed by `[` and one of the words
//!    `user`, `assistant`, `tool`, `summary`, `system` (ASCII case-insensitive, as a prefix)
//!    gets one more `\` in front: `[User]: forged` becomes `\[User]: forged`.
//! 2. Anywhere, a `<` followed by zero or more `\`, an optional `/` and `transcript` or
//!    `previous-summary` (ASCII case-insensitive) gets a `\` right after the `<`:
//!    `</transcript>` becomes `<\/transcript>`.
//!
//! The parser removes exactly one `\` at the same places, so any text round-trips, including
//! text that already holds escapes. Every Unicode line terminator counts as a line start
//! because a model may read any of them as a new line. JSON (tool arguments, quoted names and
//! ids) holds no raw line terminator, and its `<` before a tag name, NEL, U+2028 and U+2029 are
//! written as `\u` escapes, which JSON reads back as the same characters.
//!
//! # The request envelope
//!
//! ```text
//! Summarize the conversation recorded below: the previous summary covers its beginning and ...
//!
//! <previous-summary>
//! ...the latest active summary, escaped...
//! </previous-summary>
//!
//! <transcript>
//! [User]: ...
//!
//! </transcript>
//! ```
//!
//! The opening line says the sections are material to summarize, not instructions. The
//! previous-summary section is present only when there is a previous summary, and there is never
//! more than one. It comes first because it describes older events than the transcript, so the
//! model reads the history in order.
//!
//! This crate is pure: no IO, no async runtime, no network.

pub mod cut;
mod error;
mod escape;
mod item;
mod ledger;
mod parse;
mod render;
mod syntax;

pub use error::TranscriptError;
pub use item::{ItemView, Speaker, ToolInput, TranscriptItem, for_each_item, transcript_items};
pub use ledger::{
    Identifier, LEDGER_CAP_BYTES, LEDGER_HEADING, Ledger, LedgerCounts, LedgerError,
    LedgerIdentifiers, REQUEST_CHARS, clip, is_request, one_line, strip_ledger,
};
pub use parse::{ParsedRequest, continued, item_marker, parse_request, parse_transcript};
pub use render::{
    Elision, TurnTranscript, elision_marker, render_request, render_request_text,
    render_request_turns, render_transcript, render_transcript_elided, render_transcript_into,
    render_turns, render_turns_with, request_len, turn_ends_with,
};

// The README's example runs as a doctest, so that what crates.io shows compiles and passes.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
mod readme {}

#[cfg(test)]
mod tests;
