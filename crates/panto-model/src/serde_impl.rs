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

use std::borrow::Cow;
use std::cell::Cell;
use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, Deserializer, Error as _, MapAccess, SeqAccess, Visitor};
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::entry::{CompactionEntry, Entry, Trigger, UnknownEntry};
use crate::message::{
    CompactionBlock, ContentBlock, Extra, ImageBlock, Message, OtherBlock, RawJson, Role,
    TextBlock, ThinkingBlock, ToolResultBlock, ToolResultContent, ToolUseBlock, Usage,
};

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

// ---------------------------------------------------------------------------------------------
// Content blocks

impl Tagged for ContentBlock {
    const EXPECTING: &'static str = "a content block object";

    fn type_at(self, at: usize) -> Self {
        match self {
            ContentBlock::Other(mut o) => {
                o.type_index = at.min(o.fields.len());
                ContentBlock::Other(o)
            }
            other => other,
        }
    }

    fn visit_body<'de, A: MapAccess<'de>>(kind: String, mut map: A) -> Result<Self, A::Error> {
        let mut extra = Extra::new();
        match kind.as_str() {
            "text" => {
                let mut text = None;
                while let Some(key) = map.next_key::<Key<'de>>()? {
                    match key.as_str() {
                        "text" => required_str(&mut map, &mut text, "text")?,
                        _ => unknown(&mut map, key, &mut extra)?,
                    }
                }
                let text = text.ok_or_else(|| A::Error::missing_field("text"))?;
                Ok(ContentBlock::Text(TextBlock {
                    text,
                    extra: checked(extra)?,
                }))
            }
            "thinking" => {
                let (mut thinking, mut signature) = (None, None);
                while let Some(key) = map.next_key::<Key<'de>>()? {
                    match key.as_str() {
                        "thinking" => required_str(&mut map, &mut thinking, "thinking")?,
                        "signature" => {
                            opt_string(&mut map, &mut signature, "signature", &mut extra)?;
                        }
                        _ => unknown(&mut map, key, &mut extra)?,
                    }
                }
                let thinking = thinking.ok_or_else(|| A::Error::missing_field("thinking"))?;
                Ok(ContentBlock::Thinking(ThinkingBlock {
                    thinking,
                    signature,
                    extra: checked(extra)?,
                }))
            }
            "tool_use" => {
                let (mut id, mut name, mut input) = (None, None, None);
                while let Some(key) = map.next_key::<Key<'de>>()? {
                    match key.as_str() {
                        "id" => required_str(&mut map, &mut id, "id")?,
                        "name" => required_str(&mut map, &mut name, "name")?,
                        "input" => required(&mut map, &mut input, "input")?,
                        _ => unknown(&mut map, key, &mut extra)?,
                    }
                }
                Ok(ContentBlock::ToolUse(ToolUseBlock {
                    id: id.ok_or_else(|| A::Error::missing_field("id"))?,
                    name: name.ok_or_else(|| A::Error::missing_field("name"))?,
                    input: input.ok_or_else(|| A::Error::missing_field("input"))?,
                    extra: checked(extra)?,
                }))
            }
            "tool_result" => {
                let (mut tool_use_id, mut content, mut is_error) = (None, None, None);
                while let Some(key) = map.next_key::<Key<'de>>()? {
                    match key.as_str() {
                        "tool_use_id" => required_str(&mut map, &mut tool_use_id, "tool_use_id")?,
                        "content" => required(&mut map, &mut content, "content")?,
                        "is_error" => {
                            if is_error.is_some() || extra.contains_key("is_error") {
                                return Err(A::Error::duplicate_field("is_error"));
                            }
                            match map.next_value::<Option<bool>>()? {
                                Some(b) => is_error = Some(b),
                                None => {
                                    extra.insert("is_error".to_owned(), Value::Null);
                                }
                            }
                        }
                        _ => unknown(&mut map, key, &mut extra)?,
                    }
                }
                Ok(ContentBlock::ToolResult(ToolResultBlock {
                    tool_use_id: tool_use_id
                        .ok_or_else(|| A::Error::missing_field("tool_use_id"))?,
                    content: content.ok_or_else(|| A::Error::missing_field("content"))?,
                    is_error,
                    extra: checked(extra)?,
                }))
            }
            "image" => {
                let mut source = None;
                while let Some(key) = map.next_key::<Key<'de>>()? {
                    match key.as_str() {
                        "source" => required(&mut map, &mut source, "source")?,
                        _ => unknown(&mut map, key, &mut extra)?,
                    }
                }
                let source = source.ok_or_else(|| A::Error::missing_field("source"))?;
                Ok(ContentBlock::Image(ImageBlock {
                    source,
                    extra: checked(extra)?,
                }))
            }
            "compaction" => {
                let mut summary = None;
                while let Some(key) = map.next_key::<Key<'de>>()? {
                    match key.as_str() {
                        "summary" => required_str(&mut map, &mut summary, "summary")?,
                        _ => unknown(&mut map, key, &mut extra)?,
                    }
                }
                let extra = checked(extra)?;
                // Contract 1's compaction block is the one with a `summary`. A `compaction`
                // block without one is a provider's native block (Anthropic's `content` and
                // `signature`, an `OpenAI` Responses item's `encrypted_content`), kept whole.
                Ok(match summary {
                    Some(summary) => ContentBlock::Compaction(CompactionBlock { summary, extra }),
                    None => ContentBlock::Other(OtherBlock::new(kind, extra)),
                })
            }
            _ => Ok(ContentBlock::Other(OtherBlock::new(
                kind,
                rest_into_extra(map)?,
            ))),
        }
    }
}

