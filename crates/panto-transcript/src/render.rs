//! Rendering: messages to the transcript text, and the user prompt of a compaction request.
//!
//! Everything is written into one `String`, reserved up front from an upper bound of its size;
//! escaping copies unremarkable runs whole, and tool arguments are serialised straight into the
//! buffer.

use std::borrow::Cow;
use std::ops::Range;

use panto_model::{ContentBlock, Message, Role, ToolResultContent};

use crate::cut::{Budget, Cut, ends};
use crate::escape::{Bound, Escaper, Len, Sink, escape_into, write_raw_json, write_token};
use crate::item::{ItemRef, ItemView, ToolInput, walk, walk_indexed};
use crate::syntax::{
    Head, INTRO, INTRO_WITH_SUMMARY, SUMMARY_CLOSE, SUMMARY_OPEN, TRANSCRIPT_CLOSE, TRANSCRIPT_OPEN,
};

/// Renders messages as the plain-text transcript artifact (format in the crate docs).
///
/// Invariant: `parse_transcript(&render_transcript(m)) == transcript_items(m)` for all `m`, and
/// no text inside `m` can start a marker line or contain an envelope tag.
pub fn render_transcript(messages: &[Message]) -> String {
    let mut out = String::new();
    render_transcript_into(&mut out, messages);
    out
}

/// Appends the transcript of `messages` to `out`, leaving what `out` held untouched.
pub fn render_transcript_into(out: &mut String, messages: &[Message]) {
    out.reserve_exact(rendered_bound(messages));
    walk(messages, |item| write_item(out, item));
    out.shrink_to_fit();
}

/// The user prompt of a compaction request: one line saying what the material is, the latest
/// active summary (at most one) in a `<previous-summary>` section when there is one, then the
/// transcript of `prefix` in a `<transcript>` section.
///
/// The previous summary comes first because it covers older events than the transcript, so the
/// model reads the history in order. Invariant: [`crate::parse_request`] finds exactly one
/// transcript section and at most one previous-summary section in the result, and gives back
/// `previous_summary` and the items of `prefix` unchanged.
pub fn render_request(prefix: &[Message], previous_summary: Option<&str>) -> String {
    let mut head = Len::default();
    open_request(&mut head, previous_summary);
    let mut out = String::with_capacity(head.0 + rendered_bound(prefix) + CLOSE_LEN);
    open_request(&mut out, previous_summary);
    walk(prefix, |item| write_item(&mut out, item));
    close_request(&mut out);
    out.shrink_to_fit();
    out
}

/// [`render_request`] around a transcript already rendered (by [`render_turns`],
/// [`render_transcript_elided`] or [`render_transcript`]): the same envelope, the transcript
/// text copied in once, into a buffer reserved for the whole prompt up front.
pub fn render_request_text(transcript: &str, previous_summary: Option<&str>) -> String {
    let mut head = Len::default();
    open_request(&mut head, previous_summary);
    let mut out = String::with_capacity(head.0 + transcript.len() + CLOSE_LEN);
    open_request(&mut out, previous_summary);
    out.push_str(transcript);
    close_request(&mut out);
    out
}

fn open_request(out: &mut impl Sink, previous_summary: Option<&str>) {
    match previous_summary {
        Some(summary) => {
            out.push_str(INTRO_WITH_SUMMARY);
            out.push_str("\n\n");
            out.push_str(SUMMARY_OPEN);
            out.push('\n');
            escape_into(out, summary, true);
            out.push('\n');
            out.push_str(SUMMARY_CLOSE);
            out.push_str("\n\n");
        }
        None => {
            out.push_str(INTRO);
            out.push_str("\n\n");
        }
    }
    out.push_str(TRANSCRIPT_OPEN);
    out.push('\n');
}

/// The length of what [`close_request`] writes.
const CLOSE_LEN: usize = TRANSCRIPT_CLOSE.len() + 1;

fn close_request(out: &mut impl Sink) {
    out.push_str(TRANSCRIPT_CLOSE);
    out.push('\n');
}

