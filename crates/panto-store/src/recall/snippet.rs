//! Snippets: a short window of an item's text around what the query found, on one line.

use panto_transcript::cut::{Budget, Cut, head, tail};

/// The most characters a snippet holds, its `…` marks aside.
pub const SNIPPET_CHARS: usize = 240;

/// A window of `text` of at most [`SNIPPET_CHARS`] characters around the first of `needles`
/// found in it (case aside; the start of the text when none is), whitespace runs as one space,
/// cut at word boundaries where it can be, with `…` where text was left out.
pub fn snippet(text: &str, needles: &[&str]) -> String {
    snippet_near(text, needles, None, SNIPPET_CHARS)
}

/// [`snippet`] of at most `size` characters (a third of them before the match), cut around the
/// byte offset `near` of `text` (the window of the query's terms that ranked the item,
/// [`super::near`]) when none of `needles` is found.
pub(crate) fn snippet_near(
    text: &str,
    needles: &[&str],
    near: Option<usize>,
    size: usize,
) -> String {
    let flat = super::query::normalize(text);
    let lower = &flat;
    let found = needles
        .iter()
        .filter(|n| !n.is_empty())
        .find_map(|n| lower.find(&n.to_lowercase()));
    let at = match (found, near) {
        (Some(at), _) => at,
        // Where `near` falls in the flattened text: the flattened length of what precedes it,
        // and the space that separated them.
        (None, Some(near)) if near > 0 && near <= text.len() && text.is_char_boundary(near) => {
            let before = super::query::normalize(&text[..near]);
            let space = !before.is_empty() && text[..near].ends_with(char::is_whitespace);
            let at = before.len() + usize::from(space);
            if at <= lower.len() && lower.is_char_boundary(at) {
                at
            } else {
                0
            }
        }
        _ => 0,
    };
    // The window, cut by the one cutter around the match in a flattened copy that kept the
    // case (normalize lowercased `flat`, so the match is found there by its character count).
    let original: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let at_char = lower[..at].chars().count();
    let at_byte = original
        .char_indices()
        .nth(at_char)
        .map_or(original.len(), |(i, _)| i);
    let (before, after) = original.split_at(at_byte);
    // A third of the room before the match, more when the text ends sooner after it.
    let before_room = (size / 3).max(size.saturating_sub(after.chars().count()));
    let shown_before = tail(before, Budget::chars(before_room), Cut::Nearest);
    let after_room = size - before.chars().count().min(before_room);
    let shown_after = head(after, Budget::chars(after_room), Cut::Nearest);
    let mut out = String::with_capacity(shown_before.len() + shown_after.len() + 6);
    if shown_before.len() < before.len() {
        out.push('…');
    }
    out.push_str(shown_before);
    if shown_after.len() < after.len() {
        out.push_str(shown_after.trim_end_matches(' '));
        out.push('…');
    } else {
        out.push_str(shown_after);
    }
    out
}
