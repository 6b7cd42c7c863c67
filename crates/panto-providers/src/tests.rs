//! Unit tests of the pure parts: SSE decoding, wire preparation, retry timing, base URLs, keys.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use panto_model::arbitrary::session;
use panto_model::{
    ContentBlock, Message, Problem, Role, ToolResultBlock, ToolResultContent, validate,
};
use proptest::prelude::*;
use reqwest::header::{HeaderMap, HeaderValue};
use serde_json::json;

use crate::config::{BaseUrl, Error, RetryPolicy, config_from_lookup};
use crate::prepare::{INTERRUPTED, compaction_text, prepare};
use crate::retry::{Refusal, delay, next_delay, parse_retry_after, retry_after};
use crate::secret::{ApiKey, MIN_FRAGMENT, StreamGuard};
use crate::sse::{SseDecoder, SseEvent};

// ---------------------------------------------------------------------------------------------
// SSE

fn decode_chunks(chunks: &[&[u8]]) -> Vec<SseEvent> {
    let mut decoder = SseDecoder::new();
    let mut out = Vec::new();
    for chunk in chunks {
        decoder.push(chunk, &mut out);
    }
    decoder.finish(&mut out);
    out
}

fn decode(text: &str) -> Vec<SseEvent> {
    decode_chunks(&[text.as_bytes()])
}

fn ev(event: &str, data: &str) -> SseEvent {
    SseEvent {
        event: event.to_owned(),
        data: data.to_owned(),
        raw: false,
    }
}

#[test]
fn sse_named_and_unnamed_events() {
    let events = decode("event: ping\ndata: {}\n\ndata: {\"a\":1}\n\n");
    assert_eq!(events, vec![ev("ping", "{}"), ev("", "{\"a\":1}")]);
}

#[test]
fn sse_multi_line_data_is_joined_with_newlines() {
    assert_eq!(
        decode("data: one\ndata: two\ndata:\n\n"),
        vec![ev("", "one\ntwo\n")]
    );
}

#[test]
fn sse_line_endings_crlf_and_cr() {
    assert_eq!(decode("event: x\r\ndata: a\r\n\r\n"), vec![ev("x", "a")]);
    assert_eq!(decode("event: x\rdata: a\r\r"), vec![ev("x", "a")]);
}

#[test]
fn sse_comments_unknown_fields_and_ids_are_ignored() {
    let events = decode(": keep-alive\nid: 7\nretry: 100\nfoo: bar\ndata: x\n\n: bye\n\n");
    assert_eq!(events, vec![ev("", "x")]);
}

#[test]
fn sse_only_one_space_after_the_colon_is_dropped() {
    assert_eq!(
        decode("data:x\n\ndata:  y\n\n"),
        vec![ev("", "x"), ev("", " y")]
    );
}

#[test]
fn sse_event_without_data_is_not_dispatched_and_its_name_does_not_leak() {
    assert_eq!(decode("event: lonely\n\ndata: d\n\n"), vec![ev("", "d")]);
}

#[test]
fn sse_byte_order_mark_is_dropped_at_the_start_only() {
    assert_eq!(decode("\u{feff}data: a\n\n"), vec![ev("", "a")]);
}

#[test]
fn sse_bare_error_line_is_an_immediate_raw_error_event() {
    let events = decode("data: {\"x\":1}\n\nerror: {\"code\":400}\n\n");
    assert_eq!(
        events,
        vec![
            ev("", "{\"x\":1}"),
            SseEvent {
                event: "error".into(),
                data: "{\"code\":400}".into(),
                raw: true
            }
        ]
    );
}

#[test]
fn sse_finish_dispatches_a_last_event_without_blank_line() {
    assert_eq!(decode("data: [DONE]\n"), vec![ev("", "[DONE]")]);
    // An unterminated last line is still seen (a truncated payload is then rejected by the
    // adapter that parses it).
    assert_eq!(decode("data: {\"trunc"), vec![ev("", "{\"trunc")]);
}

#[test]
fn sse_cr_at_a_chunk_end_then_lf_is_one_line_end() {
    let events = decode_chunks(&[b"data: a\r", b"\n\r", b"\ndata: b\r\n\r\n"]);
    assert_eq!(events, vec![ev("", "a"), ev("", "b")]);
}

#[test]
fn sse_multibyte_characters_split_across_chunks() {
    let text = "data: caf\u{e9} \u{1f600}\n\n".as_bytes();
    for cut in 0..text.len() {
        assert_eq!(
            decode_chunks(&[&text[..cut], &text[cut..]]),
            vec![ev("", "café 😀")]
        );
    }
}

/// Splits `bytes` at the given cut points (taken modulo the length).
fn split_at<'a>(bytes: &'a [u8], cuts: &[usize]) -> Vec<&'a [u8]> {
    let mut points: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
    points.sort_unstable();
    let mut out = Vec::new();
    let mut start = 0;
    for p in points {
        out.push(&bytes[start..p]);
        start = p;
    }
    out.push(&bytes[start..]);
    out
}

