//! The binary against a loopback model server for each protocol: overflow recovery with one
//! compaction and one retry, errors that must not compact, the compaction-model fallback, chat
//! with `/compact`, and COMPACTION.md layering.

use serde_json::{Value, json};

use crate::fake_model::{FakeModel, Protocol, Seen, chat_command};
use crate::support::{Run, Sandbox};

const MODEL: &str = "fake-model";

/// Runs the binary with the protocol's key set, off the async runtime.
async fn panto(sb: &Sandbox, p: Protocol, server: &str, args: &[&str]) -> Run {
    let base = p.base_url(server);
    let mut all: Vec<&str> = args.to_vec();
    all.extend([
        "--provider",
        p.flag(),
        "--model",
        MODEL,
        "--base-url",
        &base,
    ]);
    let mut cmd = sb.command(&all);
    cmd.env(p.key_var(), "test-key-123");
    let sb_run = |cmd| sb.run_with(cmd);
    tokio::task::block_in_place(|| sb_run(cmd))
}

/// The entries of a session file.
fn entries(sb: &Sandbox, name: &str) -> Vec<Value> {
    std::fs::read_to_string(sb.work().join(name))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn compactions(seen: &[Seen]) -> usize {
    seen.iter().filter(|s| s.compaction).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_until_the_server_rejects_then_compact_once_and_retry() {
    for p in Protocol::ALL {
        let model = FakeModel::new(p, 9_000);
        let server = model.clone().start().await;
        let sb = Sandbox::new();
        let mut compacted_at = None;
        for i in 0..12 {
            let message = format!(
                "Message {i}. {}",
                "Some words about the parser. ".repeat(60)
            );
            let run = panto(
                &sb,
                p,
                &server.uri(),
                &["send", "s.jsonl", &message, "--keep-tokens", "200"],
            )
            .await;
            run.expect_code(0);
            assert!(run.stdout.starts_with("Reply "), "{p:?}: {}", run.stdout);
            assert!(!run.stderr.contains("warning"), "{p:?}: {}", run.stderr);
            if compactions(&model.seen()) > 0 {
                assert!(
                    run.stderr.contains("compacted (fake-model"),
                    "{p:?}: {}",
                    run.stderr
                );
                compacted_at = Some(i);
                break;
            }
        }
        let i = compacted_at.unwrap_or_else(|| panic!("{p:?}: the server never overflowed"));
        assert!(i >= 2, "{p:?}: overflowed too early ({i})");

        // The last requests: overflow, one compaction (folded into as many requests as the
        // 3,000-token window needs beside the built-in prompt), one retry that fits.
        let seen = model.seen();
        let steps = compactions(&seen);
        assert!(steps >= 1, "{p:?}");
        let tail: Vec<&str> = seen[seen.len() - steps - 2..]
            .iter()
            .map(|s| s.answer)
            .collect();
        let mut expect = vec!["overflow"];
        expect.extend(std::iter::repeat_n("summary", steps));
        expect.push("reply");
        assert_eq!(tail, expect, "{p:?}");
        let (overflowed, retry) = (&seen[seen.len() - steps - 2], &seen[seen.len() - 1]);
        assert!(
            retry.bytes <= model.limit && retry.bytes < overflowed.bytes,
            "{p:?}"
        );
        let last_prompt = format!("Message {i}.");
        assert!(
            retry.body.to_string().contains(&last_prompt),
            "{p:?}: the retry lost the prompt"
        );
        assert!(
            retry.body.to_string().contains(&format!("SUMMARY-{steps}")),
            "{p:?}: the retry lacks the summary"
        );
        assert_eq!(seen[seen.len() - 2].model, MODEL);

        // The session: one compaction entry with trigger overflow, its kept copies, the reply.
        let all = entries(&sb, "s.jsonl");
        // One id format for every entry, whoever named it (the driver, the compactor or the
        // store): the kind letter, then 28 hex digits.
        for e in &all {
            let id = e["id"].as_str().unwrap_or_default();
            let letter = if e["type"] == "compaction" { 'c' } else { 'm' };
            assert!(
                id.len() == 29
                    && id.starts_with(letter)
                    && id[1..].bytes().all(|b| b.is_ascii_hexdigit()),
                "{p:?}: {id}"
            );
        }
        let c: Vec<&Value> = all.iter().filter(|e| e["type"] == "compaction").collect();
        assert_eq!(c.len(), 1, "{p:?}");
        assert_eq!(c[0]["trigger"], "overflow");
        assert_eq!(c[0]["model"], MODEL);
        assert!(
            c[0]["summary"]
                .as_str()
                .unwrap()
                .starts_with(&format!("SUMMARY-{steps}"))
        );
        // Usage from the server is recorded on the replies.
        let replies: Vec<&Value> = all
            .iter()
            .filter(|e| e["role"] == "assistant" && e.get("kept_by").is_none())
            .collect();
        assert_eq!(replies.len(), i + 1, "{p:?}");
        assert!(
            replies
                .iter()
                .all(|r| r["usage"]["input_tokens"].as_u64().unwrap_or(0) > 0
                    || r["usage"]["cache_read_input_tokens"].as_u64().unwrap_or(0) > 0),
            "{p:?}: {replies:?}"
        );

        // Replay: the compaction block, then the kept turns (the in-flight prompt among them),
        // then the reply.
        let ctx = panto(&sb, p, &server.uri(), &["context", "s.jsonl", "--json"]).await;
        let ctx = ctx.expect_code(0).json();
        let messages = ctx["messages"].as_array().unwrap();
        assert_eq!(messages[0]["content"][0]["type"], "compaction");
        let kept = c[0]["kept_messages"].as_u64().unwrap() as usize;
        assert!(
            messages[1..=kept]
                .iter()
                .all(|m| m["kept_by"] == c[0]["id"]),
            "{p:?}"
        );
        assert!(
            messages[kept]["content"][0]["text"]
                .as_str()
                .unwrap()
                .starts_with(&last_prompt)
        );
        assert_eq!(messages.len(), kept + 2);
        assert_eq!(messages[kept + 1]["role"], "assistant");
    }
}

/// A server that counts the completion against its window (vLLM), a reply budget of half
/// that window and a newest prompt that fits it alone: after the compaction the request still
/// has no room for the reply. The error says it is the reply's room, not the prompt, and the
/// hint names `max_output_tokens` and where it came from.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_with_no_room_for_its_reply_says_so_and_names_the_reply_budget() {
    let p = Protocol::OpenAiChat;
    // A window of 3,000 tokens (3 bytes a token), a reply budget of 1,500.
    let mut model = FakeModel::new(p, 9_000);
    model.states_completion = true;
    model.counts_completion = true;
    let server = model.clone().start().await;
    let sb = Sandbox::new();
    history(&sb);
    std::fs::create_dir_all(&sb.user_config).unwrap();
    std::fs::write(
        sb.user_config.join("config.toml"),
        "max_output_tokens = 1500\n",
    )
    .unwrap();
    // About 2,000 tokens: within the window, not beside the reply's 1,500.
    let prompt = "Please look at this log line again. ".repeat(165);
    let run = panto(&sb, p, &server.uri(), &["send", "debugging.jsonl", &prompt]).await;
    run.expect_code(1);
    let answers: Vec<&str> = model.seen().iter().map(|s| s.answer).collect();
    assert_eq!(answers.first(), Some(&"overflow"), "{answers:?}");
    assert!(answers.contains(&"summary"), "compacted first: {answers:?}");
    assert!(!answers.contains(&"reply"), "{answers:?}");
    // panto counted the reply's room itself (the first refusal said the output counts), so
    // the retry was not sent.
    assert_eq!(answers.len(), 4, "{answers:?}");
    assert!(
        run.stderr.contains(
            "the room kept for the reply (1500 tokens) does not fit beside what the compaction kept"
        ),
        "{}",
        run.stderr
    );
    // Neither the message nor the hint blames the prompt ("... on its own").
    assert!(!run.stderr.contains("on its own"), "{}", run.stderr);
    assert!(
        run.stderr
            .contains("a smaller `max_output_tokens` (now 1500, user file "),
        "{}",
        run.stderr
    );
}

/// A session with some history, for the error paths.
fn history(sb: &Sandbox) {
    sb.example("debugging.jsonl");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_that_overflows_again_is_surfaced_without_a_second_compaction() {
    for p in Protocol::ALL {
        // A window too small for anything, whose errors state no limit: panto learns only
        // that the limit is below the request that overflowed, compacts, and retries once.
        let mut model = FakeModel::new(p, 10);
        model.numbers = false;
        let server = model.clone().start().await;
        let sb = Sandbox::new();
        history(&sb);
        let before = entries(&sb, "debugging.jsonl").len();
        let run = panto(
            &sb,
            p,
            &server.uri(),
            &["send", "debugging.jsonl", "One more thing."],
        )
        .await;
        run.expect_code(1);
        assert!(
            run.stderr
                .contains("still overflows after compaction: about"),
            "{p:?}: {}",
            run.stderr
        );
        // No numbers say which part is over: the turn, or the reply's room beside it.
        assert!(
            run.stderr.contains(
                "or the reply's room beside it: shorten it, lower `max_output_tokens` (now 4096, the default; set it in "
            ),
            "{p:?}: {}",
            run.stderr
        );
        // One compaction (its fold may take more than one request), then the one retry.
        let answers: Vec<&str> = model.seen().iter().map(|s| s.answer).collect();
        let (first, rest) = answers.split_first().unwrap();
        let (last, summaries) = rest.split_last().unwrap();
        assert_eq!((*first, *last), ("overflow", "overflow"), "{p:?}");
        assert!(
            !summaries.is_empty() && summaries.iter().all(|a| *a == "summary"),
            "{p:?}: {answers:?}"
        );
        let compactions = entries(&sb, "debugging.jsonl")
            .iter()
            .filter(|e| e["type"] == "compaction")
            .count();
        assert_eq!(compactions, 1, "{p:?}");
        // The prompt and the compaction are kept; no reply was appended.
        let after = entries(&sb, "debugging.jsonl");
        assert_eq!(after[before]["content"][0]["text"], "One more thing.");
        assert_eq!(after[before + 1]["type"], "compaction");
        assert!(
            after
                .iter()
                .skip(before)
                .all(|e| e["role"] != "assistant" || e.get("kept_by").is_some())
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_errors_pass_through_without_compaction() {
    for p in Protocol::ALL {
        let mut model = FakeModel::new(p, 1_000_000);
        model.fail_with = Some((
            401,
            json!({"error": {"message": "Invalid API key", "type": "authentication_error"}}),
        ));
        let server = model.clone().start().await;
        let sb = Sandbox::new();
        history(&sb);
        let run = panto(
            &sb,
            p,
            &server.uri(),
            &["send", "debugging.jsonl", "Hello?"],
        )
        .await;
        run.expect_code(1);
        assert!(
            run.stderr.contains("authentication failed"),
            "{p:?}: {}",
            run.stderr
        );
        assert!(
            run.stderr.contains(p.key_var()),
            "{p:?}: says which key to check: {}",
            run.stderr
        );
        let answers: Vec<&str> = model.seen().iter().map(|s| s.answer).collect();
        assert_eq!(answers, ["error"], "{p:?}: no compaction, no retry");
        assert!(!run.stderr.contains("test-key-123"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_compaction_model_falls_back_to_the_active_model() {
    for p in Protocol::ALL {
        let mut model = FakeModel::new(p, 1_000_000);
        model.missing_model = Some("tiny-model".into());
        let server = model.clone().start().await;
        let sb = Sandbox::new();
        history(&sb);
        let run = panto(
            &sb,
            p,
            &server.uri(),
            &[
                "compact",
                "debugging.jsonl",
                "--compaction-model",
                "tiny-model",
                "--keep-tokens",
                "500",
                "--json",
            ],
        )
        .await;
        run.expect_code(0);
        let doc = run.json();
        assert_eq!(doc["model"], MODEL, "{p:?}");
        assert_eq!(doc["fallback"], true);
        let seen = model.seen();
        let asked: Vec<(&str, &str)> = seen.iter().map(|s| (s.model.as_str(), s.answer)).collect();
        assert_eq!(
            asked,
            [("tiny-model", "not_found"), (MODEL, "summary")],
            "{p:?}"
        );
        let c = entries(&sb, "debugging.jsonl")
            .into_iter()
            .find(|e| e["type"] == "compaction")
            .unwrap();
        assert_eq!(c["fallback"], true);
        assert_eq!(c["model"], MODEL);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_through_stdin_with_compact_instructions() {
    let p = Protocol::OpenAiChat;
    let model = FakeModel::new(p, 1_000_000);
    let server = model.clone().start().await;
    let sb = Sandbox::new();
    let cmd = chat_command(&sb, p, &server.uri());
    let output = sb.chat_with_input(
        cmd,
        // Forced: the ledger quotes both questions, so the summary of so short a conversation
        // cannot be smaller than it (a compaction that saves nothing is otherwise refused).
        "First question about the parser.\nSecond question.\n/compact --force focus on the parser\nThird question.\n/exit\n",
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert_eq!(
        stdout.lines().collect::<Vec<_>>(),
        [
            "Reply 1 from fake-model.",
            "Reply 2 from fake-model.",
            "Reply 3 from fake-model."
        ]
    );
    // The compaction is told once, and every reply (and the compaction) is followed by the
    // context meter, which says once that the window is unknown.
    assert_eq!(stderr.matches("compacted").count(), 1, "{stderr}");
    assert!(stderr.contains("panto: compacted (fake-model"), "{stderr}");
    let meters: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("panto: context "))
        .collect();
    assert_eq!(meters.len(), 4, "{stderr}");
    // The first meter also says that the window is unknown: with the recall tool's schema in
    // every request (about 300 tokens), it is too wide for the reply's token counts, which it
    // leaves out to keep to its width.
    assert_eq!(stderr.matches(" out; fake-model").count(), 2, "{stderr}");
    assert_eq!(stderr.matches("window unknown").count(), 1, "{stderr}");
    assert!(meters[0].contains(", window unknown; "), "{stderr}");
    let seen = model.seen();
    let c: Vec<&Seen> = seen.iter().filter(|s| s.compaction).collect();
    assert_eq!(c.len(), 1);
    assert!(
        c[0].system
            .contains("## Additional instructions for this compaction run\n\nfocus on the parser"),
        "{}",
        c[0].system
    );
    let user_prompt: Vec<String> = c[0].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].to_string())
        .collect();
    assert_eq!(user_prompt.len(), 1);
    assert!(user_prompt[0].contains("<transcript>"));
    assert!(
        !user_prompt[0].contains("focus on the parser"),
        "instructions leaked into the transcript"
    );
    // The third question went out after the summary.
    assert!(seen.last().unwrap().body.to_string().contains("SUMMARY-1"));
    let all = entries(&sb, "c.jsonl");
    let comp = all.iter().find(|e| e["type"] == "compaction").unwrap();
    assert_eq!(comp["instructions"], "focus on the parser");
    assert_eq!(comp["trigger"], "manual");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_project_compaction_prompt_wins_over_the_user_one() {
    let p = Protocol::Anthropic;
    let model = FakeModel::new(p, 1_000_000);
    let server = model.clone().start().await;
    let sb = Sandbox::new();
    history(&sb);
    std::fs::write(
        sb.user_config.join("COMPACTION.md"),
        "USER PROMPT: summarize.\n",
    )
    .unwrap();
    let run = panto(
        &sb,
        p,
        &server.uri(),
        &[
            "compact",
            "debugging.jsonl",
            "--dry-run",
            "--keep-tokens",
            "500",
        ],
    )
    .await;
    run.expect_code(0);
    sb.write(
        ".panto/COMPACTION.md",
        "PROJECT PROMPT: summarize tersely.\n",
    );
    let run = panto(
        &sb,
        p,
        &server.uri(),
        &[
            "compact",
            "debugging.jsonl",
            "--dry-run",
            "--keep-tokens",
            "500",
            "--instructions",
            "keep test names",
        ],
    )
    .await;
    run.expect_code(0);
    let seen = model.seen();
    assert_eq!(seen[0].system.trim(), "USER PROMPT: summarize.");
    assert!(
        seen[1]
            .system
            .starts_with("PROJECT PROMPT: summarize tersely."),
        "{}",
        seen[1].system
    );
    assert!(
        seen[1].system.trim_end().ends_with("keep test names"),
        "{}",
        seen[1].system
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_starts_the_conversation_in_an_empty_file() {
    let p = Protocol::ALL[0];
    let model = FakeModel::new(p, 1_000_000);
    let server = model.clone().start().await;
    let sb = Sandbox::new();
    sb.write("started.jsonl", "");
    sb.run(&["context", "started.jsonl"]).expect_code(2);
    let run = panto(&sb, p, &server.uri(), &["send", "started.jsonl", "Hello?"]).await;
    run.expect_code(0);
    assert!(!run.stderr.contains("warning"), "{}", run.stderr);
    let roles: Vec<Value> = entries(&sb, "started.jsonl")
        .iter()
        .map(|e| e["role"].clone())
        .collect();
    assert_eq!(roles, [json!("user"), json!("assistant")]);
    sb.run(&["context", "started.jsonl"]).expect_code(0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_no_model_can_summarize_panto_says_so_loudly_and_the_conversation_goes_on() {
    let p = Protocol::OpenAiChat;
    let mut model = FakeModel::new(p, 9_000);
    model.empty_summaries = true;
    let server = model.clone().start().await;
    let sb = Sandbox::new();
    let mut last = None;
    for i in 0..12 {
        let message = format!(
            "Message {i}. {}",
            "Some words about the parser. ".repeat(60)
        );
        let run = panto(
            &sb,
            p,
            &server.uri(),
            &["send", "s.jsonl", &message, "--keep-tokens", "200"],
        )
        .await;
        if compactions(&model.seen()) > 0 {
            last = Some(run);
            break;
        }
        run.expect_code(0);
    }
    let run = last.expect("the server overflowed");
    // The reply was obtained and stored: 0, as docs/compaction.md says, but never quietly.
    run.expect_code(0);
    assert!(run.stdout.starts_with("Reply "), "{}", run.stdout);
    for said in [
        "panto: warning: no model could write the summary",
        "panto:   attempt 1: fake-model: the model returned an empty summary",
        "instead panto wrote its own record",
        "run `panto compact SESSION`",
    ] {
        assert!(run.stderr.contains(said), "{said}: {}", run.stderr);
    }
    let compaction = entries(&sb, "s.jsonl")
        .into_iter()
        .find(|e| e["type"] == "compaction")
        .unwrap();
    assert_eq!(compaction["model"], "panto-record");
    assert_eq!(compaction["degraded"], true);
}