/// A transcript rendered turn by turn into one text, with the end of each turn's part, so that
/// any run of consecutive turns is one slice of it (see [`render_turns`]).
///
/// Rendered by [`render_request_turns`], the text is preceded in its buffer by the head of a
/// request's envelope, which [`TurnTranscript::text`] leaves out and
/// [`TurnTranscript::into_request`] uses as it is. Two transcripts are equal when their texts
/// and turns are, whatever precedes them in the buffer.
#[derive(Clone, Debug, Default)]
pub struct TurnTranscript {
    /// The envelope's head (`text[..head]`), then the turns.
    text: String,
    head: usize,
    /// Where each turn's part ends in [`TurnTranscript::text`].
    ends: Vec<usize>,
}

impl PartialEq for TurnTranscript {
    fn eq(&self, other: &TurnTranscript) -> bool {
        self.text() == other.text() && self.ends == other.ends
    }
}

impl Eq for TurnTranscript {}

impl TurnTranscript {
    /// The whole text.
    pub fn text(&self) -> &str {
        &self.text[self.head..]
    }

    /// The number of turns.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether there are no turns.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Where the part of turn `turn` starts in [`TurnTranscript::text`].
    fn start_of(&self, turn: usize) -> usize {
        if turn == 0 { 0 } else { self.ends[turn - 1] }
    }

    /// Where each turn's part ends in [`TurnTranscript::text`].
    pub fn ends(&self) -> &[usize] {
        &self.ends
    }

    /// The same text in other parts: `ends` are where each part ends in
    /// [`TurnTranscript::text`], increasing, the last at its end. A part may end inside a line
    /// or an item: the caller that cuts one so (a fold cutting a turn too large for one
    /// request) must lead the next part's text where it sends it, so that no text comes to the
    /// start of a line it was not at ([`crate::item_marker`] gives the marker to lead with).
    ///
    /// # Panics
    /// When `ends` are not increasing, do not end at the end of the text, or one is not a
    /// character boundary.
    #[must_use]
    pub fn with_ends(mut self, ends: Vec<usize>) -> TurnTranscript {
        let text = self.text();
        assert_eq!(
            ends.last().copied().unwrap_or(0),
            text.len(),
            "the parts must end at the end of the transcript"
        );
        let mut start = 0;
        for &end in &ends {
            assert!(end > start || end == 0, "the parts must not be empty");
            assert!(
                text.is_char_boundary(end),
                "a part must end between characters"
            );
            start = end;
        }
        self.ends = ends;
        self
    }

    /// The transcript of turns `turns` (indices into the turn list it was rendered from),
    /// exactly as [`render_transcript`] renders their messages.
    ///
    /// # Panics
    /// When the range reaches past the last turn.
    pub fn turns(&self, turns: Range<usize>) -> &str {
        if turns.is_empty() {
            return "";
        }
        &self.text()[self.start_of(turns.start)..self.ends[turns.end - 1]]
    }

    /// The user prompt of a compaction request over turns `from..` (as [`render_request_text`]
    /// of [`TurnTranscript::turns`] gives it), built in this transcript's own buffer: the
    /// earlier turns' text is dropped and the envelope written around the rest, so the
    /// transcript is never copied into a second buffer. For the last request of a fold. When
    /// the buffer already holds a head of the same length before turn `from` (rendered by
    /// [`render_request_turns`] with the same `previous_summary`, and `from` is 0), the text
    /// does not move: the head is written over it and the close after the text.
    ///
    /// # Panics
    /// When `from` is past the last turn.
    pub fn into_request(self, from: usize, previous_summary: Option<&str>) -> String {
        assert!(from <= self.ends.len(), "turn {from} is past the last turn");
        let start = self.head + self.start_of(from);
        let mut head = String::new();
        open_request(&mut head, previous_summary);
        let mut text = self.text;
        let end = text.len();
        // At most one reallocation, then one move of the kept turns, unless the head takes
        // the place of what it replaces exactly (the envelope's own head): then nothing moves.
        let len = head.len() + (end - start) + CLOSE_LEN;
        text.reserve_exact(len.saturating_sub(end));
        text.replace_range(..start, &head);
        close_request(&mut text);
        text
    }
}

