//! What a fold walks (`Material`): messages in turns, and the turns' transcript in parts
//! (`Parts`), each part a whole turn or a piece of one; either the summarized
//! prefix, or the `Pieces` of a previous summary too large to ride along.
//!
//! A turn is cut only for the fold's requests, never in what is kept or stored: one larger than
//! an eighth of what a later request carries is cut between the lines of its transcript (a
//! line too long for a part between its words), so that a request is filled to within an eighth of its room whatever the turns' sizes (whole
//! turns of a third of a small window leave a request a third empty). A part that starts
//! inside an item is led by that item's marker (`[Tool result bash (t1)]: (continued)`), so
//! every request's transcript starts with a marker and reads back as items; no text comes to
//! the start of a line it was not at. The ledger derives each turn once, in the step that holds
//! its first part.

use std::ops::Range;

use panto_model::Message;
use panto_size::Heuristic;
use panto_transcript::cut::{Boundary, Budget, Lead, split, split_items};
use panto_transcript::{TurnTranscript, continued, render_turns};

use super::Prepared;
use super::state::FoldState;

/// What closes a request's transcript that ends inside a line, so that the envelope's tag
/// that follows is alone on its line.
pub(super) const TAIL: &str = "\n";

/// What a fold walks: messages, their turns, and the turns' transcript in parts.
pub(super) struct Material<'a> {
    pub(super) messages: &'a [Message],
    pub(super) parts: &'a mut Parts,
    /// Whether these are a previous summary's pieces: no ledger to derive, no elision to
    /// record, no echo to refuse.
    pub(super) carried: bool,
}

/// The transcript of some turns in parts, each a whole turn or a piece of one cut between
/// lines or words, in order, with each part's size.
pub(super) struct Parts {
    /// The turns, as ranges of the material's messages.
    turns: Vec<Range<usize>>,
    /// The turn of each part (an index into `turns`).
    turn_of: Vec<usize>,
    /// For a part that starts inside an item: what leads its text when a request starts with
    /// it (the item's marker, then `(continued)`).
    lead: Vec<Option<Lead>>,
    /// Each part's estimated tokens, without a lead or a tail (see [`Parts::allowance`]).
    pub(super) tokens: Vec<u64>,
    /// The largest lead's tokens, and the tail's when a part ends inside a line.
    lead_most: u64,
    tail: u64,
    /// Each part's transcript in tenths of a token, without its lead: a run of parts sizes
    /// exactly, without sizing its text again.
    tenths: Vec<u64>,
    /// The transcript, one part after the other, when it is held: rendered only when a part
    /// must be cut from its text or a request carries a piece of a turn, and taken by the last
    /// such request of a fold ([`Parts::rendered`]).
    pub(super) transcript: TurnTranscript,
    /// Where each part ends in the transcript, to cut it again after a re-rendering.
    ends: Vec<usize>,
}

/// How large a turn's parts may be, in estimated tokens.
#[derive(Clone, Copy)]
pub(super) struct PartSize {
    /// A turn larger than this is cut between its lines into parts of at most this much.
    pub(super) part: u64,
    /// A turn with a line larger than this is not cut: it is elided whole, as it must be.
    pub(super) line: u64,
}

impl PartSize {
    /// Parts for requests that carry `capacity` tokens of transcript: an eighth of it each, and
    /// no cut in a turn with a line larger than a request carries.
    pub(super) fn for_capacity(capacity: u64) -> PartSize {
        PartSize {
            part: (capacity / 8).max(1),
            line: capacity,
        }
    }
}

impl Parts {
    /// The turns `turns` rendered as `transcript` (one part per turn) with their sizes in
    /// tenths, in parts no larger than `size` where a turn allows it (`None`: whole turns).
    #[cfg(test)]
    pub(super) fn cut(
        turns: Vec<Range<usize>>,
        transcript: TurnTranscript,
        turn_tenths: &[u64],
        size: Option<PartSize>,
    ) -> Parts {
        let ends = transcript.ends().to_vec();
        let mut parts = Parts::whole(turns, (transcript, ends), turn_tenths);
        if size.is_some() {
            parts.cut_from(0, size, &[]);
        }
        parts
    }

