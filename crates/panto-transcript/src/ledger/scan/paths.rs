//! The identifiers that end in a file's extension: file paths, `path:line` and
//! `path(line,column)`, each found from the run of path bytes the scanner is in.

use super::{IdentifierKind, MAX_PATH, Scanner, is_word};

impl<F: FnMut(IdentifierKind, &str), const FAST: bool> Scanner<'_, '_, F, FAST> {
    /// A file path whose extension is the word `ext..end`: a folder and the extension, not
    /// going on into another folder or a word joined by `-`.
    pub(super) fn file_path(&mut self, ext: usize, end: usize) {
        let after = self.at(end);
        if after == b'/' || after == b'-' || is_word(after) {
            return;
        }
        let folder = self
            .slash
            .is_some_and(|slash| slash >= self.path && slash < ext);
        if !folder {
            return;
        }
        if let Some(start) = self.extension(ext, end) {
            self.emit(IdentifierKind::Path, start, end);
        }
    }

    /// Where a path ending with the `.` at `dot` starts: the run of path bytes (ASCII word
    /// bytes and `.~@/-`) the pass is in, at most [`MAX_PATH`] long, with a word byte or `-`
    /// right before the dot; `None` inside a URL.
    pub(super) fn path_before(&self, dot: usize) -> Option<usize> {
        let start = self.path;
        let name = self.before(dot);
        if start >= dot || dot - start > MAX_PATH || !(is_word(name) || name == b'-') {
            return None;
        }
        if self.url {
            return None;
        }
        Some(start)
    }

    /// Whether the extension word `ext..colon` is a file's, its dot before it, and the name
    /// before the dot a path (not a host).
    pub(super) fn extension(&self, ext: usize, end: usize) -> Option<usize> {
        let e = &self.bytes[ext..end];
        if e.is_empty() || e.len() > 8 || !e[0].is_ascii_alphabetic() {
            return None;
        }
        if !e.iter().all(u8::is_ascii_alphanumeric) || self.before(ext) != b'.' {
            return None;
        }
        self.path_before(ext - 1)
    }

    /// `path.ext:12[:3]` with the extension `ext..colon`: whether one was found.
    pub(super) fn path_line(&mut self, ext: usize, colon: usize) -> bool {
        let Some(start) = self.extension(ext, colon) else {
            return false;
        };
        let first = self.digits(colon + 1);
        if first == 0 {
            return false;
        }
        let mut end = colon + 1 + first;
        if self.at(end) == b':' {
            let second = self.digits(end + 1);
            if second > 0 {
                end += 1 + second;
            }
        }
        if is_word(self.at(end)) {
            return false;
        }
        let path = &self.bytes[start..ext];
        let tld = &self.bytes[ext..colon];
        let host = !path.contains(&b'/')
            && [&b"com"[..], b"org", b"net", b"io", b"dev", b"local"].contains(&tld);
        if host {
            return false;
        }
        self.emit(IdentifierKind::PathLine, start, end);
        true
    }

    /// `path.ext(12,3)` with its `(` at `open`.
    pub(super) fn paren_position(&mut self, open: usize) {
        let mut ext = open;
        while ext > 0 && self.bytes[ext - 1].is_ascii_alphanumeric() {
            ext -= 1;
        }
        let Some(start) = self.extension(ext, open) else {
            return;
        };
        let line = self.digits(open + 1);
        if line == 0 || self.at(open + 1 + line) != b',' {
            return;
        }
        let column_at = open + 2 + line;
        let column = self.digits(column_at);
        if column == 0 || self.at(column_at + column) != b')' {
            return;
        }
        self.emit(IdentifierKind::PathLine, start, column_at + column + 1);
    }
}
