//! Escaping: how message text, names and JSON are written so that they can never forge a role
//! marker or an envelope tag, and how the parser reads them back.
//!
//! Text rule (see the crate docs for the user-facing statement):
//!
//! - At a *line start* (the start of the text when the caller says so, and every position right
//!   after one of the seven line terminators LF, VT, FF, CR, NEL, LS, PS), a run of zero or more
//!   backslashes followed by `[` and a reserved word ([`MARKER_WORDS`], ASCII case-insensitive)
//!   gets one more backslash in front.
//! - Anywhere, a `<` followed by zero or more backslashes, an optional `/` and a reserved tag name
//!   ([`TAG_NAMES`], ASCII case-insensitive) gets one backslash right after the `<`.
//!
//! Unescaping removes exactly one backslash at the same places, so the two are inverse
//! bijections. Inserted backslashes are never line terminators and never `<`, and neither match
//! window can contain the other's trigger, so the places are the same before and after escaping.
//!
//! JSON (tool arguments, and names or ids that are not plain tokens) needs no text escaping of
//! its own: `serde_json` already escapes the ASCII terminators, and [`SafeJson`] writes NEL, LS,
//! PS and a `<` that opens a reserved tag as `\u` escapes, which JSON reads back as the same
//! characters.

use std::io;

/// Where rendering writes: the text itself (a `String`), or only its length ([`Len`]), so
/// that one pass can measure exactly what the next one writes.
pub(crate) trait Sink {
    /// Appends `s`.
    fn push_str(&mut self, s: &str);

    /// Appends `c`.
    fn push(&mut self, c: char) {
        self.push_str(c.encode_utf8(&mut [0; 4]));
    }

    /// Appends `value` as compact JSON through [`SafeJson`].
    fn push_json<T: serde::Serialize + ?Sized>(&mut self, value: &T);

    /// Appends `s` escaped by `escaper` ([`Escaper::push`]).
    fn push_escaped(&mut self, escaper: &mut Escaper, s: &str)
    where
        Self: Sized,
    {
        escaper.push(self, s);
    }

    /// Appends the JSON text `raw` compactly ([`write_raw_json`]).
    fn push_raw_json(&mut self, raw: &str)
    where
        Self: Sized,
    {
        write_raw_json(self, raw);
    }
}

impl Sink for String {
    fn push_str(&mut self, s: &str) {
        String::push_str(self, s);
    }

    fn push(&mut self, c: char) {
        String::push(self, c);
    }

    fn push_json<T: serde::Serialize + ?Sized>(&mut self, value: &T) {
        write_json(self, value);
    }
}

/// A [`Sink`] that only counts the bytes written to it.
#[derive(Debug, Default)]
pub(crate) struct Len(pub(crate) usize);

impl Sink for Len {
    fn push_str(&mut self, s: &str) {
        self.0 += s.len();
    }

    fn push(&mut self, c: char) {
        self.0 += c.len_utf8();
    }

    fn push_json<T: serde::Serialize + ?Sized>(&mut self, value: &T) {
        let mut ser = serde_json::Serializer::with_formatter(&mut *self, SafeJson);
        // As in `write_json`: serialising a `Value` or a `str` cannot fail here.
        let _ = value.serialize(&mut ser);
    }
}

/// A [`Sink`] that counts an upper bound of the bytes written to it, without escaping and
/// without reading the texts: escaping a text adds at most one backslash per `[` or `<` it
/// holds, so at most its own length; writing JSON text compactly adds at most five bytes per
/// `<` (`\u003c`), four per NEL and three per LS or PS (their first bytes, `C2` and `E2`, are
/// counted wherever they are), and drops whitespace. Names, ids and other JSON are short and
/// counted exactly. Texts are most of a transcript and are counted from their lengths alone, so
/// the bound reads only JSON and the short parts; it is the size a transcript's buffer is
/// reserved with, untouched memory where it is loose, given back once the text is written
/// ([`crate::render`]).
#[derive(Debug, Default)]
pub(crate) struct Bound(pub(crate) usize);

impl Sink for Bound {
    fn push_str(&mut self, s: &str) {
        self.0 += s.len();
    }

    fn push_json<T: serde::Serialize + ?Sized>(&mut self, value: &T) {
        let mut len = Len::default();
        len.push_json(value);
        self.0 += len.0;
    }

    fn push_escaped(&mut self, _escaper: &mut Escaper, s: &str) {
        self.0 += 2 * s.len();
    }

    fn push_raw_json(&mut self, raw: &str) {
        self.0 += raw.len() + raw_json_bound(raw.as_bytes());
    }
}

