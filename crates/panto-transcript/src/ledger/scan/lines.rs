//! The identifiers of a whole line, looked at when it ends: a line that is one `key: value` or
//! `key = value` pair, and in tool output an error line.

use super::{
    ERROR_LINE_BYTES, FAILED_LINES, IdentifierKind, KEY, Line, Origin, Scanner, VALUE_END, class,
    is_word,
};
use crate::cut::{Budget, Cut, head};

impl<F: FnMut(IdentifierKind, &str), const FAST: bool> Scanner<'_, '_, F, FAST> {
    /// The line `line.start..end` (its newline excluded): a one-pair line, and in tool output
    /// an error line.
    pub(super) fn line(&mut self, line: &mut Line, end: usize, origin: Origin) {
        if origin == Origin::Said && !line.pair {
            return;
        }
        let bytes = &self.bytes[line.start..end];
        let Some(lead) = bytes.iter().position(|b| !b.is_ascii_whitespace()) else {
            return;
        };
        let first = bytes[lead];
        if origin == Origin::Failed {
            line.failed += 1;
        }
        let pair =
            line.pair && (first.is_ascii_alphabetic() || matches!(first, b'_' | b'"' | b'\''));
        // Most lines of output report no error: told by what the pass saw of them.
        let failed_head = origin == Origin::Failed && line.failed <= FAILED_LINES;
        let may_report = origin != Origin::Said
            && (failed_head || line.error || line.pair || b"eEfFpPnN".contains(&first));
        if !pair && !may_report {
            return;
        }
        let trail = bytes
            .iter()
            .rposition(|b| !b.is_ascii_whitespace())
            .unwrap_or(lead);
        let (from, to) = (line.start + lead, line.start + trail + 1);
        if pair {
            self.pair_line(from, to);
        }
        if may_report {
            let trimmed = &self.text[from..to];
            // The line's first colon, where the pass saw it (none in the whitespace trimmed).
            let colon = line.colon.map(|c| c - from);
            if failed_head || reports_error(trimmed, colon, line.error) {
                let cut = clip_line(trimmed, ERROR_LINE_BYTES);
                self.emit(IdentifierKind::ErrorLine, from, from + cut.len());
            }
        }
    }

    /// A line `from..to` (trimmed) that is one `key: value` or `key = value` pair.
    pub(super) fn pair_line(&mut self, from: usize, to: usize) {
        let mut at = from;
        let quote = matches!(self.at(at), b'"' | b'\'');
        if quote {
            at += 1;
        }
        let key = at;
        if !(self.at(at).is_ascii_alphabetic() || self.at(at) == b'_') {
            return;
        }
        while at < to && class(self.bytes[at]) & KEY != 0 {
            if self.bytes[at] >= 0x80 || at - key >= 41 {
                return;
            }
            at += 1;
        }
        let key_end = at;
        if quote && matches!(self.at(at), b'"' | b'\'') {
            at += 1;
        }
        while at < to && matches!(self.at(at), b' ' | b'\t') {
            at += 1;
        }
        let sep = self.at(at);
        // `a::b` is a path in code and `https://` a URL, not a pair.
        if (sep != b':' && sep != b'=') || (sep == b':' && matches!(self.at(at + 1), b':' | b'/')) {
            return;
        }
        at += 1;
        while at < to && matches!(self.at(at), b' ' | b'\t') {
            at += 1;
        }
        let value = at;
        let mut end = to;
        if self.bytes[end - 1] == b',' {
            end -= 1;
        }
        let end = self.bytes[..end]
            .iter()
            .rposition(|b| !b" \t".contains(b))
            .map_or(value, |i| i + 1);
        if end <= value || end - value > 82 {
            return;
        }
        let v = &self.bytes[value..end];
        if v.len() == 2 && matches!(v, b"\"\"" | b"''") {
            return;
        }
        let quoted = v.len() >= 2
            && matches!(v[0], b'"' | b'\'')
            && v[v.len() - 1] == v[0]
            && !v[1..v.len() - 1].contains(&v[0]);
        let word = !quoted && v.iter().all(|b| class(*b) & VALUE_END == 0);
        if !(quoted || word) {
            return;
        }
        let numeric = self.number(value).is_some_and(|e| e == end);
        let start = if quote { key - 1 } else { key };
        if numeric {
            // `key: 12` is found inline; a line `key = 12` is configuration.
            if sep == b'=' {
                self.emit(IdentifierKind::Number, start, end);
            }
        } else if !(sep == b'=' && self.bytes[key..key_end].contains(&b'.')) {
            self.emit(IdentifierKind::Value, start, end);
        }
    }
}

/// Whether a line of output reports an error: it begins with error, fatal, failed, failure,
/// panic, panicked, exception or `npm ERR!` (after one `word:` at most, before its first colon,
/// at `colon`), or, when it holds the word error (`has_error`), names a compiler's error code.
fn reports_error(line: &str, colon: Option<usize>, has_error: bool) -> bool {
    const STARTS: [&str; 8] = [
        "error",
        "fatal",
        "failed",
        "failure",
        "panic",
        "panicked",
        "exception",
        "npm err!",
    ];
    let starts = |s: &str| {
        s.as_bytes()
            .first()
            .is_some_and(|b| b"eEfFpPnN".contains(b))
            && STARTS.iter().any(|w| {
                s.len() >= w.len()
                    && s.as_bytes()[..w.len()].eq_ignore_ascii_case(w.as_bytes())
                    && !s.as_bytes().get(w.len()).copied().is_some_and(is_word)
            })
    };
    if starts(line) {
        return true;
    }
    // What follows the colon first: it rarely starts with one of the words, and the word
    // before it may be the whole line.
    if let Some(colon) = colon
        && starts(line[colon + 1..].trim_start())
        && !line[..colon].contains(char::is_whitespace)
    {
        return true;
    }
    has_error && compiler_code(line)
}

/// Whether a line names a compiler's error: `error TS2554`, `error[E0308]`, `: error:`.
fn compiler_code(line: &str) -> bool {
    let lower = line.to_ascii_lowercase();
    if lower.contains(": error:") {
        return true;
    }
    lower.match_indices("error").any(|(at, _)| {
        let rest = &lower.as_bytes()[at + 5..];
        let rest = rest.strip_prefix(b" ").unwrap_or(rest);
        let rest = rest.strip_prefix(b"[").unwrap_or(rest);
        (rest.starts_with(b"ts") || rest.starts_with(b"e")) && {
            let code = if rest.starts_with(b"ts") {
                &rest[2..]
            } else {
                &rest[1..]
            };
            code.first().is_some_and(u8::is_ascii_digit)
        }
    })
}

/// At most `max` bytes of a line, cut at a word when longer (at a character otherwise).
fn clip_line(line: &str, max: usize) -> &str {
    if line.len() <= max {
        return line;
    }
    let kept = head(line, Budget::bytes(max), Cut::Nearest);
    if kept.len() < line.len() && kept.ends_with(' ') {
        kept.trim_end()
    } else {
        kept
    }
}
