//! Finding the exact identifiers in one text ([`scan`]): hex ids, numbers and configuration
//! values with their keys, URLs, `path:line`, versions, error lines, file paths and code names,
//! each given to the caller as the exact text it is written as.
//!
//! One pass over the bytes (here) reads the words (runs of ASCII letters, digits and `_`) and
//! the few bytes that can start or end an identifier (`:`, `=`, `(`, `#`, a line's end, and the
//! bytes that end a token). A word is looked at closer only when its classes or neighbours can
//! make it part of one (a digit, an inner capital or underscore, a `:` or `=` after it, a dot
//! before it, `http`): what a word tells is `words.rs`, what ends in a file's extension
//! `paths.rs`, what a whole line tells (at its end) `lines.rs`. Every tool output of a
//! summarized part goes through here, so the pass keeps what it needs of the token and the path
//! it is in (whether the token holds `://`, where the run of path bytes started, the last `/`)
//! instead of looking back. The rules, by kind ([`IdentifierKind`]):
//!
//! - **hex ids**: a word of 6 to 64 hex digits with a digit and a letter, a `#` color of 3, 6
//!   or 8 hex digits, or a UUID; not after a word byte, `-` or `#`, nor before a word byte or
//!   `-`, nor in a URL;
//! - **numbers**: `key: 12`, `key=12`, `"key": 12` (a unit `ms`, `s`, `%`, `k`, `KB`, `MiB`, ...
//!   may follow), and a line that is one `key = 12`; the key starts with a letter or `_`;
//! - **values**: a line that is one `key: value` or `key = value` pair (the value quoted and not
//!   empty, or one word without `,;{}[]` or quotes; a key with a dot and `=` is code, `a::b` a
//!   path and `x://` a URL, not configuration), and `ENV_VAR=value` anywhere; a value that is a
//!   number is a number instead;
//! - **URLs**: from `http://` or `https://` to a space, quote, backtick, `<`, `>`, `)`, `]`, `}`
//!   or backslash, less a final `.`, `,`, `;` or `:`;
//! - **`path:line`**: `file.ext:12`, `file.ext:12:3` and `file.ext(12,3)`, the extension a
//!   letter and up to seven letters or digits; not inside a URL, not a host and port;
//! - **versions**: `1.2.3`, `v0.7.29`, `2.0.0-rc.1` (at most four digits a part, no leading zero
//!   but a lone `0`); not an IP address nor after a dot or a digit;
//! - **error lines** (in tool output only): the first three non-empty lines of a failed result,
//!   and every line of any result that begins with error, fatal, failed, failure, panic or
//!   exception (after one `word:` at most) or names a compiler's error code (`error TS2554`,
//!   `error[E0308]`, `: error:`); trimmed and cut to [`ERROR_LINE_BYTES`] at a word;
//! - **file paths**: a folder and an extension (`src/a.rs`, `~/.pi/x.json`), at most
//!   [`MAX_PATH`] bytes, not going on into another folder or a word joined by `-`;
//! - **code names**: a word of 6 to 60 characters, not starting with a digit, with a lowercase
//!   letter before a capital or an underscore between letters or digits, not in a path or URL.
//!
//! Bytes outside ASCII count as word bytes next to an identifier, so an identifier is never cut
//! out of a longer word in another script.

mod lines;
mod paths;
#[cfg(test)]
mod tests;
mod words;

/// The most bytes of an error line the record keeps.
pub(super) const ERROR_LINE_BYTES: usize = 200;
/// How many of a failed result's first non-empty lines are error lines.
const FAILED_LINES: usize = 3;

/// A kind of identifier.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum IdentifierKind {
    HexId,
    Number,
    Value,
    Url,
    PathLine,
    Version,
    ErrorLine,
    Path,
    Name,
}

/// The kinds, in the order the record lists and a rendering shows them.
pub(super) const KINDS: [IdentifierKind; 9] = [
    IdentifierKind::HexId,
    IdentifierKind::Number,
    IdentifierKind::Value,
    IdentifierKind::Url,
    IdentifierKind::PathLine,
    IdentifierKind::Version,
    IdentifierKind::ErrorLine,
    IdentifierKind::Path,
    IdentifierKind::Name,
];

impl IdentifierKind {
    /// Its place in [`KINDS`], which lists the kinds in the order they are declared: every
    /// identifier found picks its table by it.
    pub(super) fn index(self) -> usize {
        self as usize
    }

