//! The window model as a pure value (`KnownWindows`): its rules, property-tested over any
//! sequence of what can be learned, and a compaction run that gives back what it learned.

use std::sync::Arc;

use panto_compact::testing::ScriptedProvider;
use panto_compact::{
    CompactRun, Compactor, KnownWindows, MemoryLog, ModelRef, Overflow, ProviderError, Stated,
    TokenNumbers, Window, WindowSource,
};
use proptest::prelude::*;

use crate::{assistant, user};

/// One thing a window can be told or taught.
#[derive(Clone, Debug)]
enum Lesson {
    Window(Window),
    Stated(Stated),
    Overflow(Overflow),
    Accepted(u64),
}

prop_compose! {
    fn tokens()(t in prop_oneof![0u64..10, 100u64..5_000, 5_000u64..2_000_000]) -> u64 { t }
}

fn source() -> impl Strategy<Value = WindowSource> {
    proptest::sample::select(WindowSource::ALL.to_vec())
}

fn lesson() -> impl Strategy<Value = Lesson> {
    prop_oneof![
        (tokens(), source()).prop_map(|(t, s)| Lesson::Window(Window::new(t, s))),
        (tokens(), proptest::option::of(tokens()), tokens())
            .prop_map(|(t, c, e)| Lesson::Stated(Stated::new(t).with_counts(c, e))),
        (
            proptest::option::of(tokens()),
            proptest::option::of(tokens()),
            proptest::option::of(tokens()),
            proptest::option::of(tokens()),
            proptest::option::of(tokens()),
        )
            .prop_map(|(estimated, counted, stated, output, budget)| {
                let mut o = Overflow::stating(stated);
                o.estimated = estimated;
                o.counted = counted;
                o.output = output;
                o.budget = budget;
                Lesson::Overflow(o)
            }),
        tokens().prop_map(Lesson::Accepted),
    ]
}

/// A refusal for its size stating `numbers`.
fn too_long(numbers: TokenNumbers) -> ProviderError {
    ProviderError::ContextOverflow {
        message: "too long".into(),
        numbers,
    }
}

fn teach(windows: &mut KnownWindows, lesson: &Lesson) {
    match lesson {
        Lesson::Window(w) => windows.learn(*w),
        Lesson::Stated(s) => windows.learn_stated(*s),
        Lesson::Overflow(o) => windows.overflowed(o),
        Lesson::Accepted(t) => windows.learn_accepted(*t),
    }
}

/// The bounds a lesson states: a bound window, or the request an overflow refused without a
/// limit it believes (none stated, or one its own numbers contradict).
fn bound_of(lesson: &Lesson) -> Option<u64> {
    match lesson {
        Lesson::Window(w) if w.source == WindowSource::Bound && w.tokens > 0 => Some(w.tokens),
        Lesson::Overflow(o) if o.believed().is_none() => {
            o.estimated.map(|e| e.saturating_sub(1)).filter(|&b| b > 0)
        }
        _ => None,
    }
}

