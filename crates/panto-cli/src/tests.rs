//! Unit tests of the binary's pure parts: the progress lines printed for compaction events.

use panto_compact::{CompactionEvent, CompactionReport, Plan};
use panto_model::Trigger;

use crate::ui::describe_event;

fn report(before: u64, after: u64, truncated: bool) -> CompactionEvent {
    CompactionEvent::Finished(Box::new(CompactionReport {
        id: "c1".into(),
        summary: "s".into(),
        trigger: Trigger::Manual,
        model: "m".into(),
        provider: "p".into(),
        fallback: false,
        fallback_cause: None,
        instructions: None,
        truncated,
        tokens_before: before,
        tokens_after: after,
        plan: Plan {
            head: 0,
            keep_from: 4,
            end: 6,
            summarized_turns: 3,
            kept_turns: 2,
            summarized_tokens: 900,
            kept_tokens: 100,
            budget: 200,
        },
    }))
}

#[test]
fn a_compaction_line_says_before_and_after() {
    assert_eq!(
        describe_event(&report(1000, 300, false)),
        "panto: compacted with m: about 1000 -> 300 tokens (3 turns summarized, 2 kept)"
    );
}

#[test]
fn a_compaction_that_saved_nothing_says_so() {
    assert!(describe_event(&report(117, 307, false)).ends_with("so this compaction saved nothing"));
    assert!(describe_event(&report(1000, 300, true)).ends_with("may be cut short"));
}
