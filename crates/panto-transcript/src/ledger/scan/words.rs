//! The identifiers the scanner tells from a word and what is around it: hex ids and UUIDs,
//! `#` colors, URLs, versions, numbers and environment values with their keys, and code names.

use super::{
    DIGIT, HEX, IdentifierKind, NOT_DIGIT, Scanner, UNDERSCORE, UPPER, URL_END, Word, class,
    is_digit, is_word,
};

impl<F: FnMut(IdentifierKind, &str), const FAST: bool> Scanner<'_, '_, F, FAST> {
    /// A hex id or UUID starting at the word `w`, all hex digits; whether one was found.
    pub(super) fn hex(&mut self, w: Word) -> bool {
        let (from, to) = (w.from, w.to);
        if w.len() > 64 {
            return false;
        }
        let before = self.before(from);
        if is_word(before) || before == b'-' || before == b'#' || self.url {
            return false;
        }
        if w.len() == 8
            && let Some(end) = self.uuid(from)
        {
            self.emit(IdentifierKind::HexId, from, end);
            return true;
        }
        let after = self.at(to);
        if w.any & DIGIT != 0 && w.any & NOT_DIGIT != 0 && !is_word(after) && after != b'-' {
            self.emit(IdentifierKind::HexId, from, to);
            return true;
        }
        false
    }

    /// The end of a UUID starting at `from`, if one does.
    pub(super) fn uuid(&self, from: usize) -> Option<usize> {
        let mut at = from;
        for (part, len) in [8, 4, 4, 4, 12].into_iter().enumerate() {
            if part > 0 {
                if self.at(at) != b'-' {
                    return None;
                }
                at += 1;
            }
            let run = self.bytes.get(at..at + len)?;
            if !run.iter().all(|b| class(*b) & HEX != 0) {
                return None;
            }
            at += len;
        }
        (!is_word(self.at(at)) && self.at(at) != b'-').then_some(at)
    }

    /// A `#` color at `at`.
    pub(super) fn color(&mut self, at: usize) {
        if self.url {
            return;
        }
        let before = self.before(at);
        if is_word(before) || before == b'-' || before == b'#' {
            return;
        }
        let mut end = at + 1;
        while end < self.bytes.len() && class(self.bytes[end]) & HEX != 0 {
            end += 1;
        }
        let after = self.at(end);
        if matches!(end - at - 1, 3 | 6 | 8) && !is_word(after) && after != b'-' {
            self.emit(IdentifierKind::HexId, at, end);
        }
    }

    /// A URL from its scheme at `from`.
    pub(super) fn url(&mut self, from: usize) {
        let mut end = from;
        while end < self.bytes.len() {
            if class(self.bytes[end]) & URL_END != 0 {
                break;
            }
            end += 1;
        }
        while end > from && b".,;:".contains(&self.bytes[end - 1]) {
            end -= 1;
        }
        if end > from + "https://".len() {
            self.emit(IdentifierKind::Url, from, end);
        }
    }

    /// A version whose first part is the word `from..to` (`1`, `v0`), or that starts there.
    pub(super) fn version(&mut self, from: usize, to: usize) {
        let before = self.before(from);
        if before == b'.' || is_word(before) {
            return;
        }
        let digits = if self.bytes[from] == b'v' {
            from + 1
        } else {
            from
        };
        let first = &self.bytes[digits..to];
        if first.len() > 4
            || !first.iter().all(|b| is_digit(*b))
            || (first.len() > 1 && first[0] == b'0')
        {
            return;
        }
        let mut at = to;
        for _ in 0..2 {
            if self.at(at) != b'.' {
                return;
            }
            let run = self.digits(at + 1);
            if run == 0 || run > 4 {
                return;
            }
            at += 1 + run;
        }
        if self.at(at) == b'-' && self.at(at + 1).is_ascii_alphanumeric() {
            let mut end = at + 1;
            while end < self.bytes.len()
                && (self.bytes[end].is_ascii_alphanumeric()
                    || (self.bytes[end] == b'.' && self.at(end + 1).is_ascii_alphanumeric()))
            {
                end += 1;
            }
            at = end;
        }
        let after = self.at(at);
        let ip = after == b'.' && is_digit(self.at(at + 1));
        if !ip && !is_word(after) {
            self.emit(IdentifierKind::Version, from, at);
        }
    }

    /// How many digits start at `at`.
    pub(super) fn digits(&self, at: usize) -> usize {
        self.bytes[at.min(self.bytes.len())..]
            .iter()
            .take_while(|b| is_digit(**b))
            .count()
    }

