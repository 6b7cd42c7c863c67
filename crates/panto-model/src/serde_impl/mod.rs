//! Hand-written (de)serialisation of the Contract 1 shapes.
//!
//! Why by hand: the derived form of a `type`-tagged enum with a catch-all map buffers every
//! object before looking at it, which would more than double the cost of loading a session.
//! Here the `type` key is read first when it comes first (panto and most tools write it first),
//! and the rest of the object is decoded straight into the typed value. When `type` comes later,
//! the object is buffered once and decoded from the buffer, with the same rules.
//!
//! Round-trip rules: unknown keys go to `extra` as their exact JSON text ([`RawJson`], never
//! recursed into), as does a tool call's `input`; a known optional key holding `null` is kept in
//! `extra` too, so that writing the value back reproduces the input.
//!
//! Lone surrogates: in [`lossy`] mode (the second attempt [`crate::decode_line`] makes after a
//! line failed), the strings panto models are read as bytes, and a `\uXXXX` escape of a lone
//! surrogate becomes U+FFFD instead of failing the line (object keys stay strict). Raw values
//! keep the escape exactly in
//! either mode. The mode is a thread-local flag rather than a seed threaded through every
//! visitor, so the public `Deserialize` impls stay plain.
//!
//! Here, what every shape's (de)serialisation shares: the lossy mode, keys, objects tagged by
//! `type`, and the readers of fields; the content blocks are `blocks.rs`, the roles, usage,
//! messages and entries `messages.rs`.

mod blocks;
mod messages;

use std::borrow::Cow;
use std::cell::Cell;
use std::fmt;
use std::marker::PhantomData;

use serde::Deserialize;
use serde::de::{self, Deserializer, Error as _, MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde_json::Value;
use serde_json::value::RawValue;

use crate::message::{Extra, RawJson};

// ---------------------------------------------------------------------------------------------
// Lossy mode

thread_local! {
    static LOSSY: Cell<bool> = const { Cell::new(false) };
}

/// Whether strings are read in lossy mode on this thread.
fn is_lossy() -> bool {
    LOSSY.with(Cell::get)
}

/// Runs `f` with lone surrogates in modelled strings read as U+FFFD.
pub(crate) fn lossy<T>(f: impl FnOnce() -> T) -> T {
    struct Reset(bool);
    impl Drop for Reset {
        fn drop(&mut self) {
            LOSSY.with(|l| l.set(self.0));
        }
    }
    let _reset = Reset(LOSSY.with(|l| l.replace(true)));
    f()
}

/// Text from the bytes `serde_json` gives for a string in lossy mode: UTF-8 except that a lone
/// surrogate escape is encoded as its three-byte (WTF-8) sequence, replaced here by U+FFFD.
fn wtf8_lossy(bytes: &[u8]) -> Cow<'_, str> {
    if let Ok(s) = std::str::from_utf8(bytes) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(bytes.len());
    let mut rest = bytes;
    while !rest.is_empty() {
        match std::str::from_utf8(rest) {
            Ok(s) => {
                out.push_str(s);
                break;
            }
            Err(e) => {
                let (good, bad) = rest.split_at(e.valid_up_to());
                // `good` is valid UTF-8 by the error's own account.
                out.push_str(std::str::from_utf8(good).unwrap_or_default());
                out.push(char::REPLACEMENT_CHARACTER);
                // A surrogate is three bytes; anything else invalid is skipped as the error
                // says (the caller checked the line is UTF-8, so that cannot happen).
                let skip = if bad.len() >= 3 && bad[0] == 0xED && (0xA0..0xC0).contains(&bad[1]) {
                    3
                } else {
                    e.error_len().unwrap_or(bad.len())
                };
                rest = &bad[skip.min(bad.len())..];
            }
        }
    }
    Cow::Owned(out)
}

/// A string field panto models, read strictly or (in lossy mode) with lone surrogates replaced:
/// a `String`, or a [`Name`](crate::Name), which keeps a short one without an allocation.
struct Str<T = String>(T);

/// What a [`Str`] can build: a `String` or a [`Name`](crate::Name), from borrowed or owned text.
trait Text: for<'a> From<&'a str> + From<String> {}

impl<T: for<'a> From<&'a str> + From<String>> Text for T {}

