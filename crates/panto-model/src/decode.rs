//! JSONL decoding and encoding of session entries, with errors that name line, column and field.
//!
//! Decoding never panics. A bad line yields a [`DecodeError`] such as
//! `line 12, column 57: content[1].tool_use_id: missing field`. The fast path checks the line is
//! UTF-8 once and decodes it with plain `serde_json`; only a line that fails is decoded again:
//! first with lone surrogate escapes in modelled strings read as U+FFFD (what `JSON.stringify`
//! writes for a string cut inside an emoji; [`Decoded::replaced_surrogates`] says it happened),
//! then, if it still fails, with path tracking to build the error. Good input pays nothing for
//! either.

use std::fmt;

use serde::Deserialize;

use crate::entry::Entry;
use crate::serde_impl::lossy;

/// Why one line of a session file could not be decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct DecodeError {
    /// 1-based line number in the file (or in the text given to the decoder).
    pub line: usize,
    /// 1-based column (in bytes) where the problem was found, 0 when unknown.
    pub column: usize,
    /// The field path inside the line, like `content[1].tool_use_id`; empty for the whole line.
    pub path: String,
    /// What is wrong, without position information.
    pub message: String,
}

impl DecodeError {
    /// The error for `line` (1-based) at `column` (1-based bytes, 0 when unknown), at the field
    /// `path` (empty for the whole line).
    pub fn new(
        line: usize,
        column: usize,
        path: impl Into<String>,
        message: impl Into<String>,
    ) -> DecodeError {
        DecodeError {
            line,
            column,
            path: path.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}", self.line)?;
        if self.column > 0 {
            write!(f, ", column {}", self.column)?;
        }
        if !self.path.is_empty() {
            write!(f, ": {}", self.path)?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for DecodeError {}

/// One decoded line: the entry, and whether decoding had to replace anything.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Decoded {
    /// The entry.
    pub entry: Entry,
    /// Whether a lone surrogate escape (`"\ud83d"`) in a string panto models (a text, an id, a
    /// summary) was read as U+FFFD. Values panto only carries (tool arguments, unknown fields)
    /// keep such escapes exactly and never set this.
    pub replaced_surrogates: bool,
}

/// Decodes one line (without its newline) into an entry. A lone surrogate escape in a string
/// panto models reads as U+FFFD ([`decode_line_checked`] says whether that happened).
///
/// # Errors
/// A [`DecodeError`] naming `line_number`, the column and the field when the line is not valid
/// UTF-8, not JSON, or not a Contract 1 entry.
pub fn decode_line(bytes: &[u8], line_number: usize) -> Result<Entry, DecodeError> {
    decode_line_checked(bytes, line_number).map(|d| d.entry)
}

/// Decodes one line (without its newline) into an entry, reporting what was replaced.
///
/// # Errors
/// As [`decode_line`].
pub fn decode_line_checked(bytes: &[u8], line_number: usize) -> Result<Decoded, DecodeError> {
    let text = match std::str::from_utf8(bytes) {
        Ok(text) => text,
        Err(e) => {
            return Err(DecodeError {
                line: line_number,
                column: e.valid_up_to() + 1,
                path: String::new(),
                message: "not valid UTF-8".to_owned(),
            });
        }
    };
    if let Ok(entry) = serde_json::from_str::<Entry>(text) {
        return Ok(Decoded {
            entry,
            replaced_surrogates: false,
        });
    }
    // Only a `\u` escape can be a lone surrogate; without one the second attempt is skipped.
    if memchr::memmem::find(bytes, b"\\u").is_some()
        && let Ok(entry) = lossy(|| serde_json::from_str::<Entry>(text))
    {
        return Ok(Decoded {
            entry,
            replaced_surrogates: true,
        });
    }
    Err(lossy(|| explain(bytes, line_number)))
}

/// Re-decodes a failing line with path tracking to build a precise error.
fn explain(bytes: &[u8], line_number: usize) -> DecodeError {
    match decode_tracked::<Entry>(bytes) {
        Ok(_) => DecodeError {
            // The fast path failed but the careful one did not: cannot happen, but never panic.
            line: line_number,
            column: 0,
            path: String::new(),
            message: "could not decode entry".to_owned(),
        },
        Err(mut e) => {
            e.line = line_number;
            e
        }
    }
}

/// Decodes with path tracking; the error's `line` is the line inside `bytes` (1 for one line).
fn decode_tracked<'a, T: Deserialize<'a>>(bytes: &'a [u8]) -> Result<T, DecodeError> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let err = match serde_path_to_error::deserialize::<_, T>(&mut de) {
        Ok(v) => {
            return match de.end() {
                Ok(()) => Ok(v),
                Err(e) => Err(DecodeError {
                    line: e.line(),
                    column: e.column(),
                    path: String::new(),
                    message: "trailing characters after the JSON object".to_owned(),
                }),
            };
        }
        Err(err) => err,
    };
    let inner = err.inner();
    let mut path = err.path().to_string();
    if path == "." || path == "?" {
        path.clear();
    }
    let raw = inner.to_string();
    let mut message = match raw.rfind(" at line ") {
        Some(i) if inner.line() > 0 => raw[..i].to_owned(),
        _ => raw,
    };
    // Move a field name out of the message into the path: `missing field `x``, `field `x`: ...`.
    for (prefix, rest_is_message) in [
        ("missing field `", false),
        ("duplicate field `", false),
        ("field `", true),
    ] {
        if let Some(tail) = message.strip_prefix(prefix)
            && let Some(end) = tail.find('`')
        {
            let field = &tail[..end];
            let new_message = if rest_is_message {
                tail[end + 1..].trim_start_matches(':').trim().to_owned()
            } else {
                prefix.trim_end_matches(" `").to_owned()
            };
            if !path.is_empty() {
                path.push('.');
            }
            path.push_str(field);
            message = new_message;
            break;
        }
    }
    Err(DecodeError {
        line: inner.line(),
        column: inner.column(),
        path,
        message,
    })
}

/// Iterates over the entries of JSONL text. A UTF-8 byte-order mark at the start is skipped, as
/// are blank lines; each item is an entry or the error of its line, so a caller stops at the
/// first error with `collect::<Result<Vec<_>, _>>()` or keeps going to gather them all.
pub fn entries(text: &[u8]) -> Entries<'_> {
    Entries {
        rest: text.strip_prefix(BOM).unwrap_or(text),
        line: 0,
    }
}

