//! Issue 27, native compaction: the provider's own compaction as panto's strategy, its payload
//! kept byte for byte through the session file, replay, kept copies and the wire, and the
//! fallback to panto's summary when it fails. Against the loopback emulators (`emulate`).

use std::sync::{Arc, Mutex};

use panto_compact::model::{ContentBlock, Entry, NATIVE, decode_line, encode_line, replay};
use panto_compact::{
    CompactOutcome, CompactionEvent, CompactionStrategy, CompactorConfig, Driver, MemoryLog,
    MemoryStore, Provider, RequestOptions, StreamEvent,
};
use panto_providers::{AnthropicProvider, GeminiProvider, OpenAiResponsesProvider};
use serde_json::{Value, json};
use wiremock::MockServer;

use crate::common::config;
use crate::emulate::claude::Claude;
use crate::emulate::responses::Responses;
use crate::preserved::{compactor, note, results, tools};

const WINDOW: u64 = 1_400;

fn native_driver(provider: Arc<dyn Provider>, model: &str, log: MemoryLog) -> Driver<MemoryStore> {
    let compactor = compactor(provider, model)
        .with_config(
            CompactorConfig::new()
                .with_keep_tokens(100)
                .with_compaction_strategy(CompactionStrategy::Native),
        )
        .on_event(|e| {
            if let CompactionEvent::NativeFailed { cause } = e {
                eprintln!("native compaction failed: {cause}");
            }
        });
    let context = log.replay();
    Driver::new(compactor, log, context)
        .with_system("You are a careful agent. Answer every note.")
        .with_tools(tools())
        .with_request_options(
            RequestOptions::new().with_reasoning_effort(panto_compact::ReasoningEffort::Low),
        )
        .with_max_output_tokens(2_048)
}

fn anthropic(server: &MockServer) -> Arc<dyn Provider> {
    Arc::new(AnthropicProvider::new(config(&server.uri())).unwrap())
}

fn responses(server: &MockServer) -> Arc<dyn Provider> {
    Arc::new(
        OpenAiResponsesProvider::new(config(&format!("{}/v1", server.uri())))
            .unwrap()
            .with_encrypted_reasoning(true),
    )
}

/// Three turns with thinking (one a tool loop), through `driver`.
async fn three_turns(driver: &mut Driver<MemoryStore>) {
    driver
        .send(vec![note(1, 300, false)], &mut |_| {})
        .await
        .unwrap();
    let reply = driver
        .send(vec![note(2, 300, true)], &mut |_| {})
        .await
        .unwrap();
    driver
        .send(vec![results(&reply.message, 20)], &mut |_| {})
        .await
        .unwrap();
    driver
        .send(vec![note(3, 300, false)], &mut |_| {})
        .await
        .unwrap();
}

/// The conversation of the overflow scenario, with short notes and large tool results (what
/// overflows is the tool output, as in an agent's loop), or with long notes. The fifth send
/// overflows; returns the compaction report of its reply.
async fn overflow_scenario(
    driver: &mut Driver<MemoryStore>,
    long_notes: bool,
) -> panto_compact::CompactionReport {
    let size = if long_notes { 900 } else { 150 };
    let mut last = None;
    let mut report = None;
    for step in 1..=8 {
        let new = match step {
            1 => note(1, size, false),
            2 => note(2, size, true),
            3 => results(last.as_ref().unwrap(), if long_notes { 20 } else { 2_200 }),
            5 => results(
                last.as_ref().unwrap(),
                if long_notes { 2_500 } else { 1_900 },
            ),
            8 => results(last.as_ref().unwrap(), 20),
            4 => note(4, size, true),
            6 => note(6, 150, false),
            7 => note(7, 150, true),
            _ => unreachable!(),
        };
        let reply = driver
            .send(vec![new], &mut |_| {})
            .await
            .unwrap_or_else(|e| panic!("send {step}: {e}"));
        if let Some(r) = reply.compaction {
            assert_eq!(step, 5);
            report = Some(r);
        }
        last = Some(reply.message);
    }
    report.expect("an overflow compaction")
}

/// The compaction entry a driver's log ends with (the latest one).
fn latest_entry(driver: &Driver<MemoryStore>) -> Value {
    let entries = driver.log().entries();
    let entry = entries
        .iter()
        .rev()
        .find(|e| matches!(e, Entry::Compaction(_)))
        .unwrap();
    serde_json::from_str(&encode_line(entry)).unwrap()
}

