//! The one text cutter: everything panto cuts to a budget is cut here.
//!
//! A [`Budget`] is a limit in one [`Measure`]: bytes, characters, estimated tokens (panto-size's
//! [`Heuristic`], counted in tenths so that the pieces of a text add up to the whole) or lines.
//! Every cut falls on a character boundary, and prefers the coarsest boundary: the end of a
//! line, then of a word (after a space), then of a character.
//!
//! - [`head`] and [`tail`]: the longest prefix (suffix) within a budget, cut where a [`Cut`]
//!   allows; [`ends`] both, never overlapping, for a text kept at its two ends with an elision
//!   marker in the middle ([`Ends::joined`]).
//! - [`split`]: a text in pieces each within a budget, greedily: whole lines, a line too large
//!   between its words, a word too large between its characters (or, with
//!   [`Boundary::Word`], as a piece of its own); the pieces concatenate to the text.
//! - [`split_items`]: a transcript split so, with the fold's lead rules: a marker's head is
//!   never cut, and a piece that starts inside an item is told the item's marker ([`Lead`]), so
//!   that it can be led by [`crate::continued`].

use panto_size::Heuristic;

use crate::item_marker;

/// What a budget counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Measure {
    /// UTF-8 bytes.
    Bytes,
    /// Characters (Unicode scalar values).
    Chars,
    /// Estimated tokens, counted in tenths of a token ([`Heuristic::text_tenths`]).
    Tenths,
    /// Lines (a last line without a line break counts too). Only whole lines are counted, so a
    /// cut in this measure falls at the end of a line whatever the [`Cut`] asked.
    Lines,
}

impl Measure {
    /// The size of `text` in this measure.
    pub fn size(self, text: &str) -> u64 {
        match self {
            Measure::Bytes => text.len() as u64,
            Measure::Chars => text.chars().count() as u64,
            Measure::Tenths => Heuristic.text_tenths(text),
            Measure::Lines => text.split_inclusive('\n').count() as u64,
        }
    }
}

/// A limit in one [`Measure`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budget {
    /// What is counted.
    pub measure: Measure,
    /// The most of it allowed.
    pub limit: u64,
}

impl Budget {
    /// At most `n` bytes.
    pub fn bytes(n: usize) -> Budget {
        Budget {
            measure: Measure::Bytes,
            limit: n as u64,
        }
    }

    /// At most `n` characters.
    pub fn chars(n: usize) -> Budget {
        Budget {
            measure: Measure::Chars,
            limit: n as u64,
        }
    }

    /// At most `n` estimated tokens: `Heuristic.text(t) <= n` exactly when `t` fits.
    pub fn tokens(n: u64) -> Budget {
        Budget::tenths(n.saturating_mul(10))
    }

    /// At most `n` tenths of an estimated token.
    pub fn tenths(n: u64) -> Budget {
        Budget {
            measure: Measure::Tenths,
            limit: n,
        }
    }

    /// At most `n` lines.
    pub fn lines(n: usize) -> Budget {
        Budget {
            measure: Measure::Lines,
            limit: n as u64,
        }
    }

    /// The size of `text` in this budget's measure.
    pub fn size(&self, text: &str) -> u64 {
        self.measure.size(text)
    }

    /// Whether `text` is within this budget.
    pub fn fits(&self, text: &str) -> bool {
        self.size(text) <= self.limit
    }
}

/// Where [`head`] and [`tail`] may cut.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cut {
    /// At any character boundary: as much as fits.
    Char,
    /// At the end of a line when that keeps at least half of what fits (in bytes), else at the
    /// end of a word when that does, else at a character boundary.
    Nearest,
    /// Only at the end of a line: whole lines, perhaps none.
    Line,
}

/// Where [`split`] may cut, at the finest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Boundary {
    /// Between characters: every piece is within the budget.
    Char,
    /// Between words at the finest: a word larger than the budget is a piece of its own.
    Word,
}

/// How far a text fills a budget from one end, at each kind of boundary: the bytes of the
/// longest run of whole lines, of whole words, and of characters within it.
struct Fill {
    line: usize,
    word: usize,
    char: usize,
}

impl Fill {
    /// Where `cut` cuts: a length in bytes from the end the fill started at.
    fn at(&self, cut: Cut) -> usize {
        match cut {
            Cut::Char => self.char,
            Cut::Line => self.line,
            Cut::Nearest if self.line * 2 >= self.char => self.line,
            Cut::Nearest if self.word * 2 >= self.char => self.word,
            Cut::Nearest => self.char,
        }
    }
}