proptest! {
    /// Whatever is learned, in any order, never raises a proven bound: the bound is the tightest
    /// one taught, and the largest request taken only grows.
    #[test]
    fn what_is_learned_never_raises_a_proven_bound(lessons in prop::collection::vec(lesson(), 0..24)) {
        let mut windows = KnownWindows::new();
        for lesson in &lessons {
            let before = windows;
            teach(&mut windows, lesson);
            if let (Some(b), Some(a)) = (before.bound, windows.bound) {
                prop_assert!(a <= b, "{lesson:?} raised the bound {b} to {a}");
            }
            if let (Some(b), Some(a)) = (before.accepted, windows.accepted) {
                prop_assert!(a >= b, "{lesson:?} lowered what was taken");
            }
            // A bound learned never raises the window, nor the limit (the catalogue's aside: a
            // bound overrides it, `a_bound_overrides_the_catalogue`).
            let catalogue = before.window().is_some_and(|w| w.source == WindowSource::Catalogue);
            if bound_of(lesson).is_some() && !catalogue {
                for (was, now) in [
                    (before.window().map(|w| w.tokens), windows.window().map(|w| w.tokens)),
                    (before.limit(), windows.limit()),
                ] {
                    if let (Some(was), Some(now)) = (was, now) {
                        prop_assert!(now <= was, "{lesson:?}: {was} -> {now}");
                    }
                }
            }
        }
        prop_assert_eq!(windows.bound, lessons.iter().filter_map(bound_of).min());
    }

    /// A limit stated below panto's estimate of the request it refused (the provider counted
    /// more than panto) is scaled down in proportion, as the fold always did; never up.
    #[test]
    fn a_stated_limit_is_scaled_by_the_counts_and_never_up(
        limit in 1u64..2_000_000,
        counted in 0u64..3_000_000,
        estimated in 0u64..3_000_000,
    ) {
        let stated = Stated::new(limit).with_counts(Some(counted), estimated);
        let expect = if counted > estimated {
            u64::try_from(u128::from(limit) * u128::from(estimated) / u128::from(counted)).unwrap()
        } else {
            limit
        };
        prop_assert_eq!(stated.in_estimate(), expect);
        prop_assert!(stated.in_estimate() <= limit);
        let mut windows = KnownWindows::new();
        windows.overflowed(&Overflow::new(
            &too_long(TokenNumbers::new(Some(counted), Some(limit))),
            estimated,
        ));
        prop_assert_eq!(windows.limit(), Some(expect));
        prop_assert_eq!(windows.window(), Some(Window::new(limit, WindowSource::Reported)));
        prop_assert_eq!(windows.learned(), Some(Window::new(limit, WindowSource::Reported)));
        // Learning the same overflow again changes nothing.
        let again = windows;
        windows.overflowed(&Overflow::new(
            &too_long(TokenNumbers::new(Some(counted), Some(limit))),
            estimated,
        ));
        prop_assert_eq!(windows, again);
    }

    /// The rules agree with each other: the window is the smallest known (the catalogue only
    /// when nothing else is), the limit in panto's estimate is never above it, what is learned
    /// is the smaller of the stated limit and the bound, and a window stated below the bound is
    /// all an overflow without a limit knows.
    #[test]
    fn the_rules_agree(lessons in prop::collection::vec(lesson(), 0..24)) {
        let mut windows = KnownWindows::new();
        for lesson in &lessons {
            teach(&mut windows, lesson);
        }
        let others = [
            windows.reported.map(|r| r.tokens),
            windows.configured,
            windows.discovered,
            windows.bound,
        ];
        let smallest = others.iter().flatten().min().copied();
        let window = windows.window();
        prop_assert_eq!(window.map(|w| w.tokens), smallest.or(windows.catalogue));
        if window.is_some_and(|w| w.source == WindowSource::Catalogue) {
            prop_assert!(smallest.is_none());
        }
        if let (Some(limit), Some(window)) = (windows.limit(), window) {
            prop_assert!(limit <= window.tokens);
        }
        prop_assert_eq!(
            windows.learned().map(|w| w.tokens),
            [windows.reported.map(|r| r.tokens), windows.bound].into_iter().flatten().min()
        );
        if let (Some(stated), Some(bound)) = (windows.stated_limit(), windows.bound) {
            prop_assert!(stated <= bound);
        }
        prop_assert_eq!(windows.known_limit(false), windows.limit());
        prop_assert_eq!(windows.known_limit(true), windows.stated_limit());
        // Whatever is stated below the bound, the limit is no larger than it.
        if let Some(stated) = windows.stated_limit() {
            prop_assert!(windows.limit().is_some_and(|l| l <= stated));
        }
    }
}