impl<'de> Deserialize<'de> for ContentBlock {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(TaggedVisitor::<ContentBlock>(PhantomData))
    }
}

fn write_extra<M: SerializeMap>(m: &mut M, extra: &Extra) -> Result<(), M::Error> {
    for (k, v) in extra {
        m.serialize_entry(k, v)?;
    }
    Ok(())
}

impl Serialize for ContentBlock {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        let type_later = matches!(self, ContentBlock::Other(o) if o.type_index > 0);
        if !type_later {
            m.serialize_entry("type", self.type_name())?;
        }
        match self {
            ContentBlock::Text(b) => {
                m.serialize_entry("text", &b.text)?;
                write_extra(&mut m, &b.extra)?;
            }
            ContentBlock::Thinking(b) => {
                m.serialize_entry("thinking", &b.thinking)?;
                if let Some(sig) = &b.signature {
                    m.serialize_entry("signature", sig)?;
                }
                write_extra(&mut m, &b.extra)?;
            }
            ContentBlock::ToolUse(b) => {
                m.serialize_entry("id", &b.id)?;
                m.serialize_entry("name", &b.name)?;
                m.serialize_entry("input", &b.input)?;
                write_extra(&mut m, &b.extra)?;
            }
            ContentBlock::ToolResult(b) => {
                m.serialize_entry("tool_use_id", &b.tool_use_id)?;
                m.serialize_entry("content", &b.content)?;
                if let Some(e) = b.is_error {
                    m.serialize_entry("is_error", &e)?;
                }
                write_extra(&mut m, &b.extra)?;
            }
            ContentBlock::Image(b) => {
                m.serialize_entry("source", &b.source)?;
                write_extra(&mut m, &b.extra)?;
            }
            ContentBlock::Compaction(b) => {
                m.serialize_entry("summary", &b.summary)?;
                write_extra(&mut m, &b.extra)?;
            }
            ContentBlock::Other(b) => {
                // `type` goes back where it was read (written first above when that was first).
                for (i, (k, v)) in b.fields.iter().enumerate() {
                    if i == b.type_index && i > 0 {
                        m.serialize_entry("type", &b.kind)?;
                    }
                    m.serialize_entry(k, v)?;
                }
                if b.type_index > 0 && b.type_index >= b.fields.len() {
                    m.serialize_entry("type", &b.kind)?;
                }
            }
        }
        m.end()
    }
}

impl<'de> Deserialize<'de> for ToolResultContent {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ToolResultContent;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string or a list of content blocks")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ToolResultContent, E> {
                Ok(ToolResultContent::Text(v.to_owned()))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<ToolResultContent, E> {
                Ok(ToolResultContent::Text(v))
            }
            fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<ToolResultContent, E> {
                Ok(ToolResultContent::Text(wtf8_lossy(v).into_owned()))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<ToolResultContent, A::Error> {
                Ok(ToolResultContent::Blocks(read_blocks(seq)?))
            }
        }
        string_or_seq(d, V)
    }
}

/// Reads a value that is a string or a list; in lossy mode the string comes as bytes
/// (`serde_json` reads a list the same way in both modes).
fn string_or_seq<'de, D: Deserializer<'de>, V: Visitor<'de>>(
    d: D,
    visitor: V,
) -> Result<V::Value, D::Error> {
    if is_lossy() {
        d.deserialize_bytes(visitor)
    } else {
        d.deserialize_any(visitor)
    }
}

/// Reads a list of blocks into a vector of exactly their number: most messages hold one or two
/// blocks, and a loaded context holds every message, so spare capacity would cost as much as
/// the blocks themselves.
fn read_blocks<'de, A: SeqAccess<'de>>(mut seq: A) -> Result<Vec<ContentBlock>, A::Error> {
    let mut blocks = Vec::new();
    while let Some(b) = seq.next_element::<ContentBlock>()? {
        blocks.push(b);
    }
    blocks.shrink_to_fit();
    Ok(blocks)
}

