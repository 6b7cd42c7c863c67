//! Synthetic sessions whose usage is generated from known token counts: inference is exact, and
//! each guard sends the spans it rejects to the heuristic.

use std::ops::Range;

use panto_model::arbitrary::session;
use panto_model::{KEPT_BY, Message, Role, Usage};
use panto_size::{
    Fallback, Heuristic, Measured, MessageSize, PLAUSIBLE_FACTOR, Sizer, Source, UsageSizer,
    estimate,
};
use proptest::collection::vec;
use proptest::prelude::*;
use serde_json::Value;

use crate::estimate_request;

/// A generated conversation with consistent usage and the true size of every message.
#[derive(Clone, Debug)]
pub(crate) struct MeasuredSession {
    /// The messages; every assistant message carries usage derived from `truth`.
    pub messages: Vec<Message>,
    /// The true token count of each message.
    pub truth: Vec<u64>,
    /// Tokens of the system prompt and tool definitions, part of every input total.
    pub system: u64,
}

/// How a true count relates to the heuristic, in percent, and how an input total is split.
#[derive(Clone, Copy, Debug)]
struct Draw {
    percent: u64,
    cache_read: u64,
    cache_creation: u64,
    split: bool,
}

fn draw(percent: impl Strategy<Value = u64>) -> impl Strategy<Value = Draw> {
    (percent, 0u64..=100, 0u64..=100, any::<bool>()).prop_map(
        |(percent, cache_read, cache_creation, split)| Draw {
            percent,
            cache_read,
            cache_creation,
            split,
        },
    )
}

/// Each message gets a true count between half and twice the heuristic (real spans lie in that
/// band); each assistant message reports the running sum as its input total, split between
/// uncached input, cache reads and cache writes, and its own count as output.
pub(crate) fn measured_session(max_rounds: usize) -> impl Strategy<Value = MeasuredSession> {
    sized_session(max_rounds, (50u64..=200).boxed())
}

/// Like [`measured_session`], but true counts often sit just inside or just outside the edges
/// of the plausible band, so small additions move spans across the guards.
pub(crate) fn edge_session(max_rounds: usize) -> impl Strategy<Value = MeasuredSession> {
    let low = 100 / PLAUSIBLE_FACTOR;
    let high = 100 * PLAUSIBLE_FACTOR;
    let percent = prop_oneof![low - 3..=low + 3, high - 8..=high + 2, 50u64..=200];
    sized_session(max_rounds, percent.boxed())
}

fn sized_session(
    max_rounds: usize,
    percent: BoxedStrategy<u64>,
) -> impl Strategy<Value = MeasuredSession> {
    session(max_rounds)
        .prop_flat_map(move |s| {
            let n = s.messages.len();
            (
                Just(s.messages),
                vec(draw(percent.clone()), n),
                0u64..20_000,
            )
        })
        .prop_map(|(mut messages, draws, system)| {
            let truth: Vec<u64> = messages
                .iter()
                .zip(&draws)
                .map(|(m, d)| (Heuristic.message(m) * d.percent / 100).max(1))
                .collect();
            let mut running = system;
            for ((m, d), &t) in messages.iter_mut().zip(&draws).zip(&truth) {
                if m.role == Role::Assistant {
                    m.model = Some("model-m".into());
                    m.usage = Some(split_usage(running, t, d));
                }
                running += t;
            }
            MeasuredSession {
                messages,
                truth,
                system,
            }
        })
}

fn split_usage(input_total: u64, output: u64, d: &Draw) -> Usage {
    if !d.split {
        return Usage::new(input_total, output);
    }
    let read = input_total * d.cache_read / 100;
    let creation = (input_total - read) * d.cache_creation / 100;
    let mut u = Usage::new(input_total - read - creation, output);
    u.cache_read_input_tokens = Some(read);
    u.cache_creation_input_tokens = Some(creation);
    u
}

fn assistants(messages: &[Message]) -> Vec<usize> {
    (0..messages.len())
        .filter(|&i| messages[i].role == Role::Assistant)
        .collect()
}

/// The messages strictly between consecutive assistant messages, with the pair.
fn spans(messages: &[Message]) -> Vec<(usize, usize, Range<usize>)> {
    assistants(messages)
        .windows(2)
        .map(|w| (w[0], w[1], w[0] + 1..w[1]))
        .filter(|(_, _, r)| !r.is_empty())
        .collect()
}

fn is_heuristic(messages: &[Message], sizes: &[MessageSize], i: usize, reason: Fallback) -> bool {
    sizes[i].source == Source::Heuristic(reason)
        && sizes[i].tokens == Heuristic.message(&messages[i])
}