#[test]
fn the_catalogue_counts_only_when_nothing_else_is_known() {
    let mut windows = KnownWindows::for_model("gpt-4o");
    assert_eq!(
        windows.window(),
        Some(Window::new(128_000, WindowSource::Catalogue))
    );
    assert_eq!(windows.limit(), Some(128_000));
    assert_eq!(windows.learned(), None);
    // Configured above the catalogue's: the configuration counts, not the smaller guess.
    windows.learn(Window::new(200_000, WindowSource::Configured));
    assert_eq!(
        windows.window(),
        Some(Window::new(200_000, WindowSource::Configured))
    );
    // A bound overrides it too, and an overflow without numbers then knows only the bound.
    let mut bounded = KnownWindows::for_model("gpt-4o");
    bounded.learn(Window::new(500_000, WindowSource::Bound));
    assert_eq!(
        bounded.window().map(|w| w.source),
        Some(WindowSource::Bound)
    );
    assert_eq!(bounded.stated_limit(), None);
    assert_eq!(
        KnownWindows::for_model("a-model-nobody-knows").window(),
        None
    );
}

/// Found by `what_is_learned_never_raises_a_proven_bound`: a bound above the catalogue's window
/// still overrides it (the catalogue is the lowest priority, under everything learned), so the
/// window that counts may rise when the first bound is learned.
#[test]
fn a_bound_overrides_the_catalogue() {
    let mut windows = KnownWindows::new().with(Window::new(1, WindowSource::Catalogue));
    let mut overflow = Overflow::stating(None);
    overflow.estimated = Some(3);
    windows.overflowed(&overflow);
    assert_eq!(windows.window(), Some(Window::new(2, WindowSource::Bound)));
    assert_eq!(windows.limit(), Some(2));
}

#[tokio::test]
async fn a_compaction_run_gives_back_the_limit_its_requests_were_refused_with() {
    // The conversation, then a compaction model that refuses the first request with a stated
    // limit and answers the smaller one.
    let mut log = MemoryLog::memory();
    let mut entries = Vec::new();
    for i in 0..12 {
        entries.push(user(&format!(
            "question {i} {}",
            "about the parser ".repeat(60)
        )));
        entries.push(assistant(&format!(
            "answer {i} {}",
            "it reads tokens ".repeat(60)
        )));
    }
    entries.push(user("and now?"));
    for m in entries {
        log.append(&[panto_model::Entry::Message(m)]).await.unwrap();
    }
    let provider = Arc::new(ScriptedProvider::new("m"));
    provider.push(Err(too_long(TokenNumbers::new(Some(9_000), Some(3_000)))));
    provider.push_text("The user asked twelve questions about the parser.");
    provider.push_text("The user asked twelve questions about the parser, and more.");
    provider.push_text("The user asked twelve questions about the parser, and then some.");
    let mut compactor = Compactor::new(ModelRef::new(provider, "m"));
    let mut windows = KnownWindows::new().with(Window::new(6_000, WindowSource::Discovered));
    let context = log.replay();
    let _ = compactor
        .compact(&context, &mut log, CompactRun::manual(None), &mut windows)
        .await;
    let reported = windows.reported.expect("the refusal's limit was learned");
    assert_eq!(reported.tokens, 3_000);
    assert_eq!(reported.counted, Some(9_000));
    assert_eq!(windows.discovered, Some(6_000), "what was given stays");
    assert_eq!(
        windows.learned(),
        Some(Window::new(3_000, WindowSource::Reported))
    );
}

