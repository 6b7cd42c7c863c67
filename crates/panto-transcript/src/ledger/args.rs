//! The arguments of a tool call as the ledger reads them: read from the call's JSON text into a
//! `Value` whose strings the ledger never looks at (an edit's old and new text, a written
//! file's content) are `null`, so that reading a long session does not copy every file an agent
//! wrote. The same pass gathers every string value, decoded, for the ledger's identifiers
//! ([`read_with_strings`]), so a call's text is read once.
//!
//! The value is the one `serde_json` would give with those strings replaced by `null`: every
//! key, number, boolean and container stays, in its place (a repeated key's last value wins, as
//! in the full value). The readers (`kind`, `paths`, `command` and the todo list in `tools.rs`)
//! treat `null` as they treat any value that is not a string, so they decide on it what they
//! decide on the full value. Which strings are kept, by where they sit:
//!
//! - the arguments themselves, when they are a string;
//! - every string in an array, at any depth (`paths` reads them as patches, `command` reads the
//!   last one of a command array, a todo list may hold plain strings);
//! - at the top level, the strings under a path, patch or command key;
//! - in an object of a todo list (an array under a todo-list key at the top level), the strings
//!   under a path, patch, status or todo-text key;
//! - in any other object, the strings under a path or patch key.
//!
//! The text is walked once, byte by byte ([`Reader`]), with `serde_json`'s grammar: a string
//! is found whole by eight bytes a step and copied only when it holds an escape; a number is
//! handed to `serde_json`, so it is the number `serde_json` reads. Whatever `serde_json` would
//! refuse gives `None`, and the caller parses the full value instead (`RawJson::to_value`, which
//! reads lone surrogates as U+FFFD and too deep or out-of-range values as their text); so do
//! nesting deeper than [`MAX_DEPTH`] and a key `serde_json` gives a meaning of its own. A lone
//! surrogate in a string that is not kept is read as U+FFFD, as the full parse reads it (such a
//! string `serde_json` only skips). A `Some` is therefore always the full parse, pruned.
//!
//! This reading replaced one in which `serde_json` drove a visitor that built the pruned value
//! (`args/pruned.rs`, kept for the tests, which hold the two to the same value and strings):
//! there every string left out was read twice (skipped as a raw value, then decoded escape by
//! escape), and every value went through the visitor's calls.

use std::borrow::Cow;

use serde_json::{Map, Value};

use super::tools::{
    COMMAND_KEYS, TODO_LIST_KEYS, TODO_STATUS, TODO_TEXT_KEYS, is_patch_key, is_path_key,
};

#[cfg(test)]
pub(super) mod pruned;

/// `text` read as tool arguments, pruned (see the module docs); `None` when the full parse
/// must decide.
#[cfg(test)]
pub(super) fn read(text: &str) -> Option<Value> {
    read_with_strings(text, &mut Strings::default())
}

/// The string values of arguments (not their keys), decoded, as the full value holds them:
/// gathered by [`read_with_strings`] in the same pass that prunes the value.
#[derive(Default)]
pub(super) struct Strings<'t> {
    pub list: Vec<Cow<'t, str>>,
    /// Whether an object named a key twice: the full value keeps only the last one's strings,
    /// and `list` holds both, so it must not be used.
    pub repeated: bool,
}

/// [`read`], also gathering every string value of `text` into `strings` (one pass over the
/// text for both: the ledger's identifiers and what it reads of the call). The strings left
/// out of the value are decoded from their raw text, a lone surrogate as U+FFFD as the full
/// parse reads it.
pub(super) fn read_with_strings<'t>(text: &'t str, strings: &mut Strings<'t>) -> Option<Value> {
    let mut reader = Reader {
        text,
        bytes: text.as_bytes(),
        at: 0,
        strings,
    };
    let value = reader.value(Place::Top, true, 0)?;
    reader.space();
    (reader.at == text.len()).then_some(value)
}

/// The deepest nesting read here; deeper arguments are left to the full parse, whose own limit
/// (128) turns them into a string.
const MAX_DEPTH: usize = 100;

/// The start of the keys `serde_json` reads an object by as something else (a raw value).
const RESERVED_KEY: &str = "$serde_json::private::";

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

/// The walk over a JSON text: where it is, and the strings met so far.
struct Reader<'t, 's> {
    text: &'t str,
    bytes: &'t [u8],
    at: usize,
    strings: &'s mut Strings<'t>,
}