    /// The turns `turns` of `messages`, whose transcript is not held (each turn's part of it
    /// ends at `ends`), sized `turn_tenths`, in parts no larger than `size` where a turn
    /// allows it (`None`: whole turns): the transcript is rendered only if a turn is cut.
    pub(super) fn sized(
        turns: Vec<Range<usize>>,
        ends: Vec<usize>,
        turn_tenths: &[u64],
        size: Option<PartSize>,
        messages: &[Message],
    ) -> Parts {
        let mut parts = Parts::whole(turns, (TurnTranscript::default(), ends), turn_tenths);
        if size.is_some() {
            parts.cut_from(0, size, messages);
        }
        parts
    }

    /// One part per turn: the turns `turns`, their transcript (the text, when it is held) and
    /// where each turn's part of it ends, sized `turn_tenths`.
    pub(super) fn whole(
        turns: Vec<Range<usize>>,
        (transcript, ends): (TurnTranscript, Vec<usize>),
        turn_tenths: &[u64],
    ) -> Parts {
        Parts {
            turn_of: (0..turns.len()).collect(),
            lead: vec![None; turns.len()],
            tokens: turn_tenths.iter().map(|t| t.div_ceil(10)).collect(),
            tenths: turn_tenths.to_vec(),
            ends,
            turns,
            transcript,
            lead_most: 0,
            tail: 0,
        }
    }

    /// Whether the transcript is held (rendered, and not taken by a request).
    fn rendered(&self) -> bool {
        self.transcript.len() == self.len()
    }

    /// Renders the transcript, in the same parts, when it is not held.
    pub(super) fn render(&mut self, messages: &[Message]) {
        if !self.rendered() {
            self.render_again(messages);
        }
    }

    /// Cuts the parts from `from` on again, no larger than `size` where their turns allow it
    /// (after the window shrank below a part, which would otherwise be elided), or, with no
    /// size, each turn's rest whole again. Whether the number of parts changed; `messages`
    /// render the transcript when a turn is cut and it is not held.
    pub(super) fn recut(
        &mut self,
        from: usize,
        size: Option<PartSize>,
        messages: &[Message],
    ) -> bool {
        self.cut_from(from, size, messages)
    }

    /// The parts from `from` on, cut again turn by turn (each turn's rest from `from` on,
    /// whole or in parts of `size`): the text is the same, only where it is cut changes, and
    /// the allowance is measured again. Whether the number of parts changed. The text is read
    /// (and rendered from `messages` when it is not held) only when a turn is cut or some
    /// turn is in more than one part; whole turns are sized from their ends alone.
    fn cut_from(&mut self, from: usize, size: Option<PartSize>, messages: &[Message]) -> bool {
        let before = self.len();
        // The remaining parts, turn by turn: where each turn's rest starts, what leads it, and
        // its size.
        let mut rests = Vec::new();
        let mut part = from;
        while part < before {
            let turn = self.turn_of[part];
            let last = self.turn_of[part..].partition_point(|&t| t == turn) + part;
            let start = if part == 0 { 0 } else { self.ends[part - 1] };
            let tenths: u64 = self.tenths[part..last].iter().sum();
            rests.push((
                turn,
                start,
                self.ends[last - 1],
                tenths,
                self.lead[part].clone(),
            ));
            part = last;
        }
        let cuts = size.is_some_and(|s| rests.iter().any(|r| r.3 > s.part * 10));
        if cuts {
            self.render(messages);
        }
        let transcript = std::mem::take(&mut self.transcript);
        for v in [&mut self.tokens, &mut self.tenths] {
            v.truncate(from);
        }
        self.turn_of.truncate(from);
        self.lead.truncate(from);
        self.ends.truncate(from);
        for (turn, start, end, tenths, lead) in rests {
            match size.filter(|s| tenths > s.part * 10) {
                Some(size) => {
                    let text = &transcript.text()[start..end];
                    self.push_cut((turn, tenths), start, text, size, lead);
                }
                None => self.push(turn, end, tenths, lead),
            }
        }
        self.transcript = transcript;
        // What may lead and close a request of these parts.
        self.lead_most = self
            .lead
            .iter()
            .flatten()
            .map(|l| Heuristic.text(&continued(&l.marker, l.line_start)))
            .max()
            .unwrap_or(0);
        if !self.transcript.is_empty() {
            // Held: the same text in the new parts.
            let transcript = std::mem::take(&mut self.transcript);
            self.transcript = transcript.with_ends(self.ends.clone());
        }
        // Whole turns never end inside a line (every item ends with a line break): the text
        // is read only when some turn is in parts.
        let inside = self.len() != self.turns.len() && {
            self.render(messages);
            let text = self.transcript.text();
            self.ends
                .iter()
                .any(|&e| e > 0 && text.as_bytes()[e - 1] != b'\n')
        };
        self.tail = if inside { Heuristic.text(TAIL) } else { 0 };
        self.len() != before
    }

