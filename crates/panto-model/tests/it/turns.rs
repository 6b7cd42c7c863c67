//! Segmentation partitions the messages and never separates a call from its result.

use std::collections::HashMap;

use panto_model::arbitrary::session;
use panto_model::{ContentBlock, Message, Role, allowed_cuts, turns};
use proptest::prelude::*;
use serde_json::json;

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
        prop_assert_eq!(turns(&s.messages), s.turns);
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
        let allowed = allowed_cuts(&s.messages);
        for t in turns(&s.messages) {
            prop_assert!(allowed[t.start]);
            for inside in &allowed[t.start + 1..t.end] {
                prop_assert!(!inside);
            }
        }
    }
}

/// The cut rule, computed the plain way: a map from each id to its latest call, every result
/// extending the reach of the call it answers.
fn reference_cuts(messages: &[Message]) -> Vec<bool> {
    let mut reach: Vec<usize> = (0..messages.len()).collect();
    let mut latest: HashMap<&str, usize> = HashMap::new();
    for (j, m) in messages.iter().enumerate() {
        for id in m.tool_result_ids() {
            if let Some(&k) = latest.get(id) {
                reach[k] = reach[k].max(j);
            }
        }
        for id in m.tool_use_ids() {
            latest.insert(id, j);
        }
    }
    let mut allowed = vec![true];
    let mut furthest = 0;
    for i in 1..=messages.len() {
        furthest = furthest.max(reach[i - 1]);
        allowed.push(furthest < i);
    }
    allowed
}

/// Messages of calls and results over a small pool of ids, so that ids repeat and results often
/// answer calls made long before (more than the few latest calls that are compared first).
fn calls_and_results() -> impl Strategy<Value = Vec<Message>> {
    let message =
        (any::<bool>(), prop::collection::vec(0u8..40, 0..4)).prop_map(|(assistant, ids)| {
            let blocks = ids
                .iter()
                .map(|i| {
                    if assistant {
                        ContentBlock::tool_use(format!("t{i}"), "read", json!({}))
                    } else {
                        ContentBlock::tool_result(format!("t{i}"), "ok", false)
                    }
                })
                .collect();
            let role = if assistant {
                Role::Assistant
            } else {
                Role::User
            };
            Message::new(role, blocks)
        });
    prop::collection::vec(message, 0..120)
}

proptest! {
    #[test]
    fn cuts_follow_the_latest_call_however_far_back(messages in calls_and_results()) {
        prop_assert_eq!(allowed_cuts(&messages), reference_cuts(&messages));
    }
}

#[test]
fn a_result_far_after_its_call_still_joins_it() {
    // Forty calls with distinct ids, then the result of the first: all of it is one turn, also
    // when the answered call is not among the latest few.
    let mut messages = vec![Message::new(
        Role::Assistant,
        vec![ContentBlock::tool_use("first", "read", json!({}))],
    )];
    for i in 0..40 {
        messages.push(Message::new(
            Role::Assistant,
            vec![ContentBlock::tool_use(format!("c{i}"), "read", json!({}))],
        ));
    }
    messages.push(Message::new(
        Role::User,
        vec![ContentBlock::tool_result("first", "ok", false)],
    ));
    assert_eq!(turns(&messages), vec![0..42]);
    // A later call reusing the id takes over: the result pairs with it, the old call stands alone.
    messages.insert(
        41,
        Message::new(
            Role::Assistant,
            vec![ContentBlock::tool_use("first", "read", json!({}))],
        ),
    );
    assert_eq!(turns(&messages).first(), Some(&(0..1)));
    assert_eq!(allowed_cuts(&messages), reference_cuts(&messages));
}