/// The span of `spans` that ends at assistant `b` and the one that starts at it.
fn spans_around(spans: &[(usize, usize, Range<usize>)], b: usize) -> Vec<Range<usize>> {
    spans
        .iter()
        .filter(|(x, y, _)| *x == b || *y == b)
        .map(|(_, _, r)| r.clone())
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn one_measurement_gives_the_sizes_and_every_estimate(s in measured_session(6)) {
        let sizer = UsageSizer::default();
        let measured = Measured::new(&s.messages);
        prop_assert_eq!(measured.sizes(), &sizer.message_sizes(&s.messages)[..]);
        let system = "You are a careful coding agent.";
        for tools in ["", "read(path), bash(command)"] {
            prop_assert_eq!(measured.estimate(system, tools), estimate(system, tools, &s.messages));
            // Every prefix, as if it were measured alone.
            for n in 0..=s.messages.len() + 1 {
                let first = &s.messages[..n.min(s.messages.len())];
                prop_assert_eq!(
                    measured.estimate_first(n, system, tools),
                    estimate(system, tools, first),
                    "the first {} messages", n
                );
            }
        }
    }

    #[test]
    fn one_measurement_gives_every_estimate_after_a_compaction_too(
        s in edge_session(5),
        kept in 0usize..6,
    ) {
        // A context as replay gives it: a compaction message, its kept copies, and what
        // followed.
        let mut messages = vec![Message::compaction("Earlier work.")];
        messages.extend(s.messages.iter().cloned().enumerate().map(|(i, mut m)| {
            if i < kept {
                m.extra.insert(KEPT_BY.to_owned(), Value::from("c1"));
            }
            m
        }));
        let measured = Measured::new(&messages);
        for n in 0..=messages.len() {
            prop_assert_eq!(
                measured.estimate_first(n, "system", "tools"),
                estimate("system", "tools", &messages[..n]),
                "the first {} messages", n
            );
        }
    }

    #[test]
    fn inference_is_exact_on_consistent_usage(s in measured_session(6)) {
        let sizes = UsageSizer::default().measure(&s.messages);
        let asst = assistants(&s.messages);
        for &a in &asst {
            prop_assert_eq!(sizes[a], MessageSize::new(s.truth[a], Source::Output));
        }
        for (_, _, r) in spans(&s.messages) {
            let inferred: u64 = sizes[r.clone()].iter().map(|m| m.tokens).sum();
            let truth: u64 = s.truth[r.clone()].iter().sum();
            prop_assert_eq!(inferred, truth, "span {:?}", r);
            if r.len() == 1 {
                prop_assert_eq!(sizes[r.start], MessageSize::new(truth, Source::Span));
            } else {
                prop_assert!(sizes[r].iter().all(|m| m.source == Source::Share));
            }
        }
        let first = asst[0];
        let last = *asst.last().unwrap();
        for i in (0..first).chain(last + 1..s.messages.len()) {
            prop_assert!(is_heuristic(&s.messages, &sizes, i, Fallback::Unbracketed));
        }
        // The sessions end with an answer, so the estimate is the whole truth, unless the
        // heuristic's size of the first prompt (the only unmeasured message before the last
        // answer) leaves less room than the system prompt being sent costs by the heuristic:
        // then the system prompt part is that cost, and the total exceeds the truth by it.
        prop_assert_eq!(last, s.messages.len() - 1);
        let system = "not counted: in the input totals";
        let truth = s.system + s.truth.iter().sum::<u64>();
        let sized: u64 = sizes.iter().map(|m| m.tokens).sum();
        let floor = sized + Heuristic.text(system);
        prop_assert_eq!(estimate_request(system, &s.messages), truth.max(floor));
        let parts = estimate(system, "", &s.messages);
        prop_assert!(parts.measured);
        prop_assert_eq!(parts.conversation(), sized);
        prop_assert_eq!(parts.total(), truth.max(floor));
    }

    #[test]
    fn missing_usage_falls_back(s in measured_session(6), pick in any::<prop::sample::Index>()) {
        let mut messages = s.messages;
        let asst = assistants(&messages);
        let b = asst[pick.index(asst.len())];
        messages[b].usage = None;
        let sizes = UsageSizer::default().measure(&messages);
        prop_assert!(is_heuristic(&messages, &sizes, b, Fallback::MissingUsage));
        for r in spans_around(&spans(&messages), b) {
            for i in r {
                prop_assert!(is_heuristic(&messages, &sizes, i, Fallback::MissingUsage));
            }
        }
    }

    #[test]
    fn decreasing_totals_fall_back(s in measured_session(6), pick in any::<prop::sample::Index>()) {
        let mut messages = s.messages.clone();
        let all = spans(&messages);
        prop_assume!(!all.is_empty());
        let (a, b, r) = all[pick.index(all.len())].clone();
        // The later request reports one token less than the earlier input plus its output.
        let earlier = messages[a].usage.clone().unwrap();
        let lower = earlier.input_total() + s.truth[a] - 1;
        messages[b].usage = Some(Usage::new(lower, s.truth[b]));
        let sizes = UsageSizer::default().measure(&messages);
        for i in r {
            prop_assert!(is_heuristic(&messages, &sizes, i, Fallback::Decreasing));
        }
        prop_assert_eq!(sizes[b].source, Source::Output);
    }

    #[test]
    fn a_model_change_falls_back(s in measured_session(6), pick in any::<prop::sample::Index>()) {
        let mut messages = s.messages.clone();
        let asst = assistants(&messages);
        let b = asst[pick.index(asst.len())];
        messages[b].model = Some("model-other".into());
        let sizes = UsageSizer::default().measure(&messages);
        for r in spans_around(&spans(&messages), b) {
            for i in r {
                prop_assert!(is_heuristic(&messages, &sizes, i, Fallback::ModelChanged));
            }
        }
        prop_assert_eq!(sizes[b], MessageSize::new(s.truth[b], Source::Output));
    }

    #[test]
    fn a_kept_copy_is_never_differenced(s in measured_session(6), pick in any::<prop::sample::Index>()) {
        let mut messages = s.messages.clone();
        let asst = assistants(&messages);
        let b = asst[pick.index(asst.len())];
        messages[b].extra.insert(KEPT_BY.to_owned(), Value::from("c1"));
        let sizes = UsageSizer::default().measure(&messages);
        for r in spans_around(&spans(&messages), b) {
            for i in r {
                prop_assert!(is_heuristic(&messages, &sizes, i, Fallback::KeptCopy));
            }
        }
        // Its own output is still exact.
        prop_assert_eq!(sizes[b], MessageSize::new(s.truth[b], Source::Output));
    }
}
