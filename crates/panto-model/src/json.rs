//! Exact JSON text for the values panto carries without modelling: [`RawJson`] (tool arguments,
//! unknown fields) and [`Extra`] (the unknown fields of an object, in their order).
//!
//! A value read from a session file is kept as the text it was read as, so writing it back
//! reproduces it byte for byte: numbers of any size and spelling, key order, escapes (lone
//! surrogates included), whitespace. Keeping text also means decoding never recurses into these
//! values, so no nesting depth makes a line unreadable. Code that wants to look inside gets a
//! `serde_json::Value`, parsed on first use and kept.

use std::borrow::Cow;
use std::fmt;
use std::ops::{Deref, Index};
use std::sync::OnceLock;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

/// One JSON value kept as its exact text.
///
/// Equality compares the text: two values that read the same but are spelled differently
/// (`1e2` and `100`) are different, because writing them back gives different bytes. Compare
/// with a [`Value`] (`raw == json!(...)`) to compare what they mean.
///
/// It dereferences to its [`Value`] ([`RawJson::value`]), so code written for a `&Value` (`get`,
/// `as_str`, `is_object`, pattern matches through `value()`) reads it unchanged.
#[derive(Clone)]
pub struct RawJson {
    raw: Box<RawValue>,
    /// Boxed, so that a value never looked at costs a pointer beside its text rather than a
    /// whole `Value` (a loaded context holds one per tool call and per unknown field).
    parsed: OnceLock<Box<Value>>,
}

impl RawJson {
    /// Checks that `text` is one JSON value and keeps it exactly as given (surrounding
    /// whitespace included).
    ///
    /// # Errors
    /// The parser's error when `text` is not exactly one JSON value.
    pub fn from_text(text: impl Into<String>) -> Result<RawJson, serde_json::Error> {
        Ok(RawJson {
            raw: RawValue::from_string(text.into())?,
            parsed: OnceLock::new(),
        })
    }

    /// The compact serialisation of `value`.
    pub fn from_value(value: &Value) -> RawJson {
        RawJson::from(value.clone())
    }

    /// The exact JSON text.
    pub fn json(&self) -> &str {
        self.raw.get()
    }

    /// The value as a [`Value`], parsed on first use and kept.
    ///
    /// A string holding a lone surrogate escape (`"\ud83d"`, which `JSON.stringify` writes for a
    /// string cut inside an emoji) reads as U+FFFD there; the text keeps the escape. A value
    /// nested deeper than `serde_json` parses (128 levels), which no provider adapter produces,
    /// reads as a string holding its JSON text: loading, sizing and copying never need the tree.
    pub fn value(&self) -> &Value {
        self.parsed
            .get_or_init(|| Box::new(parse_value(self.raw.get())))
    }

    /// The value as [`RawJson::value`] reads it, without keeping it: the kept value when there
    /// is one, else a fresh parse that the caller drops when done. For a one-off look inside a
    /// value that need not stay in memory beside its text.
    pub fn to_value(&self) -> Cow<'_, Value> {
        match self.parsed.get() {
            Some(value) => Cow::Borrowed(&**value),
            None => Cow::Owned(parse_value(self.raw.get())),
        }
    }
}

/// Parses text already known to be one JSON value, as [`RawJson::value`] documents.
fn parse_value(text: &str) -> Value {
    if let Ok(v) = serde_json::from_str(text) {
        return v;
    }
    let repaired = replace_lone_surrogates(text);
    serde_json::from_str(&repaired).unwrap_or_else(|_| Value::String(text.to_owned()))
}