/// Fills `budget` with the units of `text` (lines, then a line's words, then a word's
/// characters), from the start, or from the end when `back`.
fn fill(text: &str, budget: Budget, back: bool) -> Fill {
    let mut used = 0u64;
    let mut fill = Fill {
        line: 0,
        word: 0,
        char: 0,
    };
    // Takes the units of `parts` while they fit; the first one that does not, if any.
    let mut take = |parts: &mut dyn Iterator<Item = &'_ str>, sizer: &dyn Fn(&str) -> u64| {
        let mut taken = 0usize;
        for part in parts {
            let size = sizer(part);
            if used + size > budget.limit {
                return (taken, Some(part.len()));
            }
            used += size;
            taken += part.len();
        }
        (taken, None)
    };
    let size = |s: &str| budget.size(s);
    let mut lines = pieces(text, '\n', back);
    let (taken, over) = take(&mut lines, &size);
    fill.line = taken;
    let Some(over_len) = over else {
        return Fill {
            line: taken,
            word: taken,
            char: taken,
        };
    };
    if budget.measure == Measure::Lines {
        fill.word = taken;
        fill.char = taken;
        return fill;
    }
    let line = slice(text, taken, over_len, back);
    let mut words = pieces(line, ' ', back);
    let (words_taken, over) = take(&mut words, &size);
    fill.word = taken + words_taken;
    fill.char = fill.word;
    if let Some(over_len) = over {
        let word = slice(line, words_taken, over_len, back);
        let mut chars: Box<dyn Iterator<Item = &str>> = if back {
            Box::new(char_strs(word).rev())
        } else {
            Box::new(char_strs(word))
        };
        let (chars_taken, _) = take(&mut chars, &size);
        fill.char += chars_taken;
    }
    fill
}

/// The pieces of `text` after each `sep` (the separator kept with the piece before it), from
/// the start, or from the end when `back`.
fn pieces(text: &str, sep: char, back: bool) -> Box<dyn Iterator<Item = &str> + '_> {
    if back {
        Box::new(text.split_inclusive(sep).rev())
    } else {
        Box::new(text.split_inclusive(sep))
    }
}

/// The `len` bytes of `text` after its first (`back`: before its last) `skip` bytes.
fn slice(text: &str, skip: usize, len: usize, back: bool) -> &str {
    if back {
        let end = text.len() - skip;
        &text[end - len..end]
    } else {
        &text[skip..skip + len]
    }
}

/// Each character of `text` as a string slice.
fn char_strs(text: &str) -> impl DoubleEndedIterator<Item = &str> {
    text.char_indices()
        .map(move |(i, c)| &text[i..i + c.len_utf8()])
}

/// The longest prefix of `text` within `budget`, cut where `cut` allows (the cut's separator,
/// a line break or a space, stays with the prefix). `text` itself when it fits.
pub fn head(text: &str, budget: Budget, cut: Cut) -> &str {
    &text[..fill(text, budget, false).at(cut)]
}

/// The longest suffix of `text` within `budget`, starting where `cut` allows: at the start of
/// a line (after a line break), of a word (after a space), or of a character. `text` itself
/// when it fits.
pub fn tail(text: &str, budget: Budget, cut: Cut) -> &str {
    &text[text.len() - fill(text, budget, true).at(cut)..]
}

/// A text kept at its two ends: `head` a prefix of it, `tail` a suffix after `head`, and
/// `middle` what lies between them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ends<'a> {
    /// The prefix kept.
    pub head: &'a str,
    /// What is left out.
    pub middle: &'a str,
    /// The suffix kept.
    pub tail: &'a str,
}

impl Ends<'_> {
    /// The head, `marker` on a line of its own, then the tail: a line break ends the head
    /// unless it ends with one already, and one follows the marker.
    pub fn joined(&self, marker: &str) -> String {
        let mut out = String::with_capacity(self.head.len() + marker.len() + self.tail.len() + 2);
        out.push_str(self.head);
        if !self.head.ends_with('\n') {
            out.push('\n');
        }
        out.push_str(marker);
        out.push('\n');
        out.push_str(self.tail);
        out
    }
}

/// `text` kept at its ends: its [`head`] within `head_budget`, and its [`tail`] within
/// `tail_budget` from what the head leaves (so they never overlap), both cut where `cut`
/// allows.
pub fn ends(text: &str, head_budget: Budget, tail_budget: Budget, cut: Cut) -> Ends<'_> {
    let head = head(text, head_budget, cut);
    let rest = &text[head.len()..];
    let tail = tail(rest, tail_budget, cut);
    Ends {
        head,
        middle: &rest[..rest.len() - tail.len()],
        tail,
    }
}

/// `text` in pieces of at most `budget` each, in order, together the whole text: cut between
/// lines, a line larger than the budget between its words (after a space), and a word larger
/// than it between its characters, or, at [`Boundary::Word`], left whole as a piece of its
/// own. A piece takes as much as fits.
pub fn split(text: &str, budget: Budget, finest: Boundary) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    pack(text, budget, finest, &|_| 0, false, |end, _, _| {
        out.push(&text[start..end]);
        start = end;
    });
    out
}

