//! Tests of the identifiers: what the scanner finds of each kind and what it leaves alone, the
//! tally's counts and order, the merge, a call's JSON text read as its parsed value, and the
//! fair shares of a budget.

use proptest::prelude::*;
use serde_json::{Value, json};

use super::super::ids::{Identifier, IdentifierKind as I, LedgerIdentifiers, Tally};
use super::super::scan::{ERROR_LINE_BYTES, Origin, scan};
use super::super::share::allocate;
use super::super::{Ledger, LedgerCounts};

/// Every identifier of `text` as `origin`, in the order the scanner gives them.
fn all(text: &str, origin: Origin) -> Vec<(I, String)> {
    let mut out = Vec::new();
    scan(text, origin, &mut |kind, id| {
        out.push((kind, id.to_owned()));
    });
    out
}

/// The identifiers of one kind in `text`, said (not a tool's output).
fn of(kind: I, text: &str) -> Vec<String> {
    all(text, Origin::Said)
        .into_iter()
        .filter(|(k, _)| *k == kind)
        .map(|(_, id)| id)
        .collect()
}

#[test]
fn hex_ids_are_shas_colors_and_uuids_not_words_or_numbers() {
    let text = "merged 45ffe0a and 9f3c2b1d0e into main; color #8abeb7 and #fff; \
                id 123e4567-e89b-12d3-a456-426614174000; not deadbeef, 1234567, abc1234x, \
                x-45ffe0b, é45ffe0c, #12345, 45ffe0d_x";
    assert_eq!(
        of(I::HexId, text),
        [
            "45ffe0a",
            "9f3c2b1d0e",
            "#8abeb7",
            "#fff",
            "123e4567-e89b-12d3-a456-426614174000"
        ]
    );
}

#[test]
fn numbers_keep_their_keys_and_inline_code_assignments_are_not_numbers() {
    let text = "Total: 37\nUse offset=280 to continue\n\"fontSize\": 14,\nport = 8080\n\
                private x = 0;\nat 12:30, https://host:443/x, main.ts:100, elapsed: 35ms, \
                max-width: 12 and a.b: 3";
    assert_eq!(
        of(I::Number, text),
        [
            "Total: 37",
            "offset=280",
            "\"fontSize\": 14",
            "port = 8080",
            "elapsed: 35ms",
            "max-width: 12"
        ]
    );
}

#[test]
fn values_are_whole_pair_lines_or_environment_assignments_and_never_numbers() {
    let text = "{\n  \"accent\": \"#8abeb7\",\n  \"size\": 3,\n  \"text\": \"\"\n}\nmode = \"dark\"\n\
                this.theme = theme\nsay: two words\nstd::env::var(x)\nhttps://a.com/b\n\
                run with TERM=xterm-256color` now";
    assert_eq!(
        of(I::Value, text),
        [
            "\"accent\": \"#8abeb7\"",
            "mode = \"dark\"",
            "TERM=xterm-256color"
        ]
    );
}

#[test]
fn urls_path_lines_and_versions() {
    let text = "see https://github.com/a/b/issues/3. and src/main.rs:120:5, \
                ../tui/test/chat.ts(28,2): error; example.com:8080 is a host; \
                https://x.dev/src/a.rs:3 is a URL; v0.7.29 and 2.0.0-rc.1 but not 127.0.0.1, \
                01.27.21 or 1.2";
    assert_eq!(
        of(I::Url, text),
        [
            "https://github.com/a/b/issues/3",
            "https://x.dev/src/a.rs:3"
        ]
    );
    assert_eq!(
        of(I::PathLine, text),
        ["src/main.rs:120:5", "../tui/test/chat.ts(28,2)"]
    );
    assert_eq!(of(I::Version, text), ["v0.7.29", "2.0.0-rc.1"]);
}

#[test]
fn paths_and_names() {
    let text = "read packages/tui/src/editor.ts and ~/.pi/agent/themes/dark.json, not a.rs \
                nor src/mod.rs-old; call formatToolExecution() or total_tokens, not camel \
                nor src/fooBar/x.rs's folder";
    assert_eq!(
        of(I::Path, text),
        [
            "packages/tui/src/editor.ts",
            "~/.pi/agent/themes/dark.json",
            "src/fooBar/x.rs"
        ]
    );
    assert_eq!(of(I::Name, text), ["formatToolExecution", "total_tokens"]);
}