#[tokio::test]
async fn anthropic_manual_native_compaction_keeps_the_kept_thinking_valid() {
    let (server, claude) = Claude::start(100_000).await;
    let mut driver = native_driver(anthropic(&server), "claude-emulated", MemoryLog::memory());
    three_turns(&mut driver).await;
    let outcome = driver
        .compact(Some("keep the note numbers".into()))
        .await
        .unwrap();
    let CompactOutcome::Compacted(compacted) = outcome else {
        panic!("nothing compacted");
    };
    assert_eq!(compacted.report.native.as_deref(), Some("anthropic"));
    let usage = compacted
        .report
        .usage
        .clone()
        .expect("the compaction's usage");
    assert!(usage.input_tokens > 0);
    // The request: the conversation's own system prompt and tools, the beta, the instructions.
    let (block, request) = {
        let state = claude.state();
        let request = state
            .seen
            .iter()
            .find(|s| s.kind == "compaction")
            .unwrap()
            .clone();
        let record = state.compactions.values().next().unwrap().clone();
        (record.raw, request)
    };
    assert_eq!(
        request.body["system"],
        json!("You are a careful agent. Answer every note.")
    );
    assert_eq!(request.body["tools"][0]["name"], json!("lookup"));
    assert!(
        request.body["compaction"]["instructions"]
            .as_str()
            .unwrap()
            .contains("keep the note numbers")
    );
    // The entry holds the block exactly as the API wrote it (`1.50` included), its usage, and
    // the readable summary with panto's ledger after it.
    let entry = latest_entry(&driver);
    assert_eq!(entry["strategy"], json!("native"));
    assert_eq!(entry["usage"]["iterations"][0]["type"], json!("compaction"));
    let line = encode_line(
        &driver
            .log()
            .entries()
            .into_iter()
            .find(|e| matches!(e, Entry::Compaction(_)))
            .unwrap(),
    );
    assert!(
        line.contains(&block),
        "the block byte for byte in the session line"
    );
    assert!(
        entry["summary"]
            .as_str()
            .unwrap()
            .starts_with("Summary of ")
    );
    // The kept turns' thinking was fresh: it stays valid under this compaction.
    let kept_marked = driver
        .context()
        .messages
        .iter()
        .filter(|m| m.thinking_kept())
        .count();
    assert!(kept_marked >= 1);
    // The next sends carry the block byte for byte first in `messages`, and the kept thinking,
    // which the API accepts (none dropped, none refused).
    let accepted = claude.state().accepted;
    driver
        .send(vec![note(4, 100, false)], &mut |_| {})
        .await
        .unwrap();
    driver
        .send(vec![note(5, 100, false)], &mut |_| {})
        .await
        .unwrap();
    let state = claude.state();
    assert!(
        state.seen.iter().all(|s| s.status == 200),
        "{:?}",
        state
            .seen
            .iter()
            .filter_map(|s| s.refusal.clone())
            .collect::<Vec<_>>()
    );
    assert_eq!(
        state.exact_blocks, 2,
        "both sends carried the block byte for byte"
    );
    assert_eq!(state.dropped, 0);
    let last = state.seen.last().unwrap();
    assert_eq!(last.body["messages"][0]["role"], json!("assistant"));
    assert_eq!(
        last.body["messages"][0]["content"][0]["type"],
        json!("compaction")
    );
    assert!(last.raw.contains(&block));
    assert!(
        state.accepted > accepted + 1,
        "the kept turn's thinking went back and was accepted"
    );
}

#[tokio::test]
async fn anthropic_overflow_native_compaction_then_three_sends() {
    let (server, claude) = Claude::start(WINDOW).await;
    let mut driver = native_driver(anthropic(&server), "claude-emulated", MemoryLog::memory());
    let report = overflow_scenario(&mut driver, false).await;
    assert_eq!(report.native.as_deref(), Some("anthropic"));
    let state = claude.state();
    let refused: Vec<_> = state
        .seen
        .iter()
        .filter_map(|s| s.refusal.clone())
        .collect();
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert!(refused[0].contains("prompt is too long"));
    assert!(state.seen.iter().any(|s| s.kind == "compaction"));
    assert!(
        state.seen.iter().all(|s| s.kind != "summary"),
        "no summary of panto's was needed"
    );
    assert!(
        state.exact_blocks >= 4,
        "the retry and every later send carried the block"
    );
    assert_eq!(
        state.dropped, 0,
        "the kept tool loop's thinking stayed valid"
    );
}

