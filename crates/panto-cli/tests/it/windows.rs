//! Overflow recovery that always fits: the binary against a loopback model whose one window
//! holds every request (the compaction requests included), from 97% down to 35% of the
//! conversation, with the limit stated in the error or not, on every protocol.

use serde_json::{Value, json};

use crate::fake_model::{FakeModel, Protocol, Seen};
use crate::support::Sandbox;

const MODEL: &str = "fake-model";
const EXCHANGES: usize = 30;

/// A session of `EXCHANGES` user prompts and answers, each about 2.4 KB, with no usage (so
/// panto sizes it by its heuristic, which counts lower than the fake model does).
fn conversation() -> String {
    let mut lines = Vec::new();
    for i in 0..EXCHANGES {
        let words = "parser tokens lexer grammar ".repeat(85);
        lines.push(
            json!({"type": "message", "id": format!("u{i}"), "role": "user",
            "content": [{"type": "text", "text": format!("Prompt {i}. {words}")}]}),
        );
        lines.push(
            json!({"type": "message", "id": format!("a{i}"), "role": "assistant",
            "content": [{"type": "text", "text": format!("Answer {i}. {words}")}]}),
        );
    }
    let mut text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    text.push('\n');
    text.pop();
    text
}

fn body_text(seen: &Seen) -> String {
    seen.body.to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recovery_fits_every_window_on_every_protocol() {
    let session = conversation();
    // The fake model counts a third of a token per byte of the request body.
    let full_bytes = {
        let p = FakeModel::new(Protocol::OpenAiChat, usize::MAX);
        let server = p.clone().start().await;
        let sb = Sandbox::new();
        sb.write("s.jsonl", &session);
        run(&sb, Protocol::OpenAiChat, &server.uri(), "2000");
        p.seen()[0].bytes
    };
    let mut summary = Vec::new();
    for protocol in Protocol::ALL {
        for share in [0.97, 0.6, 0.35] {
            for keep in ["2000", "5000", "20000"] {
                for numbers in [true, false] {
                    let mut model = FakeModel::new(protocol, (full_bytes as f64 * share) as usize);
                    model.limit_compactions = true;
                    model.numbers = numbers;
                    let server = model.clone().start().await;
                    let sb = Sandbox::new();
                    sb.write("s.jsonl", &session);
                    let case = format!("{protocol:?} window {share} keep {keep} numbers {numbers}");
                    let code = run(&sb, protocol, &server.uri(), keep);
                    let seen = model.seen();
                    assert_eq!(code, 0, "{case}: {seen:#?}");

                    // The first request overflowed; the retry fitted and was answered.
                    assert_eq!(seen[0].answer, "overflow", "{case}");
                    let last = seen.last().unwrap();
                    assert_eq!(last.answer, "reply", "{case}");
                    assert!(!last.compaction, "{case}");
                    let conversation = seen.iter().filter(|s| !s.compaction).count();
                    assert_eq!(conversation, 2, "{case}: one retry only");
                    // Every compaction request but a few rejected ones fitted.
                    let rejected = seen
                        .iter()
                        .filter(|s| s.compaction && s.answer == "overflow")
                        .count();
                    assert!(
                        rejected <= 3,
                        "{case}: {rejected} rejected compaction requests"
                    );
                    let steps = seen
                        .iter()
                        .filter(|s| s.compaction && s.answer == "summary")
                        .count();

                    // Every prompt is summarized in some request, or kept in the retry.
                    let summarized: Vec<String> = seen
                        .iter()
                        .filter(|s| s.compaction && s.answer == "summary")
                        .map(body_text)
                        .collect();
                    let retry = body_text(last);
                    for i in 0..EXCHANGES {
                        let marker = format!("Prompt {i}. ");
                        assert!(
                            summarized.iter().any(|b| b.contains(&marker))
                                || retry.contains(&marker),
                            "{case}: prompt {i} was lost"
                        );
                    }
                    // Chained steps pass the running summary forward.
                    for (k, body) in summarized.iter().enumerate().skip(1) {
                        assert!(
                            body.contains("<previous-summary>") && body.contains("SUMMARY-"),
                            "{case}: step {}",
                            k + 1
                        );
                    }
                    // The session records one compaction with its request count.
                    let entries: Vec<Value> = std::fs::read_to_string(sb.work().join("s.jsonl"))
                        .unwrap()
                        .lines()
                        .map(|l| serde_json::from_str(l).unwrap())
                        .collect();
                    let c: Vec<&Value> = entries
                        .iter()
                        .filter(|e| e["type"] == "compaction")
                        .collect();
                    assert_eq!(c.len(), 1, "{case}");
                    assert_eq!(
                        c[0]["requests"].as_u64(),
                        Some((steps + rejected) as u64),
                        "{case}"
                    );
                    summary.push(format!(
                        "{case}: {steps} steps, {rejected} rejected, retry {} of {} bytes",
                        last.bytes, model.limit
                    ));
                }
            }
        }
    }
    eprintln!("{}", summary.join("\n"));
}

/// `panto send` of one more prompt, with the protocol's key set; returns the exit code.
fn run(sb: &Sandbox, p: Protocol, server: &str, keep: &str) -> i32 {
    let base = p.base_url(server);
    let mut cmd = sb.command(&[
        "send",
        "s.jsonl",
        "One more question about the parser.",
        "--keep-tokens",
        keep,
        "--provider",
        p.flag(),
        "--model",
        MODEL,
        "--base-url",
        &base,
    ]);
    cmd.env(p.key_var(), "test-key-123");
    let run = tokio::task::block_in_place(|| sb.run_with(cmd));
    if run.code != 0 {
        eprintln!("{}", run.stderr);
    }
    run.code
}