prop_compose! {
    /// A stream of well-formed events with one line ending, comments sprinkled in, and the
    /// events it must decode to.
    fn sse_stream()(
        events in prop::collection::vec(
            (prop::option::of("[a-z_.]{1,12}"), prop::collection::vec("[^\r\n]{0,20}", 1..4),
             prop::bool::ANY), 0..8),
        ending in prop_oneof![Just("\n"), Just("\r\n"), Just("\r")],
    ) -> (String, Vec<SseEvent>) {
        let mut text = String::new();
        let mut expected = Vec::new();
        for (name, lines, comment) in events {
            if comment {
                text.push_str(": comment");
                text.push_str(ending);
            }
            if let Some(name) = &name {
                text.push_str("event: ");
                text.push_str(name);
                text.push_str(ending);
            }
            for line in &lines {
                text.push_str("data: ");
                text.push_str(line);
                text.push_str(ending);
            }
            text.push_str(ending);
            // `data: ` then a value starting with a space keeps that space (one is dropped).
            expected.push(ev(name.as_deref().unwrap_or(""), &lines.join("\n")));
        }
        (text, expected)
    }
}

proptest! {
    #[test]
    fn sse_decodes_generated_streams_however_they_are_split(
        (text, expected) in sse_stream(),
        cuts in prop::collection::vec(any::<usize>(), 0..12),
    ) {
        let chunks = split_at(text.as_bytes(), &cuts);
        prop_assert_eq!(decode_chunks(&chunks), expected);
    }

    #[test]
    fn sse_events_do_not_depend_on_chunk_boundaries(
        bytes in prop::collection::vec(
            prop_oneof![Just(b'\n'), Just(b'\r'), Just(b':'), Just(b' '), Just(b'd'), Just(b'a'),
                        Just(b't'), Just(b'e'), Just(b'v'), Just(b'n'), Just(b'r'), Just(b'o'),
                        any::<u8>()], 0..200),
        cuts in prop::collection::vec(any::<usize>(), 0..16),
    ) {
        let whole = decode_chunks(&[&bytes]);
        let chunks = split_at(&bytes, &cuts);
        prop_assert_eq!(decode_chunks(&chunks), whole.clone());
        // Byte by byte as well.
        let singles: Vec<&[u8]> = bytes.chunks(1).collect();
        prop_assert_eq!(decode_chunks(&singles), whole);
    }
}

// ---------------------------------------------------------------------------------------------
// Wire preparation

fn wire(messages: &[Message]) -> Vec<Message> {
    prepare(messages, &compaction_text, None)
}

/// The invariants `prepare` promises, as an error message naming the first one broken.
fn check_wire(out: &[Message]) -> Result<(), String> {
    for (i, m) in out.iter().enumerate() {
        if m.content.is_empty() {
            return Err(format!("message {i} is empty"));
        }
        if i > 0 && out[i - 1].role == m.role {
            return Err(format!("messages {} and {i} have the same role", i - 1));
        }
        for (b, block) in m.content.iter().enumerate() {
            match (m.role, block) {
                (_, ContentBlock::Compaction(_)) => return Err(format!("compaction at {i}")),
                (_, ContentBlock::Text(t)) if t.text.is_empty() => {
                    return Err(format!("empty text at {i}.{b}"));
                }
                (Role::User, ContentBlock::ToolUse(_)) => return Err(format!("user call at {i}")),
                (Role::Assistant, ContentBlock::ToolResult(_)) => {
                    return Err(format!("assistant result at {i}"));
                }
                _ => {}
            }
        }
        let calls: Vec<&str> = m.tool_use_ids().collect();
        let results_here: Vec<&str> = m.tool_result_ids().collect();
        if m.role == Role::User {
            // Every result here answers the previous assistant message's calls, in order, first.
            let expected: Vec<&str> = match i.checked_sub(1).map(|p| &out[p]) {
                Some(prev) => prev.tool_use_ids().collect(),
                None => Vec::new(),
            };
            if results_here != expected {
                return Err(format!(
                    "results {results_here:?} at {i} do not match calls {expected:?}"
                ));
            }
            let leading = m
                .content
                .iter()
                .take_while(|b| matches!(b, ContentBlock::ToolResult(_)))
                .count();
            if leading != results_here.len() {
                return Err(format!("results at {i} are not at the front"));
            }
        } else if !calls.is_empty() {
            let next = out
                .get(i + 1)
                .ok_or_else(|| format!("calls at {i} are last"))?;
            if next.role != Role::User {
                return Err(format!("calls at {i} not followed by a user message"));
            }
        }
    }
    Ok(())
}

