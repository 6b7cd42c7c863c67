//! The driver's recall: search what its compactions summarized, fetch an item by id, and offer
//! and answer the recall tool (`crate::recall_tool`).
//!
//! The driver keeps the index of its session ([`RecallCache`]): built on the first recall,
//! brought up to date at each later one by reading only the entries appended since (its own
//! and other writers'), rebuilt when the session ends before where it stopped. Derived data:
//! the hits are those of [`Store::recall`] over the same history and effective context, only
//! sooner.

use std::sync::{Mutex, PoisonError};

use panto_model::{ContentBlock, Message, Role};
use panto_store::recall::{RecallIndex, context_fingerprints, fetch_in, recall_in};
use panto_store::{Fetched, Head, RecallQuery, Recalled, Store, StoreError, index_from};

use super::Driver;
use crate::recall_tool::{
    RECALL_TOOL, RecallAnswer, RecallCall, around_of, fetch_answer, recall_tool_spec, search_answer,
};

/// The index of a driver's session and where the history it holds ends.
#[derive(Default)]
pub(crate) struct RecallCache(Mutex<Option<(RecallIndex, Head)>>);

impl std::fmt::Debug for RecallCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let guard = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        match &*guard {
            Some((index, head)) => write!(f, "RecallCache({} items to {head:?})", index.len()),
            None => f.write_str("RecallCache(none)"),
        }
    }
}

impl RecallCache {
    fn take(&self) -> Option<(RecallIndex, Head)> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).take()
    }

    fn put(&self, index: RecallIndex, head: Head) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Some((index, head));
    }
}

impl<S: Store> Driver<S> {
    /// The index of the session, brought up to date, given to `f`.
    async fn with_index<T>(&self, f: impl FnOnce(&RecallIndex) -> T) -> Result<T, StoreError> {
        let log = self.log();
        let (store, session) = (log.store(), log.session());
        let (mut index, mut head) = self.recall_cache.take().unwrap_or_default();
        if store.head(session).await? < head {
            // The session ends before where the index stopped: another file, or another
            // session under the name. Start again.
            (index, head) = (RecallIndex::new(), Head::EMPTY);
        }
        head = match index_from(store, session, &mut index, head).await {
            Ok(end) => end,
            Err(StoreError::NotFound { .. }) if index.is_empty() => Head::EMPTY,
            Err(e) => return Err(e),
        };
        let out = f(&index);
        self.recall_cache.put(index, head);
        Ok(out)
    }

    /// Searches the session's history outside the driver's effective context for `query`
    /// ([`Store::recall`]), from the index the driver keeps.
    ///
    /// # Errors
    /// As [`Store::read`].
    pub async fn recall(&self, query: &RecallQuery) -> Result<Recalled, StoreError> {
        let exclude = context_fingerprints(self.context());
        self.with_index(|index| recall_in(index, query, &exclude))
            .await
    }

    /// The item (or the entry's items) `id` names, with the items of `context` entries around
    /// it ([`Store::fetch`]), from the index the driver keeps.
    ///
    /// # Errors
    /// [`StoreError::NotFound`] when nothing has that id; as [`Store::read`].
    pub async fn fetch(&self, id: &str, context: usize) -> Result<Fetched, StoreError> {
        let found = self
            .with_index(|index| fetch_in(index.items(), id, context))
            .await?;
        found.ok_or_else(|| {
            let session = self.log().session();
            StoreError::not_found(
                session,
                format!("session {session} has no item or entry {id}"),
            )
        })
    }

    /// Offers the model the recall tool ([`crate::recall_tool_spec`], after the tools already
    /// set), and makes every summary this driver's compactions write end with a note naming it.
    /// Answer its calls with [`Driver::answer_recall`].
    #[must_use]
    pub fn with_recall_tool(mut self) -> Driver<S> {
        if !self.tools.iter().any(|t| t.name == RECALL_TOOL) {
            self.tools.push(recall_tool_spec());
        }
        let config = self.compactor.config().with_recall_tool(true);
        self.compactor = self.compactor.with_config(config);
        self
    }

    /// Answers the recall tool's calls in `reply` (an assistant message), in order: each call's
    /// id with the answer. Calls of other tools are left to the agent.
    pub async fn answer_recall(&self, reply: &Message) -> Vec<(String, RecallAnswer)> {
        let mut out = Vec::new();
        if reply.role != Role::Assistant {
            return out;
        }
        for block in &reply.content {
            if let ContentBlock::ToolUse(call) = block
                && call.name.as_str() == RECALL_TOOL
            {
                let answer = match RecallCall::parse(&call.input) {
                    Err(answer) => answer,
                    Ok(RecallCall::Fetch(id)) => {
                        match self.fetch(&id, RecallCall::NEIGHBOURS).await {
                            Ok(fetched) => fetch_answer(&id, &fetched),
                            Err(e) => RecallAnswer::error(e.to_string()),
                        }
                    }
                    Ok(RecallCall::Search(query)) => match self.recall(&query).await {
                        Ok(found) => {
                            let mut around = Vec::with_capacity(found.hits.len());
                            for hit in &found.hits {
                                let (id, context) = around_of(hit);
                                around.push(self.fetch(&id, context).await.unwrap_or_default());
                            }
                            search_answer(&query.text, &found, &around)
                        }
                        Err(e) => RecallAnswer::error(e.to_string()),
                    },
                };
                out.push((call.id.clone(), answer));
            }
        }
        out
    }
}
