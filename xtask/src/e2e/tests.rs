//! Unit tests of the end-to-end suite's pure parts: every check accepts a well-formed session
//! and rejects each way it can go wrong, so a green suite means the checks ran with teeth.

use serde_json::{Value, json};

use super::checks::{self, Expect};
use super::server::parse_response;
use super::suite::note;

const EXPECT: Expect<'static> = Expect {
    trigger: "overflow",
    provider: "openai",
    model: "m",
    fallback: false,
    instructions: None,
};

/// A session as the overflow scenario leaves it: two turns, the prompt that overflowed, the
/// compaction with its one kept copy, the retry's reply.
fn session() -> Vec<Value> {
    let usage =
        |cached| json!({"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": cached});
    vec![
        json!({"type":"message","id":"m1","role":"user","content":[{"type":"text","text":"hi"}]}),
        json!({"type":"message","id":"m2","role":"assistant","content":[{"type":"text","text":"hello"}],"usage":usage(0)}),
        json!({"type":"message","id":"m3","role":"user","content":[{"type":"text","text":"Please remember note 1."}]}),
        json!({"type":"compaction","id":"c1","summary":"The user said hi.","trigger":"overflow","model":"m",
               "provider":"openai","tokens_before":2400,"tokens_after":900,"keep_tokens":512,
               "kept_messages":1,"kept_turns":1,"summarized_turns":2,"fallback":false}),
        json!({"type":"message","id":"m4","role":"user","kept_by":"c1","content":[{"type":"text","text":"Please remember note 1."}]}),
        json!({"type":"message","id":"m5","role":"assistant","content":[{"type":"text","text":"ok"}],"usage":usage(7)}),
    ]
}

fn replayed(entries: &[Value]) -> Value {
    let mut messages = vec![
        json!({"role":"user","content":[{"type":"compaction","summary":"The user said hi."}]}),
    ];
    messages.extend(entries[4..].iter().cloned());
    json!({"messages": messages, "compaction": {"id": "c1"}})
}

#[test]
fn a_well_formed_session_passes_every_check() {
    let s = session();
    let (at, entry) = checks::single_compaction(&s).unwrap();
    let f = checks::compaction_entry(entry, &EXPECT).unwrap();
    assert_eq!(
        (f.before, f.after, f.keep, f.turns),
        (2400, 900, 512, (1, 2))
    );
    assert_eq!(checks::kept_copies(&s, at).unwrap(), 5);
    checks::usage_recorded(&s).unwrap();
    checks::replay(&replayed(&s), &s, at).unwrap();
}

#[test]
fn the_compaction_entry_check_rejects_each_wrong_field() {
    let entry = &session()[3];
    let cases: [(&str, Value); 7] = [
        ("summary", json!("  ")),
        ("trigger", json!("manual")),
        ("provider", json!("offline")),
        ("model", json!("offline-extractive")),
        ("fallback", json!(true)),
        ("instructions", json!("be brief")),
        ("summarized_turns", json!(0)),
    ];
    for (field, value) in cases {
        let mut bad = entry.clone();
        bad[field] = value;
        assert!(checks::compaction_entry(&bad, &EXPECT).is_err(), "{field}");
    }
    let mut missing = entry.clone();
    missing.as_object_mut().unwrap().remove("tokens_after");
    assert!(checks::compaction_entry(&missing, &EXPECT).is_err());
    let fallback = Expect {
        fallback: true,
        ..EXPECT
    };
    let mut without_reason = entry.clone();
    without_reason["fallback"] = json!(true);
    assert!(checks::compaction_entry(&without_reason, &fallback).is_err());
    without_reason["fallback_error"] = json!("model 'x' not found");
    assert!(checks::compaction_entry(&without_reason, &fallback).is_ok());
}

#[test]
fn two_compactions_or_none_are_rejected() {
    let mut s = session();
    assert!(checks::single_compaction(&s[..3]).is_err());
    s.push(s[3].clone());
    assert!(checks::single_compaction(&s).is_err());
}

#[test]
fn a_missing_or_unmarked_copy_is_rejected() {
    let s = session();
    let mut unmarked = s.clone();
    unmarked[4].as_object_mut().unwrap().remove("kept_by");
    assert!(checks::kept_copies(&unmarked, 3).is_err());
    assert!(checks::kept_copies(&s[..4], 3).is_err());
}

