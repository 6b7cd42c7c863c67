//! Replay: from session entries to the effective context a provider is sent.
//!
//! The effective context is the latest compaction's summary as one compaction block, followed by
//! the messages after that compaction entry. Everything before it is ignored; unknown entry types
//! are skipped and reported.
//!
//! Atomic compactions: a compaction entry that says `kept_messages: n` is honoured only once the
//! `n` kept copies (message entries marked `kept_by: <its id>`) follow it. If another message or
//! the end of the entries comes first, a crash cut the append short: the compaction and its
//! partial copies are ignored and reported, and replay goes on from the context before it. So a
//! session cut at any byte of a compaction append replays to exactly the old or the new context.
//!
//! Foreign compactions: that atomicity applies to the compactions panto writes, which say so
//! (`"copies_marked": true`, [`COPIES_MARKED`](crate::COPIES_MARKED)) or whose first following message is a copy
//! marked `kept_by`. Any other compaction was written by a program that does not mark its copies,
//! and is read by Contract 1's rule: its summary, then the entries after it (a compaction that
//! announces copies and is the last entry is interrupted, whoever wrote it). The messages after
//! it that are copies (the `kept_messages` it announces, or all of them when it does not say)
//! are marked `kept_by` in the effective context, as panto's own copies are in the file, so that
//! sizing never trusts their usage, which was measured before the compaction.
//!
//! Undo: an undo entry (`{"type":"undo","undoes":"c7"}`) makes the compaction it names void.
//! Replay reads the entries as if that compaction and its kept copies (`kept_by: c7`) were not
//! there, so the effective context is again the one before it, followed by everything appended
//! since; the undo entry itself is not part of the conversation. An undo comes after what it
//! voids, so [`replay`] reads the entries once for their undos before it replays them; a
//! [`Replayer`] fed one entry at a time is told them first ([`Replayer::undoing`], [`undone`]).
//! A clearing is a compaction entry too (docs/session.md, "Clearings"), so it is undone the
//! same way.

use std::collections::HashSet;

use serde_json::Value;

use crate::entry::{CompactionEntry, Entry};
use crate::message::{CompactionBlock, ContentBlock, KEPT_BY, Message, NATIVE, Role};

/// The context that the next request is built from.
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct EffectiveContext {
    /// The messages, led by the compaction message when [`Self::compaction`] is set.
    pub messages: Vec<Message>,
    /// The compaction entry that is active, if any.
    pub compaction: Option<CompactionEntry>,
    /// How many messages after the compaction message are kept copies it wrote.
    pub kept: usize,
    /// What replay skipped, with the 0-based position of the entry in the input.
    pub skipped: Vec<Skipped>,
}

impl EffectiveContext {
    /// A context of `messages` with no active compaction: what replay gives for a session
    /// that was never compacted.
    pub fn new(messages: Vec<Message>) -> EffectiveContext {
        EffectiveContext {
            messages,
            ..EffectiveContext::default()
        }
    }

    /// The messages after the compaction message (all of them when there is none).
    pub fn conversation(&self) -> &[Message] {
        let head = usize::from(self.compaction.is_some());
        &self.messages[head.min(self.messages.len())..]
    }

    /// The summary of the active compaction.
    pub fn summary(&self) -> Option<&str> {
        self.compaction.as_ref().map(|c| c.summary.as_str())
    }
}

/// An entry that replay did not apply.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Skipped {
    /// An entry of a type panto does not know.
    UnknownType {
        /// Position of the entry.
        index: usize,
        /// Its `type`.
        kind: String,
    },
    /// A compaction whose kept copies are not all present (an interrupted append); it and the
    /// copies that were present are ignored.
    IncompleteCompaction {
        /// Position of the compaction entry.
        index: usize,
        /// Copies it announced.
        expected: u64,
        /// Copies found.
        found: u64,
    },
}

