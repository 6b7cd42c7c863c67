//! The arguments of a tool call as the ledger reads them: parsed from the call's JSON text into
//! a `Value` that leaves out the strings the ledger never looks at (an edit's old and new text,
//! a written file's content), so that reading a long session does not copy every file an agent
//! wrote.
//!
//! [`read`] gives the value `serde_json` would give, pruned: every number, boolean and string
//! the ledger's readers cannot see is `null`, and such a `null` is left out of its object unless
//! a reader looks its key up; arrays, and objects with the keys left in them, iterate as in the
//! full value (a repeated key's last value wins, and hides an earlier one even when it is left
//! out). The readers (`kind`, `paths`, `command` and the todo list in `ledger.rs`) treat `null`
//! as they treat any value that is not a string, an object or an array, and a key that is
//! missing as one they find `null` under, so they decide on it what they decide on the full
//! value. Leaving a key out is done only when `serde_json`'s objects iterate in key order (its
//! default map, checked once): in insertion order, a key left out could move a later repeat.
//! Which strings are kept, by where they sit:
//!
//! - the arguments themselves, when they are a string;
//! - every string in an array, at any depth (`paths` reads them as patches, `command` reads the
//!   last one of a command array, a todo list may hold plain strings);
//! - at the top level, the strings under a path, patch or command key;
//! - in an object of a todo list (an array under a todo-list key at the top level), the strings
//!   under a path, patch, status or todo-text key;
//! - in any other object, the strings under a path or patch key.
//!
//! Anything out of the ordinary gives `None`, and the caller parses the full value instead: a
//! raw control character, a surrogate escape in a string that is kept or in a key, a number
//! that might not fit an `f64`, nesting deeper than [`MAX_DEPTH`], a key `serde_json` gives a
//! meaning of its own, text that is not JSON. So a `Some` is always what the full parse would
//! give, pruned; the tests of `ledger.rs` compare the readers' decisions on both.

use std::borrow::Cow;
use std::sync::OnceLock;

use serde_json::{Map, Value};

use crate::ledger::{
    COMMAND_KEYS, TODO_LIST_KEYS, TODO_STATUS, TODO_TEXT_KEYS, is_patch_key, is_path_key,
};

/// The deepest nesting read here; deeper arguments are left to the full parse, whose own limit
/// (128) turns them into a string.
const MAX_DEPTH: usize = 100;

/// The most digits of a number's integer part plus its positive exponent: any such number is
/// below 10^300, which an `f64` holds, so `serde_json` reads it without an out-of-range error.
const MAX_MAGNITUDE: usize = 300;

/// `text` parsed as tool arguments, pruned (see the module docs); `None` when the full parse
/// must decide.
pub(crate) fn read(text: &str) -> Option<Value> {
    static SORTED: OnceLock<bool> = OnceLock::new();
    let sorted = *SORTED.get_or_init(|| {
        let mut map = Map::new();
        map.insert("b".to_owned(), Value::Null);
        map.insert("a".to_owned(), Value::Null);
        map.keys().next().is_some_and(|k| k == "a")
    });
    let mut p = Parser {
        sorted,
        text,
        bytes: text.as_bytes(),
        at: 0,
        depth: 0,
    };
    let value = p.value(Place::Top, true)?;
    p.space();
    (p.at == p.bytes.len()).then_some(value)
}

/// Where a value sits, which decides which strings of an object there are kept.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Place {
    /// The arguments themselves.
    Top,
    /// Under a todo-list key at the top level.
    TodoList,
    /// An element of a todo list.
    Todo,
    /// Anywhere else.
    Inner,
}

impl Place {
    /// Whether a string under `key` in an object here is kept.
    fn keeps(self, key: &str) -> bool {
        let k = &key;
        is_path_key(key)
            || is_patch_key(key)
            || match self {
                Place::Top => COMMAND_KEYS.contains(k),
                Place::Todo => *k == TODO_STATUS || TODO_TEXT_KEYS.contains(k),
                Place::TodoList | Place::Inner => false,
            }
    }

    /// Whether a reader looks `key` up in an object here (rather than only iterating over the
    /// object): such a key stays even when its value is `null`, so that it hides what the
    /// reader would look up next.
    fn looks_up(self, key: &str) -> bool {
        match self {
            Place::Top => COMMAND_KEYS.contains(&key) || TODO_LIST_KEYS.contains(&key),
            Place::Todo => key == TODO_STATUS || TODO_TEXT_KEYS.contains(&key),
            Place::TodoList | Place::Inner => false,
        }
    }

    /// Where the value under `key` of an object here sits.
    fn under(self, key: &str) -> Place {
        if self == Place::Top && TODO_LIST_KEYS.contains(&key) {
            Place::TodoList
        } else {
            Place::Inner
        }
    }

    /// Where an element of an array here sits.
    fn element(self) -> Place {
        if self == Place::TodoList {
            Place::Todo
        } else {
            Place::Inner
        }
    }
}