    /// One part of turn `turn`, ending at `end`.
    fn push(&mut self, turn: usize, end: usize, tenths: u64, lead: Option<Lead>) {
        self.turn_of.push(turn);
        self.tokens.push(tenths.div_ceil(10));
        self.tenths.push(tenths);
        self.lead.push(lead);
        self.ends.push(end);
    }

    /// The rest of turn `turn` (`whole` tenths), whose transcript `text` starts at `start` (led
    /// by `open` when inside an item), cut into parts of at most `size.part` tokens by the
    /// cutter's [`split_items`]: between lines, and inside a line too large for a part between
    /// its words (after a space, never inside a marker's head); a word larger than a part is a
    /// part of its own. Whole when a word is larger than `size.line`.
    fn push_cut(
        &mut self,
        (turn, whole): (usize, u64),
        start: usize,
        text: &str,
        size: PartSize,
        open: Option<Lead>,
    ) {
        let pieces = split_items(text, Budget::tenths(size.part * 10), open.clone());
        // Only a single word is larger than a part: one larger than a request leaves the turn
        // whole, to be elided as it must be.
        if pieces.iter().any(|p| p.size > size.line * 10) {
            self.push(turn, start + text.len(), whole, open);
            return;
        }
        for piece in pieces {
            self.push(turn, start + piece.end, piece.size, piece.lead);
        }
    }

    /// What a request may add to its parts' tokens: the lead of its first part and the tail
    /// after its last, at most. A plan counts it in every request's fixed part (0 when no turn
    /// was cut), so that a request's parts are counted once each, as they are sent.
    pub(super) fn allowance(&self) -> u64 {
        self.lead_most + self.tail
    }

    /// The number of parts.
    pub(super) fn len(&self) -> usize {
        self.turn_of.len()
    }

    /// The first part of turn `turn` (the number of parts when it is past the last turn).
    pub(super) fn first_of(&self, turn: usize) -> usize {
        self.turn_of.partition_point(|&t| t < turn)
    }

    /// The turns the parts `parts` are of, in whole or in part.
    pub(super) fn turns_in(&self, parts: Range<usize>) -> Range<usize> {
        if parts.is_empty() {
            return 0..0;
        }
        self.turn_of[parts.start]..self.turn_of[parts.end - 1] + 1
    }

    /// The messages of the turns the parts `parts` are of.
    pub(super) fn messages(&self, parts: Range<usize>) -> Range<usize> {
        let turns = self.turns_in(parts);
        if turns.is_empty() {
            return 0..0;
        }
        self.turns[turns.start].start..self.turns[turns.end - 1].end
    }

    /// The messages of the turns whose first part is among `parts`: what a step derives the
    /// ledger of, so that every turn is derived once, in the step that starts it.
    pub(super) fn started(&self, parts: Range<usize>) -> Range<usize> {
        let all = self.messages(parts.clone());
        if parts.is_empty() || self.starts_turn(parts.start) {
            return all;
        }
        let first = self.turn_of[parts.start];
        let start = self.turns[first].end.min(all.end);
        start..all.end
    }

    /// Where the messages of the turns whose every part is before part `end` end: what a
    /// summary of the parts up to `end` covers whole (a turn cut after its first parts is not
    /// covered yet).
    pub(super) fn whole_until(&self, end: usize) -> usize {
        let Some(last) = end.checked_sub(1) else {
            return self.turns.first().map_or(0, |t| t.start);
        };
        let turn = self.turn_of[last];
        if end == self.len() || self.turn_of[end] != turn {
            self.turns[turn].end
        } else {
            self.turns[turn].start
        }
    }

    /// Whether part `part` is the first of its turn.
    fn starts_turn(&self, part: usize) -> bool {
        part == 0 || self.turn_of[part - 1] != self.turn_of[part]
    }

    /// Whether the parts `parts` are whole turns: their transcript is that of their turns'
    /// messages, with nothing to lead it.
    pub(super) fn whole_turns(&self, parts: Range<usize>) -> bool {
        self.starts_turn(parts.start)
            && self.lead[parts.start].is_none()
            && (parts.end == self.len() || self.starts_turn(parts.end))
    }