#[test]
fn error_lines_come_from_tool_output_only() {
    let out = "compiling\nsrc/a.ts(3,4): error TS2554: Expected 1 arguments, but got 0.\n\
               const e = new Error('x');\nError: Invalid hex color: #000cc\nerror[E0308]: mismatched\n";
    let lines = |origin| -> Vec<String> {
        all(out, origin)
            .into_iter()
            .filter(|(k, _)| *k == I::ErrorLine)
            .map(|(_, l)| l)
            .collect()
    };
    let reported = [
        "src/a.ts(3,4): error TS2554: Expected 1 arguments, but got 0.",
        "Error: Invalid hex color: #000cc",
        "error[E0308]: mismatched",
    ];
    assert_eq!(lines(Origin::Output), reported);
    assert!(
        lines(Origin::Said).is_empty(),
        "a text reports no error lines"
    );
    // A failed result's first three non-empty lines are error lines too.
    let failed = lines(Origin::Failed);
    assert_eq!(
        failed[..3],
        ["compiling", reported[0], "const e = new Error('x');"]
    );
    assert_eq!(failed[3..], reported[1..]);
    // A long line is cut at a word.
    let long = format!("error: {}", "word ".repeat(60));
    let cut = &all(&long, Origin::Output)
        .into_iter()
        .find(|(k, _)| *k == I::ErrorLine)
        .unwrap()
        .1;
    assert!(cut.len() <= ERROR_LINE_BYTES && long.starts_with(cut.as_str()));
    assert!(cut.ends_with("word"));
}

#[test]
fn a_tally_counts_an_identifier_once_per_item_most_referenced_first() {
    let mut tally = Tally::default();
    for text in [
        "45ffe0a and 45ffe0a again",
        "9c0ffee2",
        "45ffe0a",
        "b00c4fe3",
    ] {
        tally.text(text, Origin::Output);
        tally.next_item();
    }
    let ids = tally.finish();
    // `45ffe0a` twice (once per item), then the others by the latest item, most recent first.
    assert_eq!(
        ids.hex_ids,
        [
            Identifier::new("45ffe0a", 2),
            Identifier::new("b00c4fe3", 1),
            Identifier::new("9c0ffee2", 1)
        ]
    );
}

#[test]
fn a_merge_adds_the_counts_and_keeps_the_newer_first_among_equals() {
    let older = LedgerIdentifiers {
        hex_ids: vec![Identifier::new("aaaaaa1", 3), Identifier::new("bbbbbb2", 1)],
        ..LedgerIdentifiers::default()
    };
    let newer = LedgerIdentifiers {
        hex_ids: vec![Identifier::new("cccccc3", 1), Identifier::new("bbbbbb2", 3)],
        ..LedgerIdentifiers::default()
    };
    let merged = LedgerIdentifiers::merge(&older, &newer);
    assert_eq!(
        merged.hex_ids,
        [
            Identifier::new("bbbbbb2", 4),
            Identifier::new("aaaaaa1", 3),
            Identifier::new("cccccc3", 1)
        ]
    );
}

#[test]
fn the_record_stores_identifiers_as_pairs_and_reads_records_without_them() {
    let l = Ledger {
        identifiers: LedgerIdentifiers {
            urls: vec![Identifier::new("https://a.com/x", 2)],
            ..LedgerIdentifiers::default()
        },
        ..Ledger::default()
    };
    let stored = l.to_json();
    assert_eq!(
        stored["identifiers"],
        json!({"urls": [["https://a.com/x", 2]]})
    );
    assert_eq!(Ledger::from_json(&stored).unwrap(), l);
    let old = json!({"requests": ["fix it"], "left_out": 0});
    let read = Ledger::from_json(&old).unwrap();
    assert!(read.identifiers.is_empty());
    assert!(read.to_json().get("identifiers").is_none());
    assert_eq!(LedgerCounts::default().identifiers, 0);
}