/// Builds an [`EffectiveContext`] one entry at a time, so a reader can stream a file through it.
#[derive(Debug, Default)]
pub struct Replayer {
    ctx: EffectiveContext,
    pending: Option<Pending>,
    next_index: usize,
    /// After a foreign compaction: how many more messages to mark as its copies (`u64::MAX`
    /// when it did not say), and the `kept_by` to mark them with.
    foreign: Option<(u64, String)>,
    /// The ids of the compactions an undo made void: they and their kept copies are read as if
    /// they were not there.
    undone: HashSet<String>,
}

#[derive(Debug)]
struct Pending {
    index: usize,
    entry: CompactionEntry,
    expected: u64,
    copies: Vec<Message>,
    marked: bool,
}

impl Replayer {
    /// An empty replayer.
    pub fn new() -> Replayer {
        Replayer::default()
    }

    /// The replayer, told the compactions that undo entries make void (their ids, [`undone`]
    /// of the entries it will be fed): it reads each of them, and every kept copy marked with
    /// its id, as if it were not there. Undo entries themselves are skipped whether told or
    /// not, so a replayer fed entries one at a time must be told before the voided ones come.
    #[must_use]
    pub fn undoing(mut self, undone: HashSet<String>) -> Replayer {
        self.undone = undone;
        self
    }

    /// Whether `entry` is read as if it were not there: an undo entry, a compaction an undo
    /// made void, or a kept copy of one.
    fn invisible(&self, entry: &Entry) -> bool {
        match entry {
            Entry::Undo(_) => true,
            _ if self.undone.is_empty() => false,
            Entry::Compaction(c) => c.id.as_ref().is_some_and(|id| self.undone.contains(id)),
            Entry::Message(m) => m.kept_by().is_some_and(|by| self.undone.contains(by)),
            Entry::Unknown(_) => false,
        }
    }

    /// Applies `messages` as the next message entries, in order, as [`Replayer::push`] of each
    /// would. A replayer that has applied nothing but unknown entries so far takes the vector
    /// itself as the context's messages instead of moving them one by one into a new one: a
    /// reader that has decoded a long history without a compaction hands it over whole.
    pub fn push_messages(&mut self, messages: Vec<Message>) {
        // Nothing applied but unknown entries: an active compaction leads the messages with
        // its own, so no messages and none pending is all it takes (and no undo, which may
        // make some of them void).
        if self.ctx.messages.is_empty() && self.pending.is_none() && self.undone.is_empty() {
            self.next_index += messages.len();
            self.ctx.messages = messages;
        } else {
            for m in messages {
                self.push(Entry::Message(m));
            }
        }
    }

    /// Applies the next entry.
    pub fn push(&mut self, entry: Entry) {
        let index = self.next_index;
        self.next_index += 1;
        if self.invisible(&entry) {
            return;
        }
        if let Some(mut p) = self.pending.take() {
            match entry {
                Entry::Message(m) if belongs_to(&m, &p.entry) => {
                    p.copies.push(m);
                    if p.copies.len() as u64 == p.expected {
                        self.activate(p.entry, p.copies);
                    } else {
                        self.pending = Some(p);
                    }
                    return;
                }
                Entry::Unknown(u) => {
                    self.ctx.skipped.push(Skipped::UnknownType {
                        index,
                        kind: u.kind,
                    });
                    self.pending = Some(p);
                    return;
                }
                Entry::Message(m) if !p.marked && p.copies.is_empty() => {
                    // Its copies are not marked: a compaction another program wrote.
                    self.activate_foreign(p.entry, p.expected);
                    self.apply(index, Entry::Message(m));
                    return;
                }
                other => {
                    self.abandon(p);
                    self.apply(index, other);
                    return;
                }
            }
        }
        self.apply(index, entry);
    }

