//! Loading the effective context by reading backwards from the end of the file to the latest
//! complete compaction entry.
//!
//! Correctness argument: replay (`panto_model::Replayer`) resets everything when a compaction
//! takes effect, and a compaction entry at position p takes effect in a full replay exactly
//! when the entries after it contain its kept copies and no undo entry names it (whatever came
//! before p: a compaction pending before p is abandoned when p arrives). An undo entry comes
//! after the compaction it makes void, so reading backwards meets it first. So replaying from the latest compaction that
//! takes effect gives the same messages, compaction and kept count as replaying the whole file.
//! Whether a candidate takes effect is decided by running the same `Replayer` over it and the
//! entries that follow, never by a second implementation of the rule.

use std::fs::File;
use std::path::Path;

use panto_model::{DecodeError, EffectiveContext, Entry, Message, Replayer, Skipped, undone};

use crate::error::{Result, SessionError};
use crate::lines::{
    After, BackLines, Line, NewlinesAfter, Run, Verdict, classify, count_newlines, has_bom, judge,
};
use panto_store::{Head, Loaded, Warning, WarningKind};

/// How much of the file a load read: the measure that backwards loading keeps small.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LoadStats {
    /// Length of the file when the load started (appends after that are not seen).
    pub file_len: u64,
    /// Bytes read from the file.
    pub bytes_read: u64,
    /// Byte offset where replay started (the active compaction entry, or 0).
    pub replay_from: u64,
    /// Entries replayed.
    pub entries: usize,
}

/// A warning whose line number is known only relative to the end of the file.
struct Pending {
    offset: u64,
    /// Newlines at or after `offset`.
    nl_from: u64,
    kind: WarningKind,
}

/// The length of the session file at `path`, opened as `file`, for a reader: an empty file is
/// [`SessionError::Empty`].
pub(crate) fn readable_len(path: &Path, file: &File) -> Result<u64> {
    let len = file
        .metadata()
        .map_err(|e| SessionError::io(path, "read the metadata of", e))?
        .len();
    if len == 0 {
        return Err(SessionError::Empty {
            path: path.to_path_buf(),
        });
    }
    Ok(len)
}

