//! The fallback heuristic: a per-byte cost table plus fixed overheads, calibrated on real sessions.
//!
//! Every byte of content costs a fixed fraction of a token according to its class (letters are
//! cheap, digits and symbols dear), counted in tenths of a token so that the arithmetic stays in
//! integers. Each message and each block adds a fixed overhead for the structure the provider
//! renders around it, a tool call adds more for its call syntax, and an image costs a flat amount.
//! Block costs are rounded up to whole tokens, and nothing ever subtracts, so adding content
//! never lowers a size. `docs/sizing.md` gives the calibration behind the numbers.

use panto_model::{ContentBlock, Message, RawJson, ToolResultContent};

use crate::cost::SYMBOL;
use crate::{Sizer, scan};

/// Tokens every message costs before its blocks: role markers and turn delimiters.
pub const MESSAGE_OVERHEAD: u64 = 10;
/// Tokens every content block (and every block nested in a tool result) costs on top of its
/// content: its type marker and delimiters.
pub const BLOCK_OVERHEAD: u64 = 2;
/// Extra tokens of a tool call: the call syntax around the name and the arguments.
pub const TOOL_CALL_OVERHEAD: u64 = 40;
/// Tokens of one image, whatever its bytes. Providers size images by pixels, not bytes; this is
/// Anthropic's cost of the largest image it accepts without downscaling (about 1.15 megapixels).
pub const IMAGE_TOKENS: u64 = 1600;
/// Extra tokens of a compaction block: the fixed preamble the adapters put before the summary.
pub const COMPACTION_OVERHEAD: u64 = 50;

/// The cost of a text in tenths of a token: the sum of its bytes' costs (`cost::COST`), counted by class
/// sixteen bytes at a time ([`scan::tenths`]).
pub(crate) fn tenths(text: &str) -> u64 {
    scan::tenths(text.as_bytes())
}

/// Whole tokens from tenths, rounded up.
fn tokens(tenths: u64) -> u64 {
    tenths.div_ceil(10)
}

/// The cost of a JSON value given as its text ([`panto_model::RawJson`]) in tenths of a token:
/// as its compact serialisation would read, but with strings counted as their text rather than
/// their escapes (models read the decoded text). No recursion, so any nesting depth costs what
/// its bytes cost.
///
/// Outside strings whitespace is free and every other byte costs its class (structure is
/// [`SYMBOL`], literals and numbers as spelled). Inside a string an escape costs the character it
/// stands for: `\n` a space, `\"` a symbol, `\u00e9` two non-ASCII bytes, a surrogate pair
/// four, a lone surrogate the three of U+FFFD. [`scan::json_tenths`] finds the strings and
/// escapes 64 bytes at a time.
pub(crate) fn json_tenths(json: &str) -> u64 {
    scan::json_tenths(json)
}

/// The cost of a JSON object given by its entries: braces, commas, quoted keys, colons, values.
fn object_tenths<'a>(entries: impl ExactSizeIterator<Item = (&'a str, &'a RawJson)>) -> u64 {
    let symbol = u64::from(SYMBOL);
    let n = entries.len() as u64;
    let structure = (2 + n.saturating_sub(1) + 3 * n) * symbol;
    structure
        + entries
            .map(|(k, v)| tenths(k) + json_tenths(v.json()))
            .sum::<u64>()
}

/// The fallback heuristic: cheap (byte classes counted sixteen bytes at a time), monotonic,
/// conservative.
///
/// A text costs, per byte, 0.3 token for an ASCII letter, 0.8 for a digit, 0.2 for whitespace,
/// 1.1 for any other ASCII byte and 0.5 for each byte of a non-ASCII character. A message costs
/// [`MESSAGE_OVERHEAD`] plus, for each block, [`BLOCK_OVERHEAD`] and its content rounded up:
/// text, thinking (the signature is not counted), a tool call's name and arguments walked as
/// JSON plus [`TOOL_CALL_OVERHEAD`], a tool result's content (tool call ids are not counted:
/// the calibration shows providers do not charge for them), [`IMAGE_TOKENS`] per image, a
/// compaction summary plus [`COMPACTION_OVERHEAD`], and unknown blocks as their JSON fields.
/// Fields panto does not model (`extra`) are not counted.
///
/// Invariants: the size of a message is at least [`MESSAGE_OVERHEAD`]; adding a block, or
/// content to a block, never lowers it; computing it takes time linear in the bytes of the
/// message and allocates nothing.
///
/// Calibrated on real coding-agent sessions so that it overestimates at least 90% of the spans
/// of tool output and user text while its median overestimate stays under 1.5 (see
/// `docs/sizing.md`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Heuristic;