impl<'de, T: Text> Deserialize<'de> for Str<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(PhantomData<T>);
        impl<'de, T: Text> Visitor<'de> for V<T> {
            type Value = Str<T>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Str<T>, E> {
                Ok(Str(T::from(v)))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Str<T>, E> {
                Ok(Str(T::from(v)))
            }
            fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Str<T>, E> {
                Ok(Str(match wtf8_lossy(v) {
                    Cow::Borrowed(s) => T::from(s),
                    Cow::Owned(s) => T::from(s),
                }))
            }
        }
        if is_lossy() {
            d.deserialize_bytes(V(PhantomData))
        } else {
            d.deserialize_string(V(PhantomData))
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Keys

/// An object key, borrowed from the input when possible.
enum Key<'de> {
    Borrowed(&'de str),
    Owned(String),
}

impl Key<'_> {
    fn as_str(&self) -> &str {
        match self {
            Key::Borrowed(s) => s,
            Key::Owned(s) => s,
        }
    }

    fn into_owned(self) -> String {
        match self {
            Key::Borrowed(s) => s.to_owned(),
            Key::Owned(s) => s,
        }
    }
}

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string key")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key::Borrowed(v))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key::Owned(v.to_owned()))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Key<'de>, E> {
                Ok(Key::Owned(v))
            }
        }
        // Always strict, also in lossy mode: a key with a lone surrogate fails its line (path
        // tracking sees only string keys, and no tool writes such keys).
        d.deserialize_str(KeyVisitor)
    }
}

// ---------------------------------------------------------------------------------------------
// Tagged objects

/// A type whose JSON object carries a `type` key that decides how the rest is read.
trait Tagged: Sized {
    const EXPECTING: &'static str;
    fn visit_body<'de, A: MapAccess<'de>>(kind: String, map: A) -> Result<Self, A::Error>;
    /// The value read from an object whose `type` was its `at`-th key (counted from 0), for the
    /// values that write it back where it was. Nothing by default.
    fn type_at(self, _at: usize) -> Self {
        self
    }
}

struct TaggedVisitor<T>(PhantomData<T>);

impl<'de, T: Tagged> Visitor<'de> for TaggedVisitor<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(T::EXPECTING)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<T, A::Error> {
        let Some(first) = map.next_key::<Key<'de>>()? else {
            return Err(A::Error::missing_field("type"));
        };
        if first.as_str() == "type" {
            let kind = map.next_value::<Str>()?.0;
            return T::visit_body(kind, map);
        }
        // `type` is not first: buffer the object once, each value as its raw text, then decode
        // it from the buffer.
        let mut all: Vec<(String, Box<RawValue>)> = Vec::new();
        all.push((first.into_owned(), map.next_value()?));
        while let Some(key) = map.next_key::<Key<'de>>()? {
            all.push((key.into_owned(), map.next_value()?));
        }
        let Some(at) = all.iter().position(|(k, _)| k == "type") else {
            return Err(A::Error::missing_field("type"));
        };
        let (_, raw) = all.remove(at);
        let kind = buffered_value::<Str>(&raw)
            .map_err(|e| A::Error::custom(format_args!("field `type`: {}", without_position(&e))))?
            .0;
        let mut track = serde_path_to_error::Track::new();
        let tracked = serde_path_to_error::Deserializer::new(Buffered(&all), &mut track);
        tracked
            .deserialize_map(BodyVisitor::<T>(kind, PhantomData))
            .map(|value| value.type_at(at))
            .map_err(|e| {
                // Carry the path inside the buffered object out to the caller's path.
                let path = track.path().to_string();
                let e = without_position(&e);
                if path.is_empty() || path == "." {
                    A::Error::custom(e)
                } else {
                    A::Error::custom(format_args!("field `{path}`: {e}"))
                }
            })
    }
}

/// Decodes one buffered value from its raw text.
fn buffered_value<'a, T: Deserialize<'a>>(raw: &'a RawValue) -> Result<T, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_str(raw.get());
    let value = T::deserialize(&mut de)?;
    de.end()?;
    Ok(value)
}

/// A buffered object (keys with the raw text of their values) as a deserializer.
struct Buffered<'de>(&'de [(String, Box<RawValue>)]);

impl<'de> Deserializer<'de> for Buffered<'de> {
    type Error = serde_json::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        visitor.visit_map(BufferedAccess {
            rest: self.0.iter(),
            value: None,
        })
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map struct enum
        identifier ignored_any
    }
}

struct BufferedAccess<'a> {
    rest: std::slice::Iter<'a, (String, Box<RawValue>)>,
    value: Option<&'a RawValue>,
}

