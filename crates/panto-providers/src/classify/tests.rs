//! Unit tests of the classifier's parts (number and duration reading, normalisation, secret
//! redaction, the table's own invariants) and the check that keeps the classification section
//! of `docs/providers.md` generated from the table and the fixture corpus.

use std::path::Path;
use std::time::Duration;

use proptest::prelude::*;
use serde_json::Value;

use super::numbers::{
    MIN_INPUT_ROOM, SIZE_PATTERNS, Sizes, match_pattern, parse_count, parse_duration,
    retry_delay_in_text,
};
use super::rules::{self, RULES, Test};
use super::signals::{normalize, redact_secrets, truncate_chars};
use super::{Protocol, explain_response, explain_stream_error, explain_success_body};

#[test]
fn counts_with_separators_and_suffixes() {
    let check = |text: &str, expect: Option<(u64, usize)>| {
        assert_eq!(parse_count(text, 0), expect, "{text:?}");
    };
    check("128000 tokens", Some((128_000, 6)));
    check("128,000 tokens", Some((128_000, 7)));
    check("1,048,576)", Some((1_048_576, 9)));
    check("128_000", Some((128_000, 7)));
    check("128'000", Some((128_000, 7)));
    check("128k tokens", Some((128_000, 4)));
    check("128kb", Some((128, 3)));
    check("1, 204800]", Some((1, 1)));
    check("6000, Requested", Some((6000, 4)));
    check("1,2345", Some((1, 1)));
    check("13055>= n_ctx", Some((13055, 5)));
    check("tokens", None);
    check("99999999999999999999999", None);
}

#[test]
fn patterns_capture_roles() {
    assert_eq!(
        match_pattern(
            "prompt is too long: {I} tokens > {W} maximum",
            "x: prompt is too long: 219,898 tokens > 200000 maximum"
        ),
        Some(vec![('I', 219_898), ('W', 200_000)])
    );
    assert_eq!(
        match_pattern(
            "{O} in the completion",
            "(64 in the messages, 8192 in the completion)"
        ),
        Some(vec![('O', 8192)])
    );
    assert_eq!(
        match_pattern("{O} in the completion", "the completion"),
        None
    );
    // A later occurrence matches when the first one does not.
    assert_eq!(
        match_pattern(
            "limit of {W} tokens",
            "limit of many tokens, limit of 9 tokens"
        ),
        Some(vec![('W', 9)])
    );
}

#[test]
fn sizes_and_the_output_veto() {
    let sizes = Sizes::read(&normalize(
        "This model's maximum context length is 4096 tokens. However, you requested 4201 \
         tokens (3177 in the messages, 1024 in the completion).",
    ));
    assert_eq!(sizes.input_tokens(), Some(3177));
    assert_eq!(sizes.limit, Some(4096));
    assert!(!sizes.output_fills_window());

    let tight = Sizes {
        output: Some(4096 - MIN_INPUT_ROOM + 1),
        limit: Some(4096),
        ..Sizes::default()
    };
    assert!(tight.output_fills_window());
    let roomy = Sizes {
        output: Some(4096 - MIN_INPUT_ROOM),
        limit: Some(4096),
        ..Sizes::default()
    };
    assert!(!roomy.output_fills_window());
    let no_room = Sizes {
        input_room: Some(0),
        ..Sizes::default()
    };
    assert!(no_room.output_fills_window());
    let total_only = Sizes {
        total: Some(10),
        output: Some(3),
        ..Sizes::default()
    };
    assert_eq!(total_only.input_tokens(), Some(7));
}