#[tokio::test]
async fn responses_native_compaction_manual_and_overflow() {
    // Manual.
    let (server, emulator) = Responses::start(100_000).await;
    let mut driver = native_driver(responses(&server), "gpt-emulated", MemoryLog::memory());
    three_turns(&mut driver).await;
    let outcome = driver
        .compact(Some("keep the note numbers".into()))
        .await
        .unwrap();
    let CompactOutcome::Compacted(compacted) = outcome else {
        panic!("nothing compacted");
    };
    assert_eq!(compacted.report.native.as_deref(), Some("openai-responses"));
    assert!(compacted.report.usage.is_some());
    let (item, request) = {
        let state = emulator.state();
        (
            state.compactions.values().next().unwrap().clone(),
            state
                .seen
                .iter()
                .find(|s| s.kind == "compaction")
                .unwrap()
                .clone(),
        )
    };
    assert_eq!(request.path, "/v1/responses/compact");
    assert!(
        request.body["instructions"]
            .as_str()
            .unwrap()
            .contains("keep the note numbers")
    );
    let entry = latest_entry(&driver);
    assert_eq!(entry["native"]["protocol"], json!("openai-responses"));
    assert!(
        entry["summary"]
            .as_str()
            .unwrap()
            .contains("native compaction")
    );
    driver
        .send(vec![note(4, 100, false)], &mut |_| {})
        .await
        .unwrap();
    {
        let state = emulator.state();
        assert!(state.seen.iter().all(|s| s.status == 200));
        assert_eq!(state.exact_items, 1);
        assert!(
            state.seen.last().unwrap().raw.contains(&item),
            "the item byte for byte"
        );
    }

    // Overflow.
    let (server, emulator) = Responses::start(WINDOW).await;
    let mut driver = native_driver(responses(&server), "gpt-emulated", MemoryLog::memory());
    let report = overflow_scenario(&mut driver, false).await;
    assert_eq!(report.native.as_deref(), Some("openai-responses"));
    let state = emulator.state();
    assert_eq!(state.seen.iter().filter(|s| s.status != 200).count(), 1);
    assert!(state.exact_items >= 4);
}

/// A native compaction that fails (the provider answers an error, or has none) falls back to
/// panto's summary, on both protocols and for a provider without native compaction.
#[tokio::test]
async fn a_failed_native_compaction_falls_back_to_pantos_summary() {
    let (server, claude) = Claude::start(100_000).await;
    claude.state().fail_compaction =
        Some((400, "compaction is not supported for this model".into()));
    let events = Arc::new(Mutex::new(Vec::new()));
    let seen_events = events.clone();
    let mut driver = native_driver(anthropic(&server), "claude-emulated", MemoryLog::memory());
    three_turns(&mut driver).await;
    *driver.compactor_mut() =
        std::mem::replace(driver.compactor_mut(), compactor(anthropic(&server), "x")).on_event(
            move |e| {
                if let CompactionEvent::NativeFailed { cause } = e {
                    seen_events.lock().unwrap().push(cause.clone());
                }
            },
        );
    // Three short turns summarized with their ledger are no smaller than themselves; the
    // test is about who writes the summary, so the compaction is forced.
    let forced = panto_compact::CompactRun::manual(None).with_force(true);
    let CompactOutcome::Compacted(compacted) = driver.compact_with(forced).await.unwrap() else {
        panic!("nothing compacted");
    };
    assert_eq!(compacted.report.native, None);
    assert!(compacted.report.summary.starts_with("Summary "));
    let entry = latest_entry(&driver);
    assert!(entry.get(NATIVE).is_none());
    assert_eq!(events.lock().unwrap().len(), 1);
    assert!(events.lock().unwrap()[0].contains("not supported"));
    driver
        .send(vec![note(4, 100, false)], &mut |_| {})
        .await
        .unwrap();

    let (server, emulator) = Responses::start(100_000).await;
    emulator.state().fail_compaction = Some((500, "the server had an error".into()));
    let mut driver = native_driver(responses(&server), "gpt-emulated", MemoryLog::memory());
    three_turns(&mut driver).await;
    // Three short turns summarized with their ledger are no smaller than themselves; the
    // test is about who writes the summary, so the compaction is forced.
    let forced = panto_compact::CompactRun::manual(None).with_force(true);
    let CompactOutcome::Compacted(compacted) = driver.compact_with(forced).await.unwrap() else {
        panic!("nothing compacted");
    };
    assert_eq!(compacted.report.native, None);
    assert!(emulator.state().seen.iter().any(|s| s.kind == "summary"));

    // Gemini has no native compaction: panto's summary, at once.
    let (server, gemini) = crate::emulate::gemini::Gemini::start(100_000).await;
    let provider: Arc<dyn Provider> = Arc::new(GeminiProvider::new(config(&server.uri())).unwrap());
    let mut driver = native_driver(provider, "gemini-emulated", MemoryLog::memory());
    three_turns(&mut driver).await;
    // Three short turns summarized with their ledger are no smaller than themselves; the
    // test is about who writes the summary, so the compaction is forced.
    let forced = panto_compact::CompactRun::manual(None).with_force(true);
    let CompactOutcome::Compacted(compacted) = driver.compact_with(forced).await.unwrap() else {
        panic!("nothing compacted");
    };
    assert_eq!(compacted.report.native, None);
    assert!(gemini.state().seen.iter().any(|s| s.kind == "summary"));
}

