//! Session entries: one line of a session file each.

use crate::message::{Extra, Message};

/// The field by which a compaction entry says that its kept copies follow it marked `kept_by`,
/// so that replay honours it only once they are all present. The store sets it on every
/// compaction appended together with its marked copies.
pub const COPIES_MARKED: &str = "copies_marked";

/// The field of a compaction entry that says which strategy wrote it, when not panto's summary:
/// `"native"` (the provider's own compaction) or [`CLEARING`].
pub const STRATEGY: &str = "strategy";

/// The [`STRATEGY`] of a clearing: a compaction entry that summarizes nothing. It carries the
/// active summary on unchanged (or, with [`NO_SUMMARY`], a note that says what a clearing is),
/// and its kept copies are the whole conversation, with old tool results (and old thinking and
/// images) replaced by placeholders (docs/session.md, "Clearings").
pub const CLEARING: &str = "clear";

/// The field of a compaction entry whose `summary` summarizes nothing: a clearing made when no
/// summary was active, whose summary is only a note. Readers that pass a previous summary on
/// (the next compaction's `<previous-summary>`) leave it out.
pub const NO_SUMMARY: &str = "no_summary";

/// One line of a session file.
#[derive(Clone, Debug, PartialEq)]
pub enum Entry {
    /// `{"type":"message",...}`
    Message(Message),
    /// `{"type":"compaction",...}`
    Compaction(CompactionEntry),
    /// `{"type":"undo",...}`: makes the compaction (or clearing) it names void, so that the
    /// effective context is again the one before it (docs/session.md, "Undo").
    Undo(UndoEntry),
    /// Any other `type`: skipped by replay, kept in the file for forward compatibility.
    Unknown(UnknownEntry),
}

impl Entry {
    /// The entry id, when it has one.
    pub fn id(&self) -> Option<&str> {
        match self {
            Entry::Message(m) => m.id.as_deref(),
            Entry::Compaction(c) => c.id.as_deref(),
            Entry::Undo(u) => u.id.as_deref(),
            Entry::Unknown(u) => u.fields.get("id").and_then(serde_json::Value::as_str),
        }
    }

    /// The `type` on the wire.
    pub fn type_name(&self) -> &str {
        match self {
            Entry::Message(_) => "message",
            Entry::Compaction(_) => "compaction",
            Entry::Undo(_) => "undo",
            Entry::Unknown(u) => &u.kind,
        }
    }
}

impl From<Message> for Entry {
    fn from(m: Message) -> Entry {
        Entry::Message(m)
    }
}

/// What started a compaction.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Trigger {
    /// `/compact` or `panto compact`.
    Manual,
    /// The provider rejected a request as too large (or answered it truncated, silently).
    Overflow,
    /// Proactive compaction: the next request was estimated above the configured share of
    /// the model's window, so the conversation was compacted before it was sent.
    Auto,
    /// A value written by another program (or an agent's own reason), kept verbatim.
    Other(String),
}

impl Trigger {
    /// The wire name.
    pub fn as_str(&self) -> &str {
        match self {
            Trigger::Manual => "manual",
            Trigger::Overflow => "overflow",
            Trigger::Auto => "auto",
            Trigger::Other(s) => s,
        }
    }

    /// Parses a wire name; unknown names are kept as [`Trigger::Other`].
    pub fn parse(s: &str) -> Trigger {
        match s {
            "manual" => Trigger::Manual,
            "overflow" => Trigger::Overflow,
            "auto" => Trigger::Auto,
            other => Trigger::Other(other.to_owned()),
        }
    }
}

/// `{"type":"compaction","id":...,"summary":...,...}`: a compaction, followed in the file by the
/// kept turns it duplicated.
///
/// Field set (every field but `summary` optional on input):
/// - `summary`: the text of the compaction block.
/// - `trigger`: `manual`, `overflow` or `auto` (or another program's word, kept).
/// - `model`: the model that wrote the summary.
/// - `instructions`: the extra instructions of a `/compact ARGS` run.
/// - `tokens_before`, `tokens_after`: estimated input size of the context before and after.
/// - `kept_messages`: how many message entries, each marked `"kept_by": <this id>`, follow this
///   entry as the duplicated kept turns. Replay honours the compaction only once all of them are
///   present, which makes the append of a compaction atomic with respect to a crash.
/// - `copies_marked` (in `extra`): `true` on the compactions the store appends with their marked
///   copies; with it, replay waits for the copies even when none has arrived yet. A compaction
///   without it whose next message is not a marked copy was written by another program and is
///   read by Contract 1's rule (see [`crate::replay()`]).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct CompactionEntry {
    /// The entry id.
    pub id: Option<String>,
    /// The summary that replaces everything before this entry.
    pub summary: String,
    /// What started it.
    pub trigger: Option<Trigger>,
    /// The model that produced the summary.
    pub model: Option<String>,
    /// Extra instructions given to this run.
    pub instructions: Option<String>,
    /// Estimated tokens of the context before compaction.
    pub tokens_before: Option<u64>,
    /// Estimated tokens of the context after compaction.
    pub tokens_after: Option<u64>,
    /// How many kept message entries follow this entry (see the type docs).
    pub kept_messages: Option<u64>,
    /// Unmodelled fields.
    pub extra: Extra,
}

