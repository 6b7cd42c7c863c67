//! Undo: the effective context before the latest compaction or clearing made current again by
//! appending one undo entry (docs/session.md, "Undo"); nothing is rewritten.
//!
//! [`undo`] names the compaction that leads the context it is given, appends the undo
//! conditionally (another writer's entries are a conflict, nothing written), and reads the
//! session again, since the context before a compaction is history the context no longer holds.
//! Undoing twice names the compaction that the first undo made active again. No model is asked,
//! so the `panto` binary undoes without a provider.

use panto_model::{EffectiveContext, Entry, IdKind, IdSource, UndoEntry};
use panto_size::estimate;
use panto_store::{SessionLog, Store};

use crate::error::CompactError;

/// What an undo did.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Undone {
    /// The id of the undo entry appended.
    pub id: String,
    /// The id of the compaction entry it made void.
    pub undid: String,
    /// How that compaction was written: `None` for panto's summary, else its `strategy`
    /// (`"clear"`, `"native"`).
    pub strategy: Option<String>,
    /// The conversation's size before the undo, by the ruler (`panto_size::estimate`): the
    /// summary and the messages.
    pub tokens_before: u64,
    /// The conversation's size after it, measured the same way.
    pub tokens_after: u64,
    /// The effective context after the undo, as the store loads it.
    pub context: EffectiveContext,
}

/// Makes the effective context before the compaction (or clearing) that leads `context`
/// current again: appends an undo entry naming it to `log` (its id from `ids`), conditionally
/// on the session still ending where `log` last saw it, and loads the session again. `context`
/// must be the replay of `log` at its head. Undoing again goes one step further back.
/// [`Driver::undo`](crate::Driver::undo) calls it with its own context and log.
///
/// # Errors
/// [`CompactError::NothingToUndo`] when no compaction leads the context, or the one that
/// does cannot be undone (it has no id, or another program wrote it and its copies are not
/// marked, so they could not be told from later messages); [`CompactError::Store`] when the
/// append or the load failed (a conflict when another writer appended since `log` last saw the
/// session: nothing was written).
pub async fn undo<S: Store>(
    context: &EffectiveContext,
    log: &mut SessionLog<S>,
    ids: &dyn IdSource,
) -> Result<Undone, CompactError> {
    let active = context.compaction.as_ref().ok_or_else(|| {
        CompactError::NothingToUndo(
            "no compaction or clearing is in effect: the conversation is as it was written"
                .to_owned(),
        )
    })?;
    let Some(undid) = active.id.clone() else {
        return Err(CompactError::NothingToUndo(
            "the compaction in effect has no id to name".to_owned(),
        ));
    };
    if active.kept_messages.unwrap_or(u64::MAX) > 0 && !active.copies_marked() {
        return Err(CompactError::NothingToUndo(format!(
            "the compaction in effect ({undid}) was written by another program, which did not mark its kept copies, so they cannot be told from later messages"
        )));
    }
    let tokens_before = estimate("", "", &context.messages).conversation();
    let id = ids.next_id(IdKind::Undo);
    let entry = Entry::Undo(UndoEntry::new(undid.clone()).with_id(id.clone()));
    log.append(&[entry]).await.map_err(CompactError::Store)?;
    let loaded = log.reload().await.map_err(CompactError::Store)?;
    let tokens_after = estimate("", "", &loaded.context.messages).conversation();
    Ok(Undone {
        id,
        undid,
        strategy: active.strategy().map(str::to_owned),
        tokens_before,
        tokens_after,
        context: loaded.context,
    })
}
