//! Line framing shared by every reader and the appender: classifying one line, the
//! `torn_write` record, bad-line runs, and reading a file backwards in chunks.
//!
//! The framing rules (documented for users in `docs/session.md`):
//! - A line ends with `\n`; a trailing `\r` is ignored; whitespace-only lines are skipped. A
//!   UTF-8 byte-order mark at the start of the file is skipped with a warning.
//! - The bytes after the last `\n` (the *tail*) are a last line when they decode as a whole
//!   entry (JSON Lines lets the final newline be missing); otherwise they are a torn tail, kept,
//!   reported and never parsed as an entry.
//! - A line (or tail) that does not decode but whose bytes before a lone `\r` do is a file with
//!   CR-only line endings: an error, never an empty context.
//! - A *run* is a maximal sequence of non-blank lines that fail to decode. A run is skipped with
//!   a warning when the next non-blank line is a valid `torn_write` record whose `offset` is the
//!   run's first byte, or when no complete line follows it and every line of it looks like a
//!   cut-off write. Any other run fails the read at its first line.
//! - A `torn_write` record is valid when `offset + length + 1` is its own start offset; a valid
//!   one is a store record, never an entry. An invalid one is an ordinary unknown entry.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};

use panto_model::{BOM, DecodeError, Entry, decode_line, decode_line_checked};
use serde::de::IgnoredAny;

/// The `type` of the record that acknowledges the remains of an interrupted write.
pub(crate) const TORN_WRITE: &str = "torn_write";

/// What one line of a session file is.
pub(crate) enum Line {
    /// Empty or whitespace only: skipped.
    Blank,
    /// A session entry; `replaced` when a lone surrogate in a modelled string read as U+FFFD.
    Entry { entry: Entry, replaced: bool },
    /// A valid `torn_write` record acknowledging the bytes from `covers_from` up to it.
    Marker { covers_from: u64 },
    /// A line that does not decode. `error.line` is 0 until the caller knows the line number.
    /// `cr_only` when it is entries separated by lone carriage returns.
    Bad {
        error: DecodeError,
        torn: bool,
        cr_only: bool,
    },
}

impl Line {
    /// Whether the line holds anything (a file of blank lines only is an empty session).
    pub(crate) fn is_blank(&self) -> bool {
        matches!(self, Line::Blank)
    }
}

/// Whether the segment starting at `start` opens with the byte-order mark that readers skip.
pub(crate) fn has_bom(bytes: &[u8], start: u64) -> bool {
    start == 0 && bytes.starts_with(BOM)
}

/// Classifies the line that starts at byte `start` (given without its `\n`).
pub(crate) fn classify(bytes: &[u8], start: u64) -> Line {
    let bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
    let bytes = if has_bom(bytes, start) {
        &bytes[BOM.len()..]
    } else {
        bytes
    };
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Line::Blank;
    }
    match decode_line_checked(bytes, 0).map(|d| (d.entry, d.replaced_surrogates)) {
        Ok((Entry::Unknown(u), _)) if u.kind == TORN_WRITE => {
            let field = |name: &str| u.fields.get(name).and_then(serde_json::Value::as_u64);
            match (field("offset"), field("length")) {
                (Some(offset), Some(length))
                    if offset.checked_add(length).and_then(|e| e.checked_add(1)) == Some(start) =>
                {
                    Line::Marker {
                        covers_from: offset,
                    }
                }
                _ => Line::Entry {
                    entry: Entry::Unknown(u),
                    replaced: false,
                },
            }
        }
        Ok((entry, replaced)) => Line::Entry { entry, replaced },
        Err(error) => match cr_only(bytes) {
            Some(error) => Line::Bad {
                error,
                torn: false,
                cr_only: true,
            },
            None => Line::Bad {
                torn: looks_torn(bytes),
                error,
                cr_only: false,
            },
        },
    }
}