/// One piece of [`split_items`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Piece {
    /// Where the piece ends in the text, in bytes (it starts where the one before ends).
    pub end: usize,
    /// Its size in the budget's measure.
    pub size: u64,
    /// The marker of the item it starts inside, when it does.
    pub lead: Option<Lead>,
}

/// What leads a piece of a transcript that starts inside an item: the item's marker (as
/// [`item_marker`] gives it), and whether the piece starts at the start of a line (else inside
/// one); [`crate::continued`] writes it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Lead {
    /// The item's marker.
    pub marker: String,
    /// Whether the piece starts at the start of a line.
    pub line_start: bool,
}

impl Lead {
    /// The lead of a piece inside the item `marker` opens.
    pub fn new(marker: impl Into<String>, line_start: bool) -> Lead {
        Lead {
            marker: marker.into(),
            line_start,
        }
    }
}

/// `transcript` split like [`split`] at [`Boundary::Word`] (a word larger than the budget is a
/// piece of its own), with the fold's lead rules: a line too large is cut between its words
/// after its marker's head, which is never cut; each piece says the [`Lead`] of the item it
/// starts inside (the item of the marker before it, unless it starts at a line that opens its
/// own; inside a line, that line's). `open` is the lead of the text itself when it starts
/// inside an item (its first line then opens none when it starts inside a line).
pub fn split_items(transcript: &str, budget: Budget, open: Option<Lead>) -> Vec<Piece> {
    let mid = open.as_ref().is_some_and(|l| !l.line_start);
    let mut marker = open.as_ref().map(|l| l.marker.clone());
    let mut lead = open;
    let mut out = Vec::new();
    // Where the current line starts, and its marker.
    let mut line_at = 0;
    let mut opens: Option<&str> = if mid { None } else { line_opener(transcript) };
    let head_of = |line: &str| item_marker(line).map_or(0, str::len);
    pack(
        transcript,
        budget,
        Boundary::Word,
        &head_of,
        mid,
        |end, size, next| {
            out.push(Piece {
                end,
                size,
                lead: lead.take(),
            });
            // Bring the marker up to the line the next piece starts in.
            while let Some(nl) = transcript[line_at..end].find('\n') {
                if let Some(m) = opens {
                    marker = Some(m.to_owned());
                }
                line_at += nl + 1;
                opens = line_opener(&transcript[line_at..]);
            }
            if next {
                let line_start = end == line_at && !(line_at == 0 && mid);
                let inside = if line_start {
                    marker.as_deref().filter(|_| opens.is_none())
                } else {
                    opens.or(marker.as_deref())
                };
                lead = inside.map(|m| Lead::new(m, line_start));
            }
        },
    );
    out
}

/// The marker the line at the start of `text` opens.
fn line_opener(text: &str) -> Option<&str> {
    let line = text.split_inclusive('\n').next().unwrap_or("");
    item_marker(line)
}

/// The greedy splitter under [`split`] and [`split_items`]: calls `piece(end, size, more)` for
/// each piece, in order (`more`: another follows). A line larger than the budget is cut after
/// its head (`head_of(line)` bytes, never cut; none for the first line when `mid`), then
/// between words, then, at [`Boundary::Char`], between characters.
fn pack(
    text: &str,
    budget: Budget,
    finest: Boundary,
    head_of: &dyn Fn(&str) -> usize,
    mid: bool,
    mut piece: impl FnMut(usize, u64, bool),
) {
    let (mut pos, mut start, mut used) = (0usize, 0usize, 0u64);
    let mut first = true;
    let mut add = |unit: &str, size: u64, pos: &mut usize| {
        if *pos > start && used + size > budget.limit {
            piece(*pos, used, true);
            start = *pos;
            used = 0;
        }
        *pos += unit.len();
        used += size;
    };
    for line in text.split_inclusive('\n') {
        let line_size = budget.size(line);
        let first_mid = std::mem::take(&mut first) && mid;
        if line_size <= budget.limit || budget.measure == Measure::Lines {
            add(line, line_size, &mut pos);
            continue;
        }
        let head = if first_mid { 0 } else { head_of(line) };
        let words = std::iter::once(&line[..head])
            .chain(line[head..].split_inclusive(' '))
            .filter(|w| !w.is_empty());
        for word in words {
            let size = budget.size(word);
            if size <= budget.limit || finest == Boundary::Word {
                add(word, size, &mut pos);
                continue;
            }
            for c in char_strs(word) {
                add(c, budget.size(c), &mut pos);
            }
        }
    }
    if pos > start {
        piece(pos, used, false);
    }
}

#[cfg(test)]
mod tests;
