//! The needles of the recall exam: the exact strings a person asks about later, found in one
//! block of text by the patterns of [`Category`] ([`needles`]), and the kinds of block they come
//! from ([`Source`]). Regular expressions, written for the exam alone: this file shares no code
//! with the ledger, whose record the exam scores.

use std::sync::LazyLock;

use regex::Regex;

/// What a needle is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Category {
    /// Commit SHAs, hex colors, UUIDs: 6 to 64 hex digits with a digit and a letter (or a
    /// `#` color of 3, 6 or 8), not inside a word.
    HexId,
    /// A number with its key: `total: 37`, `offset=770`, `"fontSize": 14`.
    Number,
    /// A configuration value with its key: a line that is one `key: value` or `key = value`
    /// pair (quoted or one word), or an `ENV_VAR=value` anywhere; the value is not a number.
    Config,
    /// `http://` and `https://` URLs.
    Url,
    /// `path.ext:line[:column]` and `path.ext(line,column)`.
    PathLine,
    /// Versions: `1.2.3`, `v0.7.29`, `2.0.0-rc.1`.
    Version,
    /// The first line of a failed tool result, and lines of other tool output that say error,
    /// failed, panic, fatal or exception: at most 100 characters, cut at a word.
    ErrorLine,
    /// File paths: at least one folder and an extension.
    Path,
    /// Code names: identifiers of 6 characters or more with an inner capital or an underscore.
    Name,
    /// Shell commands: the first line of a tool call's `command` argument, at most 100
    /// characters, cut at a word.
    Command,
}

impl Category {
    pub(crate) const ALL: [Category; 10] = [
        Category::HexId,
        Category::Number,
        Category::Config,
        Category::Url,
        Category::PathLine,
        Category::Version,
        Category::ErrorLine,
        Category::Path,
        Category::Name,
        Category::Command,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Category::HexId => "hex ids",
            Category::Number => "numbers with their keys",
            Category::Config => "config values",
            Category::Url => "URLs",
            Category::PathLine => "path:line",
            Category::Version => "versions",
            Category::ErrorLine => "error lines",
            Category::Path => "file paths",
            Category::Name => "code names",
            Category::Command => "commands",
        }
    }
}

/// Where a needle was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Source {
    User,
    Assistant,
    /// A string argument of a tool call.
    Call,
    /// The output of a tool call that succeeded.
    Output,
    /// The output of a tool call that failed.
    Failure,
}

impl Source {
    pub(crate) const ALL: [Source; 5] = [
        Source::User,
        Source::Assistant,
        Source::Call,
        Source::Output,
        Source::Failure,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Source::User => "user text",
            Source::Assistant => "assistant text",
            Source::Call => "tool call arguments",
            Source::Output => "successful tool output",
            Source::Failure => "failed tool output",
        }
    }
}

pub(super) fn word_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// A needle found in a block: its category, answer and where it is in the block's text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Found {
    pub(crate) category: Category,
    pub(crate) answer: String,
    pub(crate) pair: Option<(String, String)>,
    pub(crate) start: usize,
    pub(crate) end: usize,
}

fn re(pattern: &str) -> Regex {
    Regex::new(pattern).expect("the exam's patterns are valid")
}

