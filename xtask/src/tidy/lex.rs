//! A small Rust lexer for the module check: identifiers, punctuation, `::` and string literals
//! with their line numbers, comments and character literals left out.
//!
//! It knows only what the module check needs: where `mod`, `use` and paths starting with
//! `crate`, `super` and `self` are, and never mistakes text inside a comment or a string for
//! them. Numbers and lifetimes are skipped.

/// One token of Rust source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Tok {
    /// An identifier or keyword (a raw identifier without its `r#`).
    Ident(String),
    /// `::`.
    PathSep,
    /// Any other punctuation character.
    Punct(char),
    /// A string literal's text, escapes left as written.
    Str(String),
}

/// A token and the line (from 1) it starts on.
#[derive(Clone, Debug)]
pub(crate) struct Token {
    pub(crate) tok: Tok,
    pub(crate) line: usize,
}

/// The tokens of `source`.
pub(crate) fn tokens(source: &str) -> Vec<Token> {
    let chars: Vec<char> = source.chars().collect();
    let mut out = Vec::new();
    let mut line = 1;
    let mut i = 0;
    // Counts the newlines of `chars[from..to]`.
    let lines_in = |from: usize, to: usize| chars[from..to].iter().filter(|&&c| c == '\n').count();
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c.is_whitespace() {
            i += 1;
        } else if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let start = i;
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            line += lines_in(start, i);
        } else if let Some(end) = raw_string_end(&chars, i) {
            let (start, hashes) = end;
            let body_start = start;
            let mut j = body_start;
            let closing: Vec<char> = std::iter::once('"')
                .chain(std::iter::repeat_n('#', hashes))
                .collect();
            while j < chars.len() && !chars[j..].starts_with(&closing) {
                j += 1;
            }
            let text: String = chars[body_start..j.min(chars.len())].iter().collect();
            out.push(Token {
                tok: Tok::Str(text),
                line,
            });
            line += lines_in(i, j.min(chars.len()));
            i = (j + closing.len()).min(chars.len());
        } else if c == '"' || ((c == 'b' || c == 'c') && next == Some('"')) {
            let open = if c == '"' { i } else { i + 1 };
            let mut j = open + 1;
            while j < chars.len() && chars[j] != '"' {
                if chars[j] == '\\' {
                    j += 1;
                }
                j += 1;
            }
            let text: String = chars[open + 1..j.min(chars.len())].iter().collect();
            out.push(Token {
                tok: Tok::Str(text),
                line,
            });
            line += lines_in(i, j.min(chars.len()));
            i = j + 1;
        } else if c == '\'' || (c == 'b' && next == Some('\'')) {
            i = skip_quote(&chars, if c == 'b' { i + 1 } else { i });
        } else if c == 'r'
            && next == Some('#')
            && chars.get(i + 2).is_some_and(|&c| is_ident_start(c))
        {
            let start = i + 2;
            let mut j = start;
            while j < chars.len() && is_ident_char(chars[j]) {
                j += 1;
            }
            out.push(Token {
                tok: Tok::Ident(chars[start..j].iter().collect()),
                line,
            });
            i = j;
        } else if is_ident_start(c) {
            let start = i;
            while i < chars.len() && is_ident_char(chars[i]) {
                i += 1;
            }
            out.push(Token {
                tok: Tok::Ident(chars[start..i].iter().collect()),
                line,
            });
        } else if c.is_ascii_digit() {
            while i < chars.len() && (is_ident_char(chars[i])) {
                i += 1;
            }
        } else if c == ':' && next == Some(':') {
            out.push(Token {
                tok: Tok::PathSep,
                line,
            });
            i += 2;
        } else {
            out.push(Token {
                tok: Tok::Punct(c),
                line,
            });
            i += 1;
        }
    }
    out
}

fn is_ident_start(c: char) -> bool {
    c == '_' || c.is_alphabetic()
}

fn is_ident_char(c: char) -> bool {
    c == '_' || c.is_alphanumeric()
}

/// Where the body of a raw string starting at `i` (`r"`, `r#"`, `br"`, `cr#"`, ...) begins,
/// and its number of `#`s; `None` when no raw string starts there.
fn raw_string_end(chars: &[char], i: usize) -> Option<(usize, usize)> {
    let mut j = i;
    if matches!(chars.get(j), Some('b' | 'c')) {
        j += 1;
    }
    if chars.get(j) != Some(&'r') {
        return None;
    }
    // A raw string is never the tail of an identifier (`bar"` is not one).
    if i > 0 && is_ident_char(chars[i - 1]) {
        return None;
    }
    j += 1;
    let mut hashes = 0;
    while chars.get(j) == Some(&'#') {
        hashes += 1;
        j += 1;
    }
    (chars.get(j) == Some(&'"')).then_some((j + 1, hashes))
}

/// Skips the character literal or lifetime whose `'` is at `i`, returning the index after it.
fn skip_quote(chars: &[char], i: usize) -> usize {
    match (chars.get(i + 1), chars.get(i + 2)) {
        // An escaped character: up to the closing quote.
        (Some('\\'), _) => {
            let mut j = i + 2;
            while j < chars.len() && chars[j] != '\'' {
                j += 1;
            }
            j + 1
        }
        // One character between quotes.
        (Some(_), Some('\'')) => i + 3,
        // A lifetime or a label: its name is skipped with it.
        _ => {
            let mut j = i + 1;
            while j < chars.len() && is_ident_char(chars[j]) {
                j += 1;
            }
            j
        }
    }
}