fn result_texts(messages: &[Message]) -> Vec<String> {
    let mut out: Vec<String> = messages
        .iter()
        .flat_map(|m| &m.content)
        .filter_map(|b| match b {
            ContentBlock::ToolResult(r) => Some(format!("{}={}", r.tool_use_id, r.content.text())),
            _ => None,
        })
        .collect();
    out.sort();
    out
}

fn synthetic_count(messages: &[Message]) -> usize {
    messages
        .iter()
        .flat_map(|m| &m.content)
        .filter(|b| matches!(b, ContentBlock::ToolResult(r) if r.content.text() == INTERRUPTED))
        .count()
}

proptest! {
    #[test]
    fn prepare_keeps_every_result_of_a_valid_session_and_adds_none(s in session(6)) {
        let out = wire(&s.messages);
        prop_assert_eq!(check_wire(&out), Ok(()));
        prop_assert_eq!(result_texts(&out), result_texts(&s.messages));
        prop_assert_eq!(synthetic_count(&out), 0);
    }

    #[test]
    fn prepare_answers_exactly_the_unanswered_calls_of_a_cut_session(
        s in session(6),
        keep in any::<prop::sample::Index>(),
        head in any::<prop::sample::Index>(),
    ) {
        // Cutting a session anywhere leaves calls unanswered (end) and results orphaned (start).
        let end = 1 + keep.index(s.messages.len());
        let start = head.index(end);
        let messages = &s.messages[start..end];
        let out = wire(messages);
        prop_assert_eq!(check_wire(&out), Ok(()));
        let problems = validate(messages);
        let unanswered = problems.iter().filter(|p| matches!(p, Problem::UnansweredCall { .. })).count();
        let orphans = problems.iter().filter(|p| matches!(p, Problem::OrphanResult { .. })).count();
        prop_assert_eq!(synthetic_count(&out), unanswered);
        let orphan_texts = out
            .iter()
            .flat_map(|m| &m.content)
            .filter(|b| matches!(b, ContentBlock::Text(t) if t.text.starts_with("Result of tool call")))
            .count();
        prop_assert_eq!(orphan_texts, orphans);
    }
}

fn result(id: &str, text: &str) -> ContentBlock {
    ContentBlock::tool_result(id, text, false)
}

#[test]
fn prepare_renders_compaction_as_user_text_merged_with_the_next_prompt() {
    let messages = vec![
        Message::compaction("we fixed bug 3"),
        Message::user_text("go on"),
    ];
    let out = wire(&messages);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].role, Role::User);
    assert_eq!(
        out[0].text(),
        format!("{}\ngo on", compaction_text("we fixed bug 3"))
    );
    assert!(
        out[0]
            .text()
            .contains("<conversation-summary>\nwe fixed bug 3\n</conversation-summary>")
    );
}

#[test]
fn prepare_answers_an_interrupted_call_without_touching_the_input() {
    let messages = vec![
        Message::user_text("list files"),
        Message::new(
            Role::Assistant,
            vec![
                ContentBlock::tool_use("t1", "ls", json!({})),
                ContentBlock::tool_use("t2", "pwd", json!({})),
            ],
        ),
        Message::new(Role::User, vec![result("t2", "/home")]),
    ];
    let before = messages.clone();
    let out = wire(&messages);
    assert_eq!(messages, before);
    assert_eq!(out.len(), 3);
    let ContentBlock::ToolResult(first) = &out[2].content[0] else {
        panic!("{:?}", out[2])
    };
    assert_eq!(first.tool_use_id, "t1");
    assert_eq!(
        first.content,
        ToolResultContent::Text(INTERRUPTED.to_owned())
    );
    assert_eq!(first.is_error, Some(true));
    assert_eq!(
        out[2].tool_result_ids().collect::<Vec<_>>(),
        vec!["t1", "t2"]
    );
}

#[test]
fn prepare_gathers_results_spread_over_messages_and_keeps_interleaved_text_after_them() {
    let messages = vec![
        Message::user_text("go"),
        Message::new(
            Role::Assistant,
            vec![
                ContentBlock::tool_use("a", "x", json!({})),
                ContentBlock::tool_use("b", "y", json!({})),
            ],
        ),
        Message::new(
            Role::User,
            vec![result("b", "B"), ContentBlock::text("note")],
        ),
        Message::assistant_text("hmm"),
        Message::new(Role::User, vec![result("a", "A")]),
    ];
    let out = wire(&messages);
    check_wire(&out).unwrap();
    assert_eq!(out[2].tool_result_ids().collect::<Vec<_>>(), vec!["a", "b"]);
    assert_eq!(out[2].text(), "note");
    assert_eq!(out[3].text(), "hmm");
    assert_eq!(out.len(), 4);
}

