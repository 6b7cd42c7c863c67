//! A fold in progress (`Fold`): the run it belongs to and where it stands, and how it plans
//! its requests. The summary strategy (`summary.rs`) runs it in passes, each a walk
//! (`walk.rs`).

use super::limits::previous_tokens;
use super::parts::Parts;
use super::run::Run;
use super::state::FoldState;
use crate::error::CompactError;
use crate::fold::{FoldPlan, fold};

/// A fold in progress: the run it belongs to, and where it stands.
pub(super) struct Fold<'r, 'a> {
    pub(super) run: &'r mut Run<'a>,
    pub(super) state: FoldState,
}

impl Fold<'_, '_> {
    /// The fold of `parts` from part `done` on, with `previous` as the first request's summary,
    /// within the state's limit and output, for requests of `fixed` tokens besides (and the
    /// parts' lead and tail).
    pub(super) fn plan(
        &self,
        parts: &Parts,
        done: usize,
        fixed: u64,
        previous: Option<&str>,
    ) -> Result<FoldPlan, CompactError> {
        let budget = self.state.budget(
            fixed + parts.allowance(),
            previous.map_or(0, previous_tokens),
        );
        fold(&parts.tokens[done..], &budget).map_err(CompactError::NoRoom)
    }
}
