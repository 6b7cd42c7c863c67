//! Reading a valid line and writing it back gives equal JSON, unknown fields included.

use panto_model::arbitrary::{extra, json_value, session};
use panto_model::{CompactionEntry, Entry, Trigger, UnknownEntry, decode_line, encode_line};
use proptest::prelude::*;
use serde_json::Value;

fn entries() -> impl Strategy<Value = Vec<Entry>> {
    (
        session(4),
        prop::option::of(("[a-z ]{0,40}", extra(), any::<Option<u64>>())),
        extra(),
    )
        .prop_map(|(s, compaction, unknown)| {
            let mut out: Vec<Entry> = s.messages.into_iter().map(Entry::Message).collect();
            if let Some((summary, extra, tokens)) = compaction {
                let mut c = CompactionEntry::new(summary);
                c.id = Some("c1".into());
                c.trigger = Some(Trigger::Other("scheduled".into()));
                c.tokens_before = tokens;
                c.extra = extra;
                out.push(Entry::Compaction(c));
            }
            out.push(Entry::Unknown(UnknownEntry::new("custom_note", unknown)));
            out
        })
}

/// Moves `type` to the end of every object, so the buffered decoding path runs too.
fn type_last(v: Value) -> Value {
    match v {
        Value::Object(map) => {
            let mut out = serde_json::Map::new();
            let mut ty = None;
            for (k, v) in map {
                if k == "type" {
                    ty = Some(v);
                } else {
                    out.insert(k, type_last(v));
                }
            }
            // serde_json's default map sorts keys; "type" sorts after "content" and "role",
            // which is what this test needs.
            if let Some(t) = ty {
                out.insert("type".into(), t);
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(items.into_iter().map(type_last).collect()),
        other => other,
    }
}

proptest! {
    #[test]
    fn write_then_read_is_identity(entries in entries()) {
        for e in &entries {
            let line = encode_line(e);
            prop_assert!(line.ends_with('\n'));
            prop_assert_eq!(line.matches('\n').count(), 1, "one line per entry");
            let back = decode_line(line.trim_end().as_bytes(), 1).unwrap();
            prop_assert_eq!(&back, e);
        }
    }

    #[test]
    fn read_then_write_gives_equal_json(entries in entries()) {
        for e in &entries {
            let original: Value = serde_json::to_value(e).unwrap();
            let text = serde_json::to_string(&type_last(original.clone())).unwrap();
            let decoded = decode_line(text.as_bytes(), 1).unwrap();
            let again: Value = serde_json::from_str(&encode_line(&decoded)).unwrap();
            prop_assert_eq!(again, original);
        }
    }

    #[test]
    fn arbitrary_unknown_block_fields_survive(fields in extra(), v in json_value()) {
        let mut block = serde_json::Map::new();
        block.insert("type".into(), Value::String("text".into()));
        block.insert("text".into(), Value::String("t".into()));
        block.insert("x_payload".into(), v);
        block.extend(fields.to_map());
        let line = serde_json::json!({"type": "message", "role": "user", "content": [block]});
        let decoded = decode_line(line.to_string().as_bytes(), 1).unwrap();
        let again: Value = serde_json::from_str(&encode_line(&decoded)).unwrap();
        prop_assert_eq!(again, line);
    }
}