    fn apply(&mut self, index: usize, entry: Entry) {
        match entry {
            Entry::Message(mut m) => {
                if let Some((left, by)) = &mut self.foreign {
                    if m.kept_by().is_none() {
                        m.extra
                            .insert(KEPT_BY.to_owned(), Value::String(by.clone()));
                    }
                    self.ctx.kept += 1;
                    *left -= 1;
                    if *left == 0 {
                        self.foreign = None;
                    }
                }
                self.ctx.messages.push(m);
            }
            Entry::Compaction(c) => match c.kept_messages {
                Some(n) if n > 0 => {
                    self.pending = Some(Pending {
                        index,
                        marked: c.copies_marked(),
                        entry: c,
                        expected: n,
                        copies: Vec::new(),
                    });
                }
                Some(_) => self.activate(c, Vec::new()),
                // Contract 1's minimal shape, which panto never writes: the copies that may
                // follow cannot be told from new messages.
                None => self.activate_foreign(c, u64::MAX),
            },
            Entry::Unknown(u) => self.ctx.skipped.push(Skipped::UnknownType {
                index,
                kind: u.kind,
            }),
            // Skipped before it gets here ([`Replayer::invisible`]).
            Entry::Undo(_) => {}
        }
    }

    /// Activates a compaction whose next `copies` messages are its unmarked copies.
    fn activate_foreign(&mut self, entry: CompactionEntry, copies: u64) {
        let by = entry.id.clone().unwrap_or_default();
        self.activate(entry, Vec::new());
        if copies > 0 {
            self.foreign = Some((copies, by));
        }
    }

    fn activate(&mut self, entry: CompactionEntry, copies: Vec<Message>) {
        self.foreign = None;
        self.ctx.messages.clear();
        let mut block = CompactionBlock::new(entry.summary.clone());
        // A native compaction's payload rides in the block, exact, for the adapter of its
        // protocol to send back (the summary stands in everywhere else).
        if let Some(native) = entry.extra.get_raw(NATIVE) {
            block.extra.insert_raw(NATIVE.to_owned(), native.clone());
        }
        self.ctx.messages.push(Message::new(
            Role::User,
            vec![ContentBlock::Compaction(block)],
        ));
        self.ctx.kept = copies.len();
        self.ctx.messages.extend(copies);
        self.ctx.compaction = Some(entry);
    }

    fn abandon(&mut self, p: Pending) {
        self.ctx.skipped.push(Skipped::IncompleteCompaction {
            index: p.index,
            expected: p.expected,
            found: p.copies.len() as u64,
        });
    }

    /// Ends the replay.
    pub fn finish(mut self) -> EffectiveContext {
        // Whoever wrote it, a compaction that announced copies and is followed by none is an
        // interrupted append: it said copies follow.
        if let Some(p) = self.pending.take() {
            self.abandon(p);
        }
        self.ctx
    }
}

/// Whether a message is one of the kept copies of a pending compaction.
fn belongs_to(m: &Message, c: &CompactionEntry) -> bool {
    match (&c.id, m.kept_by()) {
        (Some(id), Some(by)) => id == by,
        (None, by) => by.is_some(),
        (Some(_), None) => false,
    }
}

/// The ids of the compactions that the undo entries among `entries` (in file order) make
/// void. An undo voids only a compaction written before it: one that names a compaction coming
/// after it in `entries` is void itself (a log is appended to, so an undo cannot be of what was
/// not there yet), which is also all that a load reading backwards from the end can see.
pub fn undone<'a>(entries: impl IntoIterator<Item = &'a Entry>) -> HashSet<String> {
    let mut undone = HashSet::new();
    for entry in entries {
        match entry {
            Entry::Undo(u) => {
                undone.insert(u.undoes.clone());
            }
            Entry::Compaction(c) => {
                if let Some(id) = &c.id {
                    undone.remove(id);
                }
            }
            _ => {}
        }
    }
    undone
}

/// Replays entries into the effective context: the undos first (the compactions they make
/// void are read as if they were not there), then every entry in order.
pub fn replay(entries: impl IntoIterator<Item = Entry>) -> EffectiveContext {
    let entries: Vec<Entry> = entries.into_iter().collect();
    let mut r = Replayer::new().undoing(undone(&entries));
    for e in entries {
        r.push(e);
    }
    r.finish()
}
