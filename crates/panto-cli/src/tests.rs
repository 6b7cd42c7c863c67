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
        steps: Vec::new(),
        requests: 1,
        elided: Vec::new(),
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

#[test]
fn a_fold_of_several_steps_is_announced_and_a_single_request_is_not() {
    let folding = |steps| CompactionEvent::Folding {
        steps,
        limit: Some(4_000),
        transcript_tokens: 9_000,
    };
    assert_eq!(
        describe_event(&folding(4)),
        "panto: compacting in 4 steps: about 9000 tokens of conversation to summarize, about 4000 tokens per request"
    );
    assert_eq!(describe_event(&folding(1)), "");
    let shrink = CompactionEvent::Shrinking {
        step: 2,
        limit: 3_000,
        steps: 5,
        cause: "prompt is too long".into(),
    };
    assert_eq!(
        describe_event(&shrink),
        "panto: step 2 was too large for the model (prompt is too long); retrying with requests of about 3000 tokens, 5 steps in all"
    );
}
