//! One request of a fold: its user prompt (a slice of the transcript rendered once, or, for a
//! turn too large for any request, that turn with its item bodies elided until it fits) and
//! what its answer must not merely copy.

use std::ops::Range;

use panto_model::Message;
use panto_size::Heuristic;
use panto_transcript::{
    Elision, TranscriptItem, item_marker, parse_transcript, render_request_text, render_transcript,
    render_transcript_elided,
};

use super::parts::{Material, Parts, TAIL};
use crate::error::CompactError;
use crate::fold::Chunk;

/// The body of the last item of a request's transcript, `lead` (the marker a part cut inside
/// an item starts with, if any) then `slice`: what the summary must not merely copy. Read from
/// the text the request carries, so it is at most the request's size: a part of a huge tool
/// result is checked against that part, never against the whole result (which the request does
/// not hold, and whose copy per step made a fold quadratic in the size of one turn).
pub(super) fn last_body(lead: Option<&str>, slice: &str) -> String {
    // A part led by its item's marker starts inside that item (mid-line, perhaps): its first
    // line opens nothing, even when its text looks like a marker.
    let item = match last_marker_line(slice, lead.is_none()) {
        Some(at) => parse_transcript(&slice[at..]).pop(),
        None => {
            let mut led = lead.unwrap_or_default().to_owned();
            led.push_str(slice);
            parse_transcript(&led).pop()
        }
    };
    body_of(item)
}

/// The body of a transcript item that carries text (a call carries none): what an answer must
/// not merely copy.
pub(super) fn body_of(item: Option<TranscriptItem>) -> String {
    match item {
        Some(
            TranscriptItem::Text { text, .. }
            | TranscriptItem::Thinking { text, .. }
            | TranscriptItem::ToolResult { text, .. }
            | TranscriptItem::Summary { text },
        ) => text,
        _ => String::new(),
    }
}

/// Where the last line of `text` that opens an item starts (escaping keeps message text from
/// looking like one), scanning back from the end; the first line only when `at_line_start`.
fn last_marker_line(text: &str, at_line_start: bool) -> Option<usize> {
    let mut starts = text
        .rmatch_indices('\n')
        .map(|(at, _)| at + 1)
        .chain(at_line_start.then_some(0));
    starts.find(|&at| {
        let line = text[at..].split_inclusive('\n').next().unwrap_or("");
        item_marker(line).is_some()
    })
}

/// The transcript of `messages` (one turn too large for any request) with its item bodies
/// elided until it fits `capacity` estimated tokens: the largest body cap that fits, found by
/// bisection. `None` when even the markers alone do not fit.
fn elide_to_fit(messages: &[Message], capacity: u64) -> Option<(String, Vec<Elision>)> {
    let render = |max_body: usize| {
        let mut out = String::new();
        let elided = render_transcript_elided(&mut out, messages, max_body);
        (out, elided)
    };
    let fits = |text: &str| Heuristic.text(text) <= capacity;
    let (smallest, elided) = render(0);
    if !fits(&smallest) {
        return None;
    }
    let (mut lo, mut hi) = (0usize, 1usize);
    let mut best = (smallest, elided);
    // Grow the cap until it no longer fits, then bisect between the last fit and the miss.
    loop {
        let (text, elided) = render(hi);
        if !fits(&text) || elided.is_empty() {
            if fits(&text) {
                return Some((text, elided));
            }
            break;
        }
        lo = hi;
        best = (text, elided);
        hi *= 2;
    }
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        let (text, elided) = render(mid);
        if fits(&text) {
            lo = mid;
            best = (text, elided);
        } else {
            hi = mid;
        }
    }
    Some(best)
}

/// The user prompt of one request of a fold.
pub(super) struct ChunkPrompt {
    /// The prompt.
    pub(super) text: Prompt,
    /// Its length in bytes.
    pub(super) len: usize,
    /// The bytes of the transcript in it.
    pub(super) transcript_len: usize,
    /// Its estimated tokens.
    pub(super) tokens: u64,
    /// The item bodies elided in its transcript.
    pub(super) elisions: Vec<Elision>,
    /// The body of its transcript's last item ([`last_body`]).
    pub(super) last_body: String,
}