impl Serialize for ToolResultContent {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            ToolResultContent::Text(t) => s.serialize_str(t),
            ToolResultContent::Blocks(b) => b.serialize(s),
        }
    }
}

/// Message content: a list of blocks, or (as the Anthropic API also allows) a bare string,
/// which becomes one text block.
struct MessageContent(Vec<ContentBlock>);

impl<'de> Deserialize<'de> for MessageContent {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = MessageContent;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a list of content blocks")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<MessageContent, E> {
                Ok(MessageContent(vec![ContentBlock::text(v)]))
            }
            fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<MessageContent, E> {
                Ok(MessageContent(vec![ContentBlock::text(wtf8_lossy(v))]))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<MessageContent, A::Error> {
                Ok(MessageContent(read_blocks(seq)?))
            }
        }
        string_or_seq(d, V)
    }
}

// ---------------------------------------------------------------------------------------------
// Roles and usage

impl<'de> Deserialize<'de> for Role {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = Key::deserialize(d)?;
        match s.as_str() {
            "user" => Ok(Role::User),
            "assistant" => Ok(Role::Assistant),
            other => Err(D::Error::unknown_variant(other, &["user", "assistant"])),
        }
    }
}

impl Serialize for Role {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Usage {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Usage;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a usage object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Usage, A::Error> {
                let (mut input, mut output, mut read, mut creation) = (None, None, None, None);
                let mut extra = Extra::new();
                while let Some(key) = map.next_key::<Key<'de>>()? {
                    match key.as_str() {
                        "input_tokens" => required(&mut map, &mut input, "input_tokens")?,
                        "output_tokens" => required(&mut map, &mut output, "output_tokens")?,
                        "cache_read_input_tokens" => {
                            opt_u64(&mut map, &mut read, "cache_read_input_tokens", &mut extra)?;
                        }
                        "cache_creation_input_tokens" => opt_u64(
                            &mut map,
                            &mut creation,
                            "cache_creation_input_tokens",
                            &mut extra,
                        )?,
                        _ => unknown(&mut map, key, &mut extra)?,
                    }
                }
                Ok(Usage {
                    input_tokens: input.ok_or_else(|| A::Error::missing_field("input_tokens"))?,
                    output_tokens: output
                        .ok_or_else(|| A::Error::missing_field("output_tokens"))?,
                    cache_read_input_tokens: read,
                    cache_creation_input_tokens: creation,
                    extra: checked(extra)?,
                })
            }
        }
        d.deserialize_map(V)
    }
}

impl Serialize for Usage {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("input_tokens", &self.input_tokens)?;
        m.serialize_entry("output_tokens", &self.output_tokens)?;
        if let Some(n) = self.cache_read_input_tokens {
            m.serialize_entry("cache_read_input_tokens", &n)?;
        }
        if let Some(n) = self.cache_creation_input_tokens {
            m.serialize_entry("cache_creation_input_tokens", &n)?;
        }
        write_extra(&mut m, &self.extra)?;
        m.end()
    }
}

// ---------------------------------------------------------------------------------------------
// Messages and entries

/// Reads the fields of a message object; `type` has already been consumed (or is kept in extra
/// for a bare message).
fn visit_message<'de, A: MapAccess<'de>>(mut map: A, bare: bool) -> Result<Message, A::Error> {
    let (mut id, mut role, mut content) = (None, None, None::<MessageContent>);
    let (mut model, mut stop_reason, mut usage) = (None, None, None::<Usage>);
    let mut extra = Extra::new();
    while let Some(key) = map.next_key::<Key<'de>>()? {
        match key.as_str() {
            "id" => opt_string(&mut map, &mut id, "id", &mut extra)?,
            "role" => required(&mut map, &mut role, "role")?,
            "content" => required(&mut map, &mut content, "content")?,
            "model" => opt_string(&mut map, &mut model, "model", &mut extra)?,
            "stop_reason" => opt_string(&mut map, &mut stop_reason, "stop_reason", &mut extra)?,
            "usage" => {
                if usage.is_some() || extra.contains_key("usage") {
                    return Err(A::Error::duplicate_field("usage"));
                }
                match map.next_value::<Option<Usage>>()? {
                    Some(u) => usage = Some(u),
                    None => {
                        extra.insert("usage".to_owned(), Value::Null);
                    }
                }
            }
            "type" if bare => {
                // A bare message may say `"type":"message"`; anything else is kept.
                let value: RawJson = map.next_value()?;
                if value.as_str() != Some("message") {
                    extra.push_unchecked("type".to_owned(), value);
                }
            }
            _ => unknown(&mut map, key, &mut extra)?,
        }
    }
    Ok(Message {
        id,
        role: role.ok_or_else(|| A::Error::missing_field("role"))?,
        content: content.ok_or_else(|| A::Error::missing_field("content"))?.0,
        model,
        stop_reason,
        usage,
        extra: checked(extra)?,
    })
}