    /// What follows the word `from..to` when it may be a key: `key: 12`, `key=12`, `"key": 12`,
    /// `key.ext:12` (a `path:line`) or `ENV=value`.
    pub(super) fn keyed(&mut self, from: usize, to: usize) {
        let mut at = to;
        if matches!(self.at(at), b'"' | b'\'') {
            at += 1;
        }
        let sep = self.at(at);
        if sep == b':' && self.path_line(from, at) {
            return;
        }
        if sep != b':' && sep != b'=' {
            return;
        }
        let start = self.key_start(from);
        let Some(start) = start else { return };
        let mut value = at + 1;
        if sep == b':' && matches!(self.at(value), b' ' | b'\t') {
            value += 1;
        }
        if sep == b'=' && at == to && self.env_value(start, to, value) {
            return;
        }
        if let Some(end) = self.number(value) {
            self.emit(IdentifierKind::Number, start, end);
        }
    }

    /// Where the key ending a word that starts at `from` starts: the word may be the last part
    /// of a key with `-` in it, and an opening quote belongs to it. `None` when the key does not
    /// start with a letter or `_`, or follows a word byte, `.`, `/` or `-`.
    pub(super) fn key_start(&self, from: usize) -> Option<usize> {
        let mut start = from;
        while start > 0 && (is_word(self.bytes[start - 1]) || self.bytes[start - 1] == b'-') {
            if self.bytes[start - 1] >= 0x80 {
                return None;
            }
            start -= 1;
        }
        let first = self.bytes[start];
        if !(first.is_ascii_alphabetic() || first == b'_') {
            return None;
        }
        let before = self.before(start);
        if b"./".contains(&before) {
            return None;
        }
        if matches!(before, b'"' | b'\'') {
            return Some(start - 1);
        }
        Some(start)
    }

    /// A number starting at `at` and where it ends, when nothing word-like follows it.
    pub(super) fn number(&self, at: usize) -> Option<usize> {
        let mut end = at;
        if self.at(end) == b'-' {
            end += 1;
        }
        let whole = self.digits(end);
        if whole == 0 {
            return None;
        }
        end += whole;
        if self.at(end) == b'.' && is_digit(self.at(end + 1)) {
            end += 1 + self.digits(end + 1);
        }
        for unit in [
            &b"ms"[..],
            b"s",
            b"%",
            b"KiB",
            b"MiB",
            b"GiB",
            b"KB",
            b"MB",
            b"GB",
            b"k",
        ] {
            if self.bytes[end..].starts_with(unit) && !is_word(self.at(end + unit.len())) {
                end += unit.len();
                break;
            }
        }
        let after = self.at(end);
        (!is_word(after) && after != b'.' && after != b':').then_some(end)
    }

    /// `ENV_VAR=value` with the key `start..key_end` in capitals: whether it was one.
    pub(super) fn env_value(&mut self, start: usize, key_end: usize, value: usize) -> bool {
        let key = &self.bytes[start..key_end];
        let caps = key.len() >= 3
            && key[0].is_ascii_uppercase()
            && key
                .iter()
                .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || *b == b'_');
        if !caps || self.number(value).is_some() {
            return false;
        }
        let end = match self.at(value) {
            q @ (b'"' | b'\'') => {
                let Some(close) = self.bytes[value + 1..].iter().position(|b| *b == q) else {
                    return false;
                };
                value + 2 + close
            }
            _ => {
                let mut end = value;
                while end < self.bytes.len()
                    && !self.bytes[end].is_ascii_whitespace()
                    && !b"\"'`;|&)".contains(&self.bytes[end])
                {
                    end += 1;
                }
                end
            }
        };
        if end == value || end - value > 80 {
            return false;
        }
        self.emit(IdentifierKind::Value, start, end);
        true
    }

    /// A code name: the word `w`, of six characters or more with a lowercase letter before a
    /// capital (`formatToolExecution`) or an underscore between letters or digits
    /// (`total_tokens`), not part of a path.
    pub(super) fn name(&mut self, w: Word) {
        let (from, to) = (w.from, w.to);
        let b = &self.bytes[from..to];
        if b.len() > 60 || is_digit(b[0]) {
            return;
        }
        // A capital after a letter, or an underscore between two bytes, is never the word's first
        // byte: a word whose other bytes hold none needs no look.
        let camel = (!FAST || w.rest & UPPER != 0)
            && b.windows(2)
                .any(|p| p[0].is_ascii_lowercase() && p[1].is_ascii_uppercase());
        let snake = (!FAST || w.rest & UNDERSCORE != 0)
            && b.windows(3).any(|p| {
                p[1] == b'_' && p[0].is_ascii_alphanumeric() && p[2].is_ascii_alphanumeric()
            });
        let before = self.before(from);
        let after = self.at(to);
        let in_path = b"/.-".contains(&before) || after == b'/' || after == b'-';
        if (camel || snake) && !in_path && !self.url {
            self.emit(IdentifierKind::Name, from, to);
        }
    }
}