impl Heuristic {
    /// Estimated tokens of a piece of text, without any message or block overhead.
    ///
    /// Monotonic: inserting characters anywhere never lowers the result.
    pub fn text(&self, text: &str) -> u64 {
        tokens(tenths(text))
    }

    /// The cost of `text` before rounding, in tenths of a token: additive, so the pieces of a
    /// text sum to the whole, and `text(t)` is `text_tenths(t)` divided by ten, rounded up.
    pub fn text_tenths(&self, text: &str) -> u64 {
        tenths(text)
    }

    /// Estimated tokens of one content block, including [`BLOCK_OVERHEAD`].
    pub fn block(&self, block: &ContentBlock) -> u64 {
        BLOCK_OVERHEAD + tokens(block_tenths(block))
    }

    /// Estimated tokens of one message: [`MESSAGE_OVERHEAD`] plus its blocks.
    pub fn message(&self, message: &Message) -> u64 {
        MESSAGE_OVERHEAD + message.content.iter().map(|b| self.block(b)).sum::<u64>()
    }
}

/// The content cost of a block in tenths of a token, without its own overhead.
fn block_tenths(block: &ContentBlock) -> u64 {
    match block {
        ContentBlock::Text(t) => tenths(&t.text),
        ContentBlock::Thinking(t) => tenths(&t.thinking),
        ContentBlock::ToolUse(u) => {
            10 * TOOL_CALL_OVERHEAD + tenths(&u.name) + json_tenths(u.input.json())
        }
        ContentBlock::ToolResult(r) => match &r.content {
            ToolResultContent::Text(s) => tenths(s),
            ToolResultContent::Blocks(blocks) => blocks
                .iter()
                .map(|b| 10 * BLOCK_OVERHEAD + block_tenths(b))
                .sum(),
        },
        ContentBlock::Image(_) => 10 * IMAGE_TOKENS,
        // A native compaction's payload rides in `extra` and is what its protocol is sent, so
        // it counts too (panto's own blocks have no extra fields).
        ContentBlock::Compaction(c) if !c.extra.is_empty() => {
            10 * COMPACTION_OVERHEAD + tenths(&c.summary) + object_tenths(c.extra.iter())
        }
        ContentBlock::Compaction(c) => 10 * COMPACTION_OVERHEAD + tenths(&c.summary),
        ContentBlock::Other(o) => tenths(&o.kind) + object_tenths(o.fields.iter()),
    }
}

/// How many messages [`Heuristic::message_sizes`] reads ahead and sizes per batch.
const READ_AHEAD: usize = 16;

impl Sizer for Heuristic {
    /// The sizes of [`Heuristic::message`], computed a batch of sixteen messages at a time with
    /// the start of every block of the next batch read beforehand.
    ///
    /// Sizing a long conversation is bound by memory, not by the scans: each block's text lies
    /// somewhere else on the heap, and a scan waits for it. Reading the starts of a batch
    /// together lets those loads overlap each other and the sizing of the batch before.
    fn message_sizes(&self, messages: &[Message]) -> Vec<u64> {
        let mut sizes = Vec::with_capacity(messages.len());
        let mut batches = messages.chunks(READ_AHEAD).peekable();
        while let Some(batch) = batches.next() {
            if let Some(next) = batches.peek() {
                let touched = next.iter().flat_map(|m| &m.content).map(touch);
                std::hint::black_box(touched.fold(0, |a, b| a ^ b));
            }
            sizes.extend(batch.iter().map(|m| self.message(m)));
        }
        sizes
    }
}

/// One byte of each cache line of the start of what [`block_tenths`] reads of a block, folded
/// into one: a read that brings the start into cache. Longer texts are left to the hardware
/// prefetcher, which follows a scan once it runs.
fn touch(block: &ContentBlock) -> u8 {
    const CACHE_LINE: usize = 64;
    const START: usize = 1024;
    let text = match block {
        ContentBlock::Text(t) => &t.text,
        ContentBlock::Thinking(t) => &t.thinking,
        ContentBlock::ToolUse(u) => u.input.json(),
        ContentBlock::ToolResult(r) => match &r.content {
            ToolResultContent::Text(s) => s,
            ToolResultContent::Blocks(_) => "",
        },
        ContentBlock::Compaction(c) => &c.summary,
        ContentBlock::Image(_) | ContentBlock::Other(_) => "",
    };
    let start = &text.as_bytes()[..text.len().min(START)];
    start.iter().step_by(CACHE_LINE).fold(0, |a, &b| a ^ b)
}