#[test]
fn durations() {
    let secs = |s: f64| Some(Duration::from_secs_f64(s));
    assert_eq!(parse_duration("1.5s."), secs(1.5));
    assert_eq!(parse_duration("20ms. next"), secs(0.02));
    assert_eq!(parse_duration("6m0s"), secs(360.0));
    assert_eq!(parse_duration("1h2m3s"), secs(3723.0));
    assert_eq!(parse_duration("86400 seconds. Please"), secs(86400.0));
    assert_eq!(parse_duration("1 minute 30 seconds"), secs(90.0));
    assert_eq!(parse_duration("20"), secs(20.0));
    assert_eq!(parse_duration("30s"), secs(30.0));
    assert_eq!(parse_duration("before trying again"), None);
    assert_eq!(parse_duration("20 apples"), None);
    assert_eq!(parse_duration(""), None);

    let delay = |t: &str| retry_delay_in_text(&normalize(t));
    assert_eq!(delay("Please try again in 4.77s. Need more"), secs(4.77));
    assert_eq!(delay("Please retry in 20.04466179s."), secs(20.044_661_79));
    assert_eq!(delay("Please retry after 86400 seconds."), secs(86400.0));
    assert_eq!(
        delay("please wait before trying again. try again in 20ms"),
        secs(0.02)
    );
    assert_eq!(
        delay("Too many tokens, please wait before trying again."),
        None
    );
}

#[test]
fn normalisation() {
    assert_eq!(
        normalize(
            "  Input validation error: `inputs` tokens +\n `max_new_tokens`  must be <= 4097 "
        ),
        "input validation error: inputs tokens + max_new_tokens must be <= 4097"
    );
    assert_eq!(
        normalize("The model\u{2019}s CONTEXT"),
        "the model's context"
    );
    assert_eq!(normalize(""), "");
}

#[test]
fn secrets_are_redacted() {
    assert_eq!(
        redact_secrets("Incorrect API key provided: sk-proj-****abcd1234. See"),
        "Incorrect API key provided: [redacted]. See"
    );
    assert_eq!(
        redact_secrets(
            "POST /v1beta/models/x:generateContent?key=AIzaSyA1234567890abcdefghij failed"
        ),
        "POST /v1beta/models/x:generateContent?key=[redacted] failed"
    );
    assert_eq!(
        redact_secrets("a task-oriented risk-free sk-short"),
        "a task-oriented risk-free sk-short"
    );
    assert_eq!(redact_secrets("gsk_abcdefghijklmnop"), "[redacted]");
}

#[test]
fn truncation_marks_the_cut() {
    assert_eq!(truncate_chars("abc", 3), "abc");
    assert_eq!(truncate_chars("abcd", 3), "abc… (truncated)");
    assert_eq!(truncate_chars("ééé", 2), "éé… (truncated)");
}

/// Every phrase of the table, for the invariants below.
fn phrases(test: &Test, out: &mut Vec<&'static str>) {
    match test {
        Test::Code(set) | Test::Text(set) => out.extend(set.iter().copied()),
        Test::All(tests) | Test::Any(tests) => tests.iter().for_each(|t| phrases(t, out)),
        Test::Not(t) => phrases(t, out),
        _ => {}
    }
}

#[test]
fn table_invariants() {
    let mut names: Vec<&str> = RULES.iter().map(|r| r.name).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), RULES.len(), "rule names must be unique");
    assert!(
        matches!(RULES[RULES.len() - 1].test, Test::Always),
        "the last rule must catch everything"
    );
    for rule in RULES {
        assert!(
            !rule.protocols.is_empty(),
            "{} applies to no protocol",
            rule.name
        );
        let mut found = Vec::new();
        phrases(&rule.test, &mut found);
        for phrase in found {
            assert!(!phrase.trim().is_empty(), "{}: empty phrase", rule.name);
            // Phrases are matched against normalised text; " > " keeps its spaces on purpose.
            assert_eq!(
                normalize(phrase).trim(),
                phrase.trim(),
                "{}: phrase {phrase:?} is not normalised",
                rule.name
            );
        }
    }
    for pattern in SIZE_PATTERNS {
        let plain = pattern.replace(['I', 'O', 'W', 'T', 'B'], "");
        assert_eq!(
            normalize(&plain),
            plain,
            "size pattern {pattern:?} is not normalised"
        );
    }
}