    /// The bytes of the transcript of the parts `parts`, without a lead.
    pub(super) fn text_len(&self, parts: Range<usize>) -> usize {
        match parts.end.checked_sub(1) {
            Some(last) if !parts.is_empty() => {
                let start = if parts.start == 0 {
                    0
                } else {
                    self.ends[parts.start - 1]
                };
                self.ends[last] - start
            }
            _ => 0,
        }
    }

    /// Everything the parts are but their text: turns, leads, sizes, ends and allowance.
    #[cfg(test)]
    #[allow(clippy::type_complexity)]
    pub(super) fn shape(&self) -> (&[usize], Vec<Option<String>>, &[u64], &[u64], &[usize], u64) {
        let leads = (0..self.len()).map(|i| self.lead(i)).collect();
        let allowance = self.allowance();
        (
            &self.turn_of,
            leads,
            &self.tokens,
            &self.tenths,
            &self.ends,
            allowance,
        )
    }

    /// The messages of turn `turn`.
    pub(super) fn turn(&self, turn: usize) -> Range<usize> {
        self.turns[turn].clone()
    }

    /// The line that leads a request whose transcript starts with part `part`, when the part
    /// starts inside an item.
    pub(super) fn lead(&self, part: usize) -> Option<String> {
        let lead = self.lead.get(part)?.as_ref()?;
        Some(continued(&lead.marker, lead.line_start))
    }

    /// The transcript of the parts `parts` in tenths of a token, without a lead.
    pub(super) fn tenths(&self, parts: Range<usize>) -> u64 {
        self.tenths[parts].iter().sum()
    }

    /// Renders the transcript again, in the same parts (it was not rendered, or a request
    /// took it).
    fn render_again(&mut self, messages: &[Message]) {
        let head = self.turns.first().map_or(0, |t| t.start);
        let end = self.turns.last().map_or(head, |t| t.end);
        let relative: Vec<Range<usize>> = self
            .turns
            .iter()
            .map(|t| t.start - head..t.end - head)
            .collect();
        self.transcript =
            render_turns(&messages[head..end], &relative).with_ends(self.ends.clone());
    }
}

/// The summarized prefix of `prepared` in parts for the fold's requests (taking its
/// transcript): a turn larger than an eighth of what a later request carries is cut between
/// its lines or words; whole turns when no limit is known.
pub(super) fn prefix_parts(
    prepared: &Prepared,
    state: &FoldState,
    fixed: u64,
    messages: &[Message],
) -> Parts {
    let size = state
        .budget(fixed, 0)
        .later_capacity()
        .map(PartSize::for_capacity);
    Parts::sized(
        prepared.turns.clone(),
        prepared.turn_ends.clone(),
        &prepared.turn_tenths,
        size,
        messages,
    )
}

/// A previous summary cut into pieces, each a compaction message of its own (rendered as
/// `[Summary of earlier conversation]:`) and a turn of its own.
pub(super) struct Pieces {
    pub(super) messages: Vec<Message>,
    pub(super) parts: Parts,
}

impl Pieces {
    pub(super) fn new(pieces: Vec<String>) -> Pieces {
        let messages: Vec<Message> = pieces.into_iter().map(Message::compaction).collect();
        let turns: Vec<Range<usize>> = (0..messages.len()).map(|i| i..i + 1).collect();
        let transcript = render_turns(&messages, &turns);
        let turn_tenths: Vec<u64> = (0..turns.len())
            .map(|i| Heuristic.text_tenths(transcript.turns(i..i + 1)))
            .collect();
        let ends = transcript.ends().to_vec();
        Pieces {
            parts: Parts::whole(turns, (transcript, ends), &turn_tenths),
            messages,
        }
    }

    pub(super) fn material(&mut self) -> Material<'_> {
        Material {
            messages: &self.messages,
            parts: &mut self.parts,
            carried: true,
        }
    }
}

/// `text` in pieces of at most `max_tokens` estimated tokens each, cut between lines (a line
/// longer than that between words, a word longer than that between characters), in order;
/// together they are the whole text, but for a last piece of blanks alone, which is dropped.
pub(super) fn split_text(text: &str, max_tokens: u64) -> Vec<String> {
    let mut pieces = split(text, Budget::tokens(max_tokens.max(1)), Boundary::Char);
    if pieces.last().is_some_and(|p| p.trim().is_empty()) {
        pieces.pop();
    }
    pieces.into_iter().map(str::to_owned).collect()
}