/// Renders `messages` turn by turn: `turns` are consecutive ranges of `messages` (as
/// `panto_model::turns` gives them), and the result holds their transcripts one after the
/// other.
///
/// Invariant: `render_turns(m, &turns(m)).text() == render_transcript(m)`. A tool result is
/// named after its call, and Contract 2 puts the call in the result's own turn, so rendering a
/// turn alone names every result as rendering the whole transcript does.
pub fn render_turns(messages: &[Message], turns: &[Range<usize>]) -> TurnTranscript {
    render_turns_with(messages, turns, |_| {})
}

/// [`render_turns`], calling `each` with the text of every turn, in order, right after it is
/// written: a pass over the turns' texts (sizing them, say) that reads them while they are
/// still in the cache instead of reading the whole transcript back from memory.
pub fn render_turns_with(
    messages: &[Message],
    turns: &[Range<usize>],
    each: impl FnMut(&str),
) -> TurnTranscript {
    render_after(String::new(), messages, turns, each)
}

/// Where each turn's part ends in the transcript [`render_turns_with`] would render (its
/// [`TurnTranscript::ends`]), calling `each` with the text of every turn, in order, as it does,
/// without keeping the transcript: each turn is rendered into one buffer, cleared for the next.
/// For a pass over the turns' texts (sizing them) when the whole text is not wanted at once.
pub fn turn_ends_with(
    messages: &[Message],
    turns: &[Range<usize>],
    mut each: impl FnMut(&str),
) -> Vec<usize> {
    let mut text = String::new();
    let mut ends = Vec::with_capacity(turns.len());
    let mut end = 0;
    for turn in turns {
        text.clear();
        walk(&messages[turn.clone()], |item| write_item(&mut text, item));
        each(&text);
        end += text.len();
        ends.push(end);
    }
    ends
}

/// The length in bytes of [`render_request`] of `prefix` and `previous_summary`, measured
/// without writing it.
pub fn request_len(prefix: &[Message], previous_summary: Option<&str>) -> usize {
    let mut len = Len::default();
    open_request(&mut len, previous_summary);
    walk(prefix, |item| write_item(&mut len, item));
    close_request(&mut len);
    len.0
}

/// [`render_turns_with`] for a compaction request: the buffer starts with the head of the
/// envelope for `previous_summary`, so that [`TurnTranscript::into_request`] of turn 0 with
/// the same summary writes the close after the text and moves nothing. The text, the turns
/// and what `each` is given are those of [`render_turns_with`].
pub fn render_request_turns(
    messages: &[Message],
    turns: &[Range<usize>],
    previous_summary: Option<&str>,
    each: impl FnMut(&str),
) -> TurnTranscript {
    let mut head = String::new();
    open_request(&mut head, previous_summary);
    render_after(head, messages, turns, each)
}

/// Renders the turns after `head`, in a buffer reserved once for the head, the transcript's
/// bound and an envelope's close.
fn render_after(
    head: String,
    messages: &[Message],
    turns: &[Range<usize>],
    mut each: impl FnMut(&str),
) -> TurnTranscript {
    let head_len = head.len();
    let mut text = head;
    text.reserve_exact(rendered_bound(messages) + CLOSE_LEN);
    let mut ends = Vec::with_capacity(turns.len());
    for turn in turns {
        let start = text.len();
        walk(&messages[turn.clone()], |item| write_item(&mut text, item));
        each(&text[start..]);
        ends.push(text.len() - head_len);
    }
    // What the bound reserved beyond the text was never written; room for the envelope's
    // close stays, for `into_request`.
    text.shrink_to(text.len() + CLOSE_LEN);
    TurnTranscript {
        text,
        head: head_len,
        ends,
    }
}

/// One item body shortened by [`render_transcript_elided`]: its head and tail are in the
/// transcript, with a marker between them saying how much was left out. The messages
/// themselves are not changed.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Elision {
    /// The index of the message in the rendered slice.
    pub message: usize,
    /// The index of the content block in that message.
    pub block: usize,
    /// The body's length in bytes, as it would be rendered whole (for a tool call, its JSON).
    pub bytes: usize,
    /// How many of those bytes are in the transcript (head and tail together).
    pub kept: usize,
}

