//! Clearing as a strategy (`compaction_strategy = "clear"`, and the first step of `"tiered"`):
//! in the turns before the kept suffix, tool results larger than a placeholder, images, and the
//! large arguments and the thinking of finished tool loops are replaced by placeholders; no
//! model is asked. It is written as a compaction entry that carries the active summary
//! unchanged, followed by copies of the whole conversation, so replay, the stores and crash
//! safety need nothing new (docs/session.md, "Clearings").
//!
//! Why these blocks: a tool's output is what the conversation's bytes are mostly made of and
//! what a summary drops anyway; the call stays (its name and arguments), the result keeps its
//! call id, whether it failed, its size and its first line, and the original stays in the
//! history, where the recall tool and `panto show SESSION ID` fetch it by that id. An image is
//! a placeholder of its media type. A call of a finished tool loop keeps its keys, each string
//! argument larger than [`CLEAR_INPUTS_ABOVE`] (a file a call writes) replaced by a placeholder
//! string that names the call's item id (`MESSAGE#BLOCK`, which fetches the call whole; its
//! call id names its result), as Anthropic's context editing clears tool inputs
//! (`clear_tool_inputs`). Thinking is removed, not replaced (a placeholder in an assistant
//! message would read as something the model said). Neither is touched in the tool loop in
//! flight, whose thinking Anthropic wants back with the calls it signed.

use std::collections::HashSet;

use panto_model::{
    CLEARED, CLEARED_IMAGE_PREFIX, CLEARED_INPUT_PREFIX, CLEARED_PREFIX, CUT, CUT_PREFIX,
    ContentBlock, EffectiveContext, ImageBlock, Message, RawJson, Role, ToolResultBlock,
    ToolResultContent, ToolUseBlock,
};
use panto_transcript::cut::{self, Budget};
use panto_transcript::{clip, one_line};
use serde_json::Value;

use super::Prepared;
use super::run::Run;
use crate::error::CompactError;
use crate::report::{ClearedItem, Compacted};

/// The least size, in bytes of text, of a tool result worth clearing: a placeholder is about
/// 200 bytes, so a smaller result would save little (and an error message is usually short).
pub const CLEAR_RESULTS_ABOVE: usize = 1_024;

/// The least size, in bytes, of a string argument of an old tool call worth clearing (issue 37,
/// point 8): the file a write call carries, an edit's old and new text. The same as a result's
/// ([`CLEAR_RESULTS_ABOVE`]): its placeholder is about 200 bytes too.
pub const CLEAR_INPUTS_ABOVE: usize = CLEAR_RESULTS_ABOVE;

/// The kind, in a clearing's `cleared` list, of a call whose large arguments were cleared.
pub(super) const INPUT_KIND: &str = "tool_input";

/// The kind, in a clearing's `cleared` list, of a result cut in the kept turns.
pub(super) const CUT_KIND: &str = "tool_result_cut";

/// The summary of a clearing made when no summary is active: what the placeholders are.
pub const CLEARING_NOTE: &str = "Earlier tool results of this conversation were cleared to save room. Each is replaced by a placeholder that keeps its size, whether it failed, its first line and its id; the calls are kept as they were, and the full results are kept in the session.";

/// The most characters of a first line a placeholder quotes.
const FIRST_LINE_CHARS: usize = 120;

/// A tool result in the kept turns (the turn in flight) larger than the window divided by this
/// (a quarter) is cut (issue 37, point 6): no other compaction can make room for it.
pub const CUT_RESULTS_ABOVE_DIVISOR: u64 = 4;

/// A result cut in the kept turns keeps its head within the window divided by this (an
/// eighth).
pub const CUT_RESULTS_TO_DIVISOR: u64 = 8;

/// The clearing of `prepared`'s older turns, ready to be appended.
///
/// # Errors
/// [`CompactError::NothingToClear`] when the older turns hold nothing larger than a
/// placeholder; [`CompactError::NotSmaller`] when the clearing would not make the conversation
/// smaller and the run does not force it.
pub(super) async fn produce(
    run: &mut Run<'_>,
    prepared: Prepared,
) -> Result<Compacted, CompactError> {
    let compacted = clearing(run, &prepared)?;
    run.check_smaller(compacted)
}

/// [`produce`] without the check that it shrinks (a tiered run checks more than that).
///
/// # Errors
/// [`CompactError::NothingToClear`].
pub(super) fn clearing(run: &mut Run<'_>, prepared: &Prepared) -> Result<Compacted, CompactError> {
    let id = run.compactor.next_id(panto_model::IdKind::Compaction);
    let recall = run.compactor.config.recall_tool;
    let limit = run.clearing_limit(prepared);
    let cut = limit.map(|l| Cut {
        above: l / CUT_RESULTS_ABOVE_DIVISOR,
        to: l / CUT_RESULTS_TO_DIVISOR,
    });
    let cleared = Cleared::of(run.context, prepared, &id, (recall, cut));
    if cleared.items.is_empty() {
        return Err(CompactError::NothingToClear {
            messages: prepared.plan.prefix().len(),
        });
    }
    Ok(run.build_clearing(prepared, id, cleared))
}

