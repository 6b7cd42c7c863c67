//! Snippets: a short window of an item's text around what the query found, on one line.

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
    // The window, in characters of `flat` (normalize lowercased it, so take the text's own
    // characters from a flattened copy that kept the case).
    let original: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let chars: Vec<char> = original.chars().collect();
    let at_char = lower[..at].chars().count().min(chars.len());
    let mut start = at_char.saturating_sub(size / 3);
    let mut end = (start + size).min(chars.len());
    if end == chars.len() {
        start = end.saturating_sub(size);
    }
    // Move the cuts to word boundaries when one is near.
    if start > 0
        && let Some(space) = chars[start..at_char.max(start)]
            .iter()
            .position(|c| *c == ' ')
    {
        start += space + 1;
    }
    if end < chars.len()
        && let Some(space) = chars[start..end].iter().rposition(|c| *c == ' ')
        && space > (end - start) / 2
    {
        end = start + space;
    }
    let mut out = String::new();
    if start > 0 {
        out.push('…');
    }
    out.extend(&chars[start..end]);
    if end < chars.len() {
        out.push('…');
    }
    out
}