proptest! {
    /// Whether the server counts the output against its window is learned from a refusal's
    /// numbers: an input counted within the limit stated shows it (vLLM's "you requested 9,000
    /// tokens (7,000 in the messages, 2,000 in the completion)" for a window of 8,000), and so
    /// does an output the refusal says it counted, whatever the input (vLLM's "(112,946 in the
    /// messages, 10,000 in the completion)" for a window of 16,384); an input counted above
    /// the limit, without an output, shows nothing. The room kept for the reply is the whole reply then (at
    /// most half the window), else at most an eighth of the window.
    #[test]
    fn a_refusal_whose_input_fits_its_limit_shows_the_output_counted(
        limit in 1_000u64..200_000,
        counted in 1u64..400_000,
        reply in 0u64..100_000,
        output in prop::option::of(0u64..50_000),
    ) {
        let mut windows = KnownWindows::new();
        prop_assert_eq!(windows.reply_room(reply, limit), reply.min(limit / 8));
        windows.overflowed(&Overflow::new(
            &too_long(TokenNumbers::new(Some(counted), Some(limit)).with_output(output)),
            counted,
        ));
        // A refusal whose own numbers put the request within its limit (the input and the
        // output it says it counted) states nothing believed: what it shows is the output it
        // says it counted, if any.
        let contradicted = output.is_some_and(|o| counted + o <= limit);
        let counts = if contradicted {
            output.is_some_and(|o| o > 0)
        } else {
            counted <= limit || output.is_some_and(|o| o > 0)
        };
        prop_assert_eq!(windows.counts_output, counts.then_some(true));
        let room = windows.reply_room(reply, limit);
        if counts && reply <= limit / 2 {
            prop_assert_eq!(room, reply);
        } else {
            prop_assert_eq!(room, reply.min(limit / 8));
        }
        // Learned once, it stays: a later refusal of the input alone shows nothing new.
        windows.overflowed(&Overflow::stating(Some(limit)));
        prop_assert_eq!(windows.counts_output, counts.then_some(true));
    }
}

proptest! {
    /// A limit the refusal's own numbers contradict (the request it counted, with the output it
    /// counted or the request's budget, lies within the limit: a server stating half again its
    /// window) teaches what an overflow stating none does: a bound just below the refused
    /// request, no reported limit, and a run after it that knows only windows stated below
    /// that bound. Believed whenever the count or the output counted is unknown, or the two are
    /// over the limit. Issue 39: at 1,001 tokens stated as 1,501, the limit believed let the
    /// fold plan a summary of 439 tokens that, with the kept turns, was larger than the
    /// conversation it replaced, and the send failed (`CompactError::NotSmaller`).
    #[test]
    fn a_limit_its_own_refusal_contradicts_teaches_a_bound_instead(
        limit in 1_000u64..200_000,
        counted in 1u64..400_000,
        estimated in 2u64..400_000,
        output in prop::option::of(0u64..50_000),
        budget in prop::option::of(0u64..50_000),
    ) {
        let error = too_long(TokenNumbers::new(Some(counted), Some(limit)).with_output(output));
        let mut overflow = Overflow::new(&error, estimated);
        if let Some(budget) = budget {
            overflow = overflow.with_budget(budget);
        }
        let contradicted = output.or(budget).is_some_and(|o| counted + o <= limit);
        prop_assert_eq!(overflow.believed(), (!contradicted).then_some(limit));
        let mut windows = KnownWindows::new();
        windows.overflowed(&overflow);
        if contradicted {
            prop_assert_eq!(windows.reported, None);
            prop_assert_eq!(windows.bound, Some(estimated - 1));
            prop_assert_eq!(windows.window(), Some(Window::new(estimated - 1, WindowSource::Bound)));
        } else {
            prop_assert_eq!(windows.reported.map(|r| r.tokens), Some(limit));
            prop_assert_eq!(windows.bound, None);
        }
        // A run after that overflow, told the conversation's output budget, judges the limit
        // the same way: after a contradicted one it knows no limit (the bound says only that
        // the window is smaller), after a believed one the limit scaled by the counts.
        let mut run = CompactRun::after_overflow(&error, estimated);
        if let Some(budget) = budget {
            run = run.with_reserved_tokens(0, budget);
        }
        let mut taught = KnownWindows::new();
        run.teach(&mut taught);
        prop_assert_eq!(taught, windows);
        if contradicted {
            prop_assert_eq!(run.known_limit(&taught), None);
        } else {
            prop_assert_eq!(run.known_limit(&taught), taught.limit());
        }
    }
}