#[test]
fn prepare_turns_orphans_and_second_answers_into_text() {
    let messages = vec![
        Message::new(Role::User, vec![result("gone", "old output")]),
        Message::new(
            Role::Assistant,
            vec![ContentBlock::tool_use("t", "x", json!({}))],
        ),
        Message::new(
            Role::User,
            vec![result("t", "first"), result("t", "second")],
        ),
    ];
    let out = wire(&messages);
    check_wire(&out).unwrap();
    assert_eq!(
        out[0].text(),
        "Result of tool call `gone`, whose call is no longer in this conversation:\nold output"
    );
    assert_eq!(out[2].tool_result_ids().collect::<Vec<_>>(), vec!["t"]);
    assert!(out[2].text().contains("second"));
}

#[test]
fn prepare_drops_misplaced_blocks_and_empty_text_then_merges_roles() {
    let messages = vec![
        Message::user_text("a"),
        Message::new(
            Role::User,
            vec![
                ContentBlock::tool_use("u", "x", json!({})),
                ContentBlock::text(""),
            ],
        ),
        Message::user_text("b"),
        Message::new(
            Role::Assistant,
            vec![ContentBlock::text("c"), result("u", "r")],
        ),
        Message::assistant_text("d"),
    ];
    let out = wire(&messages);
    check_wire(&out).unwrap();
    assert_eq!(out.len(), 2);
    assert_eq!(out[0].text(), "a\nb");
    assert_eq!(out[1].text(), "c\nd");
}

#[test]
fn prepare_keeps_orphan_images() {
    let image = ContentBlock::Image(panto_model::ImageBlock::new(
        json!({"type": "url", "url": "https://example.com/a.png"}),
    ));
    let orphan = ContentBlock::ToolResult(ToolResultBlock::new(
        "x",
        ToolResultContent::Blocks(vec![ContentBlock::text("shot"), image.clone()]),
        Some(true),
    ));
    let out = wire(&[Message::new(Role::User, vec![orphan])]);
    assert_eq!(out[0].content.len(), 2);
    assert!(out[0].text().contains("`x` (it failed)"));
    assert_eq!(out[0].content[1], image);
}

// ---------------------------------------------------------------------------------------------
// Retry timing

#[test]
fn retry_after_reads_seconds_fractions_dates_and_milliseconds() {
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
    assert_eq!(parse_retry_after("7", now), Some(Duration::from_secs(7)));
    assert_eq!(
        parse_retry_after(" 0.25", now),
        Some(Duration::from_millis(250))
    );
    let date = httpdate::fmt_http_date(now + Duration::from_secs(30));
    assert_eq!(parse_retry_after(&date, now), Some(Duration::from_secs(30)));
    let past = httpdate::fmt_http_date(now - Duration::from_secs(30));
    assert_eq!(parse_retry_after(&past, now), Some(Duration::ZERO));
    assert_eq!(parse_retry_after("soon", now), None);
    assert_eq!(parse_retry_after("-3", now), None);
    assert_eq!(parse_retry_after("inf", now), None);

    let mut headers = HeaderMap::new();
    assert_eq!(retry_after(&headers, now), None);
    headers.insert("retry-after", HeaderValue::from_static("2"));
    assert_eq!(retry_after(&headers, now), Some(Duration::from_secs(2)));
    headers.insert("retry-after-ms", HeaderValue::from_static("150"));
    assert_eq!(retry_after(&headers, now), Some(Duration::from_millis(150)));
}

#[test]
fn retry_after_dates_are_read_in_all_three_http_formats() {
    // 1994-11-06 08:49:37 UTC, the example of RFC 9110, section 5.6.7.
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(784_111_777 - 90);
    for date in [
        "Sun, 06 Nov 1994 08:49:37 GMT",
        "Sunday, 06-Nov-94 08:49:37 GMT",
        "Sun Nov  6 08:49:37 1994",
    ] {
        assert_eq!(
            parse_retry_after(date, now),
            Some(Duration::from_secs(90)),
            "{date}"
        );
    }
    // A date split at its comma over two field lines is joined back.
    let mut headers = HeaderMap::new();
    headers.append("retry-after", HeaderValue::from_static("Sun"));
    headers.append(
        "retry-after",
        HeaderValue::from_static("06 Nov 1994 08:49:37 GMT"),
    );
    assert_eq!(retry_after(&headers, now), Some(Duration::from_secs(90)));
}

#[test]
fn a_server_wait_beyond_the_cap_or_the_deadline_refuses_the_retry() {
    let policy = RetryPolicy {
        max_retries: 3,
        base_delay: Duration::from_secs(1),
        max_delay: Duration::from_secs(60),
    };
    let secs = Duration::from_secs;
    let plenty = secs(600);
    assert_eq!(
        next_delay(&policy, 0, Some(secs(60)), 0.5, plenty),
        Ok(secs(60))
    );
    assert_eq!(
        next_delay(&policy, 0, Some(secs(3600)), 0.5, plenty),
        Err(Refusal::AskedTooLong {
            asked: secs(3600),
            cap: secs(60)
        })
    );
    assert_eq!(
        next_delay(&policy, 0, Some(secs(4)), 0.5, secs(3)),
        Err(Refusal::PastDeadline {
            delay: secs(4),
            left: secs(3)
        })
    );
    // Backoff is measured against the deadline too.
    assert_eq!(
        next_delay(&policy, 2, None, 1.0, secs(2)),
        Err(Refusal::PastDeadline {
            delay: secs(4),
            left: secs(2)
        })
    );
}