/// `OpenAI`'s compacted window keeps every user message: when the user's notes are what fills
/// the window, it cannot bring the context within the limit, and panto's summary is written
/// instead of retrying a request that would overflow again.
#[tokio::test]
async fn a_native_compaction_too_large_for_the_window_falls_back() {
    let (server, emulator) = Responses::start(WINDOW).await;
    let events = Arc::new(Mutex::new(Vec::new()));
    let seen_events = events.clone();
    let mut driver = native_driver(responses(&server), "gpt-emulated", MemoryLog::memory());
    let compactor = std::mem::replace(driver.compactor_mut(), compactor(responses(&server), "x"));
    *driver.compactor_mut() = compactor.on_event(move |e| {
        if let CompactionEvent::NativeFailed { cause } = e {
            seen_events.lock().unwrap().push(cause.clone());
        }
    });
    let report = overflow_scenario(&mut driver, true).await;
    assert_eq!(report.native, None);
    let events = events.lock().unwrap();
    assert_eq!(events.len(), 1);
    assert!(events[0].contains("not below the limit"), "{events:?}");
    let state = emulator.state();
    assert!(state.seen.iter().any(|s| s.kind == "compaction"));
    assert!(state.seen.iter().any(|s| s.kind == "summary"));
    assert_eq!(state.seen.iter().filter(|s| s.status != 200).count(), 1);
}

/// A chain: a native compaction, then one of panto's, whose previous summary is the native
/// one's readable summary; the conversation goes on after each.
#[tokio::test]
async fn a_chain_of_native_then_panto_compactions() {
    let (server, claude) = Claude::start(100_000).await;
    let mut driver = native_driver(anthropic(&server), "claude-emulated", MemoryLog::memory());
    three_turns(&mut driver).await;
    driver.compact(None).await.unwrap();
    let native_summary = claude
        .state()
        .compactions
        .values()
        .next()
        .unwrap()
        .content
        .clone();
    driver
        .send(vec![note(4, 300, false)], &mut |_| {})
        .await
        .unwrap();
    driver
        .send(vec![note(5, 300, false)], &mut |_| {})
        .await
        .unwrap();
    // Now panto's own summary.
    let summary_compactor = compactor(anthropic(&server), "claude-emulated");
    *driver.compactor_mut() = summary_compactor;
    let CompactOutcome::Compacted(second) = driver.compact(None).await.unwrap() else {
        panic!("nothing compacted");
    };
    assert_eq!(second.report.native, None);
    {
        let state = claude.state();
        let summary_request = state
            .seen
            .iter()
            .rev()
            .find(|s| s.kind == "summary")
            .unwrap();
        let prompt = summary_request.body["messages"][0]["content"][0]["text"]
            .as_str()
            .unwrap();
        assert!(prompt.contains("<previous-summary>"));
        assert!(
            prompt.contains(&native_summary),
            "the native summary is carried forward"
        );
    }
    driver
        .send(vec![note(6, 100, false)], &mut |_| {})
        .await
        .unwrap();
    let state = claude.state();
    assert!(state.seen.iter().all(|s| s.status == 200));
    // No native block on the wire any more: the context leads with panto's summary.
    let last = state.seen.last().unwrap();
    assert!(!last.raw.contains("\"type\":\"compaction\""));
    // The second entry's ledger merged the first one's.
    let entry = latest_entry(&driver);
    assert!(entry.get("ledger").is_some());
}