/// Rewrites every `\uXXXX` escape of a lone surrogate in JSON text as `\ufffd`.
pub(crate) fn replace_lone_surrogates(text: &str) -> String {
    let b = text.as_bytes();
    let hex = |i: usize| -> Option<u32> {
        let s = text.get(i..i + 4)?;
        u32::from_str_radix(s, 16).ok()
    };
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'\\' {
            i += 1;
            continue;
        }
        if b.get(i + 1) != Some(&b'u') {
            i += 2;
            continue;
        }
        let Some(n) = hex(i + 2) else {
            i += 2;
            continue;
        };
        let pair = (0xD800..0xDC00).contains(&n)
            && b.get(i + 6) == Some(&b'\\')
            && b.get(i + 7) == Some(&b'u')
            && hex(i + 8).is_some_and(|m| (0xDC00..0xE000).contains(&m));
        if pair {
            i += 12;
        } else if (0xD800..0xE000).contains(&n) {
            out.push_str(&text[copied..i]);
            out.push_str("\\ufffd");
            i += 6;
            copied = i;
        } else {
            i += 6;
        }
    }
    out.push_str(&text[copied..]);
    out
}

impl From<Value> for RawJson {
    fn from(value: Value) -> RawJson {
        // Serialising a `Value` cannot fail: its keys are strings.
        let Ok(raw) = serde_json::value::to_raw_value(&value) else {
            return RawJson::from(Value::Null);
        };
        let parsed = OnceLock::new();
        let _ = parsed.set(Box::new(value));
        RawJson { raw, parsed }
    }
}

impl Deref for RawJson {
    type Target = Value;

    fn deref(&self) -> &Value {
        self.value()
    }
}

impl PartialEq for RawJson {
    fn eq(&self, other: &RawJson) -> bool {
        self.json() == other.json()
    }
}

impl Eq for RawJson {}

impl PartialEq<Value> for RawJson {
    fn eq(&self, other: &Value) -> bool {
        self.value() == other
    }
}

impl fmt::Debug for RawJson {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.json())
    }
}

/// The exact text.
impl fmt::Display for RawJson {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.json())
    }
}

/// Written as its exact text (by `serde_json`; other formats get the parsed value).
impl Serialize for RawJson {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.raw.serialize(s)
    }
}

/// Read as the exact text of the value, without recursing into it (from `serde_json`).
impl<'de> Deserialize<'de> for RawJson {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<RawJson, D::Error> {
        Ok(RawJson {
            raw: Box::<RawValue>::deserialize(d)?,
            parsed: OnceLock::new(),
        })
    }
}

/// The fields of a JSON object that a type does not model, in the order they were read, each
/// kept as its exact text ([`RawJson`]) so that it survives a round trip byte for byte.
///
/// It reads like a `serde_json::Map`: [`Extra::get`] and indexing give a `&Value` (parsed on
/// first use), [`Extra::insert`] takes a `Value`. Keys are unique; inserting an existing key
/// replaces its value in place. Equality compares keys, order and text.
#[derive(Clone, Default)]
pub struct Extra {
    /// `None` while there are no fields: every message and block has an `Extra` and most are
    /// empty, so an empty one is one pointer wide and allocates nothing.
    #[allow(
        clippy::box_collection,
        reason = "a thin pointer: a bare `Vec` is three words in every message and block"
    )]
    fields: Option<Box<Vec<(String, RawJson)>>>,
}

impl PartialEq for Extra {
    fn eq(&self, other: &Extra) -> bool {
        self.fields() == other.fields()
    }
}

impl Eq for Extra {}

impl Extra {
    /// The fields, in order.
    fn fields(&self) -> &[(String, RawJson)] {
        self.fields.as_deref().map_or(&[], Vec::as_slice)
    }

    /// The fields, to change them.
    fn fields_mut(&mut self) -> &mut Vec<(String, RawJson)> {
        self.fields.get_or_insert_with(Box::default)
    }

    /// No fields.
    pub fn new() -> Extra {
        Extra::default()
    }

    /// How many fields.
    pub fn len(&self) -> usize {
        self.fields().len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.fields().is_empty()
    }

    fn position(&self, key: &str) -> Option<usize> {
        self.fields().iter().position(|(k, _)| k == key)
    }

    /// Whether `key` is present.
    pub fn contains_key(&self, key: &str) -> bool {
        self.position(key).is_some()
    }