/// The veto order the design depends on.
#[test]
fn vetoes_precede_overflow_rules() {
    let position = |name: &str| {
        RULES
            .iter()
            .position(|r| r.name == name)
            .unwrap_or_else(|| panic!("no rule {name}"))
    };
    let first_overflow = RULES
        .iter()
        .position(|r| r.verdict == super::Verdict::ContextOverflow)
        .expect("an overflow rule");
    for veto in [
        "rate-limit-status",
        "rate-limit-code",
        "openai-rate-limit-type",
        "rate-limit-wording",
        "authentication",
        "item-too-large",
        "output-fills-window",
        "output-limit-wording",
    ] {
        assert!(
            position(veto) < first_overflow,
            "{veto} must come before every overflow rule"
        );
    }
}

/// Every rule is exercised by some fixture case, and every fixture names a real rule.
#[test]
fn every_rule_has_a_fixture() {
    let mut named = Vec::new();
    for file in ["overflow.jsonl", "overflow_variants.jsonl"] {
        let path = repo_root()
            .join("crates/panto-providers/tests/fixtures")
            .join(file);
        let text = std::fs::read_to_string(&path).expect("fixture file");
        for (i, line) in text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
        {
            let case: Value = serde_json::from_str(line).expect("fixture JSON");
            let rule = case["rule"].as_str().unwrap_or_default().to_owned();
            assert!(
                RULES.iter().any(|r| r.name == rule),
                "{}:{}: no rule named {rule:?}",
                path.display(),
                i + 1
            );
            named.push(rule);
        }
    }
    for rule in RULES {
        assert!(
            named.iter().any(|n| n == rule.name),
            "no fixture exercises rule {}",
            rule.name
        );
    }
}

proptest! {
    #[test]
    fn separated_counts_read_back(n in 0u64..10_000_000_000u64, sep in prop::sample::select(vec!["", ",", "_", "'"])) {
        let digits = n.to_string();
        let mut grouped = String::new();
        for (i, c) in digits.chars().enumerate() {
            if i > 0 && (digits.len() - i).is_multiple_of(3) {
                grouped.push_str(sep);
            }
            grouped.push(c);
        }
        let text = format!("{grouped} tokens");
        prop_assert_eq!(parse_count(&text, 0), Some((n, grouped.len())));
    }

    #[test]
    fn duration_reading_never_panics(s in "\\PC{0,40}") {
        let _ = parse_duration(&s);
        let _ = retry_delay_in_text(&normalize(&s));
        let _ = Sizes::read(&normalize(&s));
    }
}

// ---------------------------------------------------------------------------------------------
// The generated part of docs/providers.md.

const BEGIN: &str = "<!-- BEGIN GENERATED: overflow classification (cargo test -p panto-providers; \
                     PANTO_BLESS=1 rewrites it) -->";
const END: &str = "<!-- END GENERATED: overflow classification -->";

fn repo_root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

/// Classifies one fixture case as an adapter would; returns the rule, the verdict's
/// description and whether it is an overflow.
fn serve_fixture(case: &Value) -> (&'static str, &'static str) {
    let protocol = match case["protocol"].as_str() {
        Some("anthropic") => Protocol::Anthropic,
        Some("openai-responses") => Protocol::OpenAiResponses,
        Some("gemini") => Protocol::Gemini,
        _ => Protocol::OpenAiChat,
    };
    let status = u16::try_from(case["status"].as_u64().unwrap_or(0)).unwrap_or(0);
    let found = if let Some(events) = case["sse"].as_array() {
        let event = events
            .iter()
            .find(|e| {
                matches!(e["event"].as_str(), Some("error" | "response.failed"))
                    || e["data"].get("error").is_some()
            })
            .expect("an error event");
        explain_stream_error(protocol, &event["data"])
    } else if (200..300).contains(&status) {
        explain_success_body(protocol, &case["body"]).expect("an error body")
    } else {
        let bytes = match &case["body"] {
            Value::String(s) => s.clone().into_bytes(),
            other => serde_json::to_vec(other).expect("serialisable"),
        };
        explain_response(protocol, status, None, &bytes)
    };
    (found.rule, found.verdict.describe())
}