static HEX: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}|#?[0-9a-fA-F]{3,64}",
    )
});
/// A number with its key, inline: `key: 12`, `key=12`, `"key": 12` (not `key = 12`, which
/// inline is code; as a whole line it is configuration, [`NUMBER_LINE`]).
static NUMBER: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r#"([A-Za-z_][A-Za-z0-9_-]{0,40})(?:["']?:[ \t]?|=)(-?[0-9]+(?:\.[0-9]+)?(?:ms|s|%|[KMG]i?B|k)?)"#,
    )
});
/// A line that is one `key = number` (TOML, INI).
static NUMBER_LINE: LazyLock<Regex> = LazyLock::new(|| {
    re(r#"(?m)^[ \t]*([A-Za-z_][A-Za-z0-9_-]{0,40})[ \t]*=[ \t]*(-?[0-9]+(?:\.[0-9]+)?)[ \t]*$"#)
});
static CONFIG_LINE: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r#"(?m)^[ \t]*["']?([A-Za-z_][A-Za-z0-9_.-]{0,40})["']?[ \t]*([:=])[ \t]*("[^"\n]{1,80}"|'[^'\n]{1,80}'|[^\s,;{}\[\]"'`]{1,80})[ \t]*,?[ \t]*$"#,
    )
});
static ENV: LazyLock<Regex> = LazyLock::new(|| {
    re(r#"\b([A-Z][A-Z0-9_]{2,40})=("[^"\n]{1,80}"|'[^'\n]{1,80}'|[^\s"'`;|&)]{1,80})"#)
});
static URL: LazyLock<Regex> = LazyLock::new(|| re(r#"https?://[^\s"'`<>)\]}\\]+"#));
static PATH_LINE: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"(?:[\w.~@-]+/)*[\w.@-]*[\w-]\.[A-Za-z][A-Za-z0-9]{0,7}(?::[0-9]+(?::[0-9]+)?|\([0-9]+,[0-9]+\))",
    )
});
static VERSION: LazyLock<Regex> = LazyLock::new(|| {
    re(r"\bv?(?:0|[1-9][0-9]{0,3})\.[0-9]{1,4}\.[0-9]{1,4}(?:-[0-9A-Za-z]+(?:\.[0-9A-Za-z]+)*)?")
});
/// A line of output that reports an error: it starts with the word (after a `path:` or
/// `path(line,col):` prefix at most), or names a compiler's error code.
static ERROR_LINE: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"(?i)^(?:\S+:\s*)?(?:error|fatal|fail(?:ed|ure)?|panic(?:ked)?|exception|npm err!)\b|\b(?:error|warning)\[?\s?(?:TS|E)[0-9]+|: error:",
    )
});
static PATH: LazyLock<Regex> = LazyLock::new(|| {
    re(r"(?:~/|\.{1,2}/|/)?(?:[\w.@-]+/)+[\w.@-]*[\w-]\.[A-Za-z][A-Za-z0-9]{0,7}\b")
});
static NAME: LazyLock<Regex> = LazyLock::new(|| re(r"\b[A-Za-z_][A-Za-z0-9_]{5,59}\b"));
/// A query word.
pub(super) static WORD: LazyLock<Regex> = LazyLock::new(|| re(r"[A-Za-z][A-Za-z0-9_]{2,}"));

/// The needles of one block's text from `source`, in the order of the categories; `command`
/// when the block is a call's shell command.
pub(crate) fn needles(text: &str, source: Source, command: bool) -> Vec<Found> {
    let mut out = Vec::new();
    if command {
        command_line(text, &mut out);
    }
    hex_ids(text, &mut out);
    numbers(text, &mut out);
    configs(text, &mut out);
    simple(text, &URL, Category::Url, &mut out);
    path_lines(text, &mut out);
    versions(text, &mut out);
    if matches!(source, Source::Output | Source::Failure) {
        error_lines(text, source, &mut out);
    }
    paths(text, &mut out);
    names(text, &mut out);
    for f in &mut out {
        if f.category == Category::Url {
            let trimmed = f.answer.trim_end_matches(['.', ',', ';', ':']).len();
            f.end = f.start + trimmed;
            f.answer.truncate(trimmed);
        }
    }
    out
}

fn push(out: &mut Vec<Found>, category: Category, text: &str, start: usize, end: usize) {
    out.push(Found {
        category,
        answer: text[start..end].to_owned(),
        pair: None,
        start,
        end,
    });
}

fn simple(text: &str, pattern: &Regex, category: Category, out: &mut Vec<Found>) {
    for m in pattern.find_iter(text) {
        push(out, category, text, m.start(), m.end());
    }
}

