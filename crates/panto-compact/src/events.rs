//! Progress events of a compaction, for people building a UI or logs on the crate.

use panto_model::Trigger;

use crate::compactor::CompactionReport;
use crate::error::AttemptFailure;
use crate::plan::Plan;

/// What a [`crate::Compactor`] reports while it works, through the callback given to
/// [`crate::Compactor::on_event`].
///
/// A compaction that has something to do reports `Started`, then at most one `FallingBack`,
/// then exactly one of `Finished` or `Failed`. One with nothing to compact reports nothing.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum CompactionEvent {
    /// The plan is made and the first model is about to be asked.
    Started {
        /// What started the compaction.
        trigger: Trigger,
        /// The model asked first (`compaction_model` when configured, else the active one).
        model: String,
        /// The retention plan: turns and tokens summarized and kept.
        plan: Plan,
        /// Estimated tokens of the context before compaction.
        tokens_before: u64,
    },
    /// The compaction model failed; the active model is asked once instead.
    FallingBack {
        /// The compaction model that failed.
        failed_model: String,
        /// Why it failed.
        cause: AttemptFailure,
        /// The active model, asked now.
        model: String,
    },
    /// The summary is written (or, for a dry run, ready).
    Finished(Box<CompactionReport>),
    /// The compaction failed; nothing was written.
    Failed {
        /// What started the compaction.
        trigger: Trigger,
        /// Whether the fallback to the active model ran (and failed too).
        fallback: bool,
        /// The retention plan that was being carried out.
        plan: Plan,
        /// Estimated tokens of the context, unchanged.
        tokens_before: u64,
        /// What went wrong, as the returned error displays it.
        error: String,
    },
}