#[test]
fn backoff_doubles_with_jitter_in_the_upper_half_and_is_capped() {
    let policy = RetryPolicy {
        max_retries: 5,
        base_delay: Duration::from_millis(100),
        max_delay: Duration::from_millis(1000),
    };
    assert_eq!(delay(&policy, 0, None, 0.0), Duration::from_millis(50));
    assert_eq!(delay(&policy, 0, None, 0.999_999).as_millis(), 99);
    assert_eq!(delay(&policy, 1, None, 0.0), Duration::from_millis(100));
    assert_eq!(delay(&policy, 2, None, 1.0), Duration::from_millis(400));
    // 800 ms, then capped at one second however far it goes.
    assert_eq!(delay(&policy, 3, None, 1.0), Duration::from_millis(800));
    assert_eq!(delay(&policy, 4, None, 1.0), Duration::from_millis(1000));
    assert_eq!(delay(&policy, 40, None, 1.0), Duration::from_millis(1000));
    // A server hint wins over backoff, and is capped too.
    assert_eq!(
        delay(&policy, 3, Some(Duration::from_millis(7)), 0.5),
        Duration::from_millis(7)
    );
    assert_eq!(
        delay(&policy, 0, Some(Duration::from_secs(3600)), 0.5),
        Duration::from_millis(1000)
    );
}

proptest! {
    #[test]
    fn a_granted_retry_fits_under_the_cap_and_the_deadline(
        retry in 0u32..64, unit in 0.0f64..1.0, hint in proptest::option::of(0u64..200_000),
        cap in 1u64..120_000, left in 0u64..300_000,
    ) {
        let policy = RetryPolicy {
            max_retries: 3,
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_millis(cap),
        };
        let hint = hint.map(Duration::from_millis);
        let left = Duration::from_millis(left);
        match next_delay(&policy, retry, hint, unit, left) {
            Ok(d) => {
                prop_assert!(d <= policy.max_delay && d < left, "{d:?}");
                if let Some(h) = hint {
                    prop_assert_eq!(d, h);
                }
            }
            Err(Refusal::AskedTooLong { asked, .. }) => prop_assert!(asked > policy.max_delay),
            Err(Refusal::PastDeadline { delay, .. }) => prop_assert!(delay >= left),
        }
    }

    #[test]
    fn backoff_stays_within_half_and_whole_of_the_capped_exponential(
        retry in 0u32..64, unit in 0.0f64..1.0, base in 1u64..5_000, cap in 1u64..120_000,
    ) {
        let policy = RetryPolicy {
            max_retries: 3,
            base_delay: Duration::from_millis(base),
            max_delay: Duration::from_millis(cap),
        };
        let d = delay(&policy, retry, None, unit);
        let full = Duration::from_millis(base).saturating_mul(2u32.saturating_pow(retry.min(31)))
            .min(Duration::from_millis(cap));
        prop_assert!(d <= full && d >= full / 2, "{d:?} vs {full:?}");
    }
}

// ---------------------------------------------------------------------------------------------
// Base URLs and environment

fn endpoint(base: &str, version: &str, tail: &str) -> String {
    BaseUrl::parse(base).unwrap().endpoint(version, tail)
}

