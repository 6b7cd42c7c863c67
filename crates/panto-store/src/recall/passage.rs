//! Passages: the larger window of a hit's text that the recall tool shows its model, made of
//! whole lines.
//!
//! A snippet ([`super::snippet`]) is one line of 240 characters for a person's list. A passage
//! has the room of several hundred to a few thousand characters, and a tool's output is made of
//! lines: a passage keeps them (each line's whitespace runs made one space) and chooses which,
//! in this order while its room lasts:
//! 1. the line the query matched (where the window holding most of its terms starts,
//!    [`super::near`], else its first exact string);
//! 2. the text's first line, which says what a tool's output is (the command's first words, a
//!    failed call's error);
//! 3. half of the room for the lines around the match, a third before and two thirds after;
//! 4. the lines elsewhere that hold one of the query's exact strings, then those that say
//!    error, failed, panic, fatal or exception (what a person asks for later), nearest to the
//!    match first, each at most [`MARKED_LINE`] characters;
//! 5. the rest of the room for more lines around the match.
//!
//! Lines not shown are marked by a `…` line. A text whose matched line alone is longer than
//! two thirds of the room (minified JSON, one long log line) gets the one-line window of
//! [`super::snippet`] instead.

use std::collections::HashSet;

use panto_transcript::cut::{Budget, Cut, head};

use super::near::Near;
use super::query::{Query, normalize};

/// The most characters a line around the match shows before it is cut.
const AROUND_LINE: usize = 400;

/// The most characters a line chosen away from the match shows (step 4), and the text's first
/// line (step 2).
pub(crate) const MARKED_LINE: usize = 200;

/// Words that mark a line worth showing wherever it is (case aside).
const MARKS: [&str; 5] = ["error", "failed", "panic", "fatal", "exception"];

/// One line of the text: its byte offset and its text with whitespace runs as one space.
struct Line {
    start: usize,
    text: String,
    chars: usize,
}

/// The passage of at most about `chars` characters of `text` for `query`, whose best window
/// of terms is `near`.
pub(crate) fn cut(text: &str, query: &Query, near: Near, chars: usize) -> String {
    let exact: Vec<&str> = query.exact.iter().map(|e| e.needle.as_str()).collect();
    let lines = lines(text);
    let total: usize = lines.iter().map(|l| l.chars + 1).sum();
    if total <= chars + 1 {
        return lines
            .iter()
            .map(|l| l.text.as_str())
            .collect::<Vec<_>>()
            .join("\n");
    }
    let anchor = anchor(&lines, query, &exact, near);
    if lines[anchor].chars * 3 > chars * 2 {
        return super::cut_passage(text, query, near, chars);
    }
    // Each `…` line marking what is left out takes 2 characters: the run around the match
    // has one before and one after, and each line shown apart from it may start another.
    let mut chosen = Chosen::new(&lines, chars.saturating_sub(4));
    chosen.take(anchor, usize::MAX, 0);
    chosen.take(0, MARKED_LINE, 2);
    let half = chosen.left() / 2;
    chosen.grow(anchor, half);
    let lowered: Vec<String> = lines.iter().map(|l| l.text.to_lowercase()).collect();
    let mut marked: Vec<(u8, usize, usize)> = lowered
        .iter()
        .enumerate()
        .filter_map(|(i, l)| {
            let rank = if exact.iter().any(|e| !e.is_empty() && l.contains(e)) {
                0
            } else if MARKS.iter().any(|m| l.contains(m)) {
                1
            } else {
                return None;
            };
            Some((rank, i.abs_diff(anchor), i))
        })
        .collect();
    marked.sort_unstable();
    // A line like one shown says nothing more (`"created_at": ...` in every record).
    let mut seen: HashSet<&str> = chosen.shown_texts();
    for (_, _, i) in marked {
        if seen.insert(lines[i].text.as_str()) {
            chosen.take(i, MARKED_LINE, 2);
        }
    }
    let rest = chosen.left();
    chosen.grow(anchor, rest);
    chosen.render()
}

/// The lines of `text`, each with its whitespace runs made one space.
fn lines(text: &str) -> Vec<Line> {
    let mut out = Vec::new();
    let mut start = 0;
    for raw in text.split('\n') {
        let flat = raw.split_whitespace().collect::<Vec<_>>().join(" ");
        out.push(Line {
            start,
            chars: flat.chars().count(),
            text: flat,
        });
        start += raw.len() + 1;
    }
    out
}

