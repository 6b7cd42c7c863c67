//! (De)serialisation of roles, usage, messages and session entries.

use std::fmt;
use std::marker::PhantomData;

use serde::de::{Deserializer, Error as _, MapAccess, Visitor};
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::blocks::MessageContent;
use super::{
    Key, Tagged, TaggedVisitor, checked, opt_string, opt_u64, required, required_str,
    rest_into_extra, unknown, write_extra,
};
use crate::entry::{CompactionEntry, Entry, Trigger, UndoEntry, UnknownEntry};
use crate::message::{Extra, Message, RawJson, Role, Usage};

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
            "undo" => {
                let (mut id, mut undoes) = (None::<String>, None::<String>);
                let mut extra = Extra::new();
                while let Some(key) = map.next_key::<Key<'de>>()? {
                    match key.as_str() {
                        "id" => opt_string(&mut map, &mut id, "id", &mut extra)?,
                        "undoes" => required_str(&mut map, &mut undoes, "undoes")?,
                        _ => unknown(&mut map, key, &mut extra)?,
                    }
                }
                let undoes = undoes.ok_or_else(|| A::Error::missing_field("undoes"))?;
                Ok(Entry::Undo(UndoEntry {
                    id,
                    undoes,
                    extra: checked(extra)?,
                }))
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
            Entry::Undo(u) => {
                if let Some(id) = &u.id {
                    m.serialize_entry("id", id)?;
                }
                m.serialize_entry("undoes", &u.undoes)?;
                write_extra(&mut m, &u.extra)?;
            }
            Entry::Unknown(u) => write_extra(&mut m, &u.fields)?,
        }
        m.end()
    }
}
