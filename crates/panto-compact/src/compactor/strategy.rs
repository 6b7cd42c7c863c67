//! The seam between a compaction run and the ways of writing its summary: the one dispatch
//! point ([`CompactionStrategy::produce`]).
//!
//! A strategy takes the run (`Run`: the compactor's models and events, the context, the run
//! as asked, the window as the run knows it, what it learns) and the plan (`Prepared`), and
//! produces the compaction to append (`Compacted`: the entry and the kept copies, the report),
//! through the shared writing (`Run::build`, `write.rs`), which every strategy uses so that
//! replay stays one function. Per-run state lives in the `Run` and in the strategy's own
//! values, never on the `Compactor`. A strategy may fall back to another by calling its
//! `produce` (native falls back to the summary).
//!
//! Adding a strategy (docs/architecture.md, "Adding a strategy"): a file in this folder with
//! `async fn produce(run: &mut Run<'_>, prepared: Prepared) -> Result<Compacted, CompactError>`,
//! a variant of `CompactionStrategy` with its entry in `CompactionStrategy::ALL` (its name and
//! help, which the CLI's flag, configuration and errors list), and one arm here.

use super::run::Run;
use super::{Prepared, clear, native, summary, tiered};
use crate::config::CompactionStrategy;
use crate::error::CompactError;
use crate::report::Compacted;

impl CompactionStrategy {
    /// The compaction of `prepared` by this strategy, ready to be appended.
    ///
    /// # Errors
    /// The strategy's: no summary obtained, or (panto's summary) a compaction that would not
    /// make the conversation smaller.
    pub(super) async fn produce(
        self,
        run: &mut Run<'_>,
        prepared: Prepared,
    ) -> Result<Compacted, CompactError> {
        // Boxed: a strategy's future holds its fold's state across every request, and the
        // driver's send awaits it inside its own.
        match self {
            CompactionStrategy::Summary => Box::pin(summary::produce(run, prepared)).await,
            CompactionStrategy::Native => Box::pin(native::produce(run, prepared)).await,
            CompactionStrategy::Clear => Box::pin(clear::produce(run, prepared)).await,
            CompactionStrategy::Tiered => Box::pin(tiered::produce(run, prepared)).await,
        }
    }
}