struct Parser<'a> {
    /// Whether a `serde_json` object iterates in key order whatever the order of insertion (its
    /// default map), so that leaving a key out changes no other key's place.
    sorted: bool,
    text: &'a str,
    bytes: &'a [u8],
    at: usize,
    depth: usize,
}

impl<'a> Parser<'a> {
    /// Skips JSON whitespace.
    fn space(&mut self) {
        while let Some(b' ' | b'\n' | b'\t' | b'\r') = self.bytes.get(self.at) {
            self.at += 1;
        }
    }

    /// Consumes `byte` if it comes next.
    fn eat(&mut self, byte: u8) -> bool {
        let next = self.bytes.get(self.at) == Some(&byte);
        if next {
            self.at += 1;
        }
        next
    }

    /// The value that starts here (after whitespace), sitting at `place`; a string is kept when
    /// `keep` is true and is `null` otherwise.
    fn value(&mut self, place: Place, keep: bool) -> Option<Value> {
        self.space();
        match *self.bytes.get(self.at)? {
            b'{' => self.object(place),
            b'[' => self.array(place),
            b'"' => {
                self.at += 1;
                if keep {
                    self.string().map(|s| Value::String(s.into_owned()))
                } else {
                    self.skip_string().map(|()| Value::Null)
                }
            }
            b't' => self.word(b"true"),
            b'f' => self.word(b"false"),
            b'n' => self.word(b"null"),
            _ => self.number(),
        }
    }

    /// Opens an object or an array.
    fn enter(&mut self) -> Option<()> {
        self.at += 1;
        self.depth += 1;
        (self.depth <= MAX_DEPTH).then_some(())
    }

    /// After an entry or an element: `false` for a comma (another follows), `true` for
    /// `close`, `None` for anything else.
    fn closes(&mut self, close: u8) -> Option<bool> {
        self.space();
        let next = *self.bytes.get(self.at)?;
        self.at += 1;
        match next {
            b',' => Some(false),
            c if c == close => Some(true),
            _ => None,
        }
    }

    fn object(&mut self, place: Place) -> Option<Value> {
        self.enter()?;
        let mut map = Map::new();
        self.space();
        if !self.eat(b'}') {
            loop {
                self.space();
                if !self.eat(b'"') {
                    return None;
                }
                let key = self.string()?;
                // `serde_json` reads an object opened by such a key as a special value.
                if key.starts_with("$serde_json::private::") {
                    return None;
                }
                self.space();
                if !self.eat(b':') {
                    return None;
                }
                let value = self.value(place.under(&key), place.keeps(&key))?;
                if value.is_null() && self.sorted && !place.looks_up(&key) {
                    // Iterating over the object sees nothing here, and nothing looks the key
                    // up: it is left out, only hiding an earlier value under the same key, as
                    // the later one does in `serde_json`.
                    if let Some(earlier) = map.get_mut(&*key) {
                        *earlier = Value::Null;
                    }
                } else {
                    map.insert(key.into_owned(), value);
                }
                if self.closes(b'}')? {
                    break;
                }
            }
        }
        self.depth -= 1;
        Some(Value::Object(map))
    }

    fn array(&mut self, place: Place) -> Option<Value> {
        self.enter()?;
        let mut items = Vec::new();
        self.space();
        if !self.eat(b']') {
            loop {
                items.push(self.value(place.element(), true)?);
                if self.closes(b']')? {
                    break;
                }
            }
        }
        self.depth -= 1;
        Some(Value::Array(items))
    }

    /// `true`, `false` or `null`, read as `null`.
    fn word(&mut self, word: &[u8]) -> Option<Value> {
        let rest = self.bytes.get(self.at..)?;
        rest.starts_with(word).then(|| {
            self.at += word.len();
            Value::Null
        })
    }

    /// A number, read as `null`; `None` for one that is not JSON or that might not fit an `f64`.
    fn number(&mut self) -> Option<Value> {
        let b = self.bytes;
        let digits = |mut i: usize| {
            while matches!(b.get(i), Some(b'0'..=b'9')) {
                i += 1;
            }
            i
        };
        let mut i = self.at;
        if b.get(i) == Some(&b'-') {
            i += 1;
        }
        let start = i;
        i = match b.get(i)? {
            b'0' => i + 1,
            b'1'..=b'9' => digits(i + 1),
            _ => return None,
        };
        let mut magnitude = i - start;
        if b.get(i) == Some(&b'.') {
            let fraction = i + 1;
            i = digits(fraction);
            if i == fraction {
                return None;
            }
        }
        if let Some(b'e' | b'E') = b.get(i) {
            i += 1;
            let negative = match b.get(i) {
                Some(b'-') => {
                    i += 1;
                    true
                }
                Some(b'+') => {
                    i += 1;
                    false
                }
                _ => false,
            };
            let exponent = i;
            i = digits(exponent);
            if i == exponent || i - exponent > 3 {
                return None;
            }
            if !negative {
                magnitude += self.text.get(exponent..i)?.parse::<usize>().ok()?;
            }
        }
        if magnitude > MAX_MAGNITUDE {
            return None;
        }
        self.at = i;
        Some(Value::Null)
    }