    /// The kind's name in a rendering, singular and plural.
    pub(super) fn names(self) -> (&'static str, &'static str) {
        match self {
            IdentifierKind::HexId => ("hex id", "hex ids"),
            IdentifierKind::Number => ("number", "numbers"),
            IdentifierKind::Value => ("value", "values"),
            IdentifierKind::Url => ("URL", "URLs"),
            IdentifierKind::PathLine => ("path:line", "path:line"),
            IdentifierKind::Version => ("version", "versions"),
            IdentifierKind::ErrorLine => ("error line", "error lines"),
            IdentifierKind::Path => ("path", "paths"),
            IdentifierKind::Name => ("name", "names"),
        }
    }
}

/// What a text is, for the kinds that depend on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Origin {
    /// A user's or assistant's text, or a tool call's argument.
    Said,
    /// The output of a tool call that succeeded.
    Output,
    /// The output of a tool call that failed.
    Failed,
}

/// Calls `found` with each identifier of `text` and its kind: those of a word when the word is
/// read, those of a whole line when the line ends.
pub(super) fn scan(text: &str, origin: Origin, found: &mut impl FnMut(IdentifierKind, &str)) {
    scan_with::<true>(text, origin, found);
}

/// [`scan`] without its shortcuts (`FAST` false): every byte through the pass's general step
/// and every code name looked at whole. The tests hold the two to the same identifiers.
#[cfg(test)]
fn scan_reference(text: &str, origin: Origin, found: &mut impl FnMut(IdentifierKind, &str)) {
    scan_with::<false>(text, origin, found);
}

fn scan_with<const FAST: bool>(
    text: &str,
    origin: Origin,
    found: &mut impl FnMut(IdentifierKind, &str),
) {
    Scanner::<_, FAST> {
        text,
        bytes: text.as_bytes(),
        found,
        url: false,
        path: 0,
        slash: None,
    }
    .run(origin);
}

/// A byte of a word next to which no identifier starts or ends: an ASCII letter, digit or `_`,
/// or any byte outside ASCII.
const WORD: u16 = 1;
const HEX: u16 = 2;
const DIGIT: u16 = 4;
/// A byte the pass looks closer at: `:`, `=`, `(`, `#`, and every byte that ends a token.
const MARK: u16 = 8;
/// An ASCII letter, digit or `_`: a byte of the words the pass reads.
const ASCII_WORD: u16 = 16;
const LOWER: u16 = 32;
const UPPER: u16 = 64;
/// A byte that ends a token: whitespace, a quote, a backtick or a bracket.
const STOP: u16 = 128;
const UNDERSCORE: u16 = 256;
/// A byte of a path: an ASCII letter, digit or `_`, or one of `.~@/-`.
const PATH: u16 = 512;
/// A byte after a word that makes it a key: `:`, `=`, a quote.
const KEYED: u16 = 1024;
/// An ASCII word byte that is not a hex digit, and one that is not a digit: a word holds only
/// hex digits (only digits) when none of its bytes has the bit.
const NOT_HEX: u16 = 2048;
const NOT_DIGIT: u16 = 4096;
/// A byte of a pair line's key: a word byte, `.` or `-`.
const KEY: u16 = 8192;
/// A byte that no one-word value of a pair line holds: ASCII whitespace or one of
/// ``,;{}[]"'` ``.
const VALUE_END: u16 = 16384;
/// A byte that ends a URL: ASCII whitespace or one of ``"'`<>)]}\``.
const URL_END: u16 = 32768;

