//! Issue 40's messages: one ruler a line, hints only where they apply, a session that vanished
//! mid-chat stops the chat, and the meter names `context_window` when the window is unknown.

use std::time::Duration;

use wiremock::matchers::method;
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::support::{Sandbox, Terminal, screen_at};

/// A Chat Completions server answering every request with `status` and `body`.
async fn answering(status: u16, body: serde_json::Value) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(status).set_body_json(body))
        .mount(&server)
        .await;
    server
}

fn ok_body() -> serde_json::Value {
    serde_json::json!({"id": "c", "object": "chat.completion", "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "done"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 1}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_key_says_whether_the_variable_is_set_and_retry_is_not_offered() {
    let server = answering(
        401,
        serde_json::json!({"error": {"message": "Incorrect API key provided", "type": "invalid_request_error", "code": "invalid_api_key"}}),
    )
    .await;
    let sb = Sandbox::new();
    let base = format!("{}/v1", server.uri());
    let unset = sb.run_with(sb.send_openai(&base));
    unset.expect_code(1);
    assert!(
        unset
            .stderr
            .contains("hint: OPENAI_API_KEY is not set (or is empty)"),
        "{}",
        unset.stderr
    );
    let mut cmd = sb.send_openai(&base);
    cmd.env("OPENAI_API_KEY", "sk-wrong");
    let set = sb.run_with(cmd);
    set.expect_code(1);
    assert!(
        set.stderr.contains("hint: check the key in OPENAI_API_KEY"),
        "{}",
        set.stderr
    );
    // In a chat, the message stays, and /retry (which would be refused the same way) is not
    // offered.
    let mut cmd = sb.openai(&["chat", "c.jsonl"], &base);
    cmd.env("OPENAI_API_KEY", "sk-wrong");
    let out = sb.chat_with_input(cmd, "hello\n");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("panto: your message stays in the session\n"),
        "{stderr}"
    );
    assert!(!stderr.contains("/retry"), "{stderr}");
}

#[test]
fn window_without_a_model_says_so() {
    let sb = Sandbox::new();
    let run = sb.run(&["window"]);
    run.expect_code(2);
    assert!(
        run.stderr.contains(
            "no model configured, so no window to show: pass --provider NAME --model NAME"
        ),
        "{}",
        run.stderr
    );
    assert!(
        !run.stdout.contains(": the window is unknown"),
        "{}",
        run.stdout
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_window_is_named_once_with_the_key_that_sets_it() {
    let server = answering(200, ok_body()).await;
    let sb = Sandbox::new();
    let mut cmd = sb.openai(&["chat", "c.jsonl"], &format!("{}/v1", server.uri()));
    cmd.env("OPENAI_API_KEY", "k");
    let out = sb.chat_with_input(cmd, "one\ntwo\n");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        stderr
            .matches("hint: set context_window to see how full the window is")
            .count(),
        1,
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_moved_away_mid_chat_stops_the_chat_and_writes_nothing() {
    let server = answering(200, ok_body()).await;
    let sb = Sandbox::new();
    let mut cmd = sb.openai(&["chat", "c.jsonl"], &format!("{}/v1", server.uri()));
    cmd.env("OPENAI_API_KEY", "k");
    let (code, raw) = tokio::task::block_in_place(|| {
        let mut term = Terminal::spawn_sized(cmd, 100);
        term.wait_for_prompt();
        term.enter("first", "; 5 in, 1 out; m", 1);
        std::fs::rename(sb.work().join("c.jsonl"), sb.work().join("moved.jsonl")).unwrap();
        term.type_keys("second\r");
        term.finish()
    });
    let shown = screen_at(&raw, 100).join("\n");
    assert_eq!(code, 2, "{shown}");
    assert!(
        shown.contains("panto: c.jsonl is gone since panto last read it (moved away or deleted), so the chat stops here"),
        "{shown}"
    );
    assert!(!shown.contains("another writer appended"), "{shown}");
    assert!(!sb.work().join("c.jsonl").exists());
    let moved = std::fs::read_to_string(sb.work().join("moved.jsonl")).unwrap();
    assert_eq!(moved.lines().count(), 2, "{moved}");
    assert_eq!(server.received_requests().await.unwrap().len(), 1);

    // Replaced by a shorter file: the same.
    let sb = Sandbox::new();
    let mut cmd = sb.openai(&["chat", "c.jsonl"], &format!("{}/v1", server.uri()));
    cmd.env("OPENAI_API_KEY", "k");
    let (code, raw) = tokio::task::block_in_place(|| {
        let mut term = Terminal::spawn_sized(cmd, 100);
        term.wait_for_prompt();
        term.enter("first", "; 5 in, 1 out; m", 1);
        std::thread::sleep(Duration::from_millis(50));
        let text = std::fs::read_to_string(sb.work().join("c.jsonl")).unwrap();
        let first = text.lines().next().unwrap();
        std::fs::write(sb.work().join("c.jsonl"), format!("{first}\n")).unwrap();
        term.type_keys("/context\r");
        term.finish()
    });
    let shown = screen_at(&raw, 100).join("\n");
    assert_eq!(code, 2, "{shown}");
    assert!(
        shown.contains("panto: c.jsonl was replaced since panto last read it (it no longer holds the conversation panto read\n and wrote), so the chat stops here"),
        "{shown}"
    );
}

/// Another conversation, longer than the chat's, copied over its file while the chat runs: its
/// length grew, as another writer's appends would make it, but the chat's own record is not
/// where it was. The chat says the session was replaced and stops; nothing is sent or written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_replaced_by_a_longer_one_mid_chat_stops_the_chat() {
    let server = answering(200, ok_body()).await;
    let sb = Sandbox::new();
    let other: String = (1..=8)
        .map(|i| {
            format!(
                "{{\"type\":\"message\",\"id\":\"o{i}\",\"role\":\"user\",\"content\":[{{\"type\":\"text\",\"text\":\"another conversation, turn {i}\"}}]}}\n"
            )
        })
        .collect();
    let mut cmd = sb.openai(&["chat", "c.jsonl"], &format!("{}/v1", server.uri()));
    cmd.env("OPENAI_API_KEY", "k");
    let (code, raw) = tokio::task::block_in_place(|| {
        let mut term = Terminal::spawn_sized(cmd, 100);
        term.wait_for_prompt();
        term.enter("first", "; 5 in, 1 out; m", 1);
        let ours = std::fs::metadata(sb.work().join("c.jsonl")).unwrap().len();
        assert!(
            other.len() as u64 > ours,
            "the other conversation is the longer"
        );
        std::fs::write(sb.work().join("c.jsonl"), &other).unwrap();
        term.type_keys("second\r");
        term.finish()
    });
    let shown = screen_at(&raw, 100).join("\n");
    assert_eq!(code, 2, "{shown}");
    assert!(
        shown.contains("panto: c.jsonl was replaced since panto last read it (it no longer holds the conversation panto read\n and wrote), so the chat stops here"),
        "{shown}"
    );
    assert!(!shown.contains("another writer appended"), "{shown}");
    assert_eq!(
        crate::terminal::chat_md_capture(4),
        shown,
        "docs/chat.md's capture of a replaced session no longer shows what the chat draws; the screen now:\n{shown}"
    );
    assert_eq!(
        std::fs::read_to_string(sb.work().join("c.jsonl")).unwrap(),
        other,
        "nothing was written to the conversation put in its place"
    );
    assert_eq!(server.received_requests().await.unwrap().len(), 1);

    // Another writer's append, by contrast, is read and the chat goes on.
    let sb = Sandbox::new();
    let mut cmd = sb.openai(&["chat", "c.jsonl"], &format!("{}/v1", server.uri()));
    cmd.env("OPENAI_API_KEY", "k");
    let (code, raw) = tokio::task::block_in_place(|| {
        let mut term = Terminal::spawn_sized(cmd, 100);
        term.wait_for_prompt();
        term.enter("first", "; 5 in, 1 out; m", 1);
        let path = sb.work().join("c.jsonl");
        let mut text = std::fs::read_to_string(&path).unwrap();
        text.push_str(&other);
        std::fs::write(&path, text).unwrap();
        term.enter("second", "; 5 in, 1 out; m", 2);
        term.type_keys("\x04");
        term.finish()
    });
    let shown = screen_at(&raw, 100).join("\n");
    assert_eq!(code, 0, "{shown}");
    assert!(
        shown.contains("c.jsonl changed (another writer appended); continuing from it as it is now (10 messages)"),
        "{shown}"
    );
}

/// Point 8 of issue 40 in a terminal: a model of panto's catalogue (`gpt-4o`) gets a share of
/// its window in the meter from the first reply, with nothing configured; a model the
/// catalogue does not know gets `window unknown` and the key that sets it, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_meter_shows_a_share_from_the_first_reply_for_a_catalogued_model() {
    let server = answering(200, ok_body()).await;
    let base = format!("{}/v1", server.uri());
    let chat = |model: &str| {
        let sb = Sandbox::new();
        let mut cmd = sb.command(&[
            "chat",
            "c.jsonl",
            "--provider",
            "openai",
            "--model",
            model,
            "--base-url",
            &base,
        ]);
        cmd.env("OPENAI_API_KEY", "k");
        let raw = tokio::task::block_in_place(|| {
            let mut term = Terminal::spawn_sized(cmd, 100);
            term.wait_for_prompt();
            // The meter ends with the model's name.
            term.enter("first", model, 1);
            term.type_keys("\u{4}");
            let (code, raw) = term.finish();
            assert_eq!(code, 0);
            raw
        });
        screen_at(&raw, 100)
    };
    let known = chat("gpt-4o");
    let meter = known
        .iter()
        .find(|l| l.starts_with("panto: context "))
        .expect("a meter");
    assert!(
        meter.starts_with("panto: context ") && meter.contains("/128k (<1%); 5 in, 1 out; gpt-4o"),
        "{}",
        known.join("\n")
    );
    assert!(
        !known.join("\n").contains("context_window"),
        "{}",
        known.join("\n")
    );
    let unknown = chat("a-local-model").join("\n");
    assert!(
        unknown.contains(", window unknown; a-local-model\n"),
        "{unknown}"
    );
    assert_eq!(
        unknown
            .matches("hint: set context_window to see how full the window is")
            .count(),
        1,
        "{unknown}"
    );
}
