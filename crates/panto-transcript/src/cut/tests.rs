//! The cutter's property tests (budgets, char boundaries, prefixes and suffixes, pieces that
//! concatenate back, idempotence) and the examples that pin its choices of boundary.

use panto_size::Heuristic;
use proptest::prelude::*;

use super::{Boundary, Budget, Cut, Lead, Measure, ends, head, split, split_items, tail};

/// Text with lines, words, multibyte characters and markers at line starts.
fn text() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof![
            4 => "[a-cé😀]{1,6}",
            2 => Just(" ".to_owned()),
            2 => Just("\n".to_owned()),
            1 => Just("\n[User]: ".to_owned()),
            1 => Just("\n[Tool result bash (t1)]: ".to_owned()),
        ],
        0..60,
    )
    .prop_map(|parts| parts.concat())
}

fn budget() -> impl Strategy<Value = Budget> {
    (
        prop_oneof![
            Just(Measure::Bytes),
            Just(Measure::Chars),
            Just(Measure::Tenths),
            Just(Measure::Lines),
        ],
        0u64..80,
    )
        .prop_map(|(measure, limit)| Budget { measure, limit })
}

fn cut() -> impl Strategy<Value = Cut> {
    prop_oneof![Just(Cut::Char), Just(Cut::Nearest), Just(Cut::Line)]
}

/// The most a single character costs in `measure` (a word larger than a budget is cut between
/// characters, and one character is the least a piece holds).
fn char_most(measure: Measure) -> u64 {
    match measure {
        Measure::Bytes => 4,
        Measure::Tenths => Heuristic.text_tenths("😀"),
        Measure::Chars | Measure::Lines => 1,
    }
}

proptest! {
    #[test]
    fn a_head_is_a_prefix_within_its_budget_and_whole_when_it_fits(
        text in text(), budget in budget(), cut in cut()
    ) {
        let kept = head(&text, budget, cut);
        prop_assert!(text.starts_with(kept));
        prop_assert!(budget.fits(kept));
        if budget.fits(&text) {
            prop_assert_eq!(kept, text.as_str());
        }
        // Cutting again what was kept changes nothing.
        prop_assert_eq!(head(kept, budget, cut), kept);
        if cut == Cut::Line || budget.measure == Measure::Lines {
            prop_assert!(kept.is_empty() || kept.ends_with('\n') || kept.len() == text.len());
        }
    }

    #[test]
    fn a_head_cut_between_characters_takes_all_that_fits(text in text(), budget in budget()) {
        prop_assume!(budget.measure != Measure::Lines);
        let kept = head(&text, budget, Cut::Char);
        if let Some(next) = text[kept.len()..].chars().next() {
            let more = &text[..kept.len() + next.len_utf8()];
            prop_assert!(!budget.fits(more));
        }
        // The nearest cut keeps at least half of that, or ends a line or a word.
        let near = head(&text, budget, Cut::Nearest);
        prop_assert!(
            near.len() * 2 >= kept.len()
                || near.is_empty()
                || near.ends_with('\n')
                || near.ends_with(' ')
        );
        prop_assert!(kept.starts_with(near));
    }

    #[test]
    fn a_tail_is_a_suffix_within_its_budget_and_whole_when_it_fits(
        text in text(), budget in budget(), cut in cut()
    ) {
        let kept = tail(&text, budget, cut);
        prop_assert!(text.ends_with(kept));
        prop_assert!(budget.fits(kept));
        if budget.fits(&text) {
            prop_assert_eq!(kept, text.as_str());
        }
        prop_assert_eq!(tail(kept, budget, cut), kept);
        if cut == Cut::Line {
            let before = &text[..text.len() - kept.len()];
            prop_assert!(before.is_empty() || before.ends_with('\n') || kept.is_empty());
        }
    }

    #[test]
    fn ends_are_a_prefix_and_a_suffix_that_never_overlap(
        text in text(), a in budget(), b in 0u64..80, cut in cut()
    ) {
        let tail_budget = Budget { limit: b, ..a };
        let kept = ends(&text, a, tail_budget, cut);
        prop_assert_eq!(format!("{}{}{}", kept.head, kept.middle, kept.tail), text.clone());
        prop_assert!(a.fits(kept.head) && tail_budget.fits(kept.tail));
        let joined = kept.joined("[marker]");
        prop_assert!(joined.starts_with(kept.head) && joined.ends_with(kept.tail));
        prop_assert!(joined.contains("\n[marker]\n") || joined.starts_with("[marker]\n")
            || joined.starts_with("\n[marker]\n"));
    }

    #[test]
    fn split_pieces_are_the_text_in_order_each_within_the_budget(
        text in text(), budget in budget()
    ) {
        let budget = Budget { limit: budget.limit.max(char_most(budget.measure)), ..budget };
        let pieces = split(&text, budget, Boundary::Char);
        prop_assert_eq!(pieces.concat(), text.clone());
        for piece in &pieces {
            prop_assert!(!piece.is_empty());
            if budget.measure != Measure::Lines {
                prop_assert!(budget.fits(piece), "{:?} over {:?}", piece, budget);
            }
        }
        if budget.fits(&text) {
            prop_assert!(pieces.len() <= 1);
        }
        // Splitting a piece again leaves it whole.
        for piece in &pieces {
            prop_assert_eq!(split(piece, budget, Boundary::Char), vec![*piece]);
        }
    }

    #[test]
    fn split_at_words_leaves_only_single_words_over_the_budget(
        text in text(), limit in 1u64..80
    ) {
        let budget = Budget::tenths(limit);
        let pieces = split(&text, budget, Boundary::Word);
        prop_assert_eq!(pieces.concat(), text.clone());
        for piece in pieces.iter().filter(|p| !budget.fits(p)) {
            let inner = piece.trim_end_matches([' ', '\n']);
            prop_assert!(!inner.contains([' ', '\n']), "{:?}", piece);
        }
    }

    #[test]
    fn item_pieces_end_in_order_and_lead_with_the_marker_they_start_inside(
        text in text(), limit in 1u64..200
    ) {
        let budget = Budget::tenths(limit);
        let pieces = split_items(&text, budget, None);
        let mut start = 0;
        for (i, piece) in pieces.iter().enumerate() {
            prop_assert!(piece.end > start);
            prop_assert_eq!(piece.size, budget.size(&text[start..piece.end]));
            // Never inside a marker's head.
            let line_start = text[..start].rfind('\n').map_or(0, |n| n + 1);
            if let Some(m) = crate::item_marker(text[line_start..].split('\n').next().unwrap_or(""))
            {
                prop_assert!(start <= line_start || start >= line_start + m.len());
            }
            let expected = (i > 0).then(|| expected_lead(&text, start)).flatten();
            prop_assert_eq!(&piece.lead, &expected, "piece {} at {}", i, start);
            start = piece.end;
        }
        prop_assert_eq!(start, text.len());
        let whole: Vec<&str> = split(&text, budget, Boundary::Word);
        prop_assert!(pieces.len() >= whole.len().min(1));
    }
}

