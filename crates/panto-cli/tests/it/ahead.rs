//! Compacting before it hurts, through the binary: `auto_compact` against a loopback model
//! that enforces its window, a server that truncates silently, a window learned once and kept,
//! forgotten with `panto window --forget`, and discovered from a server that tells it.

use serde_json::{Value, json};
use wiremock::matchers::{method, path};
use wiremock::{Mock, ResponseTemplate};

use crate::fake_model::{FakeModel, Protocol};
use crate::support::{Run, Sandbox};

const MODEL: &str = "fake-model";

/// The fake model's window: it counts a third of a token per byte of the request body.
const LIMIT_BYTES: usize = 12_000;
const WINDOW_TOKENS: usize = LIMIT_BYTES / 3;

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
    tokio::task::block_in_place(|| sb.run_with(cmd))
}

fn message(i: usize) -> String {
    format!(
        "Message {i}. {}",
        "Some words about the parser. ".repeat(25)
    )
}

/// The triggers of the session's compaction entries.
fn triggers(sb: &Sandbox, name: &str) -> Vec<String> {
    std::fs::read_to_string(sb.work().join(name))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["type"] == "compaction")
        .map(|e| e["trigger"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sends_past_the_window_with_auto_compact_never_overflow_and_compact_ahead() {
    for p in Protocol::ALL {
        let mut model = FakeModel::new(p, LIMIT_BYTES);
        model.limit_compactions = true;
        let server = model.clone().start().await;
        let sb = Sandbox::new();
        std::fs::write(
            sb.user_config.join("config.toml"),
            format!("context_window = {WINDOW_TOKENS}\nauto_compact = 0.8\n"),
        )
        .unwrap();
        let mut said = false;
        for i in 0..24 {
            let run = panto(&sb, p, &server.uri(), &["send", "s.jsonl", &message(i)]).await;
            assert_eq!(run.code, 0, "{p:?} send {i}: {}", run.stderr);
            assert!(run.stdout.starts_with("Reply "), "{p:?}: {}", run.stdout);
            said |= run
                .stderr
                .contains("panto: compacting ahead: the next request is");
        }
        let seen = model.seen();
        // No conversation request was larger than the window; nothing overflowed.
        let conversation: Vec<_> = seen.iter().filter(|s| !s.compaction).collect();
        assert!(
            conversation.iter().all(|s| s.bytes <= LIMIT_BYTES),
            "{p:?}: {:?}",
            conversation.iter().map(|s| s.bytes).collect::<Vec<_>>()
        );
        assert!(
            seen.iter().all(|s| s.answer != "overflow"),
            "{p:?}: {:?}",
            seen.iter().map(|s| (s.answer, s.bytes)).collect::<Vec<_>>()
        );
        assert_eq!(conversation.len(), 24, "{p:?}: one request per send");
        let found = triggers(&sb, "s.jsonl");
        assert!(found.len() >= 2, "{p:?}: {found:?}");
        assert!(found.iter().all(|t| t == "auto"), "{p:?}: {found:?}");
        assert!(said, "{p:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_truncates_silently_is_caught_and_the_user_told_why() {
    let p = Protocol::OpenAiChat;
    let mut model = FakeModel::new(p, LIMIT_BYTES);
    model.truncate_silently = true;
    let server = model.clone().start().await;
    let sb = Sandbox::new();
    let mut caught = None;
    for i in 0..30 {
        let run = panto(&sb, p, &server.uri(), &["send", "s.jsonl", &message(i)]).await;
        run.expect_code(0);
        if run.stderr.contains("truncated the request silently") {
            caught = Some((i, run));
            break;
        }
        assert!(run.stdout.starts_with("Reply "), "{}", run.stdout);
    }
    let (i, run) = caught.expect("the server cut a request");
    assert!(i >= 3, "caught too early: {i}");
    // The cause and what to do, in words; the answer that counts is the retry's.
    assert!(
        run.stderr
            .contains("hint: raise the server's context window (Ollama: num_ctx"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("that answer is not kept"),
        "{}",
        run.stderr
    );
    // The cut answer was streamed before the cut was known; the retry's starts a line of
    // its own.
    assert_eq!(
        run.stdout,
        format!(
            "An answer from the end of a cut prompt.\nReply {} from fake-model.\n",
            i + 1
        )
    );
    let seen = model.seen();
    let conversation: Vec<_> = seen.iter().filter(|s| !s.compaction).collect();
    let (cut, retry) = (
        conversation[conversation.len() - 2],
        conversation[conversation.len() - 1],
    );
    assert_eq!(cut.answer, "truncated");
    assert_eq!(retry.answer, "reply");
    assert!(retry.bytes <= LIMIT_BYTES, "{}", retry.bytes);
    assert_eq!(triggers(&sb, "s.jsonl"), ["overflow"]);
    let session = std::fs::read_to_string(sb.work().join("s.jsonl")).unwrap();
    assert!(
        !session.contains("cut prompt"),
        "the cut answer was written"
    );
    // What the request taught is kept: the window is below it.
    let context = panto(&sb, p, &server.uri(), &["context", "s.jsonl"]).await;
    context.expect_code(0);
    assert!(
        context
            .stdout
            .contains("(learned: below a request of about"),
        "{}",
        context.stdout
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_window_an_overflow_stated_is_kept_shown_used_ahead_and_forgotten() {
    let p = Protocol::OpenAiChat;
    let model = FakeModel::new(p, LIMIT_BYTES);
    let server = model.clone().start().await;
    let sb = Sandbox::new();
    let mut i = 0;
    while model.seen().iter().all(|s| s.answer != "overflow") {
        panto(&sb, p, &server.uri(), &["send", "s.jsonl", &message(i)])
            .await
            .expect_code(0);
        i += 1;
        assert!(i < 30, "the server never overflowed");
    }
    let stated = WINDOW_TOKENS;
    // The next command knows it, and says where it came from.
    let config = panto(&sb, p, &server.uri(), &["config"]).await;
    config.expect_code(0);
    let row = config
        .stdout
        .lines()
        .find(|l| l.starts_with("window "))
        .unwrap_or_else(|| panic!("{}", config.stdout));
    assert!(row.contains(&format!("= {stated} ")), "{row}");
    assert!(
        row.contains("learned: an overflow error stated it"),
        "{row}"
    );
    assert!(row.contains("panto window --forget"), "{row}");
    let kept = std::fs::read_to_string(sb.data().join("windows.toml")).unwrap();
    assert!(kept.contains(&format!("tokens = {stated}")), "{kept}");
    assert!(kept.contains("source = \"overflow\""), "{kept}");
    assert!(!kept.contains("test-key-123"));

    // A new conversation with the same model, compacting ahead: no overflow at all.
    let before = model.seen().len();
    for j in 0..16 {
        panto(
            &sb,
            p,
            &server.uri(),
            &["send", "t.jsonl", &message(j), "--auto-compact", "0.8"],
        )
        .await
        .expect_code(0);
    }
    let later = &model.seen()[before..];
    assert!(later.iter().all(|s| s.answer != "overflow"));
    let found = triggers(&sb, "t.jsonl");
    assert!(
        !found.is_empty() && found.iter().all(|t| t == "auto"),
        "{found:?}"
    );
    let context = panto(&sb, p, &server.uri(), &["context", "t.jsonl", "--json"]).await;
    let doc: Value = serde_json::from_str(&context.stdout).unwrap();
    assert_eq!(doc["window"]["tokens"], json!(stated));
    assert_eq!(doc["window"]["source"], "overflow");
    // Its numbers ("your messages resulted in N tokens", above the limit) say nothing of
    // the output.
    assert_eq!(doc["window"]["counts_output"], Value::Null);

    // One command forgets it.
    let forget = panto(&sb, p, &server.uri(), &["window", "--forget"]).await;
    forget.expect_code(0);
    assert!(
        forget
            .stdout
            .starts_with("forgot 1 window of fake-model on openai"),
        "{}",
        forget.stdout
    );
    let context = panto(&sb, p, &server.uri(), &["context", "t.jsonl"]).await;
    assert!(
        context.stdout.contains("  window unknown"),
        "{}",
        context.stdout
    );
}

/// A server whose overflow states the completion it counted (vLLM's wording): that it counts
/// the output against its window is kept with the window learned (issue 39 point 3), and a
/// new conversation with the same model starts knowing it; `panto window --forget` forgets
/// both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn that_the_server_counts_the_output_is_kept_with_the_window_and_read_back() {
    let p = Protocol::OpenAiChat;
    let mut model = FakeModel::new(p, LIMIT_BYTES);
    model.states_completion = true;
    let server = model.clone().start().await;
    let sb = Sandbox::new();
    // A reply budget the window holds (the default 4,096 fills this one: no compaction helps).
    std::fs::create_dir_all(&sb.user_config).unwrap();
    std::fs::write(
        sb.user_config.join("config.toml"),
        "max_output_tokens = 1000\n",
    )
    .unwrap();
    let mut i = 0;
    while model.seen().iter().all(|s| s.answer != "overflow") {
        panto(&sb, p, &server.uri(), &["send", "s.jsonl", &message(i)])
            .await
            .expect_code(0);
        i += 1;
        assert!(i < 30, "the server never overflowed");
    }
    let kept = std::fs::read_to_string(sb.data().join("windows.toml")).unwrap();
    assert!(
        kept.contains(&format!("tokens = {WINDOW_TOKENS}")),
        "{kept}"
    );
    assert!(kept.contains("counts_output = true"), "{kept}");
    // A new conversation reads it back.
    panto(&sb, p, &server.uri(), &["send", "t.jsonl", &message(0)])
        .await
        .expect_code(0);
    let context = panto(&sb, p, &server.uri(), &["context", "t.jsonl", "--json"]).await;
    context.expect_code(0);
    let doc: Value = serde_json::from_str(&context.stdout).unwrap();
    assert_eq!(doc["window"]["tokens"], json!(WINDOW_TOKENS));
    assert_eq!(doc["window"]["counts_output"], json!(true));
    panto(&sb, p, &server.uri(), &["window", "--forget"])
        .await
        .expect_code(0);
    let context = panto(&sb, p, &server.uri(), &["context", "t.jsonl", "--json"]).await;
    let doc: Value = serde_json::from_str(&context.stdout).unwrap();
    assert_eq!(doc["window"]["counts_output"], Value::Null);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_window_llama_server_tells_is_discovered_once_and_compacted_ahead_of() {
    let p = Protocol::OpenAiChat;
    let mut model = FakeModel::new(p, LIMIT_BYTES);
    model.limit_compactions = true;
    let server = model.clone().start().await;
    let props = Mock::given(method("GET"))
        .and(path("/props"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "default_generation_settings": {"n_ctx": WINDOW_TOKENS, "params": {}},
            "total_slots": 1, "model_path": "/models/fake.gguf", "build_info": "b6000"})))
        .expect(1)
        .mount_as_scoped(&server)
        .await;
    let sb = Sandbox::new();
    let window = panto(&sb, p, &server.uri(), &["window"]).await;
    window.expect_code(0);
    assert!(
        window
            .stdout
            .starts_with(&format!("fake-model: a window of {WINDOW_TOKENS} tokens")),
        "{}",
        window.stdout
    );
    assert!(
        window
            .stdout
            .contains("discovered: llama-server GET /props default_generation_settings.n_ctx"),
        "{}",
        window.stdout
    );
    // Kept: the sends do not ask again (the mock expects one question), and compact ahead.
    for i in 0..20 {
        panto(
            &sb,
            p,
            &server.uri(),
            &["send", "s.jsonl", &message(i), "--auto-compact", "0.8"],
        )
        .await
        .expect_code(0);
    }
    drop(props);
    let seen = model.seen();
    assert!(seen.iter().all(|s| s.answer != "overflow"));
    let found = triggers(&sb, "s.jsonl");
    assert!(
        !found.is_empty() && found.iter().all(|t| t == "auto"),
        "{found:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_compact_discovers_the_window_of_an_ollama_server_itself() {
    let p = Protocol::OpenAiChat;
    let model = FakeModel::new(p, LIMIT_BYTES);
    let server = model.clone().start().await;
    // Ollama answers `/api/show` with the model's parameters; the catch-all POST of the fake
    // model comes after it.
    Mock::given(method("POST"))
        .and(path("/api/show"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "parameters": format!("num_keep                       24\nnum_ctx                        {WINDOW_TOKENS}"),
            "model_info": {"general.architecture": "llama", "llama.context_length": 131_072}})))
        .with_priority(1)
        .expect(1)
        .mount(&server)
        .await;
    let sb = Sandbox::new();
    for i in 0..20 {
        panto(
            &sb,
            p,
            &server.uri(),
            &["send", "s.jsonl", &message(i), "--auto-compact", "0.8"],
        )
        .await
        .expect_code(0);
    }
    let conversation: Vec<_> = model.seen().into_iter().filter(|s| !s.compaction).collect();
    assert!(conversation.iter().all(|s| s.answer != "overflow"));
    assert_eq!(
        conversation.len(),
        20,
        "the question to /api/show is no conversation"
    );
    let context = panto(&sb, p, &server.uri(), &["context", "s.jsonl"]).await;
    assert!(
        context.stdout.contains(&format!(
            "  window {WINDOW_TOKENS} tokens (discovered: Ollama POST /api/show parameters num_ctx); compacts ahead"
        )) || context.stdout.contains(&format!(
            "  window {WINDOW_TOKENS} tokens (discovered: Ollama POST /api/show parameters num_ctx); compacts only"
        )),
        "{}",
        context.stdout
    );
}

#[test]
fn auto_compact_must_be_a_share_of_the_window() {
    let sb = Sandbox::new();
    sb.write("s.jsonl", "");
    std::fs::write(sb.user_config.join("config.toml"), "auto_compact = 1.5\n").unwrap();
    let run = sb.run(&["config"]);
    run.expect_code(2);
    assert!(
        run.stderr.contains(
            "`auto_compact` must be a share of the context window from 0 to 1, like auto_compact = 0.8 (0 turns it off); it is 1.5"
        ),
        "{}",
        run.stderr
    );
    std::fs::write(
        sb.user_config.join("config.toml"),
        "auto_compact = \"high\"\n",
    )
    .unwrap();
    let run = sb.run(&["config"]);
    run.expect_code(2);
    assert!(
        run.stderr
            .contains("`auto_compact` must be a number, like auto_compact = 0.8"),
        "{}",
        run.stderr
    );
    std::fs::write(sb.user_config.join("config.toml"), "auto_compact = 0.75\n").unwrap();
    let run = sb.run(&["config"]);
    run.expect_code(0);
    assert!(run.stdout.contains("auto_compact "), "{}", run.stdout);
    assert!(run.stdout.contains("= 0.75 "), "{}", run.stdout);
    // A flag turns it off.
    let run = sb.run(&["config", "--auto-compact", "0"]);
    assert!(
        run.stdout
            .lines()
            .any(|l| l.starts_with("auto_compact") && l.contains("= off ")),
        "{}",
        run.stdout
    );
    let run = sb.run(&["config", "--auto-compact", "2"]);
    run.expect_code(2);
    assert!(
        run.stderr.contains("is not a share of the window"),
        "{}",
        run.stderr
    );
}

/// A well-known model's window comes from panto's catalogue before anything is configured,
/// learned or discovered, and says so; a configured one overrides it.
#[test]
fn a_well_known_model_s_window_comes_from_the_catalogue_until_something_overrides_it() {
    let sb = Sandbox::new();
    let run = sb.run(&["window", "--provider", "openai", "--model", "gpt-4o"]);
    run.expect_code(0);
    assert!(
        run.stdout.contains("gpt-4o: a window of 128000 tokens"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains(&format!(
            "catalogue: panto's list of well-known models, checked {}",
            panto_compact::catalogue_checked()
        )),
        "{}",
        run.stdout
    );
    let config = sb.run(&["config", "--provider", "openai", "--model", "gpt-4o"]);
    config.expect_code(0);
    assert!(config.stdout.contains("= 128000 "), "{}", config.stdout);
    // A name the catalogue does not know is unknown, as before.
    let run = sb.run(&["window", "--provider", "openai", "--model", "a-local-model"]);
    assert!(
        run.stdout.contains("the window is unknown"),
        "{}",
        run.stdout
    );
    sb.write(".panto/config.toml", "context_window = 200000\n");
    let run = sb.run(&["window", "--provider", "openai", "--model", "gpt-4o"]);
    assert!(
        run.stdout.contains("a window of 200000 tokens") && run.stdout.contains("configured"),
        "{}",
        run.stdout
    );
}