static CLASS: [u16; 256] = {
    let mut t = [0u16; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        let mut k = 0;
        if c.is_ascii_alphanumeric() || c == b'_' {
            k |= WORD | ASCII_WORD | PATH;
        }
        if matches!(c, b'.' | b'~' | b'@' | b'/' | b'-') {
            k |= PATH;
        }
        if matches!(c, b':' | b'=' | b'"' | b'\'') {
            k |= KEYED;
        }
        if c == b'_' {
            k |= UNDERSCORE;
        }
        if c >= 0x80 {
            k |= WORD;
        }
        if c.is_ascii_hexdigit() {
            k |= HEX;
        } else if c.is_ascii_alphanumeric() || c == b'_' {
            k |= NOT_HEX;
        }
        if (c.is_ascii_alphanumeric() || c == b'_') && !c.is_ascii_digit() {
            k |= NOT_DIGIT;
        }
        if c.is_ascii_digit() {
            k |= DIGIT;
        }
        if c.is_ascii_lowercase() {
            k |= LOWER;
        }
        if c.is_ascii_uppercase() {
            k |= UPPER;
        }
        let bracket = matches!(c, b'(' | b')' | b'[' | b']' | b'{' | b'}' | b'<' | b'>');
        if c.is_ascii_whitespace() || bracket || matches!(c, b'"' | b'\'' | b'`') {
            k |= STOP | MARK;
        }
        if matches!(c, b':' | b'=' | b'#') {
            k |= MARK;
        }
        if c.is_ascii_alphanumeric() || c == b'_' || c >= 0x80 || matches!(c, b'.' | b'-') {
            k |= KEY;
        }
        if c.is_ascii_whitespace()
            || matches!(
                c,
                b',' | b';' | b'{' | b'}' | b'[' | b']' | b'"' | b'\'' | b'`'
            )
        {
            k |= VALUE_END;
        }
        if c.is_ascii_whitespace()
            || matches!(
                c,
                b'"' | b'\'' | b'`' | b'<' | b'>' | b')' | b']' | b'}' | b'\\'
            )
        {
            k |= URL_END;
        }
        t[b] = k;
        b += 1;
    }
    t
};

fn class(b: u8) -> u16 {
    CLASS[b as usize]
}

fn is_word(b: u8) -> bool {
    class(b) & WORD != 0
}

fn is_digit(b: u8) -> bool {
    class(b) & DIGIT != 0
}

/// An ASCII word and the classes of its bytes, gathered in one pass.
#[derive(Clone, Copy)]
struct Word {
    from: usize,
    to: usize,
    /// The classes of every byte, or-ed.
    any: u16,
    /// The classes of every byte but the first, or-ed.
    rest: u16,
}

impl Word {
    fn len(&self) -> usize {
        self.to - self.from
    }
}

/// What the pass knows of the line it is in.
struct Line {
    /// Where it starts.
    start: usize,
    /// Whether it holds a `:` or `=`.
    pair: bool,
    /// Where its first `:` is.
    colon: Option<usize>,
    /// Whether it holds the word "error" (any case).
    error: bool,
    /// How many non-empty lines of a failed result came before it.
    failed: usize,
}

impl Line {
    /// The next line, from `start`, after this one.
    fn next(&mut self, start: usize) {
        self.start = start;
        self.pair = false;
        self.colon = None;
        self.error = false;
    }
}

/// The pass over one text. `FAST` takes the shortcuts that skip work whose outcome is known
/// (a space, a word that cannot be a code name); [`scan_reference`] does without them.
struct Scanner<'t, 'f, F, const FAST: bool> {
    text: &'t str,
    bytes: &'t [u8],
    found: &'f mut F,
    /// Whether the token being read (the bytes since the last whitespace, quote or bracket)
    /// holds `://` so far: what follows is part of a URL.
    url: bool,
    /// Where the run of path bytes being read started.
    path: usize,
    /// The last `/` read.
    slash: Option<usize>,
}

/// The most bytes a path runs back from its extension; a longer run is no path.
const MAX_PATH: usize = 1024;

impl<F: FnMut(IdentifierKind, &str), const FAST: bool> Scanner<'_, '_, F, FAST> {
    fn run(&mut self, origin: Origin) {
        let n = self.bytes.len();
        let mut i = 0;
        let mut line = Line {
            start: 0,
            pair: false,
            colon: None,
            error: false,
            failed: 0,
        };
        while i < n {
            let b = self.bytes[i];
            let k = class(b);
            if k & ASCII_WORD != 0 {
                let w = self.read_word(i);
                if w.len() == 5 && b | 0x20 == b'e' {
                    line.error |= self.bytes[i..w.to].eq_ignore_ascii_case(b"error");
                }
                self.word(w);
                i = w.to;
                continue;
            }
            if FAST && b == b' ' {
                // The most common byte between words: it ends a token and a path, no more.
                self.url = false;
                self.path = i + 1;
                i += 1;
                continue;
            }
            if k & MARK != 0 {
                match b {
                    b'\n' => {
                        self.line(&mut line, i, origin);
                        line.next(i + 1);
                    }
                    b':' => {
                        line.pair = true;
                        line.colon = line.colon.or(Some(i));
                        self.url |= self.bytes[i + 1..].starts_with(b"//");
                    }
                    b'=' => line.pair = true,
                    b'(' => self.paren_position(i),
                    b'#' => self.color(i),
                    _ => {}
                }
                if k & STOP != 0 {
                    self.url = false;
                }
            }
            if k & PATH == 0 {
                self.path = i + 1;
            } else if b == b'/' {
                self.slash = Some(i);
            }
            i += 1;
        }
        self.line(&mut line, n, origin);
    }

