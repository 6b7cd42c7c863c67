//! Text cut or wrapped to a terminal's width, measured in display cells: the one place panto
//! fits a row (`fit`, cut with `…`) or a sentence (`wrap_words`, between words) to a width.
//! Tables (`panto context`, `/context`, `panto sessions`, the picker), the meter and the
//! chat's region all go through here.

use unicode_width::UnicodeWidthChar;

/// The display width of `text` in terminal cells (a tab counts as one cell here).
pub(crate) fn width(text: &str) -> usize {
    text.chars().map(|c| c.width().unwrap_or(1)).sum()
}

/// `line` cut to `columns` display cells, ending with `…` when cut. Every row panto draws to a
/// width goes through here (tables, previews, the region's lines).
pub(crate) fn fit(line: &str, columns: usize) -> String {
    if width(line) <= columns {
        return line.to_owned();
    }
    let mut out = String::new();
    let mut used = 0;
    for c in line.chars() {
        let w = width(c.encode_utf8(&mut [0; 4]));
        if used + w + 1 > columns {
            break;
        }
        out.push(c);
        used += w;
    }
    out.push('…');
    out
}

/// `text` wrapped at word boundaries to lines of at most `columns` cells, the lines after the
/// first indented by `indent` spaces; a word longer than a line is cut with [`fit`], never
/// broken across lines.
pub(crate) fn wrap_words(text: &str, columns: usize, indent: usize) -> String {
    let body = text.trim_start_matches(' ');
    let first = text.len() - body.len();
    let mut out = " ".repeat(first);
    let mut used = first;
    let mut fresh = true;
    for word in body.split(' ').filter(|w| !w.is_empty()) {
        let word = fit(word, columns.saturating_sub(indent).max(1));
        let w = width(&word);
        if !fresh && used + 1 + w > columns {
            out.push('\n');
            out.push_str(&" ".repeat(indent));
            used = indent;
            fresh = true;
        }
        if !fresh {
            out.push(' ');
            used += 1;
        }
        out.push_str(&word);
        used += w;
        fresh = false;
    }
    out
}
