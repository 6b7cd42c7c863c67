//! `Warning`: what a read of a session noticed and skipped or repaired without failing, and
//! where; the one type every store's [`Loaded`](crate::Loaded) carries.

use std::fmt;

/// Something a read skipped or repaired without failing: a torn last line, the remains of an
/// interrupted write, an entry of an unknown type, an incomplete compaction, a byte-order mark,
/// a lone surrogate. Nothing stored is changed.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Warning {
    /// The session: its file (the JSONL store) or its name (a database store).
    pub session: String,
    /// Where in it.
    pub place: Place,
    /// What was noticed.
    pub kind: WarningKind,
}

/// Where in a session a [`Warning`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Place {
    /// A line of a session file.
    Line {
        /// Byte offset of the start of the line. Always known.
        offset: u64,
        /// 1-based line number, when known. Reading the full history always knows it;
        /// loading the effective context knows it only when it read back to the start of
        /// the file, because counting the lines of a long prefix would cost what backwards
        /// loading saves (`panto_session::Session::resolve_lines` fills it in).
        line: Option<usize>,
    },
    /// An entry of a database session, by its 1-based number.
    Entry(u64),
}

impl Warning {
    /// A warning about the line of the file `session` that starts at byte `offset` (line
    /// `line`, when known).
    pub fn at_line(
        session: impl Into<String>,
        offset: u64,
        line: Option<usize>,
        kind: WarningKind,
    ) -> Warning {
        Warning {
            session: session.into(),
            place: Place::Line { offset, line },
            kind,
        }
    }

    /// A warning about entry `entry` (1-based) of the database session `session`.
    pub fn at_entry(session: impl Into<String>, entry: u64, kind: WarningKind) -> Warning {
        Warning {
            session: session.into(),
            place: Place::Entry(entry),
            kind,
        }
    }

    /// The byte offset of the line concerned, for a warning about a line of a file.
    pub fn offset(&self) -> Option<u64> {
        match self.place {
            Place::Line { offset, .. } => Some(offset),
            Place::Entry(_) => None,
        }
    }

    /// The 1-based line number, for a warning about a line of a file whose number is known.
    pub fn line(&self) -> Option<usize> {
        match self.place {
            Place::Line { line, .. } => line,
            Place::Entry(_) => None,
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
    /// the session.
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
        write!(f, "{}: ", self.session)?;
        match self.place {
            Place::Line {
                line: Some(line), ..
            } => write!(f, "line {line}: ")?,
            Place::Line { offset, line: None } => write!(f, "byte {offset}: ")?,
            Place::Entry(entry) => write!(f, "entry {entry}: ")?,
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
