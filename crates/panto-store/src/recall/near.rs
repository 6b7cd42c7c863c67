//! Nearness: how many of a query's terms an item holds close together, and where.
//!
//! BM25 scores an item by its terms wherever they are, so a long file dump that has the query's
//! words scattered over its thousand lines ranks like one that has them on three neighbouring
//! lines. The second stage of ranking reads each candidate's text anyway; there it finds the
//! window of [`WINDOW`] consecutive chunks (words, identifiers) that holds the most distinct
//! query terms. That count orders candidates of one tier before their BM25 score, and the
//! window's place is where the snippet is cut. Both depend on the item's text and the query
//! only, so every store computes them alike.

use std::collections::VecDeque;

use super::terms::{chunks, for_each_term};

/// The chunks one window spans.
pub(crate) const WINDOW: usize = 24;

/// The best window of an item's text for a query.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Near {
    /// How many distinct query terms the window holds.
    pub(crate) terms: u32,
    /// The byte offset in the text of the window's first chunk that holds a query term.
    pub(crate) at: usize,
}

/// The window of [`WINDOW`] chunks of `text` holding the most distinct of `query` (the first
/// such window when several tie); no terms at offset 0 when the text holds none.
pub(crate) fn nearest(text: &str, query: &[String]) -> Near {
    let mut best = Near::default();
    if query.is_empty() {
        return best;
    }
    // The chunks holding a query term in the window: (chunk number, byte offset, term numbers).
    let mut window: VecDeque<(usize, usize, Vec<usize>)> = VecDeque::new();
    let mut counts = vec![0u32; query.len()];
    let mut distinct = 0u32;
    for (n, chunk) in chunks(text).enumerate() {
        let mut held: Vec<usize> = Vec::new();
        for_each_term(chunk, |t| {
            if let Some(i) = query.iter().position(|q| q == t)
                && !held.contains(&i)
            {
                held.push(i);
            }
        });
        if held.is_empty() {
            continue;
        }
        while window.front().is_some_and(|(m, _, _)| m + WINDOW <= n) {
            if let Some((_, _, gone)) = window.pop_front() {
                for i in gone {
                    counts[i] -= 1;
                    if counts[i] == 0 {
                        distinct -= 1;
                    }
                }
            }
        }
        for &i in &held {
            if counts[i] == 0 {
                distinct += 1;
            }
            counts[i] += 1;
        }
        let at = chunk.as_ptr() as usize - text.as_ptr() as usize;
        window.push_back((n, at, held));
        if distinct > best.terms {
            best = Near {
                terms: distinct,
                at: window.front().map_or(at, |(_, a, _)| *a),
            };
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(words: &[&str]) -> Vec<String> {
        words.iter().map(|w| (*w).to_owned()).collect()
    }

    #[test]
    fn the_window_with_the_most_query_terms_wins() {
        let filler = "lorem ".repeat(100);
        let text = format!("alpha {filler} beta {filler} gamma alpha delta beta tail");
        let near = nearest(&text, &q(&["alpha", "beta", "delta"]));
        assert_eq!(near.terms, 3);
        assert_eq!(&text[near.at..near.at + 5], "alpha");
        assert!(
            near.at > 400,
            "the second alpha, not the first: {}",
            near.at
        );
    }

    #[test]
    fn terms_farther_apart_than_the_window_do_not_count_together() {
        let filler = "x ".repeat(WINDOW);
        let text = format!("alpha {filler} beta");
        assert_eq!(nearest(&text, &q(&["alpha", "beta"])).terms, 1);
        let close = format!("alpha {} beta", "x ".repeat(WINDOW - 2));
        assert_eq!(nearest(&close, &q(&["alpha", "beta"])).terms, 2);
    }

    #[test]
    fn a_term_repeated_counts_once_and_no_term_is_nothing() {
        assert_eq!(nearest("alpha alpha alpha", &q(&["alpha"])).terms, 1);
        assert_eq!(nearest("nothing here", &q(&["alpha"])), Near::default());
        assert_eq!(nearest("alpha", &[]), Near::default());
    }

    /// The most distinct query terms any window of [`WINDOW`] chunks holds, by trying them all.
    fn by_brute_force(text: &str, query: &[String]) -> u32 {
        let held: Vec<Vec<usize>> = chunks(text)
            .map(|c| {
                let mut h = Vec::new();
                for_each_term(c, |t| h.extend(query.iter().position(|q| q == t)));
                h
            })
            .collect();
        (0..held.len())
            .map(|start| {
                let mut seen: Vec<usize> = held[start..(start + WINDOW).min(held.len())]
                    .iter()
                    .flatten()
                    .copied()
                    .collect();
                seen.sort_unstable();
                seen.dedup();
                seen.len() as u32
            })
            .max()
            .unwrap_or(0)
    }

    proptest::proptest! {
        /// The sliding window finds what trying every window finds, and its place starts a
        /// chunk that holds a query term.
        #[test]
        fn the_sliding_window_is_the_best_window(
            words in proptest::collection::vec("(alpha|beta|gamma|delta|x|y|z|Alpha_beta)", 0..120),
            query in proptest::collection::vec("(alpha|beta|gamma|delta|alpha_beta)", 0..4),
        ) {
            let text = words.join(" ");
            let near = nearest(&text, &query);
            proptest::prop_assert_eq!(near.terms, by_brute_force(&text, &query));
            if near.terms > 0 {
                let first = chunks(&text[near.at..]).next().unwrap_or_default();
                let mut holds = false;
                for_each_term(first, |t| holds |= query.iter().any(|q| q == t));
                proptest::prop_assert!(holds, "{first:?} holds no query term");
            }
        }
    }

    #[test]
    fn identifiers_and_their_parts_are_found_as_the_index_finds_them() {
        let text = "see src/migrate.rs:88 where parseConfig fails";
        let near = nearest(text, &q(&["migrate.rs", "config", "fails"]));
        assert_eq!(near.terms, 3);
        assert_eq!(
            &text[near.at..],
            "src/migrate.rs:88 where parseConfig fails"
        );
    }
}