/// Native payloads and native blocks survive the session file, replay, a later compaction
/// (as kept copies) and the wire byte for byte; another protocol reads the readable summary.
#[tokio::test]
async fn native_blocks_round_trip_byte_for_byte() {
    // A Responses compaction item in a reply (`context_management` through the request
    // options' escape hatch), with `id` before `type` as output items list them.
    let (server, emulator) = Responses::start(100_000).await;
    let provider = responses(&server);
    let log = MemoryLog::memory();
    let mut driver = crate::preserved::driver(provider.clone(), "gpt-emulated", log)
        .with_request_options(RequestOptions::new().with_body_field(
            "context_management",
            json!([{"type": "compaction", "compact_threshold": 300}]),
        ));
    driver
        .send(vec![note(1, 1_500, false)], &mut |_| {})
        .await
        .unwrap();
    let item = emulator
        .state()
        .compactions
        .values()
        .next()
        .unwrap()
        .clone();
    assert!(item.starts_with(r#"{"id":"cmp_"#));
    // In the session line exactly.
    let lines = driver.log().to_jsonl();
    assert!(lines.contains(&item), "{lines}");
    // Read back (a restart), the line is the same bytes.
    let reread: Vec<Entry> = lines
        .lines()
        .enumerate()
        .map(|(i, l)| decode_line(l.as_bytes(), i + 1).unwrap())
        .collect();
    assert_eq!(reread.iter().map(encode_line).collect::<String>(), lines);
    // A compaction of panto's keeps that reply (the turn in flight) as a copy, still exact;
    // the next send carries it.
    let mut driver =
        crate::preserved::driver(provider, "gpt-emulated", MemoryLog::with_entries(reread));
    // Forced: the point is the copy, and a short conversation compacts to no smaller.
    let forced = panto_compact::CompactRun::manual(None).with_force(true);
    let CompactOutcome::Compacted(_) = driver.compact_with(forced).await.unwrap() else {
        panic!("nothing compacted");
    };
    let copies = driver.log().to_jsonl();
    let last_lines: Vec<&str> = copies.lines().filter(|l| l.contains("kept_by")).collect();
    assert!(
        last_lines.iter().any(|l| l.contains(&item)),
        "the kept copy holds the item exactly"
    );
    let before = emulator.state().exact_items;
    driver
        .send(vec![note(3, 100, false)], &mut |_| {})
        .await
        .unwrap();
    assert_eq!(emulator.state().exact_items, before + 1);

    // An Anthropic native payload: through the session line, replay and the wire; and read as
    // its summary by another protocol.
    let (server, claude) = Claude::start(100_000).await;
    let mut driver = native_driver(anthropic(&server), "claude-emulated", MemoryLog::memory());
    three_turns(&mut driver).await;
    driver.compact(None).await.unwrap();
    let block = claude
        .state()
        .compactions
        .values()
        .next()
        .unwrap()
        .raw
        .clone();
    let lines = driver.log().to_jsonl();
    assert!(lines.contains(&block));
    let reread: Vec<Entry> = lines
        .lines()
        .enumerate()
        .map(|(i, l)| decode_line(l.as_bytes(), i + 1).unwrap())
        .collect();
    let context = replay(reread.iter().cloned());
    let ContentBlock::Compaction(head) = &context.messages[0].content[0] else {
        panic!("no compaction block");
    };
    assert_eq!(head.native_payload().unwrap()[0].json(), block);
    let mut restarted = native_driver(
        anthropic(&server),
        "claude-emulated",
        MemoryLog::with_entries(reread.clone()),
    );
    let before = claude.state().exact_blocks;
    restarted
        .send(vec![note(4, 100, false)], &mut |_| {})
        .await
        .unwrap();
    assert_eq!(claude.state().exact_blocks, before + 1);
    // Gemini reads the summary, never the signed block.
    let gemini = MockServer::start().await;
    wiremock::Mock::given(wiremock::matchers::method("POST"))
        .respond_with(crate::common::json_answer(json!({"candidates": [{"content": {"role": "model", "parts": [{"text": "ok"}]}, "finishReason": "STOP"}]})))
        .mount(&gemini)
        .await;
    let provider: Arc<dyn Provider> = Arc::new(GeminiProvider::new(config(&gemini.uri())).unwrap());
    let mut other = crate::preserved::driver(provider, "gemini-x", MemoryLog::with_entries(reread));
    other
        .send(vec![note(5, 100, false)], &mut |_: StreamEvent<'_>| {})
        .await
        .unwrap();
    let body = crate::common::bodies(&gemini).await.remove(0);
    let text = body.to_string();
    assert!(
        text.contains("Summary of "),
        "the readable summary stands in"
    );
    assert!(
        !text.contains("cmpsig-"),
        "the signed block stays with its protocol"
    );
}

/// The documented shapes (`tests/fixtures/native/shapes.json`, each with its source page).
fn shape(name: &str) -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/native/shapes.json"
    );
    let all: Vec<Value> = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    all.into_iter()
        .find(|s| s["name"] == json!(name))
        .unwrap_or_else(|| panic!("no shape {name}"))["shape"]
        .clone()
}

/// Checks that `actual` has the keys of `documented`, recursively (list items matched by their
/// `type`, else by the first documented item).
fn same_shape(actual: &Value, documented: &Value, at: &str) {
    match (actual, documented) {
        // An empty documented object is one whose fields the page does not list.
        (Value::Object(_), Value::Object(d)) if d.is_empty() => {}
        (Value::Object(a), Value::Object(d)) => {
            let mut ak: Vec<&String> = a.keys().collect();
            let mut dk: Vec<&String> = d.keys().collect();
            ak.sort();
            dk.sort();
            assert_eq!(ak, dk, "keys at {at}");
            for (k, v) in d {
                same_shape(&a[k], v, &format!("{at}.{k}"));
            }
        }
        (Value::Array(a), Value::Array(d)) if !d.is_empty() => {
            for item in a {
                let doc = d
                    .iter()
                    .find(|x| x.get("type").is_some() && x.get("type") == item.get("type"))
                    .unwrap_or(&d[0]);
                same_shape(item, doc, &format!("{at}[]"));
            }
        }
        _ => {}
    }
}

/// The emulators answer in the shapes the providers document.
#[tokio::test]
async fn the_emulators_speak_the_documented_shapes() {
    let (server, claude) = Claude::start(100_000).await;
    let mut driver = native_driver(anthropic(&server), "claude-emulated", MemoryLog::memory());
    three_turns(&mut driver).await;
    driver.compact(Some("keep it short".into())).await.unwrap();
    {
        let state = claude.state();
        let request = state.seen.iter().find(|s| s.kind == "compaction").unwrap();
        let mut documented = shape("anthropic-compaction-request");
        // The conversation's own options ride along (the thinking budget).
        documented["thinking"] = request.body["thinking"].clone();
        same_shape(&request.body, &documented, "anthropic request");
        let record = state.compactions.values().next().unwrap();
        let answer: Value = serde_json::from_str(&format!(
            r#"{{"id":"m","type":"message","role":"assistant","model":"x","content":[{}],"stop_reason":"compaction","stop_sequence":null,"usage":{{"input_tokens":1,"output_tokens":1,"iterations":[{{"type":"compaction","input_tokens":1,"output_tokens":1}}]}}}}"#,
            record.raw
        ))
        .unwrap();
        same_shape(
            &answer,
            &shape("anthropic-compaction-answer"),
            "anthropic answer",
        );
    }
    let (server, emulator) = Responses::start(100_000).await;
    let mut driver = native_driver(responses(&server), "gpt-emulated", MemoryLog::memory());
    three_turns(&mut driver).await;
    driver.compact(None).await.unwrap();
    let state = emulator.state();
    let request = state.seen.iter().find(|s| s.kind == "compaction").unwrap();
    same_shape(
        &request.body,
        &shape("openai-compact-request"),
        "openai request",
    );
    let item: Value = serde_json::from_str(state.compactions.values().next().unwrap()).unwrap();
    same_shape(
        &item,
        &shape("openai-compact-answer")["output"][1],
        "openai item",
    );
}