/// What a clearing makes of a context, before it is written.
pub(super) struct Cleared {
    /// Every message of the conversation, each old one with its cleared blocks replaced.
    pub(super) messages: Vec<Message>,
    /// What was cleared, in order.
    pub(super) items: Vec<ClearedItem>,
    /// The calls whose results or arguments were cleared and the original results, call then
    /// result, each call once: what the clearing's ledger is derived from.
    pub(super) originals: Vec<Message>,
    /// The ids of the calls in `originals`.
    called: HashSet<String>,
}

/// The tool results of the kept turns that are cut, and to what, in estimated tokens.
#[derive(Clone, Copy)]
struct Cut {
    /// Results larger than this are cut.
    above: u64,
    /// To their head within this.
    to: u64,
}

impl Cleared {
    /// The clearing `id` of the turns `prepared` summarizes in `context`; `recall` says whether
    /// the agent offers the recall tool (the placeholders then name it); the kept turns'
    /// results are cut as `cut` says, when a window is known.
    fn of(
        context: &EffectiveContext,
        prepared: &Prepared,
        id: &str,
        (recall, cut): (bool, Option<Cut>),
    ) -> Cleared {
        let plan = &prepared.plan;
        // Thinking is kept from the last prompt a person typed on: the tool loop in flight.
        let loop_start = context.messages.iter().rposition(is_prompt).unwrap_or(0);
        let mut out = Cleared {
            messages: Vec::with_capacity(plan.end - plan.head),
            items: Vec::new(),
            originals: Vec::new(),
            called: HashSet::new(),
        };
        let mut calls: Vec<&ToolUseBlock> = Vec::new();
        for (i, message) in context.messages.iter().enumerate().skip(plan.head) {
            calls.extend(message.content.iter().filter_map(|b| match b {
                ContentBlock::ToolUse(u) => Some(u),
                _ => None,
            }));
            if i >= plan.keep_from {
                let copy = match cut {
                    Some(cut) => out.cut(message, id, recall, (cut, &calls)),
                    None => message.clone(),
                };
                out.messages.push(copy);
                continue;
            }
            let finished = i < loop_start;
            let copy = out.clear(message, id, recall, (finished, &calls));
            out.messages.push(copy);
        }
        out
    }

    /// A kept `message` with its tool results larger than `cut.above` cut to their head within
    /// `cut.to` and a note that says what is left out and where the whole is (issue 37, point
    /// 6: a result in the turn in flight too large for the window). The call stays, the cut
    /// result keeps its call id, `is_error` and place, so every protocol's pairing holds; it
    /// is marked [`CUT`] (not `cleared`, so an older turn's clearing can still clear it).
    fn cut(
        &mut self,
        message: &Message,
        id: &str,
        recall: bool,
        (cut, calls): (Cut, &[&ToolUseBlock]),
    ) -> Message {
        let too_large = |b: &ContentBlock| match b {
            ContentBlock::ToolResult(r) => {
                !r.extra.contains_key(CLEARED)
                    && !r.extra.contains_key(CUT)
                    && !Budget::tokens(cut.above).fits(&r.content.text())
            }
            _ => false,
        };
        if !message.content.iter().any(too_large) {
            return message.clone();
        }
        let mut copy = message.clone();
        let name = message.id.as_deref();
        for (block, b) in copy.content.iter_mut().enumerate() {
            if !too_large(b) {
                continue;
            }
            let ContentBlock::ToolResult(r) = b else {
                continue;
            };
            let bytes = result_bytes(&r.content);
            self.items.push(
                ClearedItem::new(name, block, CUT_KIND, bytes).with_id(r.tool_use_id.clone()),
            );
            self.original_call(calls, &r.tool_use_id);
            let text = r.content.text();
            let head = cut::head(&text, Budget::tokens(cut.to), cut::Cut::Nearest);
            let lines = text.lines().count();
            let fetch = if recall {
                "; the recall tool fetches it whole by that id"
            } else {
                "; it is kept whole in the session under that id"
            };
            let note = format!(
                "{head}\n{CUT_PREFIX} to fit the context window: the first {} of its {bytes} bytes ({lines} lines) are above; id {}{fetch}]",
                head.len(),
                r.tool_use_id
            );
            let mut placeholder = ToolResultBlock::new(
                r.tool_use_id.clone(),
                ToolResultContent::Text(note),
                r.is_error,
            );
            placeholder.extra.insert(CUT.to_owned(), Value::from(id));
            let original = std::mem::replace(r, placeholder);
            self.originals.push(Message::new(
                Role::User,
                vec![ContentBlock::ToolResult(original)],
            ));
        }
        copy
    }

