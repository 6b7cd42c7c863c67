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
        steps: Vec::new(),
        requests: 1,
        elided: Vec::new(),
        degraded: None,
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
fn a_fold_of_several_steps_is_announced_and_a_single_request_is_not() {
    let folding = |steps| CompactionEvent::Folding {
        steps,
        limit: Some(4_000),
        transcript_tokens: 9_000,
    };
    assert_eq!(
        describe_event(&folding(4)),
        "panto: compacting in 4 steps: about 9000 tokens of conversation to summarize, about 4000 tokens per request"
    );
    assert_eq!(describe_event(&folding(1)), "");
    let shrink = CompactionEvent::Shrinking {
        step: 2,
        limit: 3_000,
        steps: 5,
        cause: "prompt is too long".into(),
    };
    assert_eq!(
        describe_event(&shrink),
        "panto: step 2 was too large for the model (prompt is too long); retrying with requests of about 3000 tokens, 5 steps in all"
    );
}

#[test]
fn a_retry_line_says_which_when_and_why_in_few_words() {
    use std::time::Duration;

    use panto_provider::{ProviderError, RetryNotice};

    use crate::ui::describe_retry;

    let refused = ProviderError::Connection {
        message: "could not connect: error sending request for url (http://127.0.0.1:9/v1/chat/completions): client error (Connect): tcp connect error: Connection refused (os error 111)".into(),
    };
    assert_eq!(
        describe_retry(&RetryNotice::new(2, 3, Duration::from_secs(4), &refused)),
        "panto: retrying 2/3 in 4 s: connection failed: Connection refused (os error 111)"
    );
    let busy = ProviderError::Server {
        status: 503,
        message: "busy".into(),
    };
    assert_eq!(
        describe_retry(&RetryNotice::new(1, 3, Duration::from_millis(700), &busy)),
        "panto: retrying 1/3 in 0.7 s: server error (HTTP 503): busy"
    );
}

#[test]
fn a_checked_log_appends_from_where_it_last_saw_the_file_and_flags_conflicts() {
    use panto_compact::SessionLog;
    use panto_model::{Entry, Message};
    use panto_session::{Session, SessionOptions};

    use panto_compact::CheckedLog;

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.jsonl");
    let session = Session::create(&path, SessionOptions::default().fsync(false)).unwrap();
    let prompt = |text: &str| [Entry::Message(Message::user_text(text))];
    let mut log = CheckedLog::new(&session, 0);
    log.append(&prompt("one")).unwrap();
    assert_eq!(log.end(), std::fs::metadata(&path).unwrap().len());
    assert!(!log.changed().unwrap());
    session.append(&prompt("another writer")).unwrap();
    assert!(log.changed().unwrap());
    let before = log.end();
    let error = log.append(&prompt("late")).unwrap_err();
    assert!(
        error.to_string().contains("another writer appended"),
        "{error}"
    );
    assert!(log.conflicted());
    assert_eq!(log.end(), before);
    let mut fresh = CheckedLog::new(&session, session.end().unwrap());
    fresh.append(&prompt("caught up")).unwrap();
    assert!(!fresh.conflicted());
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