#[test]
fn replies_with_half_a_usage_or_mostly_without_usage_or_cache_reads_are_rejected() {
    let mut s = session();
    s[5]["usage"]["cache_read_input_tokens"] = json!(0);
    assert!(checks::usage_recorded(&s).is_err());
    let mut s = session();
    s[5]["usage"]["output_tokens"] = json!(0);
    assert!(checks::usage_recorded(&s).is_err());
    let mut s = session();
    s[1]["usage"] = json!({"input_tokens": 0, "output_tokens": 32});
    assert!(checks::usage_recorded(&s).is_err());
    // One of the two replies without usage (llama-server's missing `message_start`) passes.
    let mut s = session();
    s[1].as_object_mut().unwrap().remove("usage");
    assert_eq!(checks::replies(&s).len(), 2);
    checks::usage_recorded(&s).unwrap();
    let mut s = session();
    for e in &mut s {
        if e["role"] == "assistant" && e.get("kept_by").is_none() {
            e.as_object_mut().unwrap().remove("usage");
        }
    }
    assert!(checks::usage_recorded(&s).is_err());
}

#[test]
fn a_replay_that_differs_from_the_file_is_rejected() {
    let s = session();
    let good = replayed(&s);
    let mut other_summary = good.clone();
    other_summary["messages"][0]["content"][0]["summary"] = json!("something else");
    let mut dropped = good.clone();
    dropped["messages"].as_array_mut().unwrap().pop();
    let mut reordered = good.clone();
    reordered["messages"].as_array_mut().unwrap().swap(1, 2);
    let mut old_head = good;
    old_head["messages"]
        .as_array_mut()
        .unwrap()
        .insert(1, s[0].clone());
    for bad in [other_summary, dropped, reordered, old_head] {
        assert!(checks::replay(&bad, &s, 3).is_err(), "{bad}");
    }
}

#[test]
fn notes_are_deterministic_and_grow_with_their_sentence_count() {
    assert_eq!(note(2, 3), note(2, 3));
    assert!(note(2, 3).starts_with("Please remember note 2. Fact 2.0: the "));
    assert_eq!(note(1, 40).matches("Fact 1.").count(), 40);
    assert_ne!(note(1, 5), note(2, 5));
}

#[test]
fn http_answers_are_parsed_with_and_without_chunking() {
    let plain = parse_response(b"HTTP/1.1 200 OK\r\nContent-Length: 15\r\nKeep-Alive: timeout=5, max=100\r\n\r\n{\"status\":\"ok\"}").unwrap();
    assert_eq!(plain.status, 200);
    assert_eq!(plain.header("keep-alive"), Some("timeout=5, max=100"));
    assert_eq!(plain.json().unwrap()["status"], "ok");
    let chunked = parse_response(
        b"HTTP/1.1 400 Bad Request\r\nTransfer-Encoding: chunked\r\n\r\n4\r\n{\"a\"\r\n3;x=y\r\n:1}\r\n0\r\n\r\n",
    )
    .unwrap();
    assert_eq!(chunked.status, 400);
    assert_eq!(chunked.body, b"{\"a\":1}");
    assert!(
        parse_response(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n").is_err()
    );
    assert!(parse_response(b"garbage").is_err());
}

#[test]
fn a_record_is_accepted_only_when_the_model_answered_and_its_answer_was_refused() {
    use super::suite::{MODEL, model_answer_refused};
    for refused in [
        "the model's summary stopped at the output limit of 256 tokens, so it may be cut short",
        "the model's summary repeats one phrase (only 12% of its word sequences are distinct)",
        "the model's summary is a copy of the compaction prompt",
        "the model returned an empty summary",
    ] {
        let cause = format!("compaction with {MODEL} failed: {refused}");
        assert!(model_answer_refused(&cause), "{cause}");
    }
    for other in [
        format!("compaction with {MODEL} failed: error sending request: connection refused"),
        "no room for a compaction request: the window of 2048 tokens holds only the prompt"
            .to_owned(),
        "compaction with other-model failed: the model's summary stopped at the output limit"
            .to_owned(),
        String::new(),
    ] {
        assert!(!model_answer_refused(&other), "{other}");
    }
}

#[test]
fn the_steps_counted_are_those_of_the_last_plan_announced() {
    use super::suite::announced_steps;
    // The CLI's wording (`ui::describe_event`): the first plan, then changes of plan.
    let stderr = "panto: the request was too large for the model: compacting, then retrying once
panto: compacting in 6 steps: its transcript is about 8000 tokens, about 4000 tokens per request
panto: step 1/6: about 3350 tokens in, up to 458 out
panto: planned again (the summaries so far are shorter than planned): 4 steps in all
panto: step 2/4: about 3711 tokens in, up to 458 out
";
    assert_eq!(announced_steps(stderr), 4);
    let shrunk = "panto: compacting in 3 steps: its transcript is about 5000 tokens
panto: step 1 was too large for the model (prompt is too long); retrying with requests of about 2000 tokens, 5 steps in all
";
    assert_eq!(announced_steps(shrunk), 5);
    assert_eq!(announced_steps("panto: compacted 4000 -> 500 tokens\n"), 1);
}