    /// The original of the call `call_id` among `calls` (the calls so far), added to
    /// [`Cleared::originals`] unless it is there already.
    fn original_call(&mut self, calls: &[&ToolUseBlock], call_id: &str) {
        if let Some(call) = calls.iter().rev().find(|c| c.id == call_id)
            && self.called.insert(call.id.clone())
        {
            let call = ContentBlock::ToolUse((*call).clone());
            self.originals
                .push(Message::new(Role::Assistant, vec![call]));
        }
    }

    /// `message` with its blocks worth clearing replaced (when `finished`, a message of a
    /// finished tool loop, also its calls' large arguments, and its thinking removed), each
    /// cleared block recorded; `calls` are the calls so far, to find a result's call.
    fn clear(
        &mut self,
        message: &Message,
        id: &str,
        recall: bool,
        (finished, calls): (bool, &[&ToolUseBlock]),
    ) -> Message {
        let mut copy = message.clone();
        let name = message.id.as_deref();
        let keeps_other = message.content.iter().any(|b| !is_thinking(b));
        let mut content = Vec::with_capacity(copy.content.len());
        for (block, b) in std::mem::take(&mut copy.content).into_iter().enumerate() {
            let item = |kind, bytes| ClearedItem::new(name, block, kind, bytes);
            match b {
                ContentBlock::ToolResult(r) if worth_clearing(&r) => {
                    let bytes = result_bytes(&r.content);
                    let placeholder = result_placeholder(&r, id, recall);
                    self.items
                        .push(item("tool_result", bytes).with_id(r.tool_use_id.clone()));
                    self.original_call(calls, &r.tool_use_id);
                    self.originals
                        .push(Message::new(Role::User, vec![ContentBlock::ToolResult(r)]));
                    content.push(ContentBlock::ToolResult(placeholder));
                }
                ContentBlock::Image(image) => {
                    let bytes = image_bytes(&image);
                    let it = item("image", bytes);
                    let text = image_placeholder(&image, &it.id, bytes);
                    self.items.push(it);
                    let mut block = panto_model::TextBlock::new(text);
                    block.extra.insert(CLEARED.to_owned(), Value::from(id));
                    content.push(ContentBlock::Text(block));
                }
                // Only where the thinking goes too: a call of the tool loop in flight stays as
                // its provider signed it (docs/compaction.md, section 13).
                ContentBlock::ToolUse(u) if finished && name.is_some() => {
                    let it = item(INPUT_KIND, 0);
                    match cleared_input(&u, &it.id, id, recall) {
                        Some((copy, bytes)) => {
                            self.items.push(ClearedItem { bytes, ..it });
                            self.original_call(calls, &u.id);
                            content.push(ContentBlock::ToolUse(copy));
                        }
                        None => content.push(ContentBlock::ToolUse(u)),
                    }
                }
                b if finished && keeps_other && is_thinking(&b) => {
                    let bytes = match &b {
                        ContentBlock::Thinking(t) => t.thinking.len(),
                        _ => 0,
                    };
                    self.items.push(item("thinking", bytes));
                }
                b => content.push(b),
            }
        }
        copy.content = content;
        copy
    }
}

/// Whether a tool result is worth a placeholder: not one already, and larger than
/// [`CLEAR_RESULTS_ABOVE`] or holding an image.
fn worth_clearing(result: &ToolResultBlock) -> bool {
    if result.extra.contains_key(CLEARED) {
        return false;
    }
    let image = match &result.content {
        ToolResultContent::Blocks(blocks) => {
            blocks.iter().any(|b| matches!(b, ContentBlock::Image(_)))
        }
        ToolResultContent::Text(_) => false,
    };
    image || result_bytes(&result.content) > CLEAR_RESULTS_ABOVE
}

/// The bytes of a result's content: its text, and its images' data.
fn result_bytes(content: &ToolResultContent) -> usize {
    match content {
        ToolResultContent::Text(text) => text.len(),
        ToolResultContent::Blocks(blocks) => blocks
            .iter()
            .map(|b| match b {
                ContentBlock::Text(t) => t.text.len(),
                ContentBlock::Image(i) => image_bytes(i),
                _ => 0,
            })
            .sum(),
    }
}

/// The bytes of an image's data (its URL's, for one given by URL).
fn image_bytes(image: &ImageBlock) -> usize {
    ["data", "url"]
        .iter()
        .find_map(|k| image.source.get(*k).and_then(Value::as_str))
        .map_or(0, str::len)
}

