//! Whatever panto appends, panto loads: arbitrary provider answers (tool arguments nested
//! deep, objects wide, numbers of any size and spelling, every escape) appended to a session
//! load back equal, and their carried JSON is in the file byte for byte.

use std::fs;

use panto_model::arbitrary::text;
use panto_model::{ContentBlock, Entry, Extra, Message, RawJson, Role, Usage};
use panto_session::Session;
use proptest::collection::vec;
use proptest::prelude::*;

use crate::{forward, opts, temp_session, user};

/// Numbers as other programs spell them: huge, tiny, signed zero, exponents of either case.
fn number() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("123456789012345678901234567890".to_owned()),
        Just("1e400".to_owned()),
        Just("-1E-400".to_owned()),
        Just("-0".to_owned()),
        Just("0.000".to_owned()),
        Just("1e2".to_owned()),
        Just("2.5E+10".to_owned()),
        any::<i64>().prop_map(|n| n.to_string()),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| format!("{f:e}")),
    ]
}

/// A JSON string using every escape JSON has, lone surrogates included.
fn string() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just(r#"\""#.to_owned()),
        Just(r"\\".to_owned()),
        Just(r"\/".to_owned()),
        Just(r"\b\f\n\r\t".to_owned()),
        Just(r"\u0000\u001f".to_owned()),
        Just(r"\ud83d".to_owned()),
        Just(r"\ude00".to_owned()),
        Just(r"\ud83d\ude00".to_owned()),
        Just(r"\u2028\u2029\uFFFF".to_owned()),
        "[a-z <>\\[\\]]{0,8}",
        "[\\PC&&[^\"\\\\]]{0,4}",
    ];
    vec(piece, 0..6).prop_map(|parts| format!("\"{}\"", parts.concat()))
}

/// Optional whitespace between tokens, as pretty printers write it.
fn space() -> impl Strategy<Value = &'static str> {
    prop_oneof![4 => Just(""), 1 => Just(" "), 1 => Just(" \t ")]
}

/// Arbitrary JSON text: scalars, arrays and objects, wide and nested.
fn json_text() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        number(),
        string(),
        Just("true".to_owned()),
        Just("false".to_owned()),
        Just("null".to_owned()),
    ];
    leaf.prop_recursive(4, 64, 16, |inner| {
        prop_oneof![
            (vec(inner.clone(), 0..16), space())
                .prop_map(|(items, s)| format!("[{s}{}{s}]", items.join(&format!("{s},{s}")))),
            (vec((string(), inner), 0..16), space()).prop_map(|(kv, s)| {
                let fields: Vec<String> = kv
                    .into_iter()
                    .map(|(k, v)| format!("{k}{s}:{s}{v}"))
                    .collect();
                format!("{{{s}{}{s}}}", fields.join(","))
            }),
        ]
    })
}

/// Tool arguments: arbitrary JSON, sometimes nested far deeper than any parser's limit, or
/// very wide.
fn arguments() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => json_text(),
        1 => (1usize..600, json_text()).prop_map(|(depth, core)| {
            format!("{}{core}{}", "{\"a\":[".repeat(depth), "]}".repeat(depth))
        }),
        1 => (100usize..2000, number()).prop_map(|(n, x)| format!("[{}]", vec![x; n].join(","))),
    ]
}

prop_compose! {
    /// A provider answer as an adapter returns it: text, tool calls, usage with unknown fields.
    fn answer()(
        t in text(),
        calls in vec(arguments(), 1..3),
        extra in vec(("x_[a-z]{1,6}", json_text()), 0..3),
        usage_extra in vec(("x_[a-z]{1,6}", number()), 0..2),
        input in 0u64..1_000_000,
        output in 0u64..10_000,
    ) -> Message {
        let mut content = vec![ContentBlock::text(t)];
        for (i, args) in calls.into_iter().enumerate() {
            let input = RawJson::from_text(args).expect("generated JSON");
            content.push(ContentBlock::tool_use(format!("call_{i}"), "tool", input));
        }
        let mut m = Message::new(Role::Assistant, content);
        m.stop_reason = Some("tool_use".into());
        let mut usage = Usage::new(input, output);
        usage.extra = raw_fields(usage_extra);
        m.usage = Some(usage);
        m.extra = raw_fields(extra);
        m
    }
}

/// Fields from generated JSON text (later duplicates replace earlier ones).
fn raw_fields(kv: Vec<(String, String)>) -> Extra {
    kv.into_iter()
        .map(|(k, v)| (k, RawJson::from_text(v).expect("generated JSON")))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn any_answer_panto_appends_loads_back_exactly(answers in vec(answer(), 1..3)) {
        let (_dir, path) = temp_session();
        let s = Session::create(&path, opts()).unwrap();
        let mut appended = vec![user("go")];
        appended.extend(answers.iter().cloned().map(Entry::Message));
        let ids = s.append(&appended).unwrap();

        let loaded = s.load_context().unwrap();
        prop_assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
        let got = &loaded.context.messages;
        prop_assert_eq!(got.len(), answers.len() + 1);
        for (i, want) in answers.iter().enumerate() {
            let mut want = want.clone();
            want.id = Some(ids[i + 1].as_str().into());
            prop_assert_eq!(&got[i + 1], &want);
        }
        prop_assert_eq!(forward(&s), loaded.context.clone());

        // The carried JSON is in the file exactly as given.
        let file = fs::read_to_string(&path).unwrap();
        for a in &answers {
            for block in &a.content {
                if let ContentBlock::ToolUse(call) = block {
                    let field = format!("\"input\":{}", call.input.json());
                    prop_assert!(file.contains(&field));
                }
            }
        }
    }
}
