//! Terms: the one tokenizer recall uses, for the index and the query alike, so every store's
//! index is fed the same terms and an identifier query finds the same items everywhere.
//!
//! Text is cut into *chunks* at whitespace and at the characters that never sit inside an
//! identifier (quotes, brackets, commas, `=`, ...). Every chunk gives its *words*: its runs of
//! letters and digits, lowercased, and the parts of a `snake_case` or `CamelCase` run. A chunk
//! that holds an identifier (a path, `path:line`, a URL, a version, `#123`, a dotted or dashed
//! name) also gives itself whole, lowercased, with its tails after each `/` and each of those
//! without a trailing `:line[:col]`; a run of at least [`HEX_PREFIX`] hex digits with a digit
//! and a letter gives a prefix term, so a short SHA finds the whole one.

/// The length of the hex prefix term: git's shortest abbreviation.
pub(crate) const HEX_PREFIX: usize = 7;

/// Marks the terms the tokenizer makes that no text spells (hex prefixes).
const INTERNAL: char = '\u{1}';

/// The most variants one chunk gives (a deep path gives one per folder).
const MAX_VARIANTS: usize = 12;

/// Whether `c` ends a chunk.
fn separates(c: char) -> bool {
    c.is_whitespace()
        || matches!(
            c,
            '"' | '\''
                | '`'
                | '('
                | ')'
                | '['
                | ']'
                | '{'
                | '}'
                | '<'
                | '>'
                | ','
                | ';'
                | '|'
                | '='
        )
}

/// The chunks of `text`, with the punctuation that ends a sentence trimmed off each.
pub(crate) fn chunks(text: &str) -> impl Iterator<Item = &str> {
    text.split(separates).filter_map(|c| {
        let c = c.trim_matches(|c: char| matches!(c, '.' | ':' | '!' | '?' | '*' | '\\'));
        (!c.is_empty()).then_some(c)
    })
}

/// Calls `f` with every index term of `text`, repeated as often as it occurs.
pub(crate) fn for_each_term(text: &str, mut f: impl FnMut(&str)) {
    let mut buf = String::new();
    for chunk in chunks(text) {
        words(chunk, &mut buf, &mut f);
        if is_identifier(chunk) {
            let mut seen: Vec<String> = Vec::new();
            for v in variants(chunk) {
                if !seen.contains(&v) {
                    f(&v);
                    seen.push(v);
                }
            }
        }
        hex_prefixes(chunk, &mut buf, &mut f);
    }
}

/// The index terms of `text`, in order, repeated as they occur.
pub fn terms(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for_each_term(text, |t| out.push(t.to_owned()));
    out
}

/// Gives the words of `chunk`: each `snake_case` name whole, each alphanumeric run lowercased
/// and, when it has more than one, its `CamelCase` parts.
fn words(chunk: &str, buf: &mut String, f: &mut impl FnMut(&str)) {
    for name in chunk.split(|c: char| !c.is_alphanumeric() && c != '_') {
        let name = name.trim_matches('_');
        if name.contains('_') {
            buf.clear();
            buf.extend(name.chars().flat_map(char::to_lowercase));
            f(buf);
        }
    }
    for run in chunk.split(|c: char| !c.is_alphanumeric()) {
        if run.is_empty() {
            continue;
        }
        buf.clear();
        buf.extend(run.chars().flat_map(char::to_lowercase));
        f(buf);
        let parts = camel_parts(run);
        if parts.len() > 1 {
            for p in parts {
                buf.clear();
                buf.extend(p.chars().flat_map(char::to_lowercase));
                f(buf);
            }
        }
    }
}

/// The parts of a `CamelCase` run: a new part starts at an upper-case letter after a lower-case
/// one or a digit, and before the last of several upper-case letters followed by a lower-case
/// one (`HTTPServer` is `HTTP` and `Server`).
fn camel_parts(run: &str) -> Vec<&str> {
    let chars: Vec<(usize, char)> = run.char_indices().collect();
    let mut parts = Vec::new();
    let mut start = 0;
    for i in 1..chars.len() {
        let (at, c) = chars[i];
        let prev = chars[i - 1].1;
        let next_lower = chars.get(i + 1).is_some_and(|(_, n)| n.is_lowercase());
        let boundary = c.is_uppercase()
            && (prev.is_lowercase() || prev.is_numeric() || (prev.is_uppercase() && next_lower));
        if boundary {
            parts.push(&run[start..at]);
            start = at;
        }
    }
    parts.push(&run[start..]);
    parts
}

