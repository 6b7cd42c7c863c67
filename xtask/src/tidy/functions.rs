//! The function check: no function's body runs past [`LONG_FUNCTION`] lines unless the
//! function says why (a comment line starting `Why long:` among the doc comments, comments and
//! attributes just above it).
//!
//! A file's code is what comes before its inline test module (`code_lines`, shared with the
//! file check); test files do not count. Functions are found with the module check's lexer, so
//! braces inside strings, comments and character literals never move an end.

use super::lex::{Tok, Token, tokens};

/// The most lines a function spans, from its `fn` line to its closing brace, before it must
/// say why.
pub(crate) const LONG_FUNCTION: usize = 100;

/// Whether the file at `path` holds only tests (a `tests.rs`, anything under a `tests/`
/// folder), which neither the file check nor the function check counts.
pub(crate) fn is_test_file(path: &str) -> bool {
    path.ends_with("/tests.rs") || path.contains("/tests/")
}

/// How many of the lines of `text` are code: those before its inline test module (a
/// `#[cfg(test)]` line followed by `mod NAME {` at the top level). A test module in a file of its own
/// (`#[cfg(test)] mod tests;`) is a declaration: the code goes on after it.
pub(crate) fn code_lines(text: &str) -> usize {
    let lines: Vec<&str> = text.lines().collect();
    lines
        .windows(2)
        .position(|w| w[0].trim() == "#[cfg(test)]" && opens_inline_module(w[1]))
        .unwrap_or(lines.len())
}

/// Whether `line` opens a module of the file's top level whose body follows inline
/// (`mod tests {`), rather than declaring one in a file of its own (`mod tests;`).
fn opens_inline_module(line: &str) -> bool {
    let Some(rest) = line
        .strip_prefix("mod ")
        .or_else(|| line.strip_prefix("pub(crate) mod "))
    else {
        return false;
    };
    let name_end = rest
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(rest.len());
    rest[name_end..].trim_start().starts_with('{')
}

/// The functions of the file at `path` (its text `text`) that span more than
/// [`LONG_FUNCTION`] lines and do not say why: each its name, line and span.
pub(crate) fn long_functions(path: &str, text: &str) -> Vec<Span> {
    if is_test_file(path) {
        return Vec::new();
    }
    let lines: Vec<&str> = text.lines().collect();
    let code = code_lines(text);
    spans(&tokens(text))
        .into_iter()
        .filter(|span| span.first <= code)
        .filter(|span| span.lines() > LONG_FUNCTION && !says_why(&lines, span.first))
        .collect()
}

/// The long functions that were long when this check came (issue 42), each a file and a
/// function's name: they pass until split, and the list only shrinks (a function listed here
/// that is no longer long is a problem too, so that its line goes). A new long function says
/// why or is split; it is never added here.
pub(crate) const KNOWN_LONG: [(&str, &str); 17] = [
    ("crates/panto-cli/src/commands/compact.rs", "compact"),
    ("crates/panto-cli/src/config/layers.rs", "load"),
    ("crates/panto-cli/src/config/rows.rs", "rows"),
    ("crates/panto-cli/src/ui.rs", "describe_event"),
    ("crates/panto-compact/src/error.rs", "fmt"),
    ("crates/panto-model/src/serde_impl/blocks.rs", "visit_body"),
    ("crates/panto-providers/src/anthropic/answer.rs", "event"),
    ("crates/panto-session/src/load.rs", "load"),
    ("xtask/src/bench/cost.rs", "cost"),
    ("xtask/src/bench/stores.rs", "stores"),
    ("xtask/src/e2e/provision.rs", "server"),
    ("xtask/src/e2e/suite/overflow.rs", "recovered"),
    ("xtask/src/e2e/suite/pressure.rs", "twice_the_window"),
    ("xtask/src/e2e.rs", "run"),
    ("xtask/src/quality.rs", "extract"),
    ("xtask/src/tidy/lex.rs", "tokens"),
    ("xtask/src/tidy/modules.rs", "read_file"),
];

/// The problems of the long functions `found` (each a file and its long function), against the
/// `known` ones: a long function not known, and a known one no longer long.
pub(crate) fn problems(found: &[(String, Span)], known: &[(&str, &str)]) -> Vec<String> {
    let is_known = |path: &str, name: &str| known.iter().any(|&(p, n)| p == path && n == name);
    let mut problems: Vec<String> = found
        .iter()
        .filter(|(path, span)| !is_known(path, &span.name))
        .map(|(path, span)| {
            format!(
                "{path}:{}: the function `{}` spans {} lines, past {LONG_FUNCTION}: split it into steps, or say why above it (`// Why long: ...`)",
                span.first,
                span.name,
                span.lines()
            )
        })
        .collect();
    for &(path, name) in known {
        if !found.iter().any(|(p, span)| p == path && span.name == name) {
            problems.push(format!(
                "{path}: the function `{name}` is no longer past {LONG_FUNCTION} lines: drop it from KNOWN_LONG (xtask/src/tidy/functions.rs)"
            ));
        }
    }
    problems
}

/// A function with a body: its name and the lines (from 1) of its `fn` and its closing brace.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Span {
    pub(crate) name: String,
    pub(crate) first: usize,
    pub(crate) last: usize,
}

impl Span {
    fn lines(&self) -> usize {
        self.last - self.first + 1
    }
}

/// The functions with bodies among `toks`, nested ones included.
pub(crate) fn spans(toks: &[Token]) -> Vec<Span> {
    let mut out = Vec::new();
    for (i, token) in toks.iter().enumerate() {
        if token.tok != Tok::Ident("fn".to_owned()) {
            continue;
        }
        // `fn(u8) -> u8` is a type, not a function.
        let Some(Tok::Ident(name)) = toks.get(i + 1).map(|t| &t.tok) else {
            continue;
        };
        let Some(open) = body_start(toks, i + 2) else {
            continue;
        };
        if let Some(close) = matching_brace(toks, open) {
            out.push(Span {
                name: name.clone(),
                first: token.line,
                last: toks[close].line,
            });
        }
    }
    out
}

/// Where the body of the function whose signature starts at `from` opens: the first `{` outside
/// parentheses and brackets, unless a `;` (a declaration without a body) comes first.
fn body_start(toks: &[Token], from: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (i, token) in toks.iter().enumerate().skip(from) {
        match token.tok {
            Tok::Punct('(' | '[') => depth += 1,
            Tok::Punct(')' | ']') => depth = depth.saturating_sub(1),
            Tok::Punct('{') if depth == 0 => return Some(i),
            Tok::Punct(';') if depth == 0 => return None,
            _ => {}
        }
    }
    None
}

/// The `}` that closes the `{` at `open`.
fn matching_brace(toks: &[Token], open: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (i, token) in toks.iter().enumerate().skip(open) {
        match token.tok {
            Tok::Punct('{') => depth += 1,
            Tok::Punct('}') => {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
    }
    None
}

/// Whether the comments and attributes just above line `first` (from 1) hold a line starting
/// `Why long:`.
fn says_why(lines: &[&str], first: usize) -> bool {
    lines[..first - 1]
        .iter()
        .rev()
        .map(|l| l.trim())
        .take_while(|l| l.starts_with("//") || l.starts_with("#["))
        .any(|l| {
            l.trim_start_matches('/')
                .trim_start_matches('!')
                .trim_start()
                .starts_with("Why long:")
        })
}