    /// The value of `key`, parsed.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.get_raw(key).map(RawJson::value)
    }

    /// The value of `key`, as its exact text.
    pub fn get_raw(&self, key: &str) -> Option<&RawJson> {
        self.position(key).map(|i| &self.fields()[i].1)
    }

    /// Sets `key` to `value`, returning the value it replaced. A new key goes last.
    pub fn insert(&mut self, key: String, value: Value) -> Option<RawJson> {
        self.insert_raw(key, RawJson::from(value))
    }

    /// Sets `key` to exact JSON text, returning the value it replaced. A new key goes last.
    pub fn insert_raw(&mut self, key: String, value: RawJson) -> Option<RawJson> {
        match self.position(&key) {
            Some(i) => Some(std::mem::replace(&mut self.fields_mut()[i].1, value)),
            None => {
                self.fields_mut().push((key, value));
                None
            }
        }
    }

    /// Appends a field without looking for an earlier one of the same key; the decoder checks
    /// for duplicates once the object is read ([`Extra::duplicate_key`]).
    pub(crate) fn push_unchecked(&mut self, key: String, value: RawJson) {
        self.fields_mut().push((key, value));
    }

    /// A key present twice, if any: O(n log n), so a wide object costs no more than sorting.
    pub(crate) fn duplicate_key(&self) -> Option<&str> {
        if self.fields().len() < 2 {
            return None;
        }
        let mut keys: Vec<&str> = self.fields().iter().map(|(k, _)| k.as_str()).collect();
        keys.sort_unstable();
        keys.windows(2).find(|w| w[0] == w[1]).map(|w| w[0])
    }

    /// Removes every field.
    pub fn clear(&mut self) {
        self.fields = None;
    }

    /// Removes `key`, returning its value.
    pub fn remove(&mut self, key: &str) -> Option<RawJson> {
        self.position(key).map(|i| self.fields_mut().remove(i).1)
    }

    /// The fields in order, values as exact text.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&str, &RawJson)> {
        self.fields().iter().map(|(k, v)| (k.as_str(), v))
    }

    /// The fields as a `serde_json::Map` (parsed values), for building other JSON.
    pub fn to_map(&self) -> Map<String, Value> {
        self.fields()
            .iter()
            .map(|(k, v)| (k.clone(), v.value().clone()))
            .collect()
    }
}

impl fmt::Debug for Extra {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.fields().iter().map(|(k, v)| (k, v)))
            .finish()
    }
}

impl Index<&str> for Extra {
    type Output = Value;

    /// The parsed value of `key`.
    ///
    /// # Panics
    /// When `key` is absent, as indexing a map does.
    fn index(&self, key: &str) -> &Value {
        match self.get(key) {
            Some(v) => v,
            None => panic!("no field `{key}` in extra"),
        }
    }
}

impl FromIterator<(String, Value)> for Extra {
    fn from_iter<I: IntoIterator<Item = (String, Value)>>(iter: I) -> Extra {
        let mut extra = Extra::new();
        for (k, v) in iter {
            extra.insert(k, v);
        }
        extra
    }
}

impl FromIterator<(String, RawJson)> for Extra {
    fn from_iter<I: IntoIterator<Item = (String, RawJson)>>(iter: I) -> Extra {
        let mut extra = Extra::new();
        for (k, v) in iter {
            extra.insert_raw(k, v);
        }
        extra
    }
}

impl From<Map<String, Value>> for Extra {
    fn from(map: Map<String, Value>) -> Extra {
        map.into_iter().collect()
    }
}

impl IntoIterator for Extra {
    type Item = (String, RawJson);
    type IntoIter = std::vec::IntoIter<(String, RawJson)>;

    fn into_iter(self) -> Self::IntoIter {
        self.fields.map_or_else(Vec::new, |f| *f).into_iter()
    }
}

impl<'a> IntoIterator for &'a Extra {
    type Item = (&'a str, &'a RawJson);
    type IntoIter = std::iter::Map<
        std::slice::Iter<'a, (String, RawJson)>,
        fn(&'a (String, RawJson)) -> (&'a str, &'a RawJson),
    >;

    fn into_iter(self) -> Self::IntoIter {
        self.fields().iter().map(|(k, v)| (k.as_str(), v))
    }
}
