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
                    let c = compactions(&sb);
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

/// A manual compaction of a conversation larger than the model's window (a session imported
/// from elsewhere): with the window configured, the fold is planned in several requests from
/// the start; without it, the first request is rejected and the fold learns the window from
/// the error. `--dry-run --json` reports the steps and writes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manual_compaction_of_a_conversation_larger_than_the_window_folds() {
    let session = conversation();
    for protocol in Protocol::ALL {
        for configured in [true, false] {
            // A window of a third of the conversation (141 KB of body, 3 bytes a token).
            let mut model = FakeModel::new(protocol, 47_000);
            model.limit_compactions = true;
            let server = model.clone().start().await;
            let sb = Sandbox::new();
            sb.write("s.jsonl", &session);
            if configured {
                // In panto's estimate, which counts a little under the fake model's third of a
                // token per byte of body.
                sb.write(".panto/config.toml", "context_window = 12000\n");
            }
            let case = format!("{protocol:?} window configured {configured}");
            let base = protocol.base_url(&server.uri());
            let args = |extra: &[&'static str]| {
                let mut all = vec!["compact", "s.jsonl", "--keep-tokens", "2000", "--json"];
                all.extend_from_slice(extra);
                all.extend(["--provider", protocol.flag(), "--model", MODEL]);
                all
            };
            let mut dry = args(&["--dry-run"]);
            dry.extend(["--base-url", &base]);
            let mut cmd = sb.command(&dry);
            cmd.env(protocol.key_var(), "test-key-123");
            let run = tokio::task::block_in_place(|| sb.run_with(cmd));
            assert_eq!(run.code, 0, "{case}: {}", run.stderr);
            let doc: Value = serde_json::from_str(&run.stdout).unwrap();
            let steps = doc["steps"].as_array().unwrap();
            assert!(steps.len() >= 2, "{case}: {doc}");
            if configured {
                assert!(
                    steps.iter().all(|s| s["input_tokens"].as_u64().unwrap()
                        + s["max_output_tokens"].as_u64().unwrap()
                        <= 12_000),
                    "{case}: {doc}"
                );
            }
            assert_eq!(
                doc["requests"].as_u64().unwrap() as usize,
                steps.len() + rejected(&model.seen()),
                "{case}"
            );
            // The fold is shown: planned in steps from the start, or re-planned after a rejection.
            let shown = if configured {
                "compacting in "
            } else {
                "retrying with smaller requests: about"
            };
            assert!(
                run.stderr.contains(shown) && run.stderr.contains("step 1/"),
                "{case}: {}",
                run.stderr
            );
            // Nothing written by the dry run.
            assert_eq!(
                std::fs::read_to_string(sb.work().join("s.jsonl")).unwrap(),
                session
            );
            if configured {
                assert_eq!(
                    rejected(&model.seen()),
                    0,
                    "{case}: the configured window is respected"
                );
            } else if run.stderr.contains(", limit ") {
                // The limit the refusal stated (the protocols whose error states it), which the
                // run gave back, is kept for the next command.
                let kept = std::fs::read_to_string(sb.data().join("windows.toml")).unwrap();
                assert!(
                    kept.contains("source = \"overflow\"")
                        && kept.contains(&format!("tokens = {}", 47_000 / 3)),
                    "{case}: {kept}"
                );
            }

            // The real compaction writes one entry with its request count.
            let mut real = args(&[]);
            real.extend(["--base-url", &base]);
            let mut cmd = sb.command(&real);
            cmd.env(protocol.key_var(), "test-key-123");
            let run = tokio::task::block_in_place(|| sb.run_with(cmd));
            assert_eq!(run.code, 0, "{case}: {}", run.stderr);
            let c = compactions(&sb);
            assert_eq!(c.len(), 1, "{case}");
            assert!(
                c[0]["fold_steps"].as_u64().unwrap() >= 2,
                "{case}: {}",
                c[0]
            );
        }
    }
}

fn rejected(seen: &[Seen]) -> usize {
    seen.iter()
        .filter(|s| s.compaction && s.answer == "overflow")
        .count()
}

/// The compaction entries of the sandbox's session `s.jsonl`.
fn compactions(sb: &Sandbox) -> Vec<Value> {
    std::fs::read_to_string(sb.work().join("s.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["type"] == "compaction")
        .collect()
}