impl CompactionEntry {
    /// Whether the entry says its kept copies follow it marked `kept_by`
    /// ([`crate::COPIES_MARKED`]), which makes replay wait for all of them.
    pub fn copies_marked(&self) -> bool {
        self.extra.get(COPIES_MARKED) == Some(&serde_json::Value::Bool(true))
    }

    /// A compaction entry with a summary and nothing else.
    pub fn new(summary: impl Into<String>) -> CompactionEntry {
        CompactionEntry {
            id: None,
            summary: summary.into(),
            trigger: None,
            model: None,
            instructions: None,
            tokens_before: None,
            tokens_after: None,
            kept_messages: None,
            extra: Extra::new(),
        }
    }

    /// The entry with id `id`.
    #[must_use]
    pub fn with_id(mut self, id: impl Into<String>) -> CompactionEntry {
        self.id = Some(id.into());
        self
    }

    /// The entry with what started it.
    #[must_use]
    pub fn with_trigger(mut self, trigger: Trigger) -> CompactionEntry {
        self.trigger = Some(trigger);
        self
    }

    /// The entry naming the model that wrote the summary.
    #[must_use]
    pub fn with_model(mut self, model: impl Into<String>) -> CompactionEntry {
        self.model = Some(model.into());
        self
    }

    /// The entry with the extra instructions of its run.
    #[must_use]
    pub fn with_instructions(mut self, instructions: impl Into<String>) -> CompactionEntry {
        self.instructions = Some(instructions.into());
        self
    }

    /// The entry with the estimated context size before and after the compaction.
    #[must_use]
    pub fn with_tokens(mut self, before: u64, after: u64) -> CompactionEntry {
        self.tokens_before = Some(before);
        self.tokens_after = Some(after);
        self
    }

    /// The entry saying that `kept` marked copies of kept messages follow it.
    #[must_use]
    pub fn with_kept_messages(mut self, kept: u64) -> CompactionEntry {
        self.kept_messages = Some(kept);
        self
    }

    /// The entry with `extra` as its unmodelled fields, written back verbatim.
    #[must_use]
    pub fn with_extra(mut self, extra: Extra) -> CompactionEntry {
        self.extra = extra;
        self
    }

    /// The strategy that wrote it ([`STRATEGY`]): `"native"`, [`CLEARING`], or another
    /// program's word; `None` for panto's summary.
    pub fn strategy(&self) -> Option<&str> {
        self.extra.get(STRATEGY).and_then(serde_json::Value::as_str)
    }

    /// Whether it is a clearing ([`CLEARING`]): it summarized nothing, and its copies are the
    /// whole conversation with old tool results replaced by placeholders.
    pub fn is_clearing(&self) -> bool {
        self.strategy() == Some(CLEARING)
    }

    /// The summary of everything before it, when it has one: `None` for a clearing made when
    /// no summary was active, whose summary is only a note ([`NO_SUMMARY`]).
    pub fn summary_text(&self) -> Option<&str> {
        let note = self.extra.get(NO_SUMMARY) == Some(&serde_json::Value::Bool(true));
        (!note).then_some(self.summary.as_str())
    }
}

/// `{"type":"undo","id":...,"undoes":...}`: the compaction (or clearing) entry `undoes` names
/// is void from now on. Replay reads the session as if that entry and its kept copies were not
/// there, so the effective context is again the one before it, followed by everything appended
/// since; nothing is rewritten. Undoing twice names the compaction that became active again,
/// one step further back.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct UndoEntry {
    /// The entry id.
    pub id: Option<String>,
    /// The id of the compaction entry made void.
    pub undoes: String,
    /// Unmodelled fields.
    pub extra: Extra,
}

impl UndoEntry {
    /// An undo of the compaction entry `undoes`.
    pub fn new(undoes: impl Into<String>) -> UndoEntry {
        UndoEntry {
            id: None,
            undoes: undoes.into(),
            extra: Extra::new(),
        }
    }

    /// The entry with id `id`.
    #[must_use]
    pub fn with_id(mut self, id: impl Into<String>) -> UndoEntry {
        self.id = Some(id.into());
        self
    }

    /// The entry with `extra` as its unmodelled fields, written back verbatim.
    #[must_use]
    pub fn with_extra(mut self, extra: Extra) -> UndoEntry {
        self.extra = extra;
        self
    }
}

/// An entry whose `type` panto does not know.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct UnknownEntry {
    /// Its `type`.
    pub kind: String,
    /// Every other field.
    pub fields: Extra,
}

impl UnknownEntry {
    /// An entry of type `kind` with the given fields (its `type` is not among them).
    pub fn new(kind: impl Into<String>, fields: Extra) -> UnknownEntry {
        UnknownEntry {
            kind: kind.into(),
            fields,
        }
    }
}