/// The line the query matched: the one where the window holding most of its terms near each
/// other starts (its identifiers are terms too, so this is where most of what it asks is),
/// else the first holding an exact string (a hex id prefix is no whole term), else the first
/// holding a term, else the first.
fn anchor(lines: &[Line], query: &Query, exact: &[&str], near: Near) -> usize {
    if near.terms > 0 {
        return lines
            .iter()
            .rposition(|l| l.start <= near.at)
            .unwrap_or_default();
    }
    let lowered = |l: &Line| normalize(&l.text);
    if let Some(i) = lines.iter().position(|l| {
        let low = lowered(l);
        exact.iter().any(|e| !e.is_empty() && low.contains(e))
    }) {
        return i;
    }
    lines
        .iter()
        .position(|l| {
            let low = lowered(l);
            query.terms.iter().any(|t| low.contains(t.as_str()))
        })
        .unwrap_or_default()
}

/// The lines chosen so far, each with the most characters it shows, and the room left.
struct Chosen<'a> {
    lines: &'a [Line],
    shown: Vec<Option<usize>>,
    room: usize,
}

impl<'a> Chosen<'a> {
    fn new(lines: &'a [Line], room: usize) -> Chosen<'a> {
        Chosen {
            lines,
            shown: vec![None; lines.len()],
            room,
        }
    }

    fn left(&self) -> usize {
        self.room
    }

    /// Shows line `i` (at most `most` characters of it, and `extra` more for the room a `…`
    /// line beside it may take) if it is not shown and fits; whether it is shown now.
    fn take(&mut self, i: usize, most: usize, extra: usize) -> bool {
        if self.shown[i].is_some() {
            return true;
        }
        let cost = self.lines[i].chars.min(most) + 1 + extra;
        if cost > self.room {
            return false;
        }
        self.room -= cost;
        self.shown[i] = Some(most);
        true
    }

    /// The texts of the lines shown.
    fn shown_texts(&self) -> HashSet<&'a str> {
        self.shown
            .iter()
            .zip(self.lines)
            .filter(|(shown, _)| shown.is_some())
            .map(|(_, l)| l.text.as_str())
            .collect()
    }

    /// Shows lines around `at` worth about `budget` characters, a third of them before it and
    /// the rest after (all before it when the text ends first), until the room, the budget or
    /// the text ends; a side stops at a line too long for the room left.
    fn grow(&mut self, at: usize, budget: usize) {
        let stop = self.room.saturating_sub(budget);
        let mut before = budget / 3;
        let (mut up, mut down) = (at, at);
        let (mut up_open, mut down_open) = (true, true);
        while self.room > stop {
            let can_up = up_open && up > 0 && before > 0;
            let can_down = down_open && down + 1 < self.lines.len();
            if !can_up && !can_down {
                if up_open && up > 0 && before == 0 {
                    before = usize::MAX;
                    continue;
                }
                break;
            }
            if can_up {
                up -= 1;
                let room = self.room;
                if self.take(up, AROUND_LINE, 0) {
                    before = before.saturating_sub(room - self.room);
                } else {
                    up_open = false;
                }
            }
            if can_down && self.room > stop {
                down += 1;
                down_open = self.take(down, AROUND_LINE, 0);
            }
        }
    }

    /// The lines shown, in order, a `…` line for each run left out; a line cut (at a word where
    /// that keeps most of it) shows `…` at its end.
    fn render(&self) -> String {
        let mut out: Vec<String> = Vec::new();
        let mut gap = false;
        for (line, shown) in self.lines.iter().zip(&self.shown) {
            match shown {
                Some(most) => {
                    if gap {
                        out.push("…".to_owned());
                        gap = false;
                    }
                    if line.chars > *most {
                        let room = Budget::chars(most.saturating_sub(1));
                        let kept = head(&line.text, room, Cut::Nearest).trim_end_matches(' ');
                        out.push(format!("{kept}…"));
                    } else {
                        out.push(line.text.clone());
                    }
                }
                None => gap = true,
            }
        }
        if gap {
            out.push("…".to_owned());
        }
        out.join("\n")
    }
}

#[cfg(test)]
mod tests {
    use super::super::{near::nearest, passage as of};
    use super::*;

