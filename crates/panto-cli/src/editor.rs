//! The chat's line editor as a value: the draft being typed, its cursor, the pastes it holds
//! collapsed, and the history. Keys in, actions out; no terminal, so the effect of every key is
//! tested on plain values (`tests.rs`, and the property tests there).
//!
//! **Invariant:** the cursor is always on a character boundary and never inside a paste's
//! marker, so a marker is either whole in the draft (and its paste is sent) or gone (deleted by
//! the user as one unit): a paste is never cut or lost by an edit.

use crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

use crate::fit::width;

/// A paste longer than this many lines is shown collapsed to a marker.
const COLLAPSE_LINES: usize = 3;
/// A paste longer than this many characters is shown collapsed to a marker.
const COLLAPSE_CHARS: usize = 500;

/// What a key asks of the chat.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Action {
    /// Nothing beyond the change to the draft (if any): draw it again.
    Edited,
    /// Enter: the message, each paste's marker replaced by the paste, and the draft as shown.
    Submit {
        /// What is sent.
        text: String,
        /// What the draft showed (markers in place of long pastes), for the echo.
        shown: String,
    },
    /// Ctrl-C.
    Interrupt,
    /// Ctrl-D on an empty draft.
    End,
    /// Tab found several commands for what was typed.
    Candidates(Vec<&'static str>),
}

/// A paste shown collapsed: its marker in the draft and its whole text.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Paste {
    marker: String,
    text: String,
}

/// The draft, its cursor, its pastes and the history.
#[derive(Debug, Default)]
pub(crate) struct Editor {
    text: String,
    /// A byte offset into `text`: on a character boundary, never inside a marker.
    cursor: usize,
    pastes: Vec<Paste>,
    /// How many pastes this editor has collapsed, for the markers' numbers.
    pasted: usize,
    history: Vec<String>,
    /// Where Up and Down are in the history (`history.len()` is the draft being typed).
    browsing: usize,
    /// The draft put aside while the history is browsed.
    put_aside: String,
    /// The words Tab completes.
    completions: &'static [&'static str],
}