/// The most bytes [`write_raw_json`] can add to JSON text `b`: five per `<`, four per `C2`
/// (NEL's first byte), three per `E2` (LS's and PS's).
fn raw_json_bound(b: &[u8]) -> usize {
    b.chunks(4096)
        .map(|c| {
            let n = c.iter().fold(0u16, |n, &x| {
                n + 5 * u16::from(x == b'<') + 4 * u16::from(x == 0xC2) + 3 * u16::from(x == 0xE2)
            });
            usize::from(n)
        })
        .sum()
}

impl io::Write for Len {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0 += buf.len();
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Words that, after `[` at a line start, could read as a role marker. Matched ASCII
/// case-insensitively as prefixes, so `[Users` and `[TOOLING` are escaped too. `system` is not
/// a marker of this format; it is reserved so that text cannot pose as a system prompt either.
pub(crate) const MARKER_WORDS: [&[u8]; 5] = [b"user", b"assistant", b"tool", b"summary", b"system"];

/// The tag names of the request envelope, matched ASCII case-insensitively as prefixes.
pub(crate) const TAG_NAMES: [&[u8]; 2] = [b"transcript", b"previous-summary"];

/// Whether `b` ends with a line terminator: LF, VT, FF, CR, NEL (C2 85), LS (E2 80 A8) or
/// PS (E2 80 A9).
fn ends_with_break(b: &[u8]) -> bool {
    matches!(
        b,
        [.., 0x0A..=0x0D] | [.., 0xC2, 0x85] | [.., 0xE2, 0x80, 0xA8 | 0xA9]
    )
}

fn starts_with_ci(b: &[u8], word: &[u8]) -> bool {
    b.len() >= word.len() && b[..word.len()].eq_ignore_ascii_case(word)
}

/// Whether `b[i..]` starts with a reserved marker word.
#[inline]
fn word_at(b: &[u8], i: usize) -> bool {
    // Every reserved word starts with one of these letters: most brackets are rejected here.
    if !matches!(b.get(i).map(|c| c | 0x20), Some(b'u' | b'a' | b't' | b's')) {
        return false;
    }
    let rest = &b[i..];
    MARKER_WORDS.iter().any(|w| starts_with_ci(rest, w))
}

/// The start of the run of backslashes that ends right before `j`.
#[inline]
fn run_start(b: &[u8], j: usize) -> usize {
    let mut k = j;
    while k > 0 && b[k - 1] == b'\\' {
        k -= 1;
    }
    k
}

/// Whether `b[i..]` (the bytes right after a `<`) is `\`* `/`? tag-name.
#[inline]
fn tag_at(b: &[u8], i: usize) -> bool {
    let mut j = i;
    while j < b.len() && b[j] == b'\\' {
        j += 1;
    }
    if j < b.len() && b[j] == b'/' {
        j += 1;
    }
    // Both tag names start with `t` or `p`: most angle brackets are rejected here.
    if !matches!(b.get(j).map(|c| c | 0x20), Some(b't' | b'p')) {
        return false;
    }
    let rest = &b[j..];
    TAG_NAMES.iter().any(|w| starts_with_ci(rest, w))
}

/// Whether `b[i..]` (right after a `<`) is `/`? tag-name, with no backslashes: the JSON case.
fn json_tag_at(b: &[u8], i: usize) -> bool {
    let j = if b.get(i) == Some(&b'/') { i + 1 } else { i };
    let rest = &b[j.min(b.len())..];
    TAG_NAMES.iter().any(|w| starts_with_ci(rest, w))
}

/// The position of the next `[` or `<` at or after `from`.
///
/// A short plain loop first, so that markup dense with brackets does not pay a `memchr` call per
/// byte or two; `memchr` then skips long unremarkable runs many bytes at a time.
#[inline]
fn next_special(b: &[u8], from: usize) -> Option<usize> {
    const NEAR: usize = 16;
    let near = (from + NEAR).min(b.len());
    if let Some(k) = b[from.min(near)..near]
        .iter()
        .position(|&c| c == b'[' || c == b'<')
    {
        return Some(from + k);
    }
    memchr::memchr2(b'[', b'<', &b[near..]).map(|k| near + k)
}

/// Calls `f` with the position of every `[` and `<` in `b`, in order.
#[inline]
fn for_each_special(b: &[u8], mut f: impl FnMut(usize)) {
    let mut from = 0;
    while let Some(j) = next_special(b, from) {
        f(j);
        from = j + 1;
    }
}

/// Writes text escaped, possibly in several pieces that together form one logical text.
///
/// The scan looks only for `[` and `<` (see [`next_special`]): a marker needs a `[` after its backslashes, and whether the backslash
/// run before that `[` starts a line is read backwards. This finds exactly the places of the
/// forward rule in the module docs.
///
/// Invariant: pushing pieces `a` then `b` writes exactly what pushing `a + b` would, as long as
/// no marker or tag window straddles the seam (true whenever the seam is at a line terminator,
/// which is how the renderer joins the text blocks of a tool result).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Escaper {
    line_start: bool,
}