#[test]
fn base_urls_of_known_servers_reach_their_endpoints() {
    let chat = |base: &str| endpoint(base, "v1", "chat/completions");
    let cases = [
        (
            "https://api.openai.com/v1",
            "https://api.openai.com/v1/chat/completions",
        ),
        (
            "https://api.openai.com",
            "https://api.openai.com/v1/chat/completions",
        ),
        (
            "http://127.0.0.1:8080",
            "http://127.0.0.1:8080/v1/chat/completions",
        ),
        (
            "http://127.0.0.1:8080/",
            "http://127.0.0.1:8080/v1/chat/completions",
        ),
        (
            "http://localhost:8000/v1",
            "http://localhost:8000/v1/chat/completions",
        ),
        (
            "http://localhost:11434/v1/",
            "http://localhost:11434/v1/chat/completions",
        ),
        (
            "http://localhost:1234/v1",
            "http://localhost:1234/v1/chat/completions",
        ),
        (
            "https://openrouter.ai/api/v1",
            "https://openrouter.ai/api/v1/chat/completions",
        ),
        (
            "https://openrouter.ai/api",
            "https://openrouter.ai/api/v1/chat/completions",
        ),
        (
            "https://api.groq.com/openai/v1",
            "https://api.groq.com/openai/v1/chat/completions",
        ),
        (
            "https://api.deepseek.com",
            "https://api.deepseek.com/v1/chat/completions",
        ),
        (
            "https://api.mistral.ai/v1",
            "https://api.mistral.ai/v1/chat/completions",
        ),
        (
            "https://api.together.xyz/v1",
            "https://api.together.xyz/v1/chat/completions",
        ),
        (
            "https://api.fireworks.ai/inference/v1",
            "https://api.fireworks.ai/inference/v1/chat/completions",
        ),
        (
            "https://api.z.ai/api/paas/v4",
            "https://api.z.ai/api/paas/v4/chat/completions",
        ),
        (
            "https://generativelanguage.googleapis.com/v1beta/openai",
            "https://generativelanguage.googleapis.com/v1beta/openai/chat/completions",
        ),
        (
            "http://h/v1/chat/completions",
            "http://h/v1/chat/completions",
        ),
    ];
    for (base, want) in cases {
        assert_eq!(chat(base), want, "{base}");
    }
    assert_eq!(
        endpoint("https://api.anthropic.com", "v1", "messages"),
        "https://api.anthropic.com/v1/messages"
    );
    assert_eq!(
        endpoint("http://127.0.0.1:8080/v1", "v1", "messages"),
        "http://127.0.0.1:8080/v1/messages"
    );
    assert_eq!(
        endpoint(
            "https://generativelanguage.googleapis.com",
            "v1beta",
            "models/g:generateContent"
        ),
        "https://generativelanguage.googleapis.com/v1beta/models/g:generateContent"
    );
    assert_eq!(
        endpoint(
            "https://generativelanguage.googleapis.com/v1",
            "v1beta",
            "models/g:generateContent"
        ),
        "https://generativelanguage.googleapis.com/v1/models/g:generateContent"
    );
}

#[test]
fn bad_base_urls_are_refused_without_echoing_secrets() {
    for bad in [
        "ftp://host",
        "not a url",
        "https://host/v1?key=sekrit-123",
        "https://user:sekrit-123@host/#x",
    ] {
        let err = BaseUrl::parse(bad).err().map(|e| e.to_string());
        if bad.starts_with("https://user") {
            // User info alone is allowed (a proxy may need it); a fragment is not.
            let message = err.expect("a fragment is refused");
            assert!(!message.contains("sekrit"), "{message}");
            continue;
        }
        let message = err.unwrap_or_else(|| panic!("{bad} should be refused"));
        assert!(message.starts_with("invalid base URL"), "{message}");
        assert!(!message.contains("sekrit"), "{message}");
    }
}

/// Both OpenAI protocols' variables.
const OPENAI_ENV: &crate::Environment = crate::Protocol::OpenAiChat.environment();

fn lookup(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let map: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    move |k| map.get(k).cloned()
}

#[test]
fn from_env_requires_the_key_only_for_the_official_api() {
    let err = config_from_lookup(OPENAI_ENV, lookup(&[])).unwrap_err();
    assert!(matches!(
        err,
        Error::MissingKey {
            variable: "OPENAI_API_KEY",
            ..
        }
    ));
    assert!(
        err.to_string().starts_with("OPENAI_API_KEY is not set"),
        "{err}"
    );
    let err = config_from_lookup(OPENAI_ENV, lookup(&[("OPENAI_API_KEY", "  ")])).unwrap_err();
    assert!(matches!(err, Error::MissingKey { .. }));

    let local = config_from_lookup(
        OPENAI_ENV,
        lookup(&[("OPENAI_BASE_URL", "http://127.0.0.1:8080/v1")]),
    )
    .unwrap();
    assert!(local.api_key.is_empty());
    assert_eq!(local.base_url, "http://127.0.0.1:8080/v1");

    let official =
        config_from_lookup(OPENAI_ENV, lookup(&[("OPENAI_API_KEY", "sk-test\n")])).unwrap();
    assert_eq!(official.api_key, ApiKey::new("sk-test"));
    assert_eq!(official.base_url, "https://api.openai.com/v1");

    let bad = config_from_lookup(OPENAI_ENV, lookup(&[("OPENAI_BASE_URL", "localhost:8080")]));
    assert!(matches!(bad, Err(Error::InvalidBaseUrl { .. })), "{bad:?}");
}

#[test]
fn api_key_debug_is_redacted_and_scrub_removes_it() {
    let key = ApiKey::new("sk-live-0123456789");
    assert_eq!(format!("{key:?}"), "ApiKey(<redacted>)");
    assert_eq!(format!("{:?}", ApiKey::none()), "ApiKey(<empty>)");
    assert_eq!(
        key.scrub("bad key sk-live-0123456789!"),
        "bad key <redacted>!"
    );
    assert_eq!(key.expose(), "sk-live-0123456789");
}

