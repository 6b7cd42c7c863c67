//! The driver's recall: search what its compactions summarized, fetch an item by id, and offer
//! and answer the recall tool (`crate::recall_tool`).

use panto_model::{ContentBlock, Message, Role};
use panto_store::{Fetched, RecallQuery, Recalled, Store, StoreError};

use super::Driver;
use crate::recall_tool::{RECALL_TOOL, RecallAnswer, answer_recall, recall_tool_spec};

impl<S: Store> Driver<S> {
    /// Searches the session's history outside the effective context for `query`
    /// ([`Store::recall`]).
    ///
    /// # Errors
    /// As [`Store::recall`].
    pub async fn recall(&self, query: &RecallQuery) -> Result<Recalled, StoreError> {
        let log = self.log();
        log.store().recall(log.session(), query).await
    }

    /// The item (or the entry's items) `id` names, with the items of `context` entries around
    /// it ([`Store::fetch`]).
    ///
    /// # Errors
    /// As [`Store::fetch`].
    pub async fn fetch(&self, id: &str, context: usize) -> Result<Fetched, StoreError> {
        let log = self.log();
        log.store().fetch(log.session(), id, context).await
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
        let log = self.log();
        for block in &reply.content {
            if let ContentBlock::ToolUse(call) = block
                && call.name.as_str() == RECALL_TOOL
            {
                let answer = answer_recall(log.store(), log.session(), &call.input).await;
                out.push((call.id.clone(), answer));
            }
        }
        out
    }
}