impl Elision {
    /// How many bytes were left out.
    pub fn omitted(&self) -> usize {
        self.bytes - self.kept
    }
}

/// The marker line that stands where an elided body's middle was.
pub fn elision_marker(omitted: usize) -> String {
    format!(
        "[\u{2026} {omitted} bytes of this item were left out of the transcript by panto; the session keeps them whole \u{2026}]"
    )
}

/// Renders `messages` like [`render_transcript_into`], except that every item body longer than
/// `max_body` bytes is elided: its first and last `max_body / 2` bytes (cut at character
/// boundaries) stay, joined by [`elision_marker`] on a line of its own. Returns what was
/// elided, in order.
///
/// The elided text goes through the same escaping as any body, so a cut can never forge a
/// marker line or a tag. Images and unknown blocks have no body and are never elided.
pub fn render_transcript_elided(
    out: &mut String,
    messages: &[Message],
    max_body: usize,
) -> Vec<Elision> {
    let mut elided = Vec::new();
    walk_indexed(messages, |message, block, item| {
        match elide_item(&item, max_body) {
            Some((body, bytes, kept)) => {
                write_elided(out, item, &body);
                elided.push(Elision {
                    message,
                    block,
                    bytes,
                    kept,
                });
            }
            None => write_item(out, item),
        }
    });
    elided
}

/// The elided body of `item` when its body is longer than `max_body`: `(body, bytes, kept)`.
fn elide_item(item: &ItemRef<'_>, max_body: usize) -> Option<(String, usize, usize)> {
    let cut = |text: &str| -> Option<(String, usize, usize)> {
        if text.len() <= max_body {
            return None;
        }
        let half = Budget::bytes(max_body / 2);
        let kept = ends(text, half, half, Cut::Char);
        let omitted = kept.middle.len();
        let mut body = String::with_capacity(max_body + 128);
        body.push_str(kept.head);
        body.push('\n');
        body.push_str(&elision_marker(omitted));
        body.push('\n');
        body.push_str(kept.tail);
        Some((body, text.len(), text.len() - omitted))
    };
    match item {
        ItemRef::View(
            ItemView::Text { text, .. }
            | ItemView::Thinking { text, .. }
            | ItemView::Summary { text },
        ) => cut(text),
        ItemRef::View(ItemView::ToolCall { input, .. }) => {
            let raw = input_json(*input);
            let mut json = String::with_capacity(raw.len());
            write_raw_json(&mut json, &raw);
            cut(&json)
        }
        ItemRef::View(ItemView::ToolResult { text, .. }) => cut(text),
        ItemRef::ToolResult { content, .. } => match content {
            ToolResultContent::Text(text) => cut(text),
            ToolResultContent::Blocks(_) => cut(&content.text()),
        },
        ItemRef::View(_) => None,
    }
}

/// Writes `item` with `body` (already elided) in place of its own.
fn write_elided(out: &mut String, item: ItemRef<'_>, body: &str) {
    match item {
        ItemRef::View(ItemView::ToolCall { role, id, name, .. }) => {
            tool_call_head(out, role, name, id);
            escape_into(out, body, false);
            out.push_str("\n\n");
        }
        ItemRef::ToolResult {
            id, name, is_error, ..
        }
        | ItemRef::View(ItemView::ToolResult {
            id, name, is_error, ..
        }) => {
            tool_result_head(out, id, name, is_error);
            text_body(out, body);
        }
        ItemRef::View(ItemView::Text { role, .. }) => {
            out.push_str(Head::Text(role).open());
            text_body(out, body);
        }
        ItemRef::View(ItemView::Thinking { role, .. }) => {
            out.push_str(Head::Thinking(role).open());
            text_body(out, body);
        }
        ItemRef::View(ItemView::Summary { .. }) => {
            out.push_str(Head::Summary.open());
            text_body(out, body);
        }
        ItemRef::View(_) => write_item(out, item),
    }
}