/// The shrunk failure of `a_ledger_from_argument_texts_is_the_reference_ledger`: a number out
/// of range makes the parsed arguments their own text, whose strings include the keys. The
/// JSON text is then read through its parsed value, as every other path reads it.
#[test]
fn arguments_with_a_number_out_of_range_are_read_as_their_parsed_value() {
    let text = r#"{"file_path": [1e400], "note": "see fooBarBaz"}"#;
    let mut from_text = Tally::default();
    assert!(
        from_text.json(text).is_none(),
        "an exponent leaves it to the parse"
    );
    let mut ok = Tally::default();
    assert!(ok.json(r#"{"note": "see fooBarBaz", "n": [12]}"#).is_some());
    assert_eq!(ok.finish().names, [Identifier::new("fooBarBaz", 1)]);
}

/// JSON with strings that hold identifiers, written with escapes here and there.
fn arguments() -> impl Strategy<Value = (String, bool)> {
    let string = prop_oneof![
        Just("see 45ffe0a\nTotal: 37".to_owned()),
        Just("\"accent\": \"#8abeb7\"".to_owned()),
        Just("https://a.com/x and src/a.rs:3".to_owned()),
        Just("fooBarBaz in src/x/y.rs".to_owned()),
        Just("plain".to_owned()),
        Just("é ü \u{1f600} 1.2.3".to_owned()),
    ];
    let key = prop::sample::select(vec!["path", "command", "note", "content"]);
    let entries = prop::collection::vec((key, string, any::<bool>()), 0..5);
    (entries, any::<bool>()).prop_map(|(entries, nested)| {
        let mut map = serde_json::Map::new();
        let mut text = String::from("{");
        let mut repeated = false;
        for (i, (k, v, escaped)) in entries.iter().enumerate() {
            repeated |= map.contains_key(*k);
            map.insert((*k).to_owned(), Value::String(v.clone()));
            if i > 0 {
                text.push_str(", ");
            }
            let value = if *escaped {
                // Every character escaped as \uXXXX, surrogate pairs included.
                let mut s = String::from("\"");
                for unit in v.encode_utf16() {
                    s.push_str(&format!("\\u{unit:04x}"));
                }
                s.push('"');
                s
            } else {
                Value::String(v.clone()).to_string()
            };
            if nested {
                text.push_str(&format!("\"{k}\": [{{\"x\": {value}}}]"));
            } else {
                text.push_str(&format!("\"{k}\": {value}"));
            }
        }
        text.push('}');
        (text, repeated)
    })
}

proptest! {
    /// A call's arguments read from their JSON text give the identifiers of the parsed value,
    /// or are left to the parsed value (a key named twice).
    #[test]
    fn json_text_gives_the_identifiers_of_its_parsed_value((text, repeated) in arguments()) {
        let parsed: Value = serde_json::from_str(&text).unwrap();
        let mut from_value = Tally::default();
        from_value.value(&parsed);
        let mut from_text = Tally::default();
        let read = from_text.json(&text).is_some();
        prop_assert_eq!(read, !repeated, "{}", text);
        if read {
            prop_assert_eq!(from_text.finish(), from_value.finish());
        }
    }
}

proptest! {
    /// The water-filling of `share.rs`: the shares sum to at most the budget, none is more
    /// than its kind needs, and each is at least what its weight makes sure of.
    #[test]
    fn fair_shares_never_exceed_the_budget_and_give_each_kind_its_sure_share(
        budget in 0usize..100_000,
        kinds in prop::collection::vec((0usize..40_000, 1u64..40), 1..18),
    ) {
        let needs: Vec<usize> = kinds.iter().map(|k| k.0).collect();
        let weights: Vec<u64> = kinds.iter().map(|k| k.1).collect();
        let shares = allocate(budget, &needs, &weights);
        let total: u64 = weights.iter().sum();
        prop_assert!(shares.iter().sum::<usize>() <= budget);
        for k in 0..needs.len() {
            prop_assert!(shares[k] <= needs[k]);
            let sure = (budget as u128 * u128::from(weights[k]) / u128::from(total)) as usize;
            prop_assert!(shares[k] >= needs[k].min(sure), "{k}: {} < {}", shares[k], sure);
        }
    }
}

/// The strings the pruned reading leaves out are still counted, decoded as the parsed value
/// holds them: escapes read, a lone surrogate as U+FFFD, in a string or in an object under a
/// key whose strings are left out.
#[test]
fn strings_left_out_of_the_pruned_value_are_counted_as_the_parsed_value_holds_them() {
    for text in [
        r#"{"content": "see fooBarBaz\n\u0041bcDefGh \ud800 45ffe0a"}"#,
        r#"{"path": "a.rs", "n": {"x": "https://a.com/\u00e9", "y": ["Total: 37"]}}"#,
        r#"{"oldText": "plain", "newText": "cafe_babe1 \"v1.2.3\""}"#,
    ] {
        let raw = panto_model::RawJson::from_text(text.to_owned()).unwrap();
        let mut from_value = Tally::default();
        from_value.value(&raw.to_value());
        let mut from_text = Tally::default();
        assert!(from_text.json(text).is_some(), "{text}");
        let (a, b) = (from_text.finish(), from_value.finish());
        assert!(!a.is_empty(), "{text}");
        assert_eq!(a, b, "{text}");
    }
}