/// Loads the effective context of the file at `path`, opened as `file`, and says how much it
/// read. The [`Loaded`]'s head is the file's length when the load started; its warnings name
/// the file and the line (its number when the load read back to the start of the file).
/// The context's `skipped` indices count entries from the first replayed entry (the active
/// compaction), not from the start of the file; the warnings carry the same events with file
/// positions.
pub(crate) fn load(path: &Path, file: &File, chunk: usize) -> Result<(Loaded, LoadStats)> {
    let len = readable_len(path, file)?;
    let io = |e| SessionError::io(path, "read", e);
    let mut back = BackLines::new(file, len, chunk);
    let mut pending = Vec::new();

    // Entries in reverse file order, with (start offset, newlines at or after it).
    let mut entries = Collected::default();
    let mut after = After::Nothing;
    let mut run: Option<Run<NewlinesAfter>> = None;
    let mut newlines = 0u64;
    let mut reached_start = true;
    // Whether any segment holds more than whitespace (a file of blank lines is empty).
    let mut content = false;
    // The first segment is the tail: the bytes after the last newline.
    let mut is_tail = true;
    while let Some(seg) = back.prev().map_err(io)? {
        let tail = std::mem::replace(&mut is_tail, false);
        if tail && seg.hi == seg.lo {
            continue;
        }
        if !tail {
            newlines += 1;
        }
        let bytes = &back.bytes()[seg.lo..seg.hi];
        if has_bom(bytes, seg.start) {
            pending.push(Pending {
                offset: 0,
                nl_from: newlines,
                kind: WarningKind::ByteOrderMark,
            });
        }
        let line_end = seg.start + (seg.hi - seg.lo) as u64;
        let line = classify(bytes, seg.start);
        content |= !line.is_blank();
        match line {
            Line::Blank => {}
            Line::Bad { error, cr_only, .. } if tail => {
                if cr_only {
                    return Err(malformed(path, file, seg.start, error)?);
                }
                // A tail that is not a whole entry: kept, reported, never parsed.
                pending.push(Pending {
                    offset: seg.start,
                    nl_from: 0,
                    kind: WarningKind::TornTail {
                        len: (seg.hi - seg.lo) as u64,
                    },
                });
            }
            Line::Bad { error, torn, .. } => match &mut run {
                Some(r) => {
                    r.start = seg.start;
                    r.error = error;
                    r.first = NewlinesAfter(newlines);
                    r.all_torn &= torn;
                }
                None => {
                    run = Some(Run {
                        start: seg.start,
                        end: line_end,
                        error,
                        first: NewlinesAfter(newlines),
                        all_torn: torn,
                    });
                }
            },
            Line::Marker { covers_from } => {
                close_run(path, file, run.take(), after, &mut pending)?;
                after = After::Marker(covers_from);
            }
            Line::Entry { entry, replaced } => {
                close_run(path, file, run.take(), after, &mut pending)?;
                after = After::Entry;
                if replaced {
                    pending.push(Pending {
                        offset: seg.start,
                        nl_from: newlines,
                        kind: WarningKind::LoneSurrogate,
                    });
                }
                let candidate = matches!(entry, Entry::Compaction(_));
                entries.push(entry, seg.start, newlines);
                if candidate && takes_effect(&entries) {
                    reached_start = false;
                    break;
                }
            }
        }
    }
    if reached_start {
        close_run(path, file, run.take(), after, &mut pending)?;
        if !content {
            return Err(SessionError::Empty {
                path: path.to_path_buf(),
            });
        }
    }

    let replay_from = entries.slots.last().map_or(len, |s| s.start);
    let context = entries.replay();
    for skipped in &context.skipped {
        let (index, kind) = match skipped {
            Skipped::UnknownType { index, kind } => {
                (*index, WarningKind::UnknownType { kind: kind.clone() })
            }
            Skipped::IncompleteCompaction {
                index,
                expected,
                found,
            } => (
                *index,
                WarningKind::IncompleteCompaction {
                    expected: *expected,
                    found: *found,
                },
            ),
            // A kind added to panto-model later: reported by the context itself.
            _ => continue,
        };
        if let Some((offset, nl_from)) = entries.position(index) {
            pending.push(Pending {
                offset,
                nl_from,
                kind,
            });
        }
    }

    pending.sort_by_key(|p| p.offset);
    let warnings = pending
        .into_iter()
        .map(|p| {
            // With the whole file read, `newlines` is the file's newline count.
            let line = reached_start.then(|| (newlines - p.nl_from + 1) as usize);
            Warning::at_line(path.display().to_string(), p.offset, line, p.kind)
        })
        .collect();
    let stats = LoadStats {
        file_len: len,
        bytes_read: back.bytes_read,
        replay_from: if reached_start { 0 } else { replay_from },
        entries: entries.slots.len(),
    };
    Ok((Loaded::new(context, Head::new(len), warnings), stats))
}

/// Whether the compaction at the end of `entries` (reverse file order) takes effect: no undo
/// entry read so far (all of them come after it) names it, and the same `Replayer` run over it
/// and the entries after it, until it has seen as many entries as copies announced (unknown
/// and undo entries aside), does not report it incomplete.
fn takes_effect(entries: &Collected) -> bool {
    if entries.slots.last().is_none_or(|s| s.message) {
        return false;
    }
    let Some(Entry::Compaction(c)) = entries.others.last() else {
        return false;
    };
    let undone = undone(entries.others.iter().rev());
    if c.id.as_ref().is_some_and(|id| undone.contains(id)) {
        return false;
    }
    let need = c.kept_messages.unwrap_or(0);
    let mut replayer = Replayer::new().undoing(undone);
    replayer.push(Entry::Compaction(c.clone()));
    let mut seen = 0u64;
    for entry in entries.after_earliest() {
        if seen >= need {
            break;
        }
        if !matches!(entry, Entry::Unknown(_) | Entry::Undo(_)) {
            seen += 1;
        }
        replayer.push(entry);
    }
    !replayer
        .finish()
        .skipped
        .iter()
        .any(|s| matches!(s, Skipped::IncompleteCompaction { index: 0, .. }))
}