impl<'t> Reader<'t, '_> {
    /// Moves past JSON whitespace.
    fn space(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.bytes.get(self.at) {
            self.at += 1;
        }
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    /// The value at `place` from here (after any whitespace), `depth` objects and arrays deep;
    /// a string is kept when `keep` is true (and checked as `serde_json` checks the strings it
    /// decodes) and is `null` otherwise. Every string value met is added to the strings.
    fn value(&mut self, place: Place, keep: bool, depth: usize) -> Option<Value> {
        self.space();
        match self.peek()? {
            b'"' => {
                let s = self.string(keep)?;
                let value = if keep {
                    Value::String(s.as_ref().to_owned())
                } else {
                    Value::Null
                };
                self.strings.list.push(s);
                Some(value)
            }
            b'{' => self.object(place, deeper(depth)?),
            b'[' => self.array(place, deeper(depth)?),
            b't' => self.literal("true", Value::Bool(true)),
            b'f' => self.literal("false", Value::Bool(false)),
            b'n' => self.literal("null", Value::Null),
            b'-' | b'0'..=b'9' => self.number(),
            _ => None,
        }
    }

    /// The object that opens here, its values `depth` deep.
    fn object(&mut self, place: Place, depth: usize) -> Option<Value> {
        let mut out = Map::new();
        if self.opened(b'}')? {
            return Some(Value::Object(out));
        }
        loop {
            self.space();
            if self.peek()? != b'"' {
                return None;
            }
            let key = self.string(true)?;
            if key.starts_with(RESERVED_KEY) {
                return None;
            }
            self.space();
            if self.peek()? != b':' {
                return None;
            }
            self.at += 1;
            let value = self.value(place.under(&key), place.keeps(&key), depth)?;
            if out.insert(key.into_owned(), value).is_some() {
                self.strings.repeated = true;
            }
            if self.closed(b'}')? {
                return Some(Value::Object(out));
            }
        }
    }

    /// The array that opens here, its elements `depth` deep.
    fn array(&mut self, place: Place, depth: usize) -> Option<Value> {
        let place = place.element();
        let mut items = Vec::new();
        if self.opened(b']')? {
            return Some(Value::Array(items));
        }
        loop {
            items.push(self.value(place, true, depth)?);
            if self.closed(b']')? {
                return Some(Value::Array(items));
            }
        }
    }

    /// Moves past the bracket that opens an object or array here, and past `close` when it
    /// follows (after any whitespace): whether it did (the object or array is empty).
    fn opened(&mut self, close: u8) -> Option<bool> {
        self.at += 1;
        self.space();
        let empty = self.peek()? == close;
        self.at += usize::from(empty);
        Some(empty)
    }

    /// After an entry of an object or array (and any whitespace), moves past a `,` (`false`:
    /// another entry follows) or past `close` (`true`); `None` on anything else.
    fn closed(&mut self, close: u8) -> Option<bool> {
        self.space();
        let b = self.peek()?;
        if b != b',' && b != close {
            return None;
        }
        self.at += 1;
        Some(b == close)
    }

    fn literal(&mut self, word: &str, value: Value) -> Option<Value> {
        if !self.bytes[self.at..].starts_with(word.as_bytes()) {
            return None;
        }
        self.at += word.len();
        Some(value)
    }

    /// The number that starts here: the bytes a number can hold, read by `serde_json` (which
    /// refuses them unless they are one number in its range, as it would in place).
    fn number(&mut self) -> Option<Value> {
        let from = self.at;
        while let Some(b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E') = self.peek() {
            self.at += 1;
        }
        serde_json::from_str(&self.text[from..self.at]).ok()
    }

    /// The string whose opening quote is here, decoded (borrowed when it holds no escape).
    /// `strict`: its `\\u` escapes must not leave a surrogate alone, as `serde_json` requires
    /// of the strings it decodes (it only checks that the others have four hex digits).
    fn string(&mut self, strict: bool) -> Option<Cow<'t, str>> {
        let from = self.at + 1;
        let mut i = special(self.bytes, from, None)?;
        if self.bytes[i] == b'"' {
            self.at = i + 1;
            return Some(Cow::Borrowed(&self.text[from..i]));
        }
        let mut out = Vec::with_capacity(2 * (i - from) + 32);
        out.extend_from_slice(&self.bytes[from..i]);
        loop {
            match self.bytes[i] {
                b'"' => break,
                b'\\' => i = escape(self.bytes, i + 1, strict, &mut out)?,
                // A control character.
                _ => return None,
            }
            i = special(self.bytes, i, Some(&mut out))?;
        }
        self.at = i + 1;
        // Runs of the text between escapes, and characters: always UTF-8.
        String::from_utf8(out).ok().map(Cow::Owned)
    }
}

