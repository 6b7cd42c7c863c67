//! `Warning`: what a read noticed and skipped without failing.

use std::fmt;
use std::path::PathBuf;

/// Something a read skipped or repaired without failing: a torn last line, the remains of an
/// interrupted write, an entry of an unknown type, an incomplete compaction, a byte-order mark,
/// a lone surrogate. The file is never changed.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Warning {
    /// The session file.
    pub path: PathBuf,
    /// Byte offset of the start of the line concerned. Always known.
    pub offset: u64,
    /// 1-based line number, when known. Reading the full history always knows it; loading the
    /// effective context knows it only when it read back to the start of the file, because
    /// counting the lines of a long prefix would cost what backwards loading saves. Fill it in
    /// with [`crate::Session::resolve_lines`] when needed.
    pub line: Option<usize>,
    /// What was noticed.
    pub kind: WarningKind,
}

impl Warning {
    /// A warning about the line of `path` that starts at byte `offset` (line `line`, when
    /// known).
    pub fn new(
        path: impl Into<PathBuf>,
        offset: u64,
        line: Option<usize>,
        kind: WarningKind,
    ) -> Warning {
        Warning {
            path: path.into(),
            offset,
            line,
            kind,
        }
    }
}

/// The kinds of [`Warning`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum WarningKind {
    /// The file does not end with a newline: its last `len` bytes are an unfinished line (a
    /// write cut short by a crash, or one in progress). They are kept byte for byte and never
    /// parsed; the next append starts on a fresh line.
    TornTail {
        /// Bytes after the last newline.
        len: u64,
    },
    /// Lines left by an interrupted write, skipped: either acknowledged by the `torn_write`
    /// record that the next append wrote after them, or at the very end of the file and shaped
    /// like a cut-off line.
    Debris {
        /// Bytes of the skipped lines (newlines between them included).
        len: u64,
        /// Whether a `torn_write` record acknowledges them.
        acknowledged: bool,
    },
    /// An entry whose `type` this version of panto does not know: skipped by replay, kept in
    /// the file.
    UnknownType {
        /// Its `type`.
        kind: String,
    },
    /// A compaction whose kept copies are not all present (an interrupted append): ignored
    /// together with the copies that are present.
    IncompleteCompaction {
        /// Copies it announced.
        expected: u64,
        /// Copies found.
        found: u64,
    },
    /// The file starts with a UTF-8 byte-order mark (some Windows tools write one): skipped.
    ByteOrderMark,
    /// A string panto reads (a text, an id, a summary) holds a `\uXXXX` escape of a lone
    /// surrogate, as `JSON.stringify` writes for a string cut inside an emoji: it reads as
    /// U+FFFD. The line stays as written; values panto only carries keep the escape exactly.
    LoneSurrogate,
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.path.display())?;
        match self.line {
            Some(line) => write!(f, "line {line}: ")?,
            None => write!(f, "byte {}: ", self.offset)?,
        }
        match &self.kind {
            WarningKind::TornTail { len } => write!(
                f,
                "torn last line ({len} bytes without a final newline) kept and ignored"
            ),
            WarningKind::Debris {
                len,
                acknowledged: true,
            } => write!(f, "remains of an interrupted write ({len} bytes) skipped"),
            WarningKind::Debris {
                len,
                acknowledged: false,
            } => write!(
                f,
                "remains of an interrupted write at the end of the file ({len} bytes) skipped"
            ),
            WarningKind::UnknownType { kind } => {
                write!(f, "entry of unknown type `{kind}` skipped")
            }
            WarningKind::IncompleteCompaction { expected, found } => write!(
                f,
                "compaction with {found} of its {expected} kept copies ignored (an interrupted append)"
            ),
            WarningKind::ByteOrderMark => {
                write!(f, "byte-order mark at the start of the file skipped")
            }
            WarningKind::LoneSurrogate => write!(
                f,
                "lone surrogate escape read as U+FFFD (a string cut inside a character)"
            ),
        }
    }
}