/// Whether `text` holds a piece of `key` of [`MIN_FRAGMENT`] bytes or more.
fn has_piece(key: &str, text: &str) -> bool {
    key.as_bytes()
        .windows(MIN_FRAGMENT)
        .any(|w| text.contains(std::str::from_utf8(w).unwrap()))
}

#[test]
fn scrub_removes_pieces_of_the_key_of_eight_bytes_or_more() {
    let key = ApiKey::new("sk-live-0123456789");
    // The key cut at an excerpt's end, its middle, a piece of exactly eight bytes.
    assert_eq!(key.scrub("body: sk-live-012345678"), "body: <redacted>");
    assert_eq!(key.scrub("[live-0123456]"), "[<redacted>]");
    assert_eq!(key.scrub("x 23456789 y"), "x <redacted> y");
    // Seven bytes are not a piece; neither are other words.
    assert_eq!(key.scrub("x 3456789 y"), "x 3456789 y");
    assert_eq!(key.scrub("sk-live-01"), "<redacted>");
    // Two keys in a row are one redaction; text around them survives, non-ASCII included.
    assert_eq!(
        key.scrub("é sk-live-0123456789sk-live-0123456789 ü"),
        "é <redacted> ü"
    );
    // A key shorter than a piece is removed only whole.
    let short = ApiKey::new("abc123");
    assert_eq!(short.scrub("abc123 abc12"), "<redacted> abc12");
    assert_eq!(ApiKey::none().scrub("anything"), "anything");
}

#[test]
fn an_excerpt_cut_through_the_key_keeps_no_piece_of_it() {
    let key = "sk-proj-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789";
    let api_key = ApiKey::new(key);
    for before_cut in 1..key.len() {
        let body = format!("{}{key} tail", "y".repeat(200 - before_cut));
        let message = api_key.scrub(&crate::transport::excerpt(body.as_bytes()));
        assert!(!has_piece(key, &message), "{before_cut}: {message}");
    }
}

/// Runs `chunks` through a [`StreamGuard`], returning the text the caller saw.
fn guarded(key: &ApiKey, chunks: &[&str]) -> String {
    let mut seen = String::new();
    let mut sink = |e: panto_provider::StreamEvent<'_>| {
        if let panto_provider::StreamEvent::Text(t) = e {
            seen.push_str(t);
        }
    };
    let mut guard = StreamGuard::new([key], &mut sink);
    for chunk in chunks {
        guard.event(panto_provider::StreamEvent::Text(chunk));
    }
    guard.finish();
    drop(guard);
    seen
}

#[test]
fn a_stream_guard_holds_back_only_what_could_become_a_piece_of_the_key() {
    let key = ApiKey::new("sk-live-0123456789");
    assert_eq!(
        guarded(
            &key,
            &["the key is sk-", "live-01", "23", "456789", ", see?"]
        ),
        "the key is <redacted>, see?"
    );
    // Ordinary text goes through unchanged.
    assert_eq!(guarded(&key, &["Hello", " world", "!"]), "Hello world!");
    assert_eq!(key.stream_split("Hello world"), "Hello world".len());
    assert_eq!(key.stream_split("a sk-li"), 2);
}

prop_compose! {
    /// A key as providers make them: ASCII letters, digits, `-` and `_`.
    fn arb_key()(key in "[A-Za-z0-9_-]{8,48}") -> String { key }
}

prop_compose! {
    /// Text mixing free words with pieces of `key` of any length, and cut points for a stream.
    fn text_with_pieces(key: String)(
        parts in prop::collection::vec(
            prop_oneof![
                "[ -~é\n]{0,12}".prop_map(|s| (s, None)),
                (0..key.len(), 1..=key.len()).prop_map(|(a, n)| (String::new(), Some((a, n)))),
            ],
            0..12,
        ),
        cuts in prop::collection::vec(0usize..400, 0..8),
        key in Just(key),
    ) -> (String, Vec<usize>) {
        let mut text = String::new();
        for (word, piece) in parts {
            match piece {
                Some((at, len)) => text.push_str(&key[at..(at + len).min(key.len())]),
                None => text.push_str(&word),
            }
        }
        (text, cuts)
    }
}

proptest! {
    #[test]
    fn no_piece_of_the_key_survives_scrubbing_or_streaming(
        (key, (text, cuts)) in arb_key().prop_flat_map(|k| (Just(k.clone()), text_with_pieces(k)))
    ) {
        let api_key = ApiKey::new(key.clone());
        let scrubbed = api_key.scrub(&text);
        prop_assert!(!has_piece(&key, &scrubbed), "{scrubbed}");
        // The same text streamed in chunks cut anywhere (on character boundaries).
        let mut bounds: Vec<usize> = cuts
            .into_iter()
            .map(|c| c % (text.len() + 1))
            .filter(|&c| text.is_char_boundary(c))
            .collect();
        bounds.sort_unstable();
        let mut chunks = Vec::new();
        let mut at = 0;
        for b in bounds {
            chunks.push(&text[at..b]);
            at = b;
        }
        chunks.push(&text[at..]);
        let shown = guarded(&api_key, &chunks);
        prop_assert!(!has_piece(&key, &shown), "{shown}");
        if !has_piece(&key, &text) {
            prop_assert_eq!(shown, text);
        }
    }
}