    /// The text of the string whose opening quote was just read, unescaped; `None` for a raw
    /// control character, a bad escape or a surrogate escape.
    fn string(&mut self) -> Option<Cow<'a, str>> {
        let text = self.text;
        let mut unescaped: Option<String> = None;
        let mut from = self.at;
        loop {
            let at = special(self.bytes, self.at);
            match *self.bytes.get(at)? {
                b'"' => {
                    self.at = at + 1;
                    let tail = text.get(from..at)?;
                    return Some(match unescaped {
                        None => Cow::Borrowed(tail),
                        Some(mut s) => {
                            s.push_str(tail);
                            Cow::Owned(s)
                        }
                    });
                }
                b'\\' => {
                    let s = unescaped.get_or_insert_with(String::new);
                    s.push_str(text.get(from..at)?);
                    let (c, len) = unescape(self.bytes, at + 1)?;
                    s.push(c);
                    self.at = at + 1 + len;
                    from = self.at;
                }
                _ => return None,
            }
        }
    }

    /// Skips the string whose opening quote was just read; `None` for a raw control character
    /// or a bad escape. A surrogate escape is fine here: the full parse reads it as U+FFFD, in
    /// a string that is not kept.
    fn skip_string(&mut self) -> Option<()> {
        let bytes = self.bytes;
        let mut at = self.at;
        loop {
            at = special(bytes, at);
            match *bytes.get(at)? {
                b'"' => {
                    self.at = at + 1;
                    return Some(());
                }
                b'\\' => {
                    // A table rather than a `match`: text escapes often, and a jump on each
                    // escape's letter costs more than the scan around it.
                    let escaped = *bytes.get(at + 1)?;
                    match ESCAPE_LEN[usize::from(escaped)] {
                        0 => return None,
                        5 => {
                            hex4(bytes, at + 2)?;
                            at += 6;
                        }
                        _ => at += 2,
                    }
                }
                _ => return None,
            }
        }
    }
}

/// For each byte after a backslash: how long the escape is after the backslash (5 for `\uXXXX`,
/// 1 for the others), or 0 when it is not an escape.
const ESCAPE_LEN: [u8; 256] = {
    let mut t = [0; 256];
    let mut i = 0;
    let simple = b"\"\\/bfnrt";
    while i < simple.len() {
        t[simple[i] as usize] = 1;
        i += 1;
    }
    t[b'u' as usize] = 5;
    t
};

/// The character an escape stands for, from the byte after its backslash at `at`, and the
/// escape's length after the backslash; `None` for a bad escape or a surrogate.
fn unescape(bytes: &[u8], at: usize) -> Option<(char, usize)> {
    let c = match *bytes.get(at)? {
        b'"' => '"',
        b'\\' => '\\',
        b'/' => '/',
        b'b' => '\u{8}',
        b'f' => '\u{c}',
        b'n' => '\n',
        b'r' => '\r',
        b't' => '\t',
        b'u' => return char::from_u32(hex4(bytes, at + 1)?).map(|c| (c, 5)),
        _ => return None,
    };
    Some((c, 1))
}

/// The four hexadecimal digits at `at`.
fn hex4(bytes: &[u8], at: usize) -> Option<u32> {
    bytes
        .get(at..at + 4)?
        .iter()
        .try_fold(0, |n, &d| Some(n * 16 + char::from(d).to_digit(16)?))
}

/// The index of the first byte at or after `from` that ends a run of plain string text: a
/// quote, a backslash or a control character; the length of `bytes` when there is none.
///
/// Eight bytes at a time: a byte below 0x20 borrows in `w - 0x20` per byte, and a quote or a
/// backslash becomes a zero byte in `w ^ c`, which borrows in `x - 1`. A borrow can only mark a
/// byte wrongly above a byte that is marked rightly, so the lowest mark is the first hit.
fn special(bytes: &[u8], from: usize) -> usize {
    const ONES: u64 = u64::MAX / 255;
    const HIGH: u64 = ONES << 7;
    let Some(rest) = bytes.get(from..) else {
        return bytes.len();
    };
    let mut at = from;
    let mut chunks = rest.chunks_exact(8);
    for chunk in &mut chunks {
        let Ok(eight) = <[u8; 8]>::try_from(chunk) else {
            break;
        };
        let w = u64::from_le_bytes(eight);
        let control = w.wrapping_sub(ONES * 0x20) & !w;
        let q = w ^ (ONES * u64::from(b'"'));
        let quote = q.wrapping_sub(ONES) & !q;
        let s = w ^ (ONES * u64::from(b'\\'));
        let backslash = s.wrapping_sub(ONES) & !s;
        let hits = (control | quote | backslash) & HIGH;
        if hits != 0 {
            return at + hits.trailing_zeros() as usize / 8;
        }
        at += 8;
    }
    for &b in chunks.remainder() {
        if b == b'"' || b == b'\\' || b < 0x20 {
            return at;
        }
        at += 1;
    }
    bytes.len()
}