/// The token around `start..end`: up to the nearest whitespace, quote or bracket.
fn token(text: &str, start: usize, end: usize) -> &str {
    let stop = |c: char| c.is_whitespace() || "\"'`()[]{}<>".contains(c);
    let from = text[..start].rfind(stop).map_or(0, |i| i + 1);
    let to = text[end..].find(stop).map_or(text.len(), |i| end + i);
    &text[from..to]
}

fn in_url(text: &str, start: usize, end: usize) -> bool {
    token(text, start, end).contains("://")
}

fn hex_ids(text: &str, out: &mut Vec<Found>) {
    for m in HEX.find_iter(text) {
        let s = m.as_str();
        let before = text[..m.start()].chars().next_back();
        let after = text[m.end()..].chars().next();
        if before.is_some_and(|c| word_char(c) || c == '-' || (c == '#' && !s.starts_with('#')))
            || after.is_some_and(|c| word_char(c) || c == '-')
            || in_url(text, m.start(), m.end())
        {
            continue;
        }
        let digits = s.trim_start_matches('#');
        let color = s.starts_with('#') && matches!(digits.len(), 3 | 6 | 8);
        let mixed = digits.len() >= 6
            && digits.chars().any(|c| c.is_ascii_digit())
            && digits.chars().any(|c| c.is_ascii_alphabetic());
        if s.contains('-') || color || mixed {
            push(out, Category::HexId, text, m.start(), m.end());
        }
    }
}

fn is_number(value: &str) -> bool {
    let v = value.strip_prefix('-').unwrap_or(value);
    !v.is_empty() && v.chars().all(|c| c.is_ascii_digit() || c == '.') && !v.starts_with('.')
}

fn numbers(text: &str, out: &mut Vec<Found>) {
    for c in NUMBER
        .captures_iter(text)
        .chain(NUMBER_LINE.captures_iter(text))
    {
        let (Some(whole), Some(k)) = (c.get(0), c.get(1)) else {
            continue;
        };
        let (key, value) = (k.as_str(), &c[2]);
        let before = text[..k.start()].chars().next_back();
        let after = text[whole.end()..].chars().next();
        if before.is_some_and(|c| word_char(c) || ".-/".contains(c))
            || after.is_some_and(|c| word_char(c) || c == '.' || c == ':')
            || !key.chars().any(|c| c.is_ascii_alphabetic())
            || matches!(key, "http" | "https")
            || in_url(text, whole.start(), whole.end())
        {
            continue;
        }
        let start = quoted_start(text, k.start());
        out.push(Found {
            category: Category::Number,
            answer: text[start..whole.end()].to_owned(),
            pair: Some((key.to_owned(), value.to_owned())),
            start,
            end: whole.end(),
        });
    }
}

/// Where a key starts, its opening quote included.
fn quoted_start(text: &str, key: usize) -> usize {
    match text[..key].chars().next_back() {
        Some(q @ ('"' | '\'')) => key - q.len_utf8(),
        _ => key,
    }
}

fn configs(text: &str, out: &mut Vec<Found>) {
    let lines = CONFIG_LINE.captures_iter(text).filter_map(|c| {
        let (key, sep, raw) = (c.get(1)?, c.get(2)?, c.get(3)?);
        // `this.x = y` and `a.b = c` are code, not configuration.
        let code = sep.as_str() == "=" && key.as_str().contains('.');
        (!code).then_some((key, raw))
    });
    let env = ENV
        .captures_iter(text)
        .filter_map(|c| Some((c.get(1)?, c.get(2)?)));
    for (key, raw) in lines.chain(env) {
        let value = raw.as_str().trim_matches(['"', '\'']).trim();
        if value.is_empty() || is_number(value) || value.contains("://") {
            continue;
        }
        let start = quoted_start(text, key.start());
        out.push(Found {
            category: Category::Config,
            answer: text[start..raw.end()].to_owned(),
            pair: Some((key.as_str().to_owned(), value.to_owned())),
            start,
            end: raw.end(),
        });
    }
}

