//! Adding content never lowers a size: the heuristic, the usage sizer and the request estimate.

use panto_model::arbitrary::{session, text};
use panto_model::{ContentBlock, Message, ToolResultContent};
use panto_size::{Heuristic, Sizer, UsageSizer, estimate};

use crate::estimate_request;
use proptest::prelude::*;

use crate::synthetic::{MeasuredSession, edge_session, measured_session};

/// Content to add to a message.
#[derive(Clone, Debug)]
enum Addition {
    /// A new text block at the end.
    Push(String),
    /// Text appended to the first text, thinking or string tool result (or a new block).
    Append(String),
    /// Text inserted at the start of the first such string.
    Prepend(String),
}

fn addition() -> impl Strategy<Value = Addition> {
    prop_oneof![
        text().prop_map(Addition::Push),
        text().prop_map(Addition::Append),
        text().prop_map(Addition::Prepend),
        // Small additions nudge spans across the guards' edges.
        "[a-z{} ]{1,12}".prop_map(Addition::Append),
        // Large additions reach the guards' thresholds.
        "[a-z {}\\n]{200,2000}".prop_map(Addition::Append),
    ]
}

/// The first string of `message` that content can be added to.
fn first_string(message: &mut Message) -> Option<&mut String> {
    message.content.iter_mut().find_map(|b| match b {
        ContentBlock::Text(t) => Some(&mut t.text),
        ContentBlock::Thinking(t) => Some(&mut t.thinking),
        ContentBlock::ToolResult(r) => match &mut r.content {
            ToolResultContent::Text(s) => Some(s),
            ToolResultContent::Blocks(_) => None,
        },
        _ => None,
    })
}

fn add(message: &mut Message, addition: &Addition) {
    match addition {
        Addition::Push(t) => message.content.push(ContentBlock::text(t.clone())),
        Addition::Append(t) => match first_string(message) {
            Some(s) => s.push_str(t),
            None => message.content.push(ContentBlock::text(t.clone())),
        },
        Addition::Prepend(t) => match first_string(message) {
            Some(s) => s.insert_str(0, t),
            None => message.content.push(ContentBlock::text(t.clone())),
        },
    }
}

/// Sessions with random usage (any guard may fire) or with consistent usage (spans measured).
fn any_session() -> impl Strategy<Value = Vec<Message>> {
    prop_oneof![
        session(6).prop_map(|s| s.messages),
        measured_session(6).prop_map(|m: MeasuredSession| m.messages),
        edge_session(6).prop_map(|m: MeasuredSession| m.messages),
    ]
}

/// Checks that adding `addition` to message `i` lowers neither its size nor the total nor the
/// request estimate.
fn check_addition(
    sizer: &dyn Sizer,
    messages: &[Message],
    i: usize,
    addition: &Addition,
) -> Result<(), TestCaseError> {
    let mut grown = messages.to_vec();
    add(&mut grown[i], addition);
    let before = sizer.message_sizes(messages);
    let after = sizer.message_sizes(&grown);
    prop_assert!(
        after[i] >= before[i],
        "message {i} went from {} to {}",
        before[i],
        after[i]
    );
    let (total_before, total_after) = (before.iter().sum::<u64>(), after.iter().sum::<u64>());
    prop_assert!(
        total_after >= total_before,
        "total went from {total_before} to {total_after}"
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn inserting_text_never_lowers_the_text_estimate(
        s in "\\PC{0,60}", insert in "\\PC{0,20}", at in any::<prop::sample::Index>()
    ) {
        let boundaries: Vec<usize> =
            s.char_indices().map(|(i, _)| i).chain([s.len()]).collect();
        let pos = boundaries[at.index(boundaries.len())];
        let mut grown = s.clone();
        grown.insert_str(pos, &insert);
        prop_assert!(Heuristic.text(&grown) >= Heuristic.text(&s));
    }

    #[test]
    fn adding_content_never_lowers_a_heuristic_size(
        messages in any_session(), at in any::<prop::sample::Index>(), addition in addition()
    ) {
        let i = at.index(messages.len());
        check_addition(&Heuristic, &messages, i, &addition)?;
    }

    #[test]
    fn adding_content_never_lowers_a_usage_size_nor_the_total(
        messages in any_session(), at in any::<prop::sample::Index>(), addition in addition()
    ) {
        let i = at.index(messages.len());
        check_addition(&UsageSizer::default(), &messages, i, &addition)?;
    }

    #[test]
    fn adding_content_never_lowers_the_request_estimate(
        messages in any_session(), at in any::<prop::sample::Index>(), addition in addition(),
        system in text(),
    ) {
        let i = at.index(messages.len());
        let mut grown = messages.clone();
        add(&mut grown[i], &addition);
        prop_assert!(estimate_request(&system, &grown) >= estimate_request(&system, &messages));
    }

    #[test]
    fn the_ruler_adds_up_and_grows_with_the_system_prompt_and_tools(
        messages in any_session(), system in text(), tools in text(), more in text(),
    ) {
        let parts = estimate(&system, &tools, &messages);
        prop_assert_eq!(
            parts.total(),
            parts.system + parts.tools + parts.summary + parts.messages
        );
        prop_assert_eq!(
            parts.conversation(),
            UsageSizer::default().message_sizes(&messages).iter().sum::<u64>()
        );
        prop_assert!(parts.system + parts.tools >= Heuristic.text(&system) + Heuristic.text(&tools));
        prop_assert_eq!(estimate(&system, "", &messages).total(), estimate_request(&system, &messages));
        let longer_tools = format!("{tools}{more}");
        prop_assert!(estimate(&system, &longer_tools, &messages).total() >= parts.total());
        let longer_system = format!("{system}{more}");
        prop_assert!(estimate(&longer_system, &tools, &messages).total() >= parts.total());
    }

    #[test]
    fn adding_a_message_never_lowers_the_heuristic_total(
        messages in any_session(), extra in text()
    ) {
        let mut grown = messages.clone();
        grown.push(Message::user_text(extra));
        let before: u64 = Heuristic.message_sizes(&messages).iter().sum();
        let after: u64 = Heuristic.message_sizes(&grown).iter().sum();
        prop_assert!(after > before);
    }
}