impl<'a> MapAccess<'a> for BufferedAccess<'a> {
    type Error = serde_json::Error;

    fn next_key_seed<K: de::DeserializeSeed<'a>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Self::Error> {
        let Some((key, value)) = self.rest.next() else {
            return Ok(None);
        };
        self.value = Some(value);
        seed.deserialize(de::value::BorrowedStrDeserializer::new(key))
            .map(Some)
    }

    fn next_value_seed<V: de::DeserializeSeed<'a>>(
        &mut self,
        seed: V,
    ) -> Result<V::Value, Self::Error> {
        let raw = self
            .value
            .take()
            .ok_or_else(|| serde_json::Error::custom("value asked for before its key"))?;
        let mut de = serde_json::Deserializer::from_str(raw.get());
        let value = seed.deserialize(&mut de)?;
        de.end()?;
        Ok(value)
    }
}

/// Decodes the body of a buffered tagged object whose `type` is already known.
struct BodyVisitor<T>(String, PhantomData<T>);

impl<'de, T: Tagged> Visitor<'de> for BodyVisitor<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(T::EXPECTING)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
        T::visit_body(self.0, map)
    }
}

/// Reads an optional string field: `null` is kept in `extra` so it round-trips.
fn opt_string<'de, A: MapAccess<'de>, T: Text>(
    map: &mut A,
    slot: &mut Option<T>,
    key: &str,
    extra: &mut Extra,
) -> Result<(), A::Error> {
    if slot.is_some() || extra.contains_key(key) {
        return Err(A::Error::custom(format_args!("duplicate field `{key}`")));
    }
    match map.next_value::<Option<Str<T>>>()? {
        Some(s) => *slot = Some(s.0),
        None => {
            extra.insert(key.to_owned(), Value::Null);
        }
    }
    Ok(())
}

/// Reads an optional unsigned integer field: `null` is kept in `extra` so it round-trips.
fn opt_u64<'de, A: MapAccess<'de>>(
    map: &mut A,
    slot: &mut Option<u64>,
    key: &str,
    extra: &mut Extra,
) -> Result<(), A::Error> {
    if slot.is_some() || extra.contains_key(key) {
        return Err(A::Error::custom(format_args!("duplicate field `{key}`")));
    }
    match map.next_value::<Option<u64>>()? {
        Some(n) => *slot = Some(n),
        None => {
            extra.insert(key.to_owned(), Value::Null);
        }
    }
    Ok(())
}

/// Reads a required string field once.
fn required_str<'de, A: MapAccess<'de>, T: Text>(
    map: &mut A,
    slot: &mut Option<T>,
    key: &'static str,
) -> Result<(), A::Error> {
    if slot.is_some() {
        return Err(A::Error::duplicate_field(key));
    }
    *slot = Some(map.next_value::<Str<T>>()?.0);
    Ok(())
}

/// Reads a required field once.
fn required<'de, A: MapAccess<'de>, T: Deserialize<'de>>(
    map: &mut A,
    slot: &mut Option<T>,
    key: &'static str,
) -> Result<(), A::Error> {
    if slot.is_some() {
        return Err(A::Error::duplicate_field(key));
    }
    *slot = Some(map.next_value()?);
    Ok(())
}

fn unknown<'de, A: MapAccess<'de>>(
    map: &mut A,
    key: Key<'de>,
    extra: &mut Extra,
) -> Result<(), A::Error> {
    let value: RawJson = map.next_value()?;
    extra.push_unchecked(key.into_owned(), value);
    Ok(())
}

/// The unknown fields of an object once it is read, after checking that no key came twice.
fn checked<E: de::Error>(extra: Extra) -> Result<Extra, E> {
    match extra.duplicate_key() {
        Some(key) => Err(E::custom(format_args!("duplicate field `{key}`"))),
        None => Ok(extra),
    }
}

fn rest_into_extra<'de, A: MapAccess<'de>>(mut map: A) -> Result<Extra, A::Error> {
    let mut fields = Extra::new();
    while let Some(key) = map.next_key::<Key<'de>>()? {
        unknown(&mut map, key, &mut fields)?;
    }
    checked(fields)
}

/// An error message without the position `serde_json` appends (the caller adds its own).
fn without_position(e: &serde_json::Error) -> String {
    let text = e.to_string();
    match text.rfind(" at line ") {
        Some(i) if e.line() > 0 => text[..i].to_owned(),
        _ => text,
    }
}

fn write_extra<M: SerializeMap>(m: &mut M, extra: &Extra) -> Result<(), M::Error> {
    for (k, v) in extra {
        m.serialize_entry(k, v)?;
    }
    Ok(())
}