/// The error for a line that is entries separated by lone carriage returns (classic Mac line
/// endings), when it is one: its bytes up to the first `\r` decode as an entry.
fn cr_only(bytes: &[u8]) -> Option<DecodeError> {
    let cr = memchr::memchr(b'\r', bytes)?;
    let rest = &bytes[cr..];
    if rest.iter().all(u8::is_ascii_whitespace) || decode_line(&bytes[..cr], 0).is_err() {
        return None;
    }
    Some(DecodeError::new(
        0,
        cr + 1,
        "",
        "lines end with a carriage return alone (CR line endings); panto reads lines ending \
         with LF or CRLF",
    ))
}

/// Whether a line that failed to decode is shaped like a write cut off by a crash: a prefix of
/// a JSON value (the parser ran out of input), possibly padded with NUL bytes (what some file
/// systems show for blocks allocated but not written before a power loss).
pub(crate) fn looks_torn(bytes: &[u8]) -> bool {
    let end = bytes.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
    let bytes = &bytes[..end];
    if bytes.is_empty() {
        return true;
    }
    match serde_json::from_slice::<IgnoredAny>(bytes) {
        Ok(_) => false,
        Err(e) if e.is_eof() => true,
        // A number cut after `-`, `.` or `e` fails at its last byte rather than at the end of
        // input; with one more digit it would be a prefix like any other.
        Err(e) if e.line() == 1 && e.column() == bytes.len() => {
            let mut longer = bytes.to_vec();
            longer.push(b'0');
            serde_json::from_slice::<IgnoredAny>(&longer).is_err_and(|e| e.is_eof())
        }
        Err(_) => false,
    }
}

/// The `torn_write` record acknowledging `[offset, offset + length)`, with its newline.
pub(crate) fn torn_write_record(offset: u64, length: u64) -> String {
    format!("{{\"type\":\"{TORN_WRITE}\",\"offset\":{offset},\"length\":{length}}}\n")
}

/// A run of consecutive bad lines, as far as it has been read.
///
/// `P` says where its first line is, in the terms of the reader that found it: reading forwards
/// knows the line number ([`LineNumber`]); reading backwards knows only how many newlines lie at
/// or after it ([`NewlinesAfter`]), which becomes a line number once the whole file is read.
#[derive(Debug)]
pub(crate) struct Run<P> {
    /// Offset of its first line.
    pub start: u64,
    /// Offset just past its last line (before that line's newline).
    pub end: u64,
    /// The error of its first line (line number not yet filled in).
    pub error: DecodeError,
    /// Where its first line is.
    pub first: P,
    /// Whether every line of it looks torn.
    pub all_torn: bool,
}

/// The 1-based line number of a line (forwards reading).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LineNumber(pub u64);

/// How many newlines of the file lie at or after a line's start (backwards reading): the line
/// number is the file's newline count minus this, plus one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct NewlinesAfter(pub u64);

/// What follows a run in the file: decides whether it is skipped or an error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum After {
    /// No complete non-blank line (at most the tail).
    Nothing,
    /// A valid `torn_write` record covering from this offset.
    Marker(u64),
    /// An entry.
    Entry,
}

/// The verdict on a finished run.
pub(crate) enum Verdict {
    /// Skipped, reported as debris.
    Skip { acknowledged: bool },
    /// The read fails at the run's first line.
    Fail,
}

/// Applies the run rule.
pub(crate) fn judge<P>(run: &Run<P>, after: After) -> Verdict {
    match after {
        After::Marker(from) if from == run.start => Verdict::Skip { acknowledged: true },
        After::Nothing if run.all_torn => Verdict::Skip {
            acknowledged: false,
        },
        _ => Verdict::Fail,
    }
}

/// Reads `buf.len()` bytes at `offset`.
pub(crate) fn read_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<()> {
    let mut f = file;
    f.seek(SeekFrom::Start(offset))?;
    f.read_exact(buf)
}