fn write_message_fields<M: SerializeMap>(m: &mut M, msg: &Message) -> Result<(), M::Error> {
    if let Some(id) = &msg.id {
        m.serialize_entry("id", id)?;
    }
    m.serialize_entry("role", &msg.role)?;
    if let Some(model) = &msg.model {
        m.serialize_entry("model", model)?;
    }
    if let Some(sr) = &msg.stop_reason {
        m.serialize_entry("stop_reason", sr)?;
    }
    if let Some(u) = &msg.usage {
        m.serialize_entry("usage", u)?;
    }
    m.serialize_entry("content", &msg.content)?;
    Ok(())
}

impl<'de> Deserialize<'de> for Message {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Message;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a message object")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Message, A::Error> {
                visit_message(map, true)
            }
        }
        d.deserialize_map(V)
    }
}

/// A bare message: the message fields without `"type":"message"` (the shape of `panto context
/// --json`). Unknown fields are written after the known ones.
impl Serialize for Message {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        write_message_fields(&mut m, self)?;
        write_extra(&mut m, &self.extra)?;
        m.end()
    }
}

impl Tagged for Entry {
    const EXPECTING: &'static str = "a session entry object";

    fn visit_body<'de, A: MapAccess<'de>>(kind: String, mut map: A) -> Result<Self, A::Error> {
        match kind.as_str() {
            "message" => Ok(Entry::Message(visit_message(map, false)?)),
            "compaction" => {
                let mut c = CompactionEntry::new(String::new());
                let (mut summary, mut trigger) = (None::<String>, None::<String>);
                let mut extra = Extra::new();
                while let Some(key) = map.next_key::<Key<'de>>()? {
                    match key.as_str() {
                        "id" => opt_string(&mut map, &mut c.id, "id", &mut extra)?,
                        "summary" => required_str(&mut map, &mut summary, "summary")?,
                        "trigger" => opt_string(&mut map, &mut trigger, "trigger", &mut extra)?,
                        "model" => opt_string(&mut map, &mut c.model, "model", &mut extra)?,
                        "instructions" => {
                            opt_string(&mut map, &mut c.instructions, "instructions", &mut extra)?;
                        }
                        "tokens_before" => {
                            opt_u64(&mut map, &mut c.tokens_before, "tokens_before", &mut extra)?;
                        }
                        "tokens_after" => {
                            opt_u64(&mut map, &mut c.tokens_after, "tokens_after", &mut extra)?;
                        }
                        "kept_messages" => {
                            opt_u64(&mut map, &mut c.kept_messages, "kept_messages", &mut extra)?;
                        }
                        _ => unknown(&mut map, key, &mut extra)?,
                    }
                }
                c.summary = summary.ok_or_else(|| A::Error::missing_field("summary"))?;
                c.trigger = trigger.as_deref().map(Trigger::parse);
                c.extra = checked(extra)?;
                Ok(Entry::Compaction(c))
            }
            _ => Ok(Entry::Unknown(UnknownEntry {
                kind,
                fields: rest_into_extra(map)?,
            })),
        }
    }
}

impl<'de> Deserialize<'de> for Entry {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(TaggedVisitor::<Entry>(PhantomData))
    }
}

impl Serialize for Entry {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("type", self.type_name())?;
        match self {
            Entry::Message(msg) => {
                write_message_fields(&mut m, msg)?;
                write_extra(&mut m, &msg.extra)?;
            }
            Entry::Compaction(c) => {
                if let Some(id) = &c.id {
                    m.serialize_entry("id", id)?;
                }
                m.serialize_entry("summary", &c.summary)?;
                if let Some(t) = &c.trigger {
                    m.serialize_entry("trigger", t.as_str())?;
                }
                if let Some(v) = &c.model {
                    m.serialize_entry("model", v)?;
                }
                if let Some(v) = &c.instructions {
                    m.serialize_entry("instructions", v)?;
                }
                if let Some(v) = c.tokens_before {
                    m.serialize_entry("tokens_before", &v)?;
                }
                if let Some(v) = c.tokens_after {
                    m.serialize_entry("tokens_after", &v)?;
                }
                if let Some(v) = c.kept_messages {
                    m.serialize_entry("kept_messages", &v)?;
                }
                write_extra(&mut m, &c.extra)?;
            }
            Entry::Unknown(u) => write_extra(&mut m, &u.fields)?,
        }
        m.end()
    }
}