impl Escaper {
    /// An escaper whose first byte is (`true`) or is not (`false`) at a line start.
    pub(crate) fn new(line_start: bool) -> Escaper {
        Escaper { line_start }
    }

    /// Whether position `k` of `b` (the current piece) is a line start.
    #[inline]
    fn line_start_at(self, b: &[u8], k: usize) -> bool {
        if k == 0 {
            self.line_start
        } else {
            ends_with_break(&b[..k])
        }
    }

    /// Appends `s`, escaped, to `out`.
    pub(crate) fn push(&mut self, out: &mut impl Sink, s: &str) {
        let b = s.as_bytes();
        let mut copied = 0;
        let this = *self;
        for_each_special(b, |j| {
            if b[j] == b'[' {
                if word_at(b, j + 1) {
                    let k = run_start(b, j);
                    if this.line_start_at(b, k) {
                        out.push_str(&s[copied..k]);
                        out.push('\\');
                        copied = k;
                    }
                }
            } else if tag_at(b, j + 1) {
                out.push_str(&s[copied..=j]);
                out.push('\\');
                copied = j + 1;
            }
        });
        out.push_str(&s[copied..]);
        if !b.is_empty() {
            self.line_start = ends_with_break(b);
        }
    }
}

/// Appends `s` escaped as one whole text (see the module docs).
pub(crate) fn escape_into(out: &mut impl Sink, s: &str, line_start: bool) {
    out.push_escaped(&mut Escaper::new(line_start), s);
}

/// The inverse of [`escape_into`]: removes the backslash that escaping added at each place.
pub(crate) fn unescape(s: &str, line_start: bool) -> String {
    let b = s.as_bytes();
    // Escaping only ever adds backslashes: text without one is its own unescaping.
    if memchr::memchr(b'\\', b).is_none() {
        return s.to_owned();
    }
    let at = Escaper::new(line_start);
    let mut out = String::with_capacity(s.len());
    let mut copied = 0;
    for_each_special(b, |j| {
        if b[j] == b'[' {
            if word_at(b, j + 1) {
                let k = run_start(b, j);
                if k < j && at.line_start_at(b, k) {
                    out.push_str(&s[copied..k]);
                    copied = k + 1;
                }
            }
        } else if b.get(j + 1) == Some(&b'\\') && tag_at(b, j + 1) {
            out.push_str(&s[copied..=j]);
            copied = j + 2;
        }
    });
    out.push_str(&s[copied..]);
    out
}

/// Whether `s` can be written bare in a marker line: non-empty ASCII letters, digits and
/// `_ - . : / @ + = #`. Other names and ids are written as JSON strings.
pub(crate) fn is_plain_token(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(is_plain_byte)
}

/// A byte allowed in a bare token.
pub(crate) fn is_plain_byte(b: u8) -> bool {
    PLAIN_BYTES[usize::from(b)]
}

/// [`is_plain_byte`] as a table: every tool call and result checks its id and name, twice.
static PLAIN_BYTES: [bool; 256] = {
    let mut table = [false; 256];
    let mut i = 0;
    while i < 256 {
        let b = i as u8;
        table[i] = b.is_ascii_alphanumeric()
            || matches!(
                b,
                b'_' | b'-' | b'.' | b':' | b'/' | b'@' | b'+' | b'=' | b'#'
            );
        i += 1;
    }
    table
};

/// Appends a name or id: bare when it is a plain token, else as a safe JSON string.
pub(crate) fn write_token(out: &mut impl Sink, s: &str) {
    if is_plain_token(s) {
        out.push_str(s);
    } else {
        out.push_json(s);
    }
}

/// Appends `value` as compact JSON through [`SafeJson`].
///
/// The JSON is written into a byte buffer first and checked as UTF-8 once, rather than piece
/// by piece as `serde_json` emits it (a quote, a key, a fragment of a string).
pub(crate) fn write_json<T: serde::Serialize + ?Sized>(out: &mut String, value: &T) {
    let mut buf = Vec::with_capacity(128);
    let mut ser = serde_json::Serializer::with_formatter(&mut buf, SafeJson);
    // Serialising a `Value` or a `str` fails only when the writer fails or a map key is not a
    // string; a `Vec` never fails and `Value` keys are strings, so there is no error to report.
    let _ = value.serialize(&mut ser);
    // `serde_json` and [`SafeJson`] write only whole UTF-8 sequences, so this is always valid;
    // were it not, it would be written lossily rather than fail.
    match std::str::from_utf8(&buf) {
        Ok(s) => out.push_str(s),
        Err(_) => out.push_str(&String::from_utf8_lossy(&buf)),
    }
}

