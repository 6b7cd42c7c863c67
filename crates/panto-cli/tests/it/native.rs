//! `compaction_strategy = "native"`: `panto compact` asks the provider for its own compaction
//! (Anthropic's on-demand compaction here), writes the entry with the payload exactly as the
//! API returned it, and falls back to panto's summary when the provider cannot.

use serde_json::{Value, json};
use wiremock::matchers::{body_partial_json, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::support::Sandbox;

/// The answer of "Compaction on demand"
/// (<https://platform.claude.com/docs/en/build-with-claude/compaction-on-demand>): one signed
/// `compaction` block, `stop_reason: "compaction"`, the compaction's usage itemized.
const BLOCK: &str = r#"{"type":"compaction","content":"The user asked about the parser; the assistant explained the state machine.","signature":"c2lnLW9uZQ==","tool_changes":{"kept":0,"ratio":1.50}}"#;

fn answer() -> String {
    format!(
        r#"{{"id":"msg_c1","type":"message","role":"assistant","model":"claude-x","content":[{BLOCK}],"stop_reason":"compaction","stop_sequence":null,"usage":{{"input_tokens":120,"output_tokens":30,"iterations":[{{"type":"compaction","input_tokens":120,"output_tokens":30}}]}}}}"#
    )
}

const SESSION: &str = r#"{"type":"message","id":"m1","role":"user","content":[{"type":"text","text":"How does the parser keep its state?"}]}
{"type":"message","id":"m2","role":"assistant","content":[{"type":"text","text":"A state machine, one state per line kind."}]}
{"type":"message","id":"m3","role":"user","content":[{"type":"text","text":"And between lines?"}]}
{"type":"message","id":"m4","role":"assistant","content":[{"type":"text","text":"The state carries over."}]}
"#;

fn compact(sb: &Sandbox, server: &MockServer) -> crate::support::Run {
    let base = server.uri();
    // A three-message session summarized with its ledger is no smaller than itself: these
    // tests look at who wrote the summary, so the compaction is forced.
    let mut cmd = sb.command(&[
        "compact",
        "s.jsonl",
        "--json",
        "--force",
        "--keep-tokens",
        "1",
        "--provider",
        "anthropic",
        "--model",
        "claude-x",
        "--base-url",
        &base,
    ]);
    cmd.env("ANTHROPIC_API_KEY", "test-key-123");
    tokio::task::block_in_place(|| sb.run_with(cmd))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compact_writes_the_providers_native_compaction() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/messages"))
        .and(body_partial_json(
            json!({"compaction": {"type": "summarize"}}),
        ))
        .respond_with(
            ResponseTemplate::new(200).set_body_raw(answer().into_bytes(), "application/json"),
        )
        .mount(&server)
        .await;
    let sb = Sandbox::new();
    sb.write(".panto/config.toml", "compaction_strategy = \"native\"\n");
    sb.write("s.jsonl", SESSION);
    let run = compact(&sb, &server);
    run.expect_code(0);
    let doc = run.json();
    assert_eq!(doc["strategy"], json!("native"));
    assert_eq!(doc["native"], json!("anthropic"));
    assert_eq!(doc["usage"]["input_tokens"], json!(120));
    assert!(
        run.stderr.contains("anthropic native compaction"),
        "{}",
        run.stderr
    );
    // The request: the beta, the conversation's system prompt, the summarized messages.
    let requests = server.received_requests().await.unwrap();
    assert_eq!(requests.len(), 1);
    let beta = requests[0]
        .headers
        .get("anthropic-beta")
        .unwrap()
        .to_str()
        .unwrap();
    assert!(beta.contains("compact-2026-09-04"), "{beta}");
    let body: Value = serde_json::from_slice(&requests[0].body).unwrap();
    assert!(
        body["system"]
            .as_str()
            .unwrap()
            .starts_with("You are a helpful assistant")
    );
    // The entry holds the block byte for byte (`1.50` included).
    let file = std::fs::read_to_string(sb.work().join("s.jsonl")).unwrap();
    let entry = file
        .lines()
        .find(|l| l.starts_with(r#"{"type":"compaction""#))
        .unwrap();
    assert!(entry.contains(BLOCK), "{entry}");
    let entry: Value = serde_json::from_str(entry).unwrap();
    assert_eq!(entry["strategy"], json!("native"));
    assert_eq!(entry["usage"]["iterations"][0]["type"], json!("compaction"));
    // `panto config` says where the setting came from.
    let run = sb.run(&["config"]);
    assert!(
        run.stdout
            .lines()
            .any(|l| l.starts_with("compaction_strategy")
                && l.contains("native")
                && l.contains("project file")),
        "{}",
        run.stdout
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compact_falls_back_to_pantos_summary_when_the_native_call_fails() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/messages"))
        .and(body_partial_json(json!({"compaction": {"type": "summarize"}})))
        .respond_with(ResponseTemplate::new(400).set_body_json(json!({"type": "error", "error": {"type": "invalid_request_error", "message": "compaction: unknown field"}})))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/v1/messages"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "id": "msg_s", "type": "message", "role": "assistant", "model": "claude-x",
            "content": [{"type": "text", "text": "The user asked how the parser keeps its state; the assistant explained the state machine and that the state carries over between lines."}],
            "stop_reason": "end_turn", "usage": {"input_tokens": 300, "output_tokens": 40}
        })))
        .mount(&server)
        .await;
    let sb = Sandbox::new();
    sb.write(".panto/config.toml", "compaction_strategy = \"native\"\n");
    sb.write("s.jsonl", SESSION);
    let run = compact(&sb, &server);
    run.expect_code(0);
    let doc = run.json();
    assert_eq!(doc["strategy"], json!("summary"));
    assert!(
        run.stderr.contains("native compaction failed"),
        "{}",
        run.stderr
    );
    assert_eq!(server.received_requests().await.unwrap().len(), 2);
}

#[test]
fn an_unknown_strategy_is_refused_naming_the_file_and_line() {
    let sb = Sandbox::new();
    sb.write(".panto/config.toml", "compaction_strategy = \"fancy\"\n");
    let run = sb.run(&["config"]);
    run.expect_code(2);
    assert!(
        run.stderr.contains(".panto/config.toml: line 1"),
        "{}",
        run.stderr
    );
    // Every strategy is listed, from the one definition.
    for name in panto_compact::CompactionStrategy::NAMES {
        assert!(
            run.stderr.contains(&format!("`{name}`")),
            "{name}: {}",
            run.stderr
        );
    }
}