/// Counts the newlines in the first `len` bytes of `file` (the error path of backwards
/// reading, to name the true line number).
pub(crate) fn count_newlines(file: &File, len: u64) -> io::Result<u64> {
    let mut f = file;
    f.seek(SeekFrom::Start(0))?;
    let mut reader = f.take(len);
    let mut buf = vec![0u8; 1 << 20];
    let mut count = 0u64;
    loop {
        let n = reader.read(&mut buf)?;
        if n == 0 {
            return Ok(count);
        }
        count += memchr::memchr_iter(b'\n', &buf[..n]).count() as u64;
    }
}

/// A segment of the file found by [`BackLines::prev`]: a line without its newline, or the tail.
pub(crate) struct Segment {
    /// File offset of the segment's first byte.
    pub start: u64,
    /// Index of that byte in [`BackLines::bytes`] (the segment is `bytes()[lo..hi]`).
    pub lo: usize,
    /// Index just past the segment's last byte in [`BackLines::bytes`] (where its newline, if
    /// any, is).
    pub hi: usize,
}

/// Reads a file backwards, one `\n`-separated segment at a time, in chunks.
///
/// The first segment returned is the tail (the bytes after the last newline, possibly empty);
/// every later one is a complete line without its newline, from the last to the first. Memory
/// holds two buffers, each of a chunk plus the longest line met; bytes before the last segment
/// returned are never read unless asked for.
pub(crate) struct BackLines<'f> {
    file: &'f File,
    chunk: usize,
    buf: Vec<u8>,
    /// The previous buffer, reused by the next step.
    spare: Vec<u8>,
    /// File offset of `buf[0]`.
    buf_start: u64,
    /// File offset where the next segment ends (exclusive).
    pos: u64,
    done: bool,
    /// Bytes read from the file so far.
    pub bytes_read: u64,
}

impl<'f> BackLines<'f> {
    /// A reader positioned at `len`, the end of the file.
    pub(crate) fn new(file: &'f File, len: u64, chunk: usize) -> BackLines<'f> {
        BackLines {
            file,
            chunk: chunk.max(1),
            buf: Vec::new(),
            spare: Vec::new(),
            buf_start: len,
            pos: len,
            done: false,
            bytes_read: 0,
        }
    }

    /// The buffer that [`Segment`] ranges index.
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.buf
    }

    /// The previous segment, or `None` once the start of the file was passed.
    pub(crate) fn prev(&mut self) -> io::Result<Option<Segment>> {
        if self.done {
            return Ok(None);
        }
        loop {
            let hi = (self.pos - self.buf_start) as usize;
            if let Some(i) = memchr::memrchr(b'\n', &self.buf[..hi]) {
                let start = self.buf_start + i as u64 + 1;
                self.pos = start - 1;
                return Ok(Some(Segment {
                    start,
                    lo: i + 1,
                    hi,
                }));
            }
            if self.buf_start == 0 {
                self.done = true;
                return Ok(Some(Segment {
                    start: 0,
                    lo: 0,
                    hi,
                }));
            }
            self.grow(hi)?;
        }
    }

    /// Reads more bytes before the buffer, keeping its first `keep` bytes (the unread part).
    /// Steps grow with the kept part, so a long line costs linear time.
    fn grow(&mut self, keep: usize) -> io::Result<()> {
        let step = self.chunk.max(keep) as u64;
        let new_start = self.buf_start.saturating_sub(step);
        let n = (self.buf_start - new_start) as usize;
        // The two buffers take turns, so that a long read allocates (and faults in) two
        // chunks' worth of memory once rather than a fresh chunk per step.
        let mut fresh = std::mem::take(&mut self.spare);
        // Every byte is written below (the read fills its part or fails): only the bytes the
        // buffer has never held are zeroed first, not the whole buffer at every step.
        if fresh.len() < n + keep {
            fresh.resize(n + keep, 0);
        } else {
            fresh.truncate(n + keep);
        }
        read_at(self.file, &mut fresh[..n], new_start)?;
        fresh[n..].copy_from_slice(&self.buf[..keep]);
        self.spare = std::mem::replace(&mut self.buf, fresh);
        self.buf_start = new_start;
        self.bytes_read += n as u64;
        Ok(())
    }
}