/// The placeholder of a cleared tool result: the same call, whether it failed, and a text that
/// starts with [`CLEARED_PREFIX`] and says its size, its first line and its id.
fn result_placeholder(result: &ToolResultBlock, id: &str, recall: bool) -> ToolResultBlock {
    let failed = if result.failed() { ", failed" } else { "" };
    let placeholder = placeholder_text(
        CLEARED_PREFIX,
        &result.content.text(),
        result_bytes(&result.content),
        (failed, &result.tool_use_id, recall),
    );
    let mut block = ToolResultBlock::new(
        result.tool_use_id.clone(),
        ToolResultContent::Text(placeholder),
        result.is_error,
    );
    block.extra.insert(CLEARED.to_owned(), Value::from(id));
    block
}

/// `{prefix} to save room: ...]`, what stands in for `text` of `bytes` bytes: its size, its
/// lines, `failed` (`", failed"` or nothing), its first line and the `item` id that fetches it
/// whole (with `recall`, the placeholder says the recall tool does).
fn placeholder_text(
    prefix: &str,
    text: &str,
    bytes: usize,
    (failed, item, recall): (&str, &str, bool),
) -> String {
    let lines = text.lines().count();
    let first = text
        .lines()
        .find(|l| !l.trim().is_empty())
        .map(|l| clip(&one_line(&clip(l, FIRST_LINE_CHARS * 4)), FIRST_LINE_CHARS));
    let first = first.map_or(String::new(), |l| format!("; first line: {l}"));
    let fetch = if recall {
        ", which the recall tool fetches whole"
    } else {
        ""
    };
    format!(
        "{prefix} to save room: {bytes} bytes in {lines} lines{failed}{first}; id {item}{fetch}]"
    )
}

/// `call` with each string of its arguments (at any depth) larger than [`CLEAR_INPUTS_ABOVE`]
/// replaced by a placeholder that starts with [`CLEARED_INPUT_PREFIX`] and names `item` (the
/// call's item id), marked cleared by `clearing`, and the bytes cleared; `None` when no
/// argument is that large. The keys stay, so the arguments are still an object every protocol
/// accepts (Anthropic's `input`, Gemini's `args`, the JSON text of Chat's and Responses'
/// `arguments`).
fn cleared_input(
    call: &ToolUseBlock,
    item: &str,
    clearing: &str,
    recall: bool,
) -> Option<(ToolUseBlock, usize)> {
    fn clear(value: &mut Value, placeholder: &dyn Fn(&str) -> String, bytes: &mut usize) {
        match value {
            Value::String(s) if s.len() > CLEAR_INPUTS_ABOVE => {
                *bytes += s.len();
                *s = placeholder(s);
            }
            Value::Array(items) => items.iter_mut().for_each(|v| clear(v, placeholder, bytes)),
            Value::Object(map) => map.values_mut().for_each(|v| clear(v, placeholder, bytes)),
            _ => {}
        }
    }
    // A string argument is no longer than the JSON text of the arguments.
    if item.is_empty()
        || call.extra.contains_key(CLEARED)
        || call.input.json().len() <= CLEAR_INPUTS_ABOVE
    {
        return None;
    }
    let mut value = call.input.value().clone();
    let mut bytes = 0;
    let placeholder =
        |s: &str| placeholder_text(CLEARED_INPUT_PREFIX, s, s.len(), ("", item, recall));
    clear(&mut value, &placeholder, &mut bytes);
    if bytes == 0 {
        return None;
    }
    let mut copy = call.clone();
    copy.input = RawJson::from(value);
    copy.extra.insert(CLEARED.to_owned(), Value::from(clearing));
    Some((copy, bytes))
}

/// The text that stands in for a cleared image: it starts with [`CLEARED_IMAGE_PREFIX`].
fn image_placeholder(image: &ImageBlock, item: &str, bytes: usize) -> String {
    let media = image
        .media_type()
        .filter(|m| !m.is_empty())
        .unwrap_or("image");
    let id = if item.is_empty() {
        String::new()
    } else {
        format!("; id {item}")
    };
    format!("{CLEARED_IMAGE_PREFIX} to save room: {media}, {bytes} bytes{id}]")
}

/// Whether a block is thinking (signed or redacted).
fn is_thinking(block: &ContentBlock) -> bool {
    match block {
        ContentBlock::Thinking(_) => true,
        ContentBlock::Other(o) => o.kind == "redacted_thinking",
        _ => false,
    }
}

/// Whether `m` is a prompt a person typed: a user message with something besides tool results.
fn is_prompt(m: &Message) -> bool {
    m.role == Role::User
        && m.content.iter().any(|b| {
            matches!(
                b,
                ContentBlock::Text(_) | ContentBlock::Image(_) | ContentBlock::Compaction(_)
            )
        })
}
