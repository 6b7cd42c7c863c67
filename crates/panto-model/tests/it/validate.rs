//! Validation finds every defect injected into a valid session.

use panto_model::arbitrary::session;
use panto_model::{ContentBlock, Message, Problem, Role, validate};
use proptest::prelude::*;

/// Positions of tool-use blocks: (message, block).
fn calls(messages: &[Message]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        for (b, block) in m.content.iter().enumerate() {
            if matches!(block, ContentBlock::ToolUse(_)) {
                out.push((i, b));
            }
        }
    }
    out
}

fn call_id(messages: &[Message], (i, b): (usize, usize)) -> String {
    match &messages[i].content[b] {
        ContentBlock::ToolUse(u) => u.id.clone(),
        _ => unreachable!(),
    }
}

proptest! {
    #[test]
    fn valid_sessions_have_no_problems(s in session(6)) {
        prop_assert_eq!(validate(&s.messages), vec![]);
    }

    #[test]
    fn a_removed_result_is_an_unanswered_call(s in session(6), pick in any::<prop::sample::Index>()) {
        let mut m = s.messages;
        let cs = calls(&m);
        prop_assume!(!cs.is_empty());
        let id = call_id(&m, cs[pick.index(cs.len())]);
        for msg in &mut m {
            msg.content.retain(|b| !matches!(b, ContentBlock::ToolResult(r) if r.tool_use_id == id));
        }
        let problems = validate(&m);
        prop_assert!(problems.iter().any(|p| matches!(p, Problem::UnansweredCall { tool_use_id, .. } if *tool_use_id == id)), "{:?}", problems);
    }

    #[test]
    fn a_removed_call_is_an_orphan_result(s in session(6), pick in any::<prop::sample::Index>()) {
        let mut m = s.messages;
        let cs = calls(&m);
        prop_assume!(!cs.is_empty());
        let (i, b) = cs[pick.index(cs.len())];
        let id = call_id(&m, (i, b));
        m[i].content.remove(b);
        let problems = validate(&m);
        prop_assert!(problems.iter().any(|p| matches!(p, Problem::OrphanResult { tool_use_id, .. } if *tool_use_id == id)), "{:?}", problems);
    }

    #[test]
    fn a_reused_id_is_a_duplicate(s in session(6), a in any::<prop::sample::Index>(), b in any::<prop::sample::Index>()) {
        let mut m = s.messages;
        let cs = calls(&m);
        prop_assume!(cs.len() >= 2);
        let (x, y) = (a.index(cs.len()), b.index(cs.len()));
        prop_assume!(x != y);
        let (first, second) = (cs[x.min(y)], cs[x.max(y)]);
        let id = call_id(&m, first);
        if let ContentBlock::ToolUse(u) = &mut m[second.0].content[second.1] {
            u.id = id.clone();
        }
        let problems = validate(&m);
        prop_assert!(problems.iter().any(|p| matches!(p, Problem::DuplicateToolId { tool_use_id, .. } if *tool_use_id == id)), "{:?}", problems);
    }

    #[test]
    fn emptied_content_is_reported(s in session(6), pick in any::<prop::sample::Index>()) {
        let mut m = s.messages;
        let i = pick.index(m.len());
        m[i].content.clear();
        let problems = validate(&m);
        prop_assert!(problems.contains(&Problem::EmptyContent { message: i }), "{:?}", problems);
    }

    #[test]
    fn a_result_moved_into_the_assistant_is_misplaced(s in session(6), pick in any::<prop::sample::Index>()) {
        let mut m = s.messages;
        let users: Vec<usize> = (0..m.len()).filter(|&i| m[i].role == Role::User && m[i].tool_result_ids().next().is_some()).collect();
        prop_assume!(!users.is_empty());
        let i = users[pick.index(users.len())];
        m[i].role = Role::Assistant;
        let problems = validate(&m);
        prop_assert!(problems.iter().any(|p| matches!(p, Problem::MisplacedBlock { message, .. } if *message == i)), "{:?}", problems);
    }
}
