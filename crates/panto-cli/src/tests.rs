//! Unit tests of the binary's pure parts: the progress lines printed for compaction events, the
//! terminal neutralising of text, and the trust table.

use panto_compact::{CompactionEvent, CompactionReport, Plan};
use panto_model::Trigger;

use crate::ui::describe_event;

fn report(before: u64, after: u64, truncated: bool) -> CompactionEvent {
    CompactionEvent::Finished(Box::new(CompactionReport {
        id: "c1".into(),
        summary: "s".into(),
        trigger: Trigger::Manual,
        model: "m".into(),
        provider: "p".into(),
        fallback: false,
        fallback_cause: None,
        instructions: None,
        truncated,
        tokens_before: before,
        tokens_after: after,
        plan: Plan {
            head: 0,
            keep_from: 4,
            end: 6,
            summarized_turns: 3,
            kept_turns: 2,
            summarized_tokens: 900,
            kept_tokens: 100,
            budget: 200,
        },
    }))
}

#[test]
fn a_compaction_line_says_before_and_after() {
    assert_eq!(
        describe_event(&report(1000, 300, false)),
        "panto: compacted with m: about 1000 -> 300 tokens (3 turns summarized, 2 kept)"
    );
}

#[test]
fn a_compaction_that_saved_nothing_says_so() {
    assert!(describe_event(&report(117, 307, false)).ends_with("so this compaction saved nothing"));
    assert!(describe_event(&report(1000, 300, true)).ends_with("may be cut short"));
}

#[test]
fn neutralize_escapes_controls_and_bidi_overrides_but_keeps_text_newlines_and_tabs() {
    use crate::ui::neutralize;
    let check = |input: &str, expect: &str| assert_eq!(neutralize(input), expect, "{input:?}");
    check(
        "plain text, é and 漢字\n\tindented",
        "plain text, é and 漢字\n\tindented",
    );
    check("\u{1b}]52;c;ZXZpbA==\u{7}", r"\x1b]52;c;ZXZpbA==\x07");
    check("\u{1b}[2J\u{9b}31m", r"\x1b[2J\u{9b}31m");
    check("del\u{7f} nul\u{0}", r"del\x7f nul\x00");
    check(
        "abc\u{202e}txt.exe \u{2066}",
        r"abc\u{202e}txt.exe \u{2066}",
    );
    check("windows\r\nline", "windows\nline");
    check("over\rwrite", r"over\x0dwrite");
    assert!(matches!(
        neutralize("nothing to do"),
        std::borrow::Cow::Borrowed(_)
    ));
}

#[test]
fn only_the_project_layer_needs_trust_and_only_for_routing_keys() {
    use crate::config::{KEYS, Layer, Needs, may_set};
    let routing: Vec<&str> = KEYS
        .iter()
        .filter(|(_, n)| matches!(n, Needs::Trust(_)))
        .map(|(k, _)| *k)
        .collect();
    assert_eq!(routing, ["provider", "base_url", "max_response_mib"]);
    for (key, _) in KEYS {
        for layer in [Layer::Default, Layer::UserFile, Layer::Env, Layer::Flag] {
            assert!(may_set(key, layer, false), "{key} from {layer:?}");
        }
        assert!(may_set(key, Layer::ProjectFile, true), "{key}");
        assert_eq!(
            may_set(key, Layer::ProjectFile, false),
            !routing.contains(key),
            "{key}"
        );
    }
}

#[test]
fn the_trust_table_names_every_key_a_config_file_may_hold() {
    // The parser lists the keys it accepts when it meets an unknown one.
    let err = toml::from_str::<crate::config::FileConfig>("zzz = 1").unwrap_err();
    let message = err.message().to_owned();
    let (_, expected) = message.split_once("expected one of").expect(&message);
    let accepted: Vec<&str> = expected.split('`').skip(1).step_by(2).collect();
    let table: Vec<&str> = crate::config::KEYS.iter().map(|(k, _)| *k).collect();
    assert_eq!(accepted, table);
}