    fn numbered(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("line {i} of the output")).collect()
    }

    #[test]
    fn a_text_that_fits_is_whole_with_its_lines() {
        let text = "first  line\n\tsecond line\nthird";
        assert_eq!(of(text, "second", 1_000), "first line\nsecond line\nthird");
    }

    #[test]
    fn an_error_line_far_from_the_match_is_shown() {
        let mut lines = numbered(400);
        lines[20] = "warning: unused import in migrate.rs".to_owned();
        lines[300] = "error[E0308]: mismatched types in parse_config".to_owned();
        let text = lines.join("\n");
        let shown = of(&text, "unused import warning", 1_200);
        assert!(
            shown.contains("warning: unused import in migrate.rs"),
            "{shown}"
        );
        assert!(
            shown.contains("error[E0308]: mismatched types in parse_config"),
            "{shown}"
        );
        assert!(shown.chars().count() <= 1_200, "{}", shown.chars().count());
    }

    #[test]
    fn the_first_line_says_what_the_output_is() {
        let mut lines = numbered(400);
        lines[0] = "Exit code 101".to_owned();
        lines[250] = "the migration of the table went wrong".to_owned();
        let text = lines.join("\n");
        let shown = of(&text, "migration table wrong", 800);
        assert!(shown.starts_with("Exit code 101\n…\n"), "{shown}");
        assert!(shown.contains("the migration of the table went wrong"));
    }

    #[test]
    fn lines_around_the_match_are_whole_a_third_before_it() {
        let mut lines = numbered(400);
        lines[200] = "needle here".to_owned();
        let text = lines.join("\n");
        let shown = of(&text, "needle", 600);
        let kept: Vec<&str> = shown.lines().filter(|l| *l != "…").collect();
        for l in &kept {
            assert!(lines.iter().any(|x| x == l), "{l:?} is not a whole line");
        }
        let at = kept.iter().position(|l| *l == "needle here").unwrap();
        assert!(at > 2 && at * 2 < kept.len(), "{at} of {}", kept.len());
    }

    #[test]
    fn a_line_holding_the_exact_string_elsewhere_is_shown() {
        let mut lines = numbered(400);
        lines[10] = "deploy token abc123def456 issued".to_owned();
        lines[350] = "deploy again with abc123def456".to_owned();
        let text = lines.join("\n");
        let shown = of(&text, "abc123def456", 500);
        assert!(shown.contains("deploy token abc123def456 issued"));
        assert!(shown.contains("deploy again with abc123def456"), "{shown}");
    }

    #[test]
    fn the_window_of_most_terms_beats_a_lone_exact_string() {
        let mut lines = numbered(400);
        lines[5] = "deps/ash_sqlite/mix.exs".to_owned();
        for (i, dep) in ["ecto_sqlite3", "db_connection", "ash_sql", "ecto_sql"]
            .iter()
            .enumerate()
        {
            lines[300 + i] = format!("deps/{dep}/mix.exs");
        }
        let text = lines.join("\n");
        let shown = of(&text, "db_connection ash_sql ecto_sqlite3", 400);
        assert!(shown.contains("deps/ecto_sql/mix.exs"), "{shown}");
    }

    #[test]
    fn a_line_like_one_shown_is_not_shown_again() {
        let mut lines = numbered(600);
        for i in [100, 300, 500] {
            lines[i] = "\"created_at\": \"2026-02-10\",".to_owned();
        }
        lines[301] = "\"issue_id\": \"spotter-2qx.1\",".to_owned();
        let text = lines.join("\n");
        let shown = of(&text, "created_at issue_id", 300);
        assert_eq!(shown.matches("created_at").count(), 1, "{shown}");
        assert!(shown.contains("spotter-2qx.1"), "{shown}");
    }

    #[test]
    fn one_long_line_gets_a_window_around_the_match() {
        let text = format!("{} needle {}", "a ".repeat(2_000), "b ".repeat(2_000));
        let shown = of(&text, "needle", 300);
        assert!(shown.contains("needle"));
        assert!(shown.chars().count() <= 302);
    }

    proptest::proptest! {
        /// A passage keeps to its room and shows lines of the text (whole or cut at their end
        /// with `…`), in order, the matched line among them.
        #[test]
        fn a_passage_keeps_to_its_room_and_shows_lines_of_the_text(
            words in proptest::collection::vec(
                "(alpha|beta|error|x|y|zz|\\n|\\n|\\n|failed: code 3|longer-word-here)", 0..300),
            query in "(alpha|beta|error|gamma)( beta)?",
            room in 40usize..1_500,
        ) {
            let text = words.join(" ");
            let shown = of(&text, &query, room);
            proptest::prop_assert!(shown.chars().count() <= room + 2, "{} > {room}", shown.chars().count());
            let flat: Vec<String> = lines(&text).into_iter().map(|l| l.text).collect();
            let parsed = Query::parse(&query);
            let near = nearest(&text, &parsed.terms);
            let whole: usize = flat.iter().map(|l| l.chars().count() + 1).sum();
            let exact: Vec<&str> = parsed.exact.iter().map(|e| e.needle.as_str()).collect();
            let at = anchor(&lines(&text), &parsed, &exact, near);
            if whole <= room + 1 || flat[at].chars().count() * 3 > room * 2 {
                return Ok(());
            }
            let mut next = 0;
            for l in shown.lines().filter(|l| *l != "…") {
                let found = (next..flat.len()).find(|&i| {
                    flat[i] == l || l.strip_suffix('…').is_some_and(|p| flat[i].starts_with(p))
                });
                proptest::prop_assert!(found.is_some(), "{l:?} is no later line of the text");
                next = found.unwrap_or_default() + 1;
            }
            proptest::prop_assert!(shown.lines().any(|l| l == flat[at]), "the matched line {:?}", flat[at]);
        }
    }
}