    /// The ASCII word that starts at `from`, read once.
    fn read_word(&self, from: usize) -> Word {
        let bytes = self.bytes;
        let first = class(bytes[from]);
        let mut rest = 0u16;
        let mut j = from + 1;
        while j < bytes.len() {
            let k = class(bytes[j]);
            if k & ASCII_WORD == 0 {
                break;
            }
            rest |= k;
            j += 1;
        }
        Word {
            from,
            to: j,
            any: first | rest,
            rest,
        }
    }

    fn at(&self, i: usize) -> u8 {
        self.bytes.get(i).copied().unwrap_or(b' ')
    }

    fn before(&self, i: usize) -> u8 {
        if i == 0 { b' ' } else { self.bytes[i - 1] }
    }

    fn emit(&mut self, kind: IdentifierKind, from: usize, to: usize) {
        (self.found)(kind, &self.text[from..to]);
    }

    /// The ASCII word `w`: a hex id, a URL's scheme, a version's first part, the key of a
    /// number or an environment variable, a file's extension or a code name. Most words are
    /// none of these, and are told so by their classes and neighbours alone.
    fn word(&mut self, w: Word) {
        let (from, to) = (w.from, w.to);
        let first = self.bytes[from];
        // Most words are plain: no digit, no capital or underscore after the first byte (no
        // code name), no `:`, `=` or quote after them (no key), no dot before them (no
        // extension), not `h` first (no URL's scheme). Told by a few tests, before the rules'.
        if FAST
            && (w.any & DIGIT) | (w.rest & (UPPER | UNDERSCORE)) == 0
            && class(self.at(to)) & KEYED == 0
            && self.before(from) != b'.'
            && first != b'h'
        {
            return;
        }
        let named = w.len() >= 6
            && ((w.rest & UPPER != 0 && w.any & LOWER != 0) || w.rest & UNDERSCORE != 0);
        let keyed = self.may_be_key(w);
        // A file's extension: a dot before it, and a folder before that in the same path.
        let dotted = self.before(from) == b'.' && self.slash.is_some_and(|s| s >= self.path);
        let scheme = first == b'h' && matches!(w.len(), 4 | 5);
        if w.any & DIGIT == 0 && !named && !keyed && !dotted && !scheme {
            return;
        }
        if scheme
            && matches!(&self.bytes[from..to], b"http" | b"https")
            && self.bytes[to..].starts_with(b"://")
        {
            self.url(from);
            return;
        }
        if w.any & NOT_HEX == 0 && w.len() >= 6 && self.hex(w) {
            return;
        }
        if is_digit(first) || (first == b'v' && is_digit(self.at(from + 1))) {
            self.version(from, to);
        }
        if keyed {
            self.keyed(from, to);
        }
        if dotted {
            self.file_path(from, to);
        } else if named {
            self.name(w);
        }
    }

    /// Whether what follows the word `w` may make it a key with a number (`key: 12`, `key=12`,
    /// `"key": 12`), a file's extension with a line (`a.rs:12`), or an environment variable
    /// (`KEY=value`): a `:` or `=`, after a quote at most, then a digit, a space and a digit,
    /// or a minus; or `=` after a capital letter.
    fn may_be_key(&self, w: Word) -> bool {
        let mut at = w.to;
        if matches!(self.at(at), b'"' | b'\'') {
            at += 1;
        }
        let sep = self.at(at);
        if sep != b':' && sep != b'=' {
            return false;
        }
        let next = self.at(at + 1);
        let number = is_digit(next)
            || (next == b'-' && is_digit(self.at(at + 2)))
            || (sep == b':' && matches!(next, b' ' | b'\t') && is_digit(self.at(at + 2)));
        number || (sep == b'=' && at == w.to && w.any & LOWER == 0)
    }
}