/// The depth inside an object or array opened at `depth`, or `None` past [`MAX_DEPTH`].
fn deeper(depth: usize) -> Option<usize> {
    (depth < MAX_DEPTH).then_some(depth + 1)
}

/// Where the first quote, backslash or control character at or after `from` is, eight bytes a
/// step ([`specials`]), copying the bytes before it into `out` when given: each step copies
/// eight bytes and takes back those from the special one on, which costs less than copying a
/// run whose length is not known in advance.
fn special(bytes: &[u8], from: usize, mut out: Option<&mut Vec<u8>>) -> Option<usize> {
    let mut i = from;
    while let Some(chunk) = bytes.get(i..i + 8) {
        let chunk: [u8; 8] = chunk.try_into().expect("eight bytes");
        let found = specials(u64::from_le_bytes(chunk));
        if let Some(out) = out.as_deref_mut() {
            out.extend_from_slice(&chunk);
            if found != 0 {
                out.truncate(out.len() - 8 + found.trailing_zeros() as usize / 8);
            }
        }
        if found != 0 {
            return Some(i + found.trailing_zeros() as usize / 8);
        }
        i += 8;
    }
    let rest = bytes.get(i..)?;
    let k = rest
        .iter()
        .position(|&b| b == b'"' || b == b'\\' || b < 0x20)?;
    if let Some(out) = out {
        out.extend_from_slice(&rest[..k]);
    }
    Some(i + k)
}

/// The bytes of `w` (eight, the first lowest) that are a quote, a backslash or a control
/// character, each as its high bit; with word arithmetic (a byte equal to `q` is a zero byte of
/// `w` xor `q` repeated), whose lowest flagged byte is always a true one.
fn specials(w: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let zero = |w: u64| w.wrapping_sub(ONES) & !w;
    let quote = zero(w ^ (ONES * u64::from(b'"')));
    let backslash = zero(w ^ (ONES * u64::from(b'\\')));
    let control = w.wrapping_sub(ONES * 0x20) & !w;
    (quote | backslash | control) & HIGH
}

/// The escape whose letter is at `at` (after its backslash) decoded into `out`, and where it
/// ends; `None` where `serde_json` refuses it: an unknown letter, a `\\u` without four hex
/// digits, and when `strict` a surrogate not in a pair (a low one first, a high one not
/// followed by a `\\u` escape of a low one). A surrogate alone in a string not `strict` is
/// read as U+FFFD, as the full parse reads it.
fn escape(bytes: &[u8], at: usize, strict: bool, out: &mut Vec<u8>) -> Option<usize> {
    let plain = match *bytes.get(at)? {
        c @ (b'"' | b'\\' | b'/') => c,
        b'b' => 0x08,
        b'f' => 0x0c,
        b'n' => b'\n',
        b'r' => b'\r',
        b't' => b'\t',
        b'u' => {
            let first = hex4(bytes, at + 1)?;
            // A low surrogate escaped after a high one: the pair is one character.
            let low = match bytes.get(at + 5..at + 7) {
                Some(b"\\u") if (0xD800..0xDC00).contains(&first) => {
                    hex4(bytes, at + 7).filter(|low| (0xDC00..0xE000).contains(low))
                }
                _ => None,
            };
            if let Some(low) = low {
                let c = 0x10000 + ((first - 0xD800) << 10) + (low - 0xDC00);
                push_char(out, char::from_u32(c)?);
                return Some(at + 11);
            }
            let c = char::from_u32(first);
            if strict && c.is_none() {
                return None;
            }
            push_char(out, c.unwrap_or(char::REPLACEMENT_CHARACTER));
            return Some(at + 5);
        }
        _ => return None,
    };
    out.push(plain);
    Some(at + 1)
}

fn push_char(out: &mut Vec<u8>, c: char) {
    out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes());
}

/// The value of the four hex digits at `at`.
fn hex4(bytes: &[u8], at: usize) -> Option<u32> {
    bytes.get(at..at + 4)?.iter().try_fold(0, |n, &b| {
        let d = (b as char).to_digit(16)?;
        Some(n << 4 | d)
    })
}
