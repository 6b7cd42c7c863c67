//! The scan's shortcuts held to the pass without them: the class table's bits that stand for a
//! test of a byte are that test, for every byte, and the scan with its shortcuts finds what the
//! reference scan finds, in the same order, on generated text.

use proptest::prelude::*;

use super::{
    IdentifierKind, KEY, KINDS, Origin, URL_END, VALUE_END, class, is_word, scan, scan_reference,
};

#[test]
fn every_class_bit_is_the_test_of_the_byte_it_stands_for() {
    for b in 0..=255u8 {
        let key = is_word(b) || b".-".contains(&b);
        let value_end = b.is_ascii_whitespace() || b",;{}[]\"'`".contains(&b);
        let url_end = b.is_ascii_whitespace() || b"\"'`<>)]}\\".contains(&b);
        assert_eq!(class(b) & KEY != 0, key, "KEY of byte {b}");
        assert_eq!(
            class(b) & VALUE_END != 0,
            value_end,
            "VALUE_END of byte {b}"
        );
        assert_eq!(class(b) & URL_END != 0, url_end, "URL_END of byte {b}");
    }
}

#[test]
fn a_kind_s_index_is_its_place_in_the_list_of_kinds() {
    for (i, kind) in KINDS.into_iter().enumerate() {
        assert_eq!(kind.index(), i, "{kind:?}");
    }
}

/// What the scan finds in `text`, with its shortcuts or (`shortcuts` false) without them.
fn found(text: &str, origin: Origin, shortcuts: bool) -> Vec<(IdentifierKind, String)> {
    let mut out = Vec::new();
    let mut push = |kind, id: &str| out.push((kind, id.to_owned()));
    if shortcuts {
        scan(text, origin, &mut push);
    } else {
        scan_reference(text, origin, &mut push);
    }
    out
}

/// Pieces that make or break identifiers of every kind, and the bytes around them: words of
/// every case, code names with a capital or an underscore anywhere, runs of spaces, keys and
/// their separators, paths, URLs, versions, hex ids, error lines and text in another script.
fn piece() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z]{1,9}",
        "[A-Za-z_]{1,12}",
        "[a-z]{1,6}[A-Z_][a-z0-9]{0,6}",
        "_[a-z]{2,8}",
        "[A-Z][A-Z0-9_]{2,8}",
        "[0-9a-f]{3,12}",
        "[0-9]{1,4}(\\.[0-9]{1,4}){0,3}",
        " {1,6}",
        "[ \t]{0,3}\n[ \t]{0,3}",
        Just(": ".to_owned()),
        Just("=".to_owned()),
        Just("\": ".to_owned()),
        Just("\"".to_owned()),
        Just("#".to_owned()),
        Just("/".to_owned()),
        Just(".".to_owned()),
        Just("-".to_owned()),
        Just(",".to_owned()),
        Just("(".to_owned()),
        Just(")".to_owned()),
        Just("https://".to_owned()),
        Just("error".to_owned()),
        Just("Error: ".to_owned()),
        Just("src/".to_owned()),
        Just(".rs:12".to_owned()),
        Just("v1.2.3".to_owned()),
        Just("é".to_owned()),
        Just("名前".to_owned()),
        "[ -~]{1,4}",
    ]
}

fn text() -> impl Strategy<Value = String> {
    prop::collection::vec(piece(), 0..60).prop_map(|pieces| pieces.concat())
}

fn origin() -> impl Strategy<Value = Origin> {
    prop_oneof![
        Just(Origin::Said),
        Just(Origin::Output),
        Just(Origin::Failed)
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    /// The shortcuts (a space stepped over, a word with no capital or underscore after its first
    /// byte not looked at as a code name) change nothing the scan finds, nor its order.
    #[test]
    fn the_scan_with_its_shortcuts_finds_what_the_reference_scan_finds(
        text in text(),
        origin in origin(),
    ) {
        prop_assert_eq!(found(&text, origin, true), found(&text, origin, false), "{:?}", text);
    }
}
