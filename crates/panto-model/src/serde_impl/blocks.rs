//! (De)serialisation of content blocks and of a tool result's content.

use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, Deserializer, Error as _, MapAccess, SeqAccess, Visitor};
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{
    Key, Tagged, TaggedVisitor, checked, is_lossy, opt_string, required, required_str,
    rest_into_extra, unknown, write_extra, wtf8_lossy,
};
use crate::message::{
    CompactionBlock, ContentBlock, Extra, ImageBlock, OtherBlock, TextBlock, ThinkingBlock,
    ToolResultBlock, ToolResultContent, ToolUseBlock,
};

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
pub(super) struct MessageContent(pub(super) Vec<ContentBlock>);

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
