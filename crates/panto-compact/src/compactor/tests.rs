//! Tests of what the compactor sizes once and reuses.

use std::sync::Arc;

use panto_model::arbitrary::session;
use panto_model::{EffectiveContext, Message, Trigger};
use panto_size::{Measured, Sizer, estimate};
use proptest::prelude::*;

use super::{Compactor, kept_copies, kept_estimate};
use crate::config::{CompactRun, ModelRef};
use crate::testing::ScriptedProvider;

proptest! {
    /// The kept turns are sized once, in `prepare`; the size of the context after the
    /// compaction, made from that and the summary's size, is exactly the ruler's estimate of
    /// the compaction message followed by the copies, whatever usage the originals carry.
    #[test]
    fn the_kept_turns_sized_once_give_the_ruler_s_estimate_of_the_context_after(
        s in session(6),
        summaries in prop::collection::vec("[a-z \n]{0,300}", 1..4),
        keep in 0u64..4_000,
    ) {
        let context = EffectiveContext::new(s.messages);
        let compactor = Compactor::new(ModelRef::new(Arc::new(ScriptedProvider::new("m")), "m"));
        let run = CompactRun {
            trigger: Trigger::Manual,
            keep_tokens: Some(keep),
            ..CompactRun::manual(None)
        };
        let Ok(prepared) = compactor.prepare(&context, &run) else {
            return Ok(());
        };
        for summary in summaries {
            let mut after = vec![Message::compaction(summary.as_str())];
            after.extend(kept_copies(&context.messages[prepared.plan.kept()]));
            prop_assert_eq!(
                kept_estimate(&prepared, &summary),
                estimate("", "", &after).total()
            );
        }
    }
}

/// A sizer of its own: every message costs 100.
struct Hundred;

impl Sizer for Hundred {
    fn message_sizes(&self, messages: &[Message]) -> Vec<u64> {
        vec![100; messages.len()]
    }
}

proptest! {
    /// Sizes handed over by a caller that measured the context with the ruler plan exactly as
    /// the compactor's own sizing does; a compactor with a sizer of its own ignores them.
    #[test]
    fn handed_sizes_plan_as_the_compactor_s_own(s in session(6), keep in 0u64..4_000) {
        let context = EffectiveContext::new(s.messages);
        let model = || ModelRef::new(Arc::new(ScriptedProvider::new("m")), "m");
        let run = CompactRun {
            keep_tokens: Some(keep),
            ..CompactRun::overflow(Some(8_000))
        };
        let measured = Measured::new(&context.messages);
        let handed = run.clone().with_sizes(measured.sizes().into());
        let ruler = Compactor::new(model());
        prop_assert_eq!(ruler.prepare(&context, &handed), ruler.prepare(&context, &run));
        let own = Compactor::new(model()).with_sizer(Hundred);
        let wrong = run.clone().with_sizes(vec![1; context.messages.len()].into());
        prop_assert_eq!(own.prepare(&context, &wrong), own.prepare(&context, &run));
    }
}