/// Appends `raw`, the text of one JSON value, compactly and without parsing it: the whitespace
/// outside strings is dropped, and inside strings NEL, LS, PS and a `<` that opens a reserved
/// tag (also when its `/` is written `\/`) are written as `\u` escapes, as [`SafeJson`] does.
/// Everything else is the text as given: numbers keep their spelling (`1e2`, `100000000000000000000`),
/// strings their escapes (`\u00e9`, lone surrogates), objects their key order and repeated keys.
///
/// For text that `serde_json` wrote (compact or pretty), this is exactly [`write_json`] of the
/// value the text reads as; for other spellings of the same value it differs only where the
/// text differs from `serde_json`'s spelling, and the transcript then shows what the session
/// holds. Nothing here can forge a marker line: a compact JSON value has no line terminator
/// outside its escapes.
pub(crate) fn write_raw_json(out: &mut impl Sink, raw: &str) {
    let b = raw.as_bytes();
    let mut copied = 0;
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'"' => {
                // A string, to its closing quote: a plain loop over a table of the bytes that
                // stop it (the quote, a backslash, and the three bytes that may open something
                // to escape), because arguments with code in them have an escape every few
                // bytes, too often for `memchr` to pay. An escape is skipped whole (`\"` does
                // not close the string).
                i += 1;
                loop {
                    while i < b.len() && !STOPS_IN_STRING[usize::from(b[i])] {
                        i += 1;
                    }
                    match b.get(i) {
                        None => break,
                        Some(b'"') => {
                            i += 1;
                            break;
                        }
                        Some(b'\\') => i = (i + 2).min(b.len()),
                        Some(_) => match raw_special(b, i) {
                            Some((len, replacement)) => {
                                out.push_str(&raw[copied..i]);
                                out.push_str(replacement);
                                i += len;
                                copied = i;
                            }
                            None => i += 1,
                        },
                    }
                }
            }
            b' ' | b'\t' | b'\n' | b'\r' => {
                out.push_str(&raw[copied..i]);
                while i < b.len() && matches!(b[i], b' ' | b'\t' | b'\n' | b'\r') {
                    i += 1;
                }
                copied = i;
            }
            _ => i += 1,
        }
    }
    out.push_str(&raw[copied.min(b.len())..]);
}

/// The bytes that end a plain run inside a JSON string for [`write_raw_json`]: the closing
/// quote, a backslash, `<`, and the first bytes of NEL (`C2`) and of LS and PS (`E2`).
static STOPS_IN_STRING: [bool; 256] = {
    let mut table = [false; 256];
    table[b'"' as usize] = true;
    table[b'\\' as usize] = true;
    table[b'<' as usize] = true;
    table[0xC2] = true;
    table[0xE2] = true;
    table
};

/// What [`write_raw_json`] writes for the bytes at `b[at..]` inside a string, when they need
/// an escape: their length and the escape.
fn raw_special(b: &[u8], at: usize) -> Option<(usize, &'static str)> {
    match (b[at], b.get(at + 1), b.get(at + 2)) {
        (0xC2, Some(0x85), _) => Some((2, "\\u0085")),
        (0xE2, Some(0x80), Some(0xA8)) => Some((3, "\\u2028")),
        (0xE2, Some(0x80), Some(0xA9)) => Some((3, "\\u2029")),
        (b'<', Some(b'\\'), Some(b'/')) if json_tag_at(b, at + 2) => Some((1, "\\u003c")),
        (b'<', _, _) if json_tag_at(b, at + 1) => Some((1, "\\u003c")),
        _ => None,
    }
}

/// The compact JSON formatter, except that string contents write NEL, LS, PS and a `<` that
/// opens a reserved tag as `\u` escapes (equivalent JSON, so the value reads back unchanged).
struct SafeJson;

impl serde_json::ser::Formatter for SafeJson {
    fn write_string_fragment<W: ?Sized + io::Write>(
        &mut self,
        writer: &mut W,
        fragment: &str,
    ) -> io::Result<()> {
        let b = fragment.as_bytes();
        let mut copied = 0;
        for i in memchr::memchr3_iter(b'<', 0xC2, 0xE2, b) {
            let (len, replacement): (usize, &[u8]) = match (b[i], b.get(i + 1), b.get(i + 2)) {
                (0xC2, Some(0x85), _) => (2, b"\\u0085"),
                (0xE2, Some(0x80), Some(0xA8)) => (3, b"\\u2028"),
                (0xE2, Some(0x80), Some(0xA9)) => (3, b"\\u2029"),
                (b'<', _, _) if json_tag_at(b, i + 1) => (1, b"\\u003c"),
                _ => continue,
            };
            writer.write_all(&b[copied..i])?;
            writer.write_all(replacement)?;
            copied = i + len;
        }
        writer.write_all(&b[copied..])
    }
}