fn path_lines(text: &str, out: &mut Vec<Found>) {
    for m in PATH_LINE.find_iter(text) {
        let after = text[m.end()..].chars().next();
        if in_url(text, m.start(), m.end()) || after.is_some_and(word_char) || host(m.as_str()) {
            continue;
        }
        push(out, Category::PathLine, text, m.start(), m.end());
    }
}

/// Whether a `name.ext:number` is a host and port (`example.com:8080`), not a file and line.
fn host(s: &str) -> bool {
    let Some((name, _)) = s.split_once(':') else {
        return false;
    };
    let tld = name.rsplit('.').next().unwrap_or("");
    !name.contains('/') && ["com", "org", "net", "io", "dev", "local", "localhost"].contains(&tld)
}

fn versions(text: &str, out: &mut Vec<Found>) {
    for m in VERSION.find_iter(text) {
        let before = text[..m.start()].chars().next_back();
        let rest = &text[m.end()..];
        let ip = rest.starts_with('.') && rest[1..].starts_with(|c: char| c.is_ascii_digit());
        if before.is_some_and(|c| c == '.' || c.is_ascii_digit())
            || ip
            || rest.starts_with(|c: char| word_char(c))
            || in_url(text, m.start(), m.end())
        {
            continue;
        }
        push(out, Category::Version, text, m.start(), m.end());
    }
}

/// At most 100 characters of a line, cut at a word when longer.
fn line_head(line: &str) -> &str {
    if line.len() <= 100 {
        return line;
    }
    let mut cut = 100;
    while !line.is_char_boundary(cut) {
        cut -= 1;
    }
    let head = &line[..cut];
    head.rfind(' ')
        .filter(|&i| i >= 40)
        .map_or(head, |i| &head[..i])
}

fn command_line(text: &str, out: &mut Vec<Found>) {
    let Some(line) = text.lines().map(str::trim).find(|l| !l.is_empty()) else {
        return;
    };
    let start = line.as_ptr() as usize - text.as_ptr() as usize;
    push(
        out,
        Category::Command,
        text,
        start,
        start + line_head(line).len(),
    );
}

fn error_lines(text: &str, source: Source, out: &mut Vec<Found>) {
    let mut first = source == Source::Failure;
    let mut at = 0;
    for line in text.split_inclusive('\n') {
        let start = at + (line.len() - line.trim_start().len());
        at += line.len();
        let trimmed = line.trim();
        if trimmed.is_empty() {
            continue;
        }
        if first || ERROR_LINE.is_match(trimmed) {
            let head = line_head(trimmed);
            if head.chars().count() >= 12 {
                push(out, Category::ErrorLine, text, start, start + head.len());
            }
        }
        first = false;
    }
}

fn paths(text: &str, out: &mut Vec<Found>) {
    for m in PATH.find_iter(text) {
        let after = text[m.end()..].chars().next();
        if in_url(text, m.start(), m.end()) || after.is_some_and(|c| c == '-' || c == '/') {
            continue;
        }
        push(out, Category::Path, text, m.start(), m.end());
    }
}

fn names(text: &str, out: &mut Vec<Found>) {
    for m in NAME.find_iter(text) {
        let s = m.as_str();
        let bytes = s.as_bytes();
        let camel = bytes
            .windows(2)
            .any(|w| w[0].is_ascii_lowercase() && w[1].is_ascii_uppercase());
        let snake = bytes
            .windows(3)
            .any(|w| w[1] == b'_' && w[0].is_ascii_alphanumeric() && w[2].is_ascii_alphanumeric());
        let before = text[..m.start()].chars().next_back();
        let after = text[m.end()..].chars().next();
        let in_path = before.is_some_and(|c| "/.-".contains(c))
            || after.is_some_and(|c| c == '/' || c == '-');
        if (camel || snake) && !in_path && !in_url(text, m.start(), m.end()) {
            push(out, Category::Name, text, m.start(), m.end());
        }
    }
}