/// Whether a chunk is an identifier worth finding whole: alphanumerics joined by the marks
/// that build paths, URLs, versions, ids and references (`/ . : # - _ @ ~ + %`).
pub(crate) fn is_identifier(chunk: &str) -> bool {
    let mut alnum = false;
    let mut mark = false;
    for c in chunk.chars() {
        if c.is_alphanumeric() {
            alnum = true;
        } else if matches!(c, '/' | '.' | ':' | '#' | '-' | '_' | '@' | '~' | '+' | '%') {
            mark = true;
        } else {
            return false;
        }
    }
    alnum && mark
}

/// The whole identifier, lowercased, its tails after each `/`, and each of those without a
/// trailing `:line` or `:line:col`.
fn variants(chunk: &str) -> Vec<String> {
    let whole: String = chunk.chars().flat_map(char::to_lowercase).collect();
    let mut forms = vec![whole.clone()];
    for (i, c) in whole.char_indices() {
        if c == '/' && i + 1 < whole.len() {
            forms.push(whole[i + 1..].to_owned());
        }
    }
    let mut out = Vec::new();
    for form in forms {
        if let Some(path) = without_line(&form) {
            out.push(path.to_owned());
        }
        out.push(form);
        if out.len() >= MAX_VARIANTS {
            break;
        }
    }
    out.retain(|v| v.chars().any(char::is_alphanumeric));
    out
}

/// `path` of `path:12` or `path:12:5`, when the path is not empty.
fn without_line(form: &str) -> Option<&str> {
    let mut end = form.len();
    for _ in 0..2 {
        let Some(colon) = form[..end].rfind(':') else {
            break;
        };
        let digits = &form[colon + 1..end];
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            break;
        }
        end = colon;
    }
    (end < form.len() && end > 0).then(|| &form[..end])
}

/// Whether a run is a hex id: at least [`HEX_PREFIX`] hex digits, with a digit and a letter.
pub(crate) fn is_hex(run: &str) -> bool {
    run.len() >= HEX_PREFIX
        && run.bytes().all(|b| b.is_ascii_hexdigit())
        && run.bytes().any(|b| b.is_ascii_digit())
        && run.bytes().any(|b| b.is_ascii_alphabetic())
}

/// The prefix term of a hex id (`\u{1}` and its first [`HEX_PREFIX`] digits, lowercased).
pub(crate) fn hex_term(run: &str) -> String {
    let mut t = String::with_capacity(HEX_PREFIX + 1);
    t.push(INTERNAL);
    t.extend(run[..HEX_PREFIX].chars().map(|c| c.to_ascii_lowercase()));
    t
}

fn hex_prefixes(chunk: &str, buf: &mut String, f: &mut impl FnMut(&str)) {
    for run in chunk.split(|c: char| !c.is_ascii_alphanumeric()) {
        if is_hex(run) {
            *buf = hex_term(run);
            f(buf);
        }
    }
}

/// Words a query leaves out of its ranking unless it has nothing else: they are in nearly
/// every item, and questions are full of them.
const STOPWORDS: &[&str] = &[
    "a", "an", "and", "are", "as", "at", "be", "by", "did", "do", "does", "for", "from", "had",
    "has", "have", "how", "i", "in", "is", "it", "its", "me", "my", "of", "on", "or", "our", "so",
    "that", "the", "their", "them", "then", "there", "these", "this", "to", "us", "was", "we",
    "were", "what", "when", "where", "which", "who", "why", "will", "with", "you", "your",
];

/// Whether a query word is a stopword.
pub(crate) fn is_stopword(word: &str) -> bool {
    STOPWORDS.binary_search(&word).is_ok()
}