/// The entries read so far, in reverse file order. The messages are kept in a vector of their
/// own, so that a context read without a compaction (the long one that needs compacting) is
/// that vector itself, reversed in place: no second copy of every message is built, moved and
/// paged in, as replaying entries into a new vector would.
#[derive(Default)]
struct Collected {
    /// The message entries, in reverse file order.
    messages: Vec<Message>,
    /// The other entries, in reverse file order.
    others: Vec<Entry>,
    /// Every entry, in reverse file order.
    slots: Vec<Slot>,
}

/// Where an entry of [`Collected`] is and what it is.
struct Slot {
    /// Its start offset.
    start: u64,
    /// Newlines at or after it.
    nl_from: u64,
    /// Whether it is in `messages` (else in `others`).
    message: bool,
}

impl Collected {
    fn push(&mut self, entry: Entry, start: u64, nl_from: u64) {
        let message = match entry {
            Entry::Message(m) => {
                self.messages.push(m);
                true
            }
            other => {
                self.others.push(other);
                false
            }
        };
        self.slots.push(Slot {
            start,
            nl_from,
            message,
        });
    }

    /// Copies of the entries after the earliest one read, in file order; the earliest is one of
    /// `others` (a candidate compaction, see [`takes_effect`]).
    fn after_earliest(&self) -> impl Iterator<Item = Entry> + '_ {
        let (mut m, mut o) = (self.messages.len(), self.others.len().saturating_sub(1));
        self.slots.iter().rev().skip(1).map(move |s| {
            if s.message {
                m -= 1;
                Entry::Message(self.messages[m].clone())
            } else {
                o -= 1;
                self.others[o].clone()
            }
        })
    }

    /// Replays the entries in file order. Without other entries (a history never compacted,
    /// the long one that needs compacting) the messages read backwards are reversed in place
    /// and handed to the replayer whole ([`Replayer::push_messages`]). The entries are taken;
    /// their slots stay, for [`Collected::position`].
    fn replay(&mut self) -> EffectiveContext {
        // Undo entries are among the others, read before the compactions they make void.
        let mut replayer = Replayer::new().undoing(undone(self.others.iter().rev()));
        let mut messages = std::mem::take(&mut self.messages);
        if self.others.is_empty() {
            messages.reverse();
            replayer.push_messages(messages);
            return replayer.finish();
        }
        let mut messages = messages.into_iter().rev();
        let mut others = std::mem::take(&mut self.others).into_iter().rev();
        for slot in self.slots.iter().rev() {
            let entry = if slot.message {
                messages.next().map(Entry::Message)
            } else {
                others.next()
            };
            if let Some(entry) = entry {
                replayer.push(entry);
            }
        }
        replayer.finish()
    }

    /// The (start offset, newlines at or after it) of the replayed entry at `index` in file
    /// order.
    fn position(&self, index: usize) -> Option<(u64, u64)> {
        let slot = self.slots.get(self.slots.len().checked_sub(index + 1)?)?;
        Some((slot.start, slot.nl_from))
    }
}

/// Applies the run rule to a finished run: a warning, or the error of its first line with the
/// true line number (counted from the start of the file, on this error path only).
fn close_run(
    path: &Path,
    file: &File,
    run: Option<Run<NewlinesAfter>>,
    after: After,
    pending: &mut Vec<Pending>,
) -> Result<()> {
    let Some(run) = run else { return Ok(()) };
    match judge(&run, after) {
        Verdict::Skip { acknowledged } => {
            pending.push(Pending {
                offset: run.start,
                nl_from: run.first.0,
                kind: WarningKind::Debris {
                    len: run.end - run.start,
                    acknowledged,
                },
            });
            Ok(())
        }
        Verdict::Fail => Err(malformed(path, file, run.start, run.error)?),
    }
}

/// The error of the bad line that starts at `start`, with its true line number (counted from
/// the start of the file, on this error path only).
pub(crate) fn malformed(
    path: &Path,
    file: &File,
    start: u64,
    mut source: DecodeError,
) -> Result<SessionError> {
    let before = count_newlines(file, start).map_err(|e| SessionError::io(path, "read", e))?;
    source.line = before as usize + 1;
    Ok(SessionError::Malformed {
        path: path.to_path_buf(),
        source,
    })
}