/// The UTF-8 byte-order mark, which some editors and Windows tools put at the start of a file.
pub const BOM: &[u8] = b"\xEF\xBB\xBF";

/// Iterator returned by [`entries`].
pub struct Entries<'a> {
    rest: &'a [u8],
    line: usize,
}

impl Iterator for Entries<'_> {
    type Item = Result<Entry, DecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if self.rest.is_empty() {
                return None;
            }
            let (line, rest) = match memchr_newline(self.rest) {
                Some(i) => (&self.rest[..i], &self.rest[i + 1..]),
                None => (self.rest, &[][..]),
            };
            self.rest = rest;
            self.line += 1;
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            return Some(decode_line(line, self.line));
        }
    }
}

/// The next newline. A vectorised search: a byte-at-a-time scan here cost a fifth of the
/// instructions of decoding a session (`docs/benchmarks.md`).
fn memchr_newline(bytes: &[u8]) -> Option<usize> {
    memchr::memchr(b'\n', bytes)
}

/// Decodes every line, stopping at the first bad one.
///
/// # Errors
/// The first line that fails to decode.
pub fn read_entries(text: &[u8]) -> Result<Vec<Entry>, DecodeError> {
    entries(text).collect()
}

/// Decodes every line, keeping the good entries and collecting every error.
pub fn read_entries_lossy(text: &[u8]) -> (Vec<Entry>, Vec<DecodeError>) {
    let mut good = Vec::new();
    let mut bad = Vec::new();
    for item in entries(text) {
        match item {
            Ok(e) => good.push(e),
            Err(e) => bad.push(e),
        }
    }
    (good, bad)
}

/// Encodes one entry as a JSON line, with the trailing newline.
pub fn encode_line(entry: &Entry) -> String {
    let mut s = serde_json::to_string(entry).unwrap_or_else(|_| {
        // Serialising these types cannot fail: keys are strings and values are JSON values.
        String::from("{}")
    });
    s.push('\n');
    s
}

/// Encodes entries as JSONL text.
pub fn encode_lines<'a>(entries: impl IntoIterator<Item = &'a Entry>) -> String {
    let mut out = String::new();
    for e in entries {
        out.push_str(&encode_line(e));
    }
    out
}

/// Deserialises any Contract 1 value (an [`Entry`], a [`crate::Message`], a
/// [`crate::ContentBlock`]) from JSON text, with the same path-carrying errors.
///
/// # Errors
/// A [`DecodeError`] whose `line` and `column` are positions inside `text`.
pub fn from_json<'a, T: Deserialize<'a>>(text: &'a [u8]) -> Result<T, DecodeError> {
    decode_tracked(text)
}