#[test]
fn keys_that_cannot_go_in_a_header_are_refused_without_being_repeated() {
    for key in ["sk-abc\u{7}def", "sk-caf\u{e9}", "sk-a b"] {
        let config = crate::Config::new("http://127.0.0.1:1", key);
        let err = crate::transport::Transport::new(config).unwrap_err();
        assert!(matches!(err, Error::InvalidKey { .. }), "{err}");
        assert!(!err.to_string().contains("sk-"), "{err}");
    }
    assert!(crate::transport::Transport::new(crate::Config::new("http://127.0.0.1:1", "")).is_ok());
}

#[test]
fn a_stream_is_scrubbed_of_every_secret_at_every_cut() {
    let key = ApiKey::new("sk-live-0123456789abcdef");
    let header = ApiKey::new("gw-secret-4242-abcdef");
    let text = "the key sk-live-0123456789abcdef and the token gw-secret-4242-abcdef, then more";
    for cut in 1..text.len() {
        for second in cut..text.len() {
            let mut seen = String::new();
            let mut sink = |e: panto_provider::StreamEvent<'_>| {
                if let panto_provider::StreamEvent::Text(t) = e {
                    seen.push_str(t);
                }
            };
            let mut guard = StreamGuard::new([&key, &header], &mut sink);
            for chunk in [&text[..cut], &text[cut..second], &text[second..]] {
                guard.event(panto_provider::StreamEvent::Text(chunk));
            }
            guard.finish();
            drop(guard);
            assert!(
                !seen.contains("0123456789") && !seen.contains("4242-abc"),
                "{cut}/{second}: {seen}"
            );
            assert!(seen.ends_with(", then more"), "{cut}/{second}: {seen}");
        }
    }
}

/// The adapters' table at the top of docs/providers.md and its list of features: each
/// protocol's name, official API and variables as `Protocol` defines them, no row more.
#[test]
#[expect(
    clippy::disallowed_methods,
    reason = "the repository's own document, read whole by a test"
)]
fn the_docs_table_of_adapters_is_the_protocols_own() {
    use crate::Protocol;
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/providers.md");
    let doc = std::fs::read_to_string(path).expect("docs/providers.md");
    let rows: Vec<Vec<&str>> = doc
        .lines()
        .skip_while(|l| !l.starts_with("| adapter |"))
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .map(|l| l.split('|').map(str::trim).collect())
        .collect();
    assert_eq!(rows.len(), Protocol::ALL.len(), "{rows:?}");
    for (protocol, row) in Protocol::ALL.into_iter().zip(&rows) {
        let env = protocol.environment();
        let quoted = |s: &str| format!("`{s}`");
        assert_eq!(row[2], quoted(protocol.name()), "{row:?}");
        assert_eq!(row[4], quoted(env.default_base_url), "{row:?}");
        assert_eq!(row[5], quoted(env.key_variable), "{row:?}");
        assert_eq!(row[6], quoted(env.base_url_variable), "{row:?}");
    }
    let open = "<!-- list: features -->";
    let at = doc.find(open).expect("the marked list of features") + open.len();
    let list = &doc[at..at + doc[at..].find("<!-- /list -->").expect("its end")];
    let features: Vec<&str> = list.split('`').skip(1).step_by(2).collect();
    let defined: Vec<&str> = Protocol::ALL.iter().map(|p| p.feature()).collect();
    assert_eq!(features, defined);
}

#[test]
fn every_protocol_builds_its_adapter_under_its_own_name() {
    use crate::Protocol;
    assert_eq!(Protocol::compiled().count(), Protocol::ALL.len());
    for protocol in Protocol::ALL {
        assert_eq!(Protocol::from_name(protocol.name()), Some(protocol));
        let env = protocol.environment();
        let local = [(env.base_url_variable, "http://127.0.0.1:9/v1")];
        let adapter = protocol
            .adapter(protocol.config_from_env(lookup(&local)).unwrap())
            .unwrap();
        assert_eq!(adapter.name(), protocol.name());
        // The official API needs the key, and the error names the protocol's variable.
        let err = protocol.config_from_env(lookup(&[])).unwrap_err();
        assert!(err.to_string().starts_with(env.key_variable), "{err}");
    }
    assert_eq!(Protocol::from_name("acme"), None);
    assert_eq!(
        crate::AnthropicProvider::DEFAULT_BASE_URL,
        "https://api.anthropic.com"
    );
}