/// The user prompt of the request for `chunk`, a turn too large for any request (or a part of
/// one after the window shrank below it): the turn of `messages` with its bodies elided until
/// it fits, after the summary `running`.
///
/// # Errors
/// [`CompactError::TurnTooLarge`] when even its markers do not fit.
fn elided_prompt(
    chunk: &Chunk,
    messages: &[Message],
    running: Option<&str>,
) -> Result<ChunkPrompt, CompactError> {
    let (text, elisions) =
        elide_to_fit(messages, chunk.capacity).ok_or(CompactError::TurnTooLarge {
            tokens: chunk.tokens,
            capacity: chunk.capacity,
        })?;
    let prompt = render_request_text(&text, running);
    Ok(ChunkPrompt {
        tokens: Heuristic.text(&prompt),
        len: prompt.len(),
        text: Prompt::Text(prompt),
        transcript_len: text.len(),
        elisions,
        last_body: last_body(None, &text),
    })
}

/// The user prompt of the request for `chunk`: the parts `parts` of `material` (of the
/// turns whose messages are `messages`), after the summary `running`.
///
/// When the parts are whole turns, the prompt is the request of those turns' messages
/// ([`Prompt::OfSource`]), written only when a model reads it: the transcript is never
/// rendered whole for a summarizer that reads the source, and what a request carries is
/// rendered when it is sent. Otherwise the chunk's transcript is a slice of the one rendered
/// (again, when it is not held), led by the marker of the item its first part starts inside
/// (if it does) and closed by a line break when it ends inside a line, unless a body must be
/// elided. The last request is built in that transcript's own buffer (moved, not copied)
/// when nothing leads it; any other copies its slice once. Its size comes from the parts'
/// sizes, never from sizing its text again (an elided one, new text, is sized here).
///
/// # Errors
/// [`CompactError::TurnTooLarge`] when even the markers of a turn too large for any request do
/// not fit.
pub(super) fn chunk_prompt(
    material: &mut Material<'_>,
    chunk: &Chunk,
    parts: Range<usize>,
    messages: &[Message],
    running: Option<&str>,
) -> Result<ChunkPrompt, CompactError> {
    if chunk.needs_elision() {
        return elided_prompt(chunk, messages, running);
    }
    // Exact: the envelope's cost, the lead's, the parts' and the tail's add up to the prompt's.
    let envelope = render_request_text("", running);
    let all = &mut *material.parts;
    let parts_tenths = Heuristic.text_tenths(&envelope) + all.tenths(parts.clone());
    if all.whole_turns(parts.clone()) {
        let transcript_len = all.text_len(parts.clone());
        let last_body = last_body(None, &last_turn_text(all, parts, material.messages));
        return Ok(ChunkPrompt {
            text: Prompt::OfSource,
            len: envelope.len() + transcript_len,
            transcript_len,
            tokens: parts_tenths.div_ceil(10),
            elisions: Vec::new(),
            last_body,
        });
    }
    all.render(material.messages);
    let lead = all.lead(parts.start);
    let slice = all.transcript.turns(parts.clone());
    let tail = if slice.is_empty() || slice.ends_with('\n') {
        ""
    } else {
        TAIL
    };
    let transcript_len = lead.as_deref().map_or(0, str::len) + slice.len() + tail.len();
    let last_body = last_body(lead.as_deref(), slice);
    let tenths = parts_tenths
        + lead.as_deref().map_or(0, |l| Heuristic.text_tenths(l))
        + Heuristic.text_tenths(tail);
    let text = match lead {
        None if parts.end == all.len() => {
            std::mem::take(&mut all.transcript).into_request(parts.start, running)
        }
        None if tail.is_empty() => render_request_text(slice, running),
        led => {
            let mut text = led.unwrap_or_default();
            text.push_str(slice);
            text.push_str(tail);
            render_request_text(&text, running)
        }
    };
    Ok(ChunkPrompt {
        len: envelope.len() + transcript_len,
        text: Prompt::Text(text),
        transcript_len,
        tokens: tenths.div_ceil(10),
        elisions: Vec::new(),
        last_body,
    })
}

/// The transcript of the last turn of the parts `parts` (whole turns of `messages`) that
/// renders to any text: where the last item of their transcript starts, since every turn's
/// text starts with an item's marker.
pub(super) fn last_turn_text(all: &Parts, parts: Range<usize>, messages: &[Message]) -> String {
    let turns = all.turns_in(parts);
    turns
        .rev()
        .map(|turn| render_transcript(&messages[all.turn(turn)]))
        .find(|text| !text.is_empty())
        .unwrap_or_default()
}

/// A request's user prompt: its text, or, for a request of whole turns, the request of their
/// messages after the summary it carries (`render_request` of its
/// [`RequestSource`](crate::RequestSource)), written only when a model that reads it is asked
/// or its input must be recognised.
pub(super) enum Prompt {
    Text(String),
    OfSource,
}
