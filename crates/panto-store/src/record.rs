//! `Record`: one entry as a store keeps it, its exact Contract 1 text and what kind of entry it is.

use panto_model::{DecodeError, Entry, decode_line, encode_line};

/// What kind of entry a [`Record`] holds: a store indexes compactions, so that loading the
/// effective context starts from the latest one instead of the first entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RecordKind {
    /// `{"type":"message",...}`.
    Message,
    /// `{"type":"compaction",...}` (a clearing included).
    Compaction,
    /// Any other `type`: kept; an undo entry makes the compaction it names void, every other
    /// type is skipped by replay.
    Other,
}

impl RecordKind {
    /// The kind of `entry`.
    pub fn of(entry: &Entry) -> RecordKind {
        match entry {
            Entry::Message(_) => RecordKind::Message,
            Entry::Compaction(_) => RecordKind::Compaction,
            Entry::Undo(_) | Entry::Unknown(_) => RecordKind::Other,
        }
    }

    /// A small number for a database column: 0 message, 1 compaction, 2 other.
    pub fn code(self) -> i16 {
        match self {
            RecordKind::Message => 0,
            RecordKind::Compaction => 1,
            RecordKind::Other => 2,
        }
    }

    /// The kind a [`RecordKind::code`] stands for (an unknown code is [`RecordKind::Other`]).
    pub fn from_code(code: i16) -> RecordKind {
        match code {
            0 => RecordKind::Message,
            1 => RecordKind::Compaction,
            _ => RecordKind::Other,
        }
    }
}

/// One session entry as a store keeps it: the exact text of its Contract 1 line (without the
/// newline) and its kind.
///
/// A store keeps `text` byte for byte and gives it back unchanged: that is how fields panto
/// does not model, and a foreign program's spelling of the ones it does, survive a store.
///
/// Invariant: `text` decodes ([`Record::decode`]) to an entry of kind `kind`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Record {
    /// The entry's JSON text, one line, no newline.
    pub text: String,
    /// What kind of entry it is.
    pub kind: RecordKind,
}

impl Record {
    /// The record of `entry`, encoded as panto writes it.
    pub fn encode(entry: &Entry) -> Record {
        let mut text = encode_line(entry);
        text.truncate(text.trim_end_matches('\n').len());
        Record {
            text,
            kind: RecordKind::of(entry),
        }
    }

    /// The record of a line another program wrote, kept exactly as it is. `line` is the
    /// 1-based line number errors name.
    ///
    /// # Errors
    /// The [`DecodeError`] of a line that is not a Contract 1 entry (it names the line, the
    /// column and the field).
    pub fn parse(text: impl Into<String>, line: usize) -> Result<Record, DecodeError> {
        let mut text = text.into();
        let trimmed = text.trim_end_matches(['\n', '\r']).len();
        text.truncate(trimmed);
        let entry = decode_line(text.as_bytes(), line)?;
        Ok(Record {
            kind: RecordKind::of(&entry),
            text,
        })
    }

    /// The entry. `line` is the 1-based line number errors name (a store passes the entry's
    /// position).
    ///
    /// # Errors
    /// The [`DecodeError`] of a record whose text is not an entry (a store that changed it).
    pub fn decode(&self, line: usize) -> Result<Entry, DecodeError> {
        decode_line(self.text.as_bytes(), line)
    }
}