impl Editor {
    /// An empty editor with `history` (oldest first) and the words Tab completes.
    pub(crate) fn new(history: Vec<String>, completions: &'static [&'static str]) -> Editor {
        let browsing = history.len();
        Editor {
            history,
            browsing,
            completions,
            ..Editor::default()
        }
    }

    /// Whether the draft is empty.
    pub(crate) fn is_empty(&self) -> bool {
        self.text.is_empty()
    }

    /// The draft as shown (markers in place of long pastes).
    pub(crate) fn shown(&self) -> &str {
        &self.text
    }

    /// The draft's lines as shown, and the cursor as (line, column in display cells).
    pub(crate) fn view(&self) -> (Vec<&str>, (usize, usize)) {
        let before = &self.text[..self.cursor];
        let line = before.matches('\n').count();
        let start = before.rfind('\n').map_or(0, |i| i + 1);
        (
            self.text.split('\n').collect(),
            (line, width(&before[start..])),
        )
    }

    /// Empties the draft (its pastes go with it).
    pub(crate) fn clear(&mut self) {
        self.text.clear();
        self.pastes.clear();
        self.cursor = 0;
        self.browsing = self.history.len();
    }

    /// Replaces the draft with `text`, the cursor at its end; a long text is collapsed as a
    /// paste would be.
    pub(crate) fn load(&mut self, text: &str) {
        self.clear();
        self.paste(text);
    }

    /// Adds `entry` to the history (not twice in a row, never an empty one).
    pub(crate) fn remember(&mut self, entry: &str) {
        if !entry.trim().is_empty() && self.history.last().map(String::as_str) != Some(entry) {
            self.history.push(entry.to_owned());
        }
        self.browsing = self.history.len();
    }

    /// Inserts a paste at the cursor: whole, with line ends made `\n`, collapsed to a marker
    /// when it is longer than a few lines.
    pub(crate) fn paste(&mut self, text: &str) {
        let text = text.replace("\r\n", "\n").replace('\r', "\n");
        let lines = text.trim_end_matches('\n').split('\n').count();
        let chars = text.chars().count();
        if lines <= COLLAPSE_LINES && chars <= COLLAPSE_CHARS {
            self.insert(&text);
            return;
        }
        self.pasted += 1;
        let marker = format!(
            "[Pasted text #{}: {}, {} characters]",
            self.pasted,
            if lines == 1 {
                "1 line".to_owned()
            } else {
                format!("{lines} lines")
            },
            chars
        );
        self.insert(&marker);
        self.pastes.push(Paste { marker, text });
    }

    /// What a key does to the draft.
    pub(crate) fn key(&mut self, key: KeyEvent) -> Action {
        if key.kind == KeyEventKind::Release {
            return Action::Edited;
        }
        let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
        let alt = key.modifiers.contains(KeyModifiers::ALT);
        match key.code {
            KeyCode::Char(c) if ctrl => return self.control(c),
            KeyCode::Char('b') if alt => self.cursor = self.word_start(),
            KeyCode::Char('f') if alt => self.cursor = self.word_end(),
            KeyCode::Char(_) if alt => {}
            KeyCode::Char(c) => self.insert(c.encode_utf8(&mut [0; 4])),
            KeyCode::Enter
                if key
                    .modifiers
                    .intersects(KeyModifiers::SHIFT | KeyModifiers::ALT) =>
            {
                self.insert("\n");
            }
            KeyCode::Enter => return self.enter(),
            KeyCode::Tab => return self.complete(),
            KeyCode::Backspace => self.delete_before(),
            KeyCode::Delete => self.delete_after(),
            KeyCode::Left if ctrl => self.cursor = self.word_start(),
            KeyCode::Right if ctrl => self.cursor = self.word_end(),
            KeyCode::Left => self.cursor = self.step_left(),
            KeyCode::Right => self.cursor = self.step_right(),
            KeyCode::Home => self.cursor = self.line_start(),
            KeyCode::End => self.cursor = self.line_end(),
            KeyCode::Up => self.up(),
            KeyCode::Down => self.down(),
            _ => {}
        }
        Action::Edited
    }

    /// Whether Up would leave the draft's first line (to the history, or to a queued message).
    pub(crate) fn on_first_line(&self) -> bool {
        !self.text[..self.cursor].contains('\n')
    }

    fn control(&mut self, c: char) -> Action {
        match c {
            'c' => return Action::Interrupt,
            'd' if self.text.is_empty() => return Action::End,
            'd' => self.delete_after(),
            'a' => self.cursor = self.line_start(),
            'e' => self.cursor = self.line_end(),
            'b' => self.cursor = self.step_left(),
            'f' => self.cursor = self.step_right(),
            'h' => self.delete_before(),
            'j' => self.insert("\n"),
            'k' => self.remove(self.cursor, self.line_end()),
            'u' => self.remove(self.line_start(), self.cursor),
            'w' => self.remove(self.word_start(), self.cursor),
            'p' => self.up(),
            'n' => self.down(),
            _ => {}
        }
        Action::Edited
    }

    /// Enter: a line ending in `\` goes on in a new line (the `\` is dropped); anything else is
    /// sent.
    fn enter(&mut self) -> Action {
        if self.cursor == self.text.len() && self.text.ends_with('\\') {
            self.text.pop();
            self.cursor -= 1;
            self.insert("\n");
            return Action::Edited;
        }
        let mut text = self.text.clone();
        for p in &self.pastes {
            text = text.replacen(&p.marker, &p.text, 1);
        }
        let shown = std::mem::take(&mut self.text);
        self.clear();
        Action::Submit { text, shown }
    }

    /// Tab: completes a `/` command typed at the start of the draft.
    fn complete(&mut self) -> Action {
        if !self.text.starts_with('/')
            || self.cursor != self.text.len()
            || self.text.contains(char::is_whitespace)
        {
            return Action::Edited;
        }
        let found: Vec<&'static str> = self
            .completions
            .iter()
            .copied()
            .filter(|c| c.starts_with(self.text.as_str()))
            .collect();
        match found.as_slice() {
            [] => Action::Edited,
            [one] => {
                self.text = format!("{one} ");
                self.cursor = self.text.len();
                Action::Edited
            }
            [first, rest @ ..] => {
                let common = rest.iter().fold(*first, |common, c| {
                    let n = common
                        .char_indices()
                        .zip(c.chars())
                        .take_while(|((_, a), b)| a == b)
                        .count();
                    &common[..n]
                });
                self.text = common.to_owned();
                self.cursor = self.text.len();
                Action::Candidates(found)
            }
        }
    }

    fn insert(&mut self, s: &str) {
        self.text.insert_str(self.cursor, s);
        self.cursor += s.len();
    }

    /// Removes `from..to` (both outside markers), and the pastes whose markers went with it.
    fn remove(&mut self, from: usize, to: usize) {
        self.text.replace_range(from..to, "");
        self.cursor = from;
        let text = &self.text;
        self.pastes.retain(|p| text.contains(&p.marker));
    }

    /// The marker that ends at `at`, or starts at it with `after`.
    fn marker_at(&self, at: usize, after: bool) -> Option<std::ops::Range<usize>> {
        self.pastes.iter().find_map(|p| {
            let n = p.marker.len();
            let start = if after { at } else { at.checked_sub(n)? };
            (self.text.get(start..start + n) == Some(p.marker.as_str())).then_some(start..start + n)
        })
    }

    fn delete_before(&mut self) {
        let from = self.step_left();
        self.remove(from, self.cursor);
    }

    fn delete_after(&mut self) {
        let to = self.step_right();
        let at = self.cursor;
        self.remove(at, to);
    }

    /// One character (or one whole marker) to the left of the cursor.
    fn step_left(&self) -> usize {
        if let Some(m) = self.marker_at(self.cursor, false) {
            return m.start;
        }
        self.text[..self.cursor]
            .char_indices()
            .next_back()
            .map_or(0, |(i, _)| i)
    }

    /// One character (or one whole marker) to the right of the cursor.
    fn step_right(&self) -> usize {
        if let Some(m) = self.marker_at(self.cursor, true) {
            return m.end;
        }
        self.text[self.cursor..]
            .chars()
            .next()
            .map_or(self.cursor, |c| self.cursor + c.len_utf8())
    }

    fn line_start(&self) -> usize {
        self.text[..self.cursor].rfind('\n').map_or(0, |i| i + 1)
    }

    fn line_end(&self) -> usize {
        self.text[self.cursor..]
            .find('\n')
            .map_or(self.text.len(), |i| self.cursor + i)
    }

    /// The start of the word before the cursor (a marker counts as one word).
    fn word_start(&self) -> usize {
        let mut at = self.cursor;
        let mut seen_word = false;
        while at > 0 {
            if let Some(m) = self.marker_at(at, false) {
                return if seen_word { at } else { m.start };
            }
            let (i, c) = self.text[..at]
                .char_indices()
                .next_back()
                .unwrap_or((0, ' '));
            if c.is_whitespace() && seen_word {
                break;
            }
            seen_word |= !c.is_whitespace();
            at = i;
        }
        at
    }

    /// The end of the word after the cursor (a marker counts as one word).
    fn word_end(&self) -> usize {
        let mut at = self.cursor;
        let mut seen_word = false;
        while at < self.text.len() {
            if let Some(m) = self.marker_at(at, true) {
                return if seen_word { at } else { m.end };
            }
            let c = self.text[at..].chars().next().unwrap_or(' ');
            if c.is_whitespace() && seen_word {
                break;
            }
            seen_word |= !c.is_whitespace();
            at += c.len_utf8();
        }
        at
    }

    /// Up: the line above in the draft, or the previous history entry from the first line.
    fn up(&mut self) {
        if !self.on_first_line() {
            self.vertical(false);
            return;
        }
        if self.browsing == 0 {
            return;
        }
        if self.browsing == self.history.len() {
            self.put_aside = self.text.clone();
        }
        self.browsing -= 1;
        let entry = self.history[self.browsing].clone();
        self.show_entry(&entry);
    }

    /// Down: the line below in the draft, or the next history entry from the last line.
    fn down(&mut self) {
        if self.text[self.cursor..].contains('\n') {
            self.vertical(true);
            return;
        }
        if self.browsing >= self.history.len() {
            return;
        }
        self.browsing += 1;
        let entry = if self.browsing == self.history.len() {
            std::mem::take(&mut self.put_aside)
        } else {
            self.history[self.browsing].clone()
        };
        self.show_entry(&entry);
    }

    fn show_entry(&mut self, entry: &str) {
        let browsing = self.browsing;
        self.load(entry);
        self.browsing = browsing;
    }

    /// Moves the cursor one line down or up in the draft, to the same column or the line's end.
    fn vertical(&mut self, down: bool) {
        let column = width(&self.text[self.line_start()..self.cursor]);
        let start = if down {
            self.line_end() + 1
        } else {
            self.text[..self.line_start() - 1]
                .rfind('\n')
                .map_or(0, |i| i + 1)
        };
        let line_end = self.text[start..]
            .find('\n')
            .map_or(self.text.len(), |i| start + i);
        self.cursor = start;
        while self.cursor < line_end && width(&self.text[start..self.step_right()]) <= column {
            self.cursor = self.step_right();
        }
    }
}