/// The lead of a piece of `text` starting at `at`, found the slow way: the marker of the last
/// line at or before it that opens an item (at the start of a line: before it).
fn expected_lead(text: &str, at: usize) -> Option<Lead> {
    let line_start = text[..at].rfind('\n').map_or(0, |n| n + 1);
    let opener =
        |l: usize| crate::item_marker(text[l..].split_inclusive('\n').next().unwrap_or(""));
    let here = opener(line_start);
    let before = text[..line_start]
        .split_inclusive('\n')
        .scan(0, |pos, line| {
            let start = *pos;
            *pos += line.len();
            Some(start)
        })
        .filter_map(opener)
        .last();
    let starts = at == line_start;
    let marker = if starts {
        before.filter(|_| here.is_none())
    } else {
        here.or(before)
    };
    marker.map(|m| Lead::new(m, starts))
}

#[test]
fn a_head_prefers_a_line_then_a_word_then_a_character() {
    let text = "first line here\nsecond line goes on and on";
    // 30 bytes fit: the line end at 16 keeps more than half.
    assert_eq!(
        head(text, Budget::bytes(30), Cut::Nearest),
        "first line here\n"
    );
    // 40 bytes: the line end keeps less than half (16 * 2 < 40): a word end.
    assert_eq!(
        head(text, Budget::bytes(40), Cut::Nearest),
        "first line here\nsecond line goes on and "
    );
    assert_eq!(head("abcdefghij", Budget::bytes(4), Cut::Nearest), "abcd");
    assert_eq!(head(text, Budget::bytes(10), Cut::Line), "");
    assert_eq!(head("é", Budget::bytes(1), Cut::Char), "");
}

#[test]
fn a_tail_starts_at_a_line_then_a_word() {
    let text = "one two\nthree four five";
    assert_eq!(
        tail(text, Budget::chars(16), Cut::Nearest),
        "three four five"
    );
    assert_eq!(tail(text, Budget::chars(9), Cut::Nearest), "four five");
    assert_eq!(tail(text, Budget::chars(3), Cut::Char), "ive");
}

#[test]
fn a_budget_in_tokens_is_the_heuristic_rounded_up() {
    let text = "word ".repeat(100);
    for n in [0, 1, 5, 17, 40] {
        let kept = head(&text, Budget::tokens(n), Cut::Char);
        assert!(Heuristic.text(kept) <= n);
        let more = &text[..(kept.len() + 1).min(text.len())];
        assert!(Heuristic.text(more) > n || more.len() == text.len());
    }
}

#[test]
fn lines_count_whole_lines() {
    let text = "a\nb\nc";
    assert_eq!(head(text, Budget::lines(2), Cut::Char), "a\nb\n");
    assert_eq!(head(text, Budget::lines(3), Cut::Char), text);
    assert_eq!(
        split(text, Budget::lines(2), Boundary::Char),
        ["a\nb\n", "c"]
    );
}

#[test]
fn a_piece_inside_an_item_is_led_by_its_marker() {
    let text = "[User]: one two three four\nfive six\n[Assistant]: seven\n";
    let pieces = split_items(text, Budget::bytes(14), None);
    let cut: Vec<(&str, Option<Lead>)> = pieces
        .iter()
        .scan(0, |start, p| {
            let s = &text[*start..p.end];
            *start = p.end;
            Some((s, p.lead.clone()))
        })
        .collect();
    assert_eq!(
        cut,
        [
            ("[User]: one ", None),
            ("two three ", Some(Lead::new("[User]:", false))),
            ("four\nfive six\n", Some(Lead::new("[User]:", false))),
            ("[Assistant]: ", None),
            ("seven\n", Some(Lead::new("[Assistant]:", false))),
        ]
    );
}
