//! Writing a compaction when other writers share the session: one that lost its append to
//! another writer's prompt or tool results is written after them, with copies of them among
//! the kept turns, so the summary a model wrote is not thrown away and writers that take turns
//! on one session do not ask for one summary after another (issue 39).
//!
//! Only messages that leave the conversation awaiting a reply are taken in: a reply another
//! writer appended answered the turn (the caller learns so from the conflict and a reload),
//! and a compaction another writer appended replaced the context this one summarized.

use panto_model::{COPIES_MARKED, Entry, IdKind, KEPT_BY, Message, Role, replay};
use panto_store::{Record, SessionLog, Store, StoreError};
use serde_json::Value;

use super::Compactor;
use crate::report::Compacted;

/// How many times one compaction is written after other writers' messages before its append
/// gives up with the conflict: each try reads what they appended and appends once more.
pub const MAX_REBASES: usize = 3;

/// The entry field that counts the messages another writer appended while the summary was
/// written, kept after it.
pub const REBASED_FIELD: &str = "rebased";

impl Compactor {
    /// Appends `compacted` to `log` in one conditional append. When another writer appended
    /// meanwhile, and only messages that leave the conversation awaiting a reply, appends it
    /// after them instead, with copies of them after the kept turns (at most
    /// [`MAX_REBASES`] times); `compacted` is then the compaction as written.
    ///
    /// # Errors
    /// As [`SessionLog::append`]: a conflict when another writer's entries cannot be taken in
    /// (a reply, a compaction) or kept coming; nothing of the compaction is written then.
    pub(super) async fn write<S: Store>(
        &self,
        log: &mut SessionLog<S>,
        compacted: &mut Compacted,
    ) -> Result<(), StoreError> {
        let mut conflict = match log.append(&compacted.entries).await {
            Ok(()) => return Ok(()),
            Err(e @ StoreError::Conflict { .. }) => e,
            Err(e) => return Err(e),
        };
        for _ in 0..MAX_REBASES {
            let Ok(page) = log.appended_since().await else {
                return Err(conflict);
            };
            let Some(theirs) = to_keep(&page.records) else {
                return Err(conflict);
            };
            let rebased = self.rebase(compacted, theirs);
            match log.append_after(page.next, &rebased.entries).await {
                Ok(()) => {
                    tracing::info!(
                        messages = page.records.len(),
                        "another writer appended while the summary was written; the compaction went after its messages"
                    );
                    *compacted = rebased;
                    return Ok(());
                }
                Err(e @ StoreError::Conflict { .. }) => conflict = e,
                Err(e) => return Err(e),
            }
        }
        Err(conflict)
    }

    /// `compacted` with copies of `theirs` after its kept turns, its counts and sizes grown by
    /// them.
    fn rebase(&self, compacted: &Compacted, theirs: Vec<Message>) -> Compacted {
        let mut rebased = compacted.clone();
        let added: u64 = self
            .message_sizes(&theirs)
            .iter()
            .fold(0u64, |t, &s| t.saturating_add(s));
        let report = &mut rebased.report;
        report.tokens_before = report.tokens_before.saturating_add(added);
        report.tokens_after = report.tokens_after.saturating_add(added);
        report.rebased = theirs.len();
        let id = report.id.clone();
        if let Some(Entry::Compaction(entry)) = rebased.entries.first_mut() {
            entry.tokens_before = Some(report.tokens_before);
            entry.tokens_after = Some(report.tokens_after);
            let kept = entry.kept_messages.unwrap_or(0);
            entry.kept_messages = Some(kept + theirs.len() as u64);
            entry.extra.insert(COPIES_MARKED.into(), true.into());
            entry
                .extra
                .insert(REBASED_FIELD.into(), (theirs.len() as u64).into());
        }
        rebased.entries.extend(theirs.into_iter().map(|mut copy| {
            copy.id = Some(self.next_id(IdKind::Message).into());
            copy.extra
                .insert(KEPT_BY.to_owned(), Value::from(id.as_str()));
            Entry::Message(copy)
        }));
        rebased.context = replay(rebased.entries.iter().cloned());
        rebased
    }
}

/// The messages of `records` when each is a message of the conversation itself (not a
/// compaction, nor a copy one made) and the last leaves it awaiting a reply; `None` otherwise.
fn to_keep(records: &[Record]) -> Option<Vec<Message>> {
    let mut messages = Vec::with_capacity(records.len());
    for (i, record) in records.iter().enumerate() {
        match record.decode(i + 1).ok()? {
            Entry::Message(m) if m.kept_by().is_none() && m.compaction_summary().is_none() => {
                messages.push(m);
            }
            _ => return None,
        }
    }
    (messages.last()?.role == Role::User).then_some(messages)
}
