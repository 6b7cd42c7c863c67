//! Segmentation partitions the messages and never separates a call from its result.

use std::collections::HashMap;

use panto_model::arbitrary::session;
use panto_model::{Message, turns};
use proptest::prelude::*;

/// Checks the two invariants on any message sequence, valid or not.
fn check_invariants(messages: &[Message]) -> Result<(), TestCaseError> {
    let ts = turns(messages);
    // Partition: consecutive, non-empty, covering everything.
    let mut next = 0;
    for t in &ts {
        prop_assert_eq!(t.start, next);
        prop_assert!(t.end > t.start);
        next = t.end;
    }
    prop_assert_eq!(next, messages.len());
    // Pairing: each result is in the turn of the latest earlier call with its id.
    let turn_of: Vec<usize> = ts
        .iter()
        .enumerate()
        .flat_map(|(k, t)| t.clone().map(move |_| k))
        .collect();
    let mut latest: HashMap<&str, usize> = HashMap::new();
    for (j, m) in messages.iter().enumerate() {
        for id in m.tool_result_ids() {
            if let Some(&k) = latest.get(id) {
                prop_assert_eq!(turn_of[k], turn_of[j], "call {} split from its result", id);
            }
        }
        for id in m.tool_use_ids() {
            latest.insert(id, j);
        }
    }
    Ok(())
}

proptest! {
    #[test]
    fn turns_are_the_turns_the_session_was_built_from(s in session(6)) {
        prop_assert_eq!(turns(&s.messages), s.turns.clone());
        check_invariants(&s.messages)?;
    }

    #[test]
    fn invariants_hold_on_shuffled_messages(
        s in session(5),
        swaps in prop::collection::vec((any::<prop::sample::Index>(), any::<prop::sample::Index>()), 0..10),
    ) {
        let mut messages = s.messages;
        for (a, b) in swaps {
            let (a, b) = (a.index(messages.len()), b.index(messages.len()));
            messages.swap(a, b);
        }
        check_invariants(&messages)?;
    }

    #[test]
    fn every_turn_boundary_is_needed(s in session(5)) {
        // Minimality: merging is never required, so each turn starts at an allowed cut and no
        // allowed cut lies strictly inside a turn.
        let allowed = panto_model::allowed_cuts(&s.messages);
        for t in turns(&s.messages) {
            prop_assert!(allowed[t.start]);
            for inside in &allowed[t.start + 1..t.end] {
                prop_assert!(!inside);
            }
        }
    }
}
