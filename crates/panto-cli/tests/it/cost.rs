//! What a conversation costs, through the binary: `panto cost` (rows that add up to the totals,
//! money with `[prices]`), the cost on `compact --json`, and the caching settings reaching the
//! wire (`prompt_cache`, `cache_ttl`, the conversation's `prompt_cache_key`), and the chat's
//! meter showing the session's cost so far.

use serde_json::Value;

use crate::fake_model::{FakeModel, Protocol};
use crate::support::{Run, Sandbox};

/// A session with two turns, a tool loop, a compaction that recorded its usage, its kept copy,
/// and a reply after it.
const SESSION: &str = r#"{"type":"message","id":"m1","role":"user","content":[{"type":"text","text":"fix it"}]}
{"type":"message","id":"m2","role":"assistant","model":"claude-sonnet-4-5","usage":{"input_tokens":10,"output_tokens":5,"cache_creation_input_tokens":2000},"content":[{"type":"tool_use","id":"t1","name":"read","input":{}}]}
{"type":"message","id":"m3","role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"ok"}]}
{"type":"message","id":"m4","role":"assistant","model":"claude-sonnet-4-5","usage":{"input_tokens":10,"output_tokens":5,"cache_read_input_tokens":2000,"cache_creation_input_tokens":100},"content":[{"type":"text","text":"done"}]}
{"type":"compaction","id":"c1","summary":"fixed","model":"claude-sonnet-4-5","kept_messages":1,"copies_marked":true,"usage":{"input_tokens":3000,"output_tokens":200}}
{"type":"message","id":"m5","role":"assistant","kept_by":"c1","model":"claude-sonnet-4-5","usage":{"input_tokens":10,"output_tokens":5,"cache_read_input_tokens":2000},"content":[{"type":"text","text":"done"}]}
{"type":"message","id":"m6","role":"user","content":[{"type":"text","text":"next"}]}
{"type":"message","id":"m7","role":"assistant","model":"claude-sonnet-4-5","usage":{"input_tokens":10,"output_tokens":5,"cache_read_input_tokens":800,"cache_creation_input_tokens":1500},"content":[{"type":"text","text":"ok"}]}
"#;

const FIELDS: [&str; 9] = [
    "replies",
    "input_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "cache_write_long_tokens",
    "output_tokens",
    "billed_input_tokens",
    "money_micros",
    "unpriced",
];

#[test]
fn panto_cost_gives_rows_that_add_up_to_the_totals() {
    let sb = Sandbox::new();
    sb.write("s.jsonl", SESSION);
    let doc = sb.run(&["cost", "s.jsonl", "--json"]).expect_code(0).json();
    let rows = doc["turns"].as_array().unwrap();
    let kinds: Vec<&str> = rows.iter().map(|r| r["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["turn", "compaction", "turn"]);
    for field in FIELDS {
        let sum: u64 = rows.iter().map(|r| r[field].as_u64().unwrap()).sum();
        assert_eq!(doc["totals"][field].as_u64().unwrap(), sum, "{field}");
    }
    // The copy is not counted twice; the compaction says what the next reply wrote again.
    assert_eq!(doc["totals"]["replies"], 4);
    assert_eq!(rows[1]["written_after"], 1500);
    assert_eq!(rows[1]["input_tokens"], 3000);
    // No prices: tokens only.
    assert!(doc["totals"]["money"].is_null());
    let share = doc["totals"]["cache_hit_share"].as_f64().unwrap();
    assert!((share - 2800.0 / 9430.0).abs() < 1e-9, "{share}");

    // With prices, money; a dated release would take its family's price.
    std::fs::write(
        sb.user_config.join("config.toml"),
        "[prices.claude-sonnet-4-5]\ninput = 3.0\noutput = 15.0\n",
    )
    .unwrap();
    let doc = sb.run(&["cost", "s.jsonl", "--json"]).expect_code(0).json();
    let money = doc["totals"]["money"].as_f64().unwrap();
    let micros: u64 = doc["turns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["money_micros"].as_u64().unwrap())
        .sum();
    assert_eq!(doc["totals"]["money_micros"].as_u64().unwrap(), micros);
    assert!((money - micros as f64 / 1e6).abs() < 1e-12);
    let text = sb.run(&["cost", "s.jsonl"]).expect_code(0).stdout.clone();
    assert!(text.contains("compaction c1"), "{text}");
    assert!(text.contains("the next reply wrote 1.5k"), "{text}");
    assert!(
        text.lines().any(|l| l.trim_start().starts_with("total")),
        "{text}"
    );
    assert!(
        text.contains("% of the input read from the cache"),
        "{text}"
    );
    // `panto config` lists the settings.
    let config = sb.run(&["config"]).expect_code(0).stdout.clone();
    for key in ["prompt_cache", "cache_ttl", "prices"] {
        assert!(config.contains(key), "{config}");
    }
}

#[test]
fn panto_cost_of_an_empty_session_is_bad_input() {
    let sb = Sandbox::new();
    sb.write("empty.jsonl", "");
    let run = sb.run(&["cost", "empty.jsonl"]);
    run.expect_code(2);
    assert!(run.stderr.contains("empty"), "{}", run.stderr);
}

/// The chat's meter shows the session's cost so far: what its history cost (the figures `panto
/// cost` adds up) from the meter on resuming, and the chat's own replies added to it after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chat_meter_counts_the_sessions_cost_so_far() {
    let p = Protocol::OpenAiChat;
    let server = FakeModel::new(p, 1_000_000).start().await;
    let sb = Sandbox::new();
    sb.write("c.jsonl", SESSION);
    // A known window: the meter has room for the cost within its 60 columns.
    std::fs::write(
        sb.user_config.join("config.toml"),
        "context_window = 100000\n",
    )
    .unwrap();
    let history = sb.run(&["cost", "c.jsonl", "--json"]).expect_code(0).json();
    // 2,510 + 335 + 3,000 + 1,965 billed; 2,800 of 9,430 input tokens read from the cache.
    assert_eq!(history["totals"]["billed_input_tokens"], 7810);
    let output = sb.chat_with_input(
        crate::fake_model::chat_command(&sb, p, &server.uri()),
        "Hello there.\n",
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let meters: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("panto: context "))
        .collect();
    assert_eq!(meters.len(), 2, "{stderr}");
    assert!(
        meters[0].contains("; 7.8k billed (29% cached)"),
        "{}",
        meters[0]
    );
    // The reply (plain input at the fake model's plain rates) adds to the history's figures; by
    // itself it would show no cost at all (no price, no cache).
    let billed = |meter: &str| -> String {
        let (_, after) = meter.split_once("; ").unwrap();
        after
            .split("; ")
            .find(|part| part.contains(" billed ("))
            .unwrap_or_else(|| panic!("{meter}"))
            .to_owned()
    };
    assert_ne!(billed(meters[1]), billed(meters[0]), "{stderr}");
}

async fn send(sb: &Sandbox, p: Protocol, server: &str, session: &str, i: usize) -> Run {
    let base = p.base_url(server);
    let message = format!(
        "Message {i}. {}",
        "Some words about the parser. ".repeat(60)
    );
    let mut cmd = sb.command(&[
        "send",
        session,
        &message,
        "--provider",
        p.flag(),
        "--model",
        if p == Protocol::Anthropic {
            "claude-sonnet-4-5"
        } else {
            "gpt-5.1"
        },
        "--base-url",
        &base,
    ]);
    cmd.env(p.key_var(), "test-key-123");
    tokio::task::block_in_place(|| sb.run_with(cmd))
}

fn key_of(body: &Value) -> Option<String> {
    body["prompt_cache_key"].as_str().map(str::to_owned)
}

/// `OpenAI` gets one key per conversation, the same on every request of it, another for another
/// session, never the session's name; `cache_ttl = "1h"` asks for extended retention on a model
/// that offers it; `prompt_cache = false` sends neither.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_conversation_has_its_own_cache_key() {
    for p in [Protocol::OpenAiChat, Protocol::OpenAiResponses] {
        let model = FakeModel::new(p, 1_000_000);
        let server = model.clone().start().await;
        let sb = Sandbox::new();
        for i in 0..2 {
            assert_eq!(send(&sb, p, &server.uri(), "alpha.jsonl", i).await.code, 0);
        }
        assert_eq!(send(&sb, p, &server.uri(), "beta.jsonl", 9).await.code, 0);
        let keys: Vec<Option<String>> = model.seen().iter().map(|s| key_of(&s.body)).collect();
        let first = keys[0].clone().expect("a key");
        assert!(first.starts_with("panto-") && first.len() == 38, "{first}");
        assert!(!first.contains("alpha"));
        assert_eq!(keys[1].as_deref(), Some(first.as_str()));
        assert_ne!(keys[2].as_deref(), Some(first.as_str()));
        assert!(
            model
                .seen()
                .iter()
                .all(|s| s.body.get("prompt_cache_retention").is_none())
        );

        std::fs::write(sb.user_config.join("config.toml"), "cache_ttl = \"1h\"\n").unwrap();
        send(&sb, p, &server.uri(), "alpha.jsonl", 3).await;
        let last = model.seen().last().unwrap().body.clone();
        assert_eq!(last["prompt_cache_retention"], "24h", "{p:?}");
        assert_eq!(key_of(&last).as_deref(), Some(first.as_str()));

        std::fs::write(sb.user_config.join("config.toml"), "prompt_cache = false\n").unwrap();
        send(&sb, p, &server.uri(), "alpha.jsonl", 4).await;
        let last = model.seen().last().unwrap().body.clone();
        assert!(key_of(&last).is_none() && last.get("prompt_cache_retention").is_none());
    }
}

/// Anthropic: breakpoints once the conversation is long enough to cache, each asking for an
/// hour with `cache_ttl = "1h"`; none with `prompt_cache = false`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_breakpoints_follow_the_settings() {
    let p = Protocol::Anthropic;
    let model = FakeModel::new(p, 1_000_000);
    let server = model.clone().start().await;
    let sb = Sandbox::new();
    std::fs::write(sb.user_config.join("config.toml"), "cache_ttl = \"1h\"\n").unwrap();
    for i in 0..4 {
        assert_eq!(send(&sb, p, &server.uri(), "a.jsonl", i).await.code, 0);
    }
    let marks = |body: &Value| -> Vec<Value> {
        body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
            .filter_map(|b| b.get("cache_control").cloned())
            .collect()
    };
    let last = model.seen().last().unwrap().body.clone();
    let found = marks(&last);
    assert!(!found.is_empty() && found.len() <= 4, "{found:?}");
    assert!(found.iter().all(|m| m["ttl"] == "1h"), "{found:?}");
    std::fs::write(sb.user_config.join("config.toml"), "prompt_cache = false\n").unwrap();
    send(&sb, p, &server.uri(), "a.jsonl", 5).await;
    let last = model.seen().last().unwrap().body.clone();
    assert!(marks(&last).is_empty());
}
