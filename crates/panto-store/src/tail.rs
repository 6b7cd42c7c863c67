//! Helpers for a store's load: whether a compaction takes effect, and the replay of the
//! entries from the one that does, so that a database store loads in O(tail) as the JSONL
//! store does.

use panto_model::{Entry, Replayer, Skipped, replay, undone};

use crate::head::Head;
use crate::store::Loaded;
use crate::warning::{Warning, WarningKind};

/// Whether the compaction `entries[0]` takes effect, given every entry after it: replay
/// honours it unless its marked copies are not all there, or an undo entry after it makes it
/// void (a clearing is a compaction entry, so the same holds of it). `false` when `entries[0]`
/// is not a compaction.
pub fn takes_effect(entries: &[Entry]) -> bool {
    let Some(Entry::Compaction(c)) = entries.first() else {
        return false;
    };
    let undone = undone(&entries[1..]);
    if c.id.as_ref().is_some_and(|id| undone.contains(id)) {
        return false;
    }
    let need = c.kept_messages.unwrap_or(0);
    let mut replayer = Replayer::new().undoing(undone);
    replayer.push(entries[0].clone());
    let mut seen = 0u64;
    for entry in &entries[1..] {
        if seen >= need {
            break;
        }
        if !matches!(entry, Entry::Unknown(_) | Entry::Undo(_)) {
            seen += 1;
        }
        replayer.push(entry.clone());
    }
    !replayer
        .finish()
        .skipped
        .iter()
        .any(|s| matches!(s, Skipped::IncompleteCompaction { index: 0, .. }))
}

/// The [`Loaded`] of a session whose entries from the latest compaction that takes effect (or
/// from the first entry) are `entries`, with `head` where it ends. `first` is the number of
/// entries before `entries[0]` in the session, for the warnings, which name each skipped entry
/// by its 1-based number in the session.
pub fn replay_tail(entries: Vec<Entry>, head: Head, name: &str, first: u64) -> Loaded {
    let context = replay(entries);
    let entry = |index: &usize| first + *index as u64 + 1;
    let warnings = context
        .skipped
        .iter()
        .filter_map(|s| match s {
            Skipped::UnknownType { index, kind } => Some(Warning::at_entry(
                name,
                entry(index),
                WarningKind::UnknownType { kind: kind.clone() },
            )),
            Skipped::IncompleteCompaction {
                index,
                expected,
                found,
            } => Some(Warning::at_entry(
                name,
                entry(index),
                WarningKind::IncompleteCompaction {
                    expected: *expected,
                    found: *found,
                },
            )),
            _ => None,
        })
        .collect();
    Loaded::new(context, head, warnings)
}