fn provider_table() -> String {
    let corpus = std::fs::read_to_string(
        repo_root().join("crates/panto-providers/tests/fixtures/overflow.jsonl"),
    )
    .expect("the fixture corpus");
    let mut rows: Vec<(String, String)> = corpus
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let case: Value = serde_json::from_str(line).expect("fixture JSON");
            let (rule, verdict) = serve_fixture(&case);
            let provider = case["provider"].as_str().unwrap_or("?").to_owned();
            let where_ = if case["sse"].is_array() {
                "stream".to_owned()
            } else {
                case["status"].to_string()
            };
            let message = text_of(&case);
            let short: String = message.chars().take(90).collect();
            let short = if short.len() < message.len() {
                format!("{short}…")
            } else {
                short
            };
            let row = format!(
                "| {provider} | {where_} | {} | {verdict} | `{rule}` |\n",
                short.replace('|', "\\|").replace('`', "'")
            );
            (provider, row)
        })
        .collect();
    rows.sort_by(|a, b| a.0.cmp(&b.0));
    let mut out = String::from(
        "| provider | status | what it sends (start of the message) | classified as | rule |\n\
         | --- | --- | --- | --- | --- |\n",
    );
    for (_, row) in rows {
        out.push_str(&row);
    }
    out
}

/// The message a fixture case carries, for the table.
fn text_of(case: &Value) -> String {
    let payload = match case["sse"].as_array() {
        Some(events) => events
            .iter()
            .rev()
            .find(|e| e["data"].get("error").is_some() || e["data"].get("response").is_some())
            .map_or(Value::Null, |e| e["data"].clone()),
        None => case["body"].clone(),
    };
    let signals = super::signals::Signals::from_value(&payload);
    signals.message
}

fn generated_docs() -> String {
    let mut out = String::new();
    out.push_str(BEGIN);
    out.push_str("\n\n### The rules, in order\n\n");
    out.push_str(&rules::markdown());
    out.push_str("\n### Sizes read from messages\n\n");
    out.push_str(
        "`{I}` input, `{O}` requested output, `{W}` window, `{T}` input plus output, `{B}` \
         room left for the input, `{_}` skipped; the first pattern that gives a role wins.\n\n",
    );
    for pattern in SIZE_PATTERNS {
        out.push_str(&format!("- `{pattern}`\n"));
    }
    out.push_str("\n### What each provider sends, and the rule that catches it\n\n");
    out.push_str(
        "Every real case of `crates/panto-providers/tests/fixtures/overflow.jsonl` (the \
         shared sample and the research corpus, with sources there).\n\n",
    );
    out.push_str(&provider_table());
    out.push('\n');
    out.push_str(END);
    out
}

#[test]
fn docs_match_the_table() {
    let path = repo_root().join("docs/providers.md");
    let doc = std::fs::read_to_string(&path).unwrap_or_default();
    let generated = generated_docs();
    let current = match (doc.find(BEGIN), doc.find(END)) {
        (Some(b), Some(e)) if b < e => Some((b, e + END.len())),
        _ => None,
    };
    if std::env::var_os("PANTO_BLESS").is_some() {
        let updated = match current {
            Some((b, e)) => format!("{}{generated}{}", &doc[..b], &doc[e..]),
            None => panic!("{}: add the BEGIN/END markers first", path.display()),
        };
        std::fs::write(&path, updated).expect("write docs/providers.md");
        return;
    }
    let (b, e) = current.unwrap_or_else(|| {
        panic!(
            "{}: the generated classification section is missing",
            path.display()
        )
    });
    assert!(
        doc[b..e] == generated,
        "{} is out of date with the rule table; run PANTO_BLESS=1 cargo test -p panto-providers \
         docs_match_the_table and review the diff",
        path.display()
    );
}
