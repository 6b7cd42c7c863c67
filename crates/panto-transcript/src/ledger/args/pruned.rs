//! The reading the byte reader of `args.rs` replaced, kept as its reference for the tests:
//! `serde_json` drives a visitor that builds the pruned value, each value under a key whose
//! strings are not kept first skipped as raw text (`RawValue`) and read again only when it is an
//! object or an array; the strings left out are decoded from that raw text. The tests hold the
//! two readings to the same value and the same strings on every text.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::{MAX_DEPTH, Place, RESERVED_KEY, Strings};

/// The pruned value of `text`, gathering every string value into `strings`. The strings left
/// out of the value are decoded from their raw text, a lone surrogate as U+FFFD as the full
/// parse reads it.
pub(in crate::ledger) fn read_with_strings<'t>(
    text: &'t str,
    strings: &mut Strings<'t>,
) -> Option<Value> {
    parse(text, Some(strings))
}

fn parse<'t>(text: &'t str, strings: Option<&mut Strings<'t>>) -> Option<Value> {
    let mut de = serde_json::Deserializer::from_str(text);
    let value = Pruned {
        place: Place::Top,
        keep: true,
        depth: 0,
        strings,
    }
    .deserialize(&mut de)
    .ok()?;
    de.end().ok()?;
    Some(value)
}

/// The value at `place`; a string is kept when `keep` is true and is `null` otherwise.
/// `depth` counts the objects and arrays around it, across the nested parses of [`skipped`].
/// Every string value met is added to `strings` when there are some.
struct Pruned<'s, 't> {
    place: Place,
    keep: bool,
    depth: usize,
    strings: Option<&'s mut Strings<'t>>,
}

/// The value of raw text `raw` that sits at `place` under a key whose strings are not kept:
/// `null` for a string (added to `strings`, decoded), else its pruned value.
fn skipped<'t>(
    raw: &'t str,
    place: Place,
    depth: usize,
    strings: Option<&mut Strings<'t>>,
) -> Result<Value, serde_json::Error> {
    match raw.as_bytes().first() {
        Some(b'"') => {
            if let Some(strings) = strings {
                let inner = &raw[1..raw.len() - 1];
                strings
                    .list
                    .push(if memchr::memchr(b'\\', inner.as_bytes()).is_some() {
                        let mut out = String::with_capacity(inner.len());
                        unescape(inner, &mut out);
                        Cow::Owned(out)
                    } else {
                        Cow::Borrowed(inner)
                    });
            }
            Ok(Value::Null)
        }
        Some(b'{' | b'[') => {
            let mut de = serde_json::Deserializer::from_str(raw);
            let value = Pruned {
                place,
                keep: false,
                depth,
                strings,
            }
            .deserialize(&mut de)?;
            de.end()?;
            Ok(value)
        }
        _ => serde_json::from_str(raw),
    }
}

impl<'t> Pruned<'_, 't> {
    /// The depth inside the object or array this value opens, or an error past [`MAX_DEPTH`].
    fn deeper<E: de::Error>(&self) -> Result<usize, E> {
        if self.depth >= MAX_DEPTH {
            return Err(E::custom("nested too deep"));
        }
        Ok(self.depth + 1)
    }
}

impl<'de> DeserializeSeed<'de> for Pruned<'_, 'de> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Pruned<'_, 'de> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("tool arguments")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Value, E> {
        if let Some(strings) = self.strings {
            strings.list.push(Cow::Borrowed(v));
        }
        Ok(if self.keep {
            Value::String(v.to_owned())
        } else {
            Value::Null
        })
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        if let Some(strings) = self.strings {
            strings.list.push(Cow::Owned(v.to_owned()));
        }
        Ok(if self.keep {
            Value::String(v.to_owned())
        } else {
            Value::Null
        })
    }

    fn visit_seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> Result<Value, A::Error> {
        let depth = self.deeper()?;
        let place = self.place.element();
        let mut items = Vec::new();
        while let Some(v) = seq.next_element_seed(Pruned {
            place,
            keep: true,
            depth,
            strings: self.strings.as_deref_mut(),
        })? {
            items.push(v);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<Value, A::Error> {
        let depth = self.deeper()?;
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            // `serde_json` reads an object with such a key as something else (a raw value).
            if key.starts_with(RESERVED_KEY) {
                return Err(de::Error::custom("a key serde_json reserves"));
            }
            let place = self.place.under(&key);
            let value = if self.place.keeps(&key) {
                map.next_value_seed(Pruned {
                    place,
                    keep: true,
                    depth,
                    strings: self.strings.as_deref_mut(),
                })?
            } else {
                // Most such values are long strings (an edit's texts): skipped as raw text,
                // without unescaping them, and read only when they can hold something kept.
                let raw: &'de RawValue = map.next_value()?;
                skipped(raw.get(), place, depth, self.strings.as_deref_mut())
                    .map_err(de::Error::custom)?
            };
            if out.insert(key, value).is_some()
                && let Some(strings) = self.strings.as_deref_mut()
            {
                strings.repeated = true;
            }
        }
        Ok(Value::Object(out))
    }
}

/// The text of a JSON string's escaped contents, as `serde_json` reads it (a lone surrogate
/// as U+FFFD).
fn unescape(raw: &str, out: &mut String) {
    let mut rest = raw;
    while let Some(i) = memchr::memchr(b'\\', rest.as_bytes()) {
        out.push_str(&rest[..i]);
        let esc = &rest[i + 1..];
        let Some(c) = esc.chars().next() else { return };
        rest = &esc[c.len_utf8()..];
        match c {
            'n' => out.push('\n'),
            't' => out.push('\t'),
            'r' => out.push('\r'),
            'b' => out.push('\u{8}'),
            'f' => out.push('\u{c}'),
            'u' => {
                let (ch, used) = unicode_escape(rest);
                out.push(ch);
                rest = &rest[used..];
            }
            other => out.push(other),
        }
    }
    out.push_str(rest);
}

/// The character of a `\u` escape whose four hex digits start `rest`, with a second escape
/// for a surrogate pair, and how many bytes of `rest` it used.
fn unicode_escape(rest: &str) -> (char, usize) {
    let hex = |s: &str| s.get(..4).and_then(|h| u32::from_str_radix(h, 16).ok());
    let Some(first) = hex(rest) else {
        return (char::REPLACEMENT_CHARACTER, 0);
    };
    let low = rest
        .get(4..)
        .and_then(|r| r.strip_prefix("\\u"))
        .and_then(hex)
        .filter(|second| (0xDC00..0xE000).contains(second));
    if let (true, Some(second)) = ((0xD800..0xDC00).contains(&first), low) {
        let c = 0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00);
        return (char::from_u32(c).unwrap_or(char::REPLACEMENT_CHARACTER), 10);
    }
    (
        char::from_u32(first).unwrap_or(char::REPLACEMENT_CHARACTER),
        4,
    )
}