/// An upper bound of the length of the transcript of `messages` (see [`Bound`]): the
/// rendering walk, counting instead of escaping, so that the text is allocated once, large
/// enough, and never grows. Texts count twice their length (each byte could take a backslash)
/// and are never read, so the bound costs a walk over the JSON and the short parts only; the
/// buffer it reserves is given back past the text once the text is written, and memory that
/// is reserved but never written is never touched.
pub(crate) fn rendered_bound(messages: &[Message]) -> usize {
    let mut bound = Bound::default();
    walk(messages, |item| write_item(&mut bound, item));
    bound.0
}

/// Writes one item: the marker, then `: ` and the body when it is not empty, then a blank line.
fn write_item(out: &mut impl Sink, item: ItemRef<'_>) {
    match item {
        ItemRef::ToolResult {
            id,
            name,
            is_error,
            content,
        } => {
            tool_result_head(out, id, name, is_error);
            match content {
                ToolResultContent::Text(text) => text_body(out, text),
                ToolResultContent::Blocks(blocks) => blocks_body(out, blocks),
            }
        }
        ItemRef::View(view) => match view {
            ItemView::Text { role, text } => {
                out.push_str(Head::Text(role).open());
                text_body(out, text);
            }
            ItemView::Thinking { role, text } => {
                out.push_str(Head::Thinking(role).open());
                text_body(out, text);
            }
            ItemView::ToolCall {
                role,
                id,
                name,
                input,
            } => {
                tool_call_head(out, role, name, id);
                out.push_raw_json(&input_json(input));
                out.push_str("\n\n");
            }
            ItemView::ToolResult {
                id,
                name,
                is_error,
                text,
            } => {
                tool_result_head(out, id, name, is_error);
                text_body(out, &text);
            }
            ItemView::Image { from, media_type } => {
                out.push_str(Head::Image(from).open());
                text_body(out, media_type.unwrap_or(""));
            }
            ItemView::Unknown { from, kind } => {
                out.push_str(Head::Unknown(from).open());
                text_body(out, kind);
            }
            ItemView::Summary { text } => {
                out.push_str(Head::Summary.open());
                text_body(out, text);
            }
        },
    }
}

/// A call's arguments as JSON text: the message's own text, or an item's value written out.
fn input_json(input: ToolInput<'_>) -> Cow<'_, str> {
    match input {
        ToolInput::Text(raw) => Cow::Borrowed(raw.json()),
        ToolInput::Value(value) => Cow::Owned(value.to_string()),
    }
}

/// A tool call's marker line up to its body: the head, the name, the call id, and `]: `.
fn tool_call_head(out: &mut impl Sink, role: Role, name: &str, id: &str) {
    out.push_str(Head::ToolCall(role).open());
    out.push(' ');
    write_token(out, name);
    out.push_str(" (");
    write_token(out, id);
    out.push_str(")]: ");
}

/// Opens a tool result's marker: the head, the tool's name when known, and the call id.
fn tool_result_head(out: &mut impl Sink, id: &str, name: Option<&str>, is_error: bool) {
    out.push_str(if is_error {
        Head::ToolError.open()
    } else {
        Head::ToolResult.open()
    });
    if let Some(name) = name {
        out.push(' ');
        write_token(out, name);
    }
    out.push_str(" (");
    write_token(out, id);
    out.push(')');
}

/// Closes the marker and writes an escaped text body and the blank line after it.
fn text_body(out: &mut impl Sink, text: &str) {
    out.push_str("]:");
    if !text.is_empty() {
        out.push(' ');
        escape_into(out, text, false);
    }
    out.push_str("\n\n");
}

/// Like [`text_body`] for the text blocks of a tool result, without building the joined
/// string. The body is exactly [`ToolResultContent::text`]: a newline goes before a text block
/// only once something has been written, so leading empty blocks add nothing.
fn blocks_body(out: &mut impl Sink, blocks: &[ContentBlock]) {
    out.push_str("]:");
    let mut written = false;
    let mut escaper = Escaper::new(false);
    for block in blocks {
        let ContentBlock::Text(t) = block else {
            continue;
        };
        if written {
            out.push_escaped(&mut escaper, "\n");
        } else if !t.text.is_empty() {
            out.push(' ');
            written = true;
        }
        out.push_escaped(&mut escaper, &t.text);
    }
    out.push_str("\n\n");
}
