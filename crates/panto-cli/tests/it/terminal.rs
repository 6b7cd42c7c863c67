//! Terminal behaviour: a spinner on stderr while the provider works, only when stderr is a
//! terminal (a pseudo-terminal here), coloured unless `NO_COLOR` is set.

use std::process::Stdio;
use std::time::Duration;

use wiremock::matchers::method;
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::support::{Sandbox, Terminal, Tty, run_on_terminal, screen};

/// A slow OpenAI-compatible server, so that the spinner has time to turn.
async fn slow_server() -> MockServer {
    let server = MockServer::start().await;
    let body = serde_json::json!({"id": "c", "object": "chat.completion", "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "done"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 1}});
    Mock::given(method("POST"))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(body)
                .set_delay(Duration::from_millis(700)),
        )
        .mount(&server)
        .await;
    server
}

/// Runs `send` against `server`, with stderr on a pseudo-terminal when `tty`; returns stderr.
fn send(sb: &Sandbox, server: &str, tty: bool, no_color: bool) -> String {
    let mut cmd = sb.send_openai(&format!("{server}/v1"));
    // The provider answers without streaming (a JSON body), so the spinner runs for the whole wait.
    cmd.stdout(Stdio::null());
    if no_color {
        cmd.env("NO_COLOR", "1");
    }
    if !tty {
        let out = cmd.stderr(Stdio::piped()).output().unwrap();
        assert!(out.status.success());
        return String::from_utf8_lossy(&out.stderr).into_owned();
    }
    let run = run_on_terminal(cmd, Tty::Stderr);
    run.expect_code(0);
    run.stderr
}

fn has_colour(text: &str) -> bool {
    // An SGR sequence that sets a colour: ESC [ ... m with a 3x or 9x foreground code.
    text.split('\u{1b}').any(|part| {
        part.strip_prefix('[')
            .and_then(|p| p.split_once('m'))
            .is_some_and(|(codes, _)| {
                codes
                    .split(';')
                    .any(|c| c.starts_with('3') || c.starts_with('9'))
            })
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spinner_only_on_a_terminal_and_colourless_with_no_color() {
    let server = slow_server().await;
    let sb = Sandbox::new();
    let uri = server.uri();

    let piped = tokio::task::block_in_place(|| send(&sb, &uri, false, false));
    assert!(!piped.contains("waiting for the model"), "{piped:?}");
    assert!(
        !piped.contains('\u{1b}'),
        "escape codes on a pipe: {piped:?}"
    );

    let tty = tokio::task::block_in_place(|| send(&sb, &uri, true, false));
    assert!(tty.contains("waiting for the model"), "{tty:?}");
    assert!(has_colour(&tty), "{tty:?}");

    let plain = tokio::task::block_in_place(|| send(&sb, &uri, true, true));
    assert!(plain.contains("waiting for the model"), "{plain:?}");
    assert!(!has_colour(&plain), "colour despite NO_COLOR: {plain:?}");
}

/// An OpenAI-compatible server answering `reply` with usage 5 in, 1 out; the first
/// `slow_first` requests wait 20 s before answering.
async fn chat_server(slow_first: u64) -> MockServer {
    let server = MockServer::start().await;
    let body = serde_json::json!({"id": "c", "object": "chat.completion", "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "done"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 1}});
    if slow_first > 0 {
        Mock::given(method("POST"))
            .respond_with(
                ResponseTemplate::new(200)
                    .set_body_json(body.clone())
                    .set_delay(Duration::from_secs(20)),
            )
            .up_to_n_times(slow_first)
            .mount(&server)
            .await;
    }
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_body_json(body))
        .mount(&server)
        .await;
    server
}

/// `panto chat c.jsonl` against `server`, with the history in the sandbox's data folder and a
/// configured window of 1000 tokens.
fn chat_command(sb: &Sandbox, server: &str) -> std::process::Command {
    std::fs::write(
        sb.user_config.join("config.toml"),
        "context_window = 1000\n",
    )
    .unwrap();
    let mut cmd = sb.openai(&["chat", "c.jsonl"], &format!("{server}/v1"));
    cmd.env("OPENAI_API_KEY", "k")
        .env("PANTO_DATA_DIR", sb.dir.path().join("data"));
    cmd
}

/// The messages of the session file, as (role, text).
fn messages(sb: &Sandbox) -> Vec<(String, String)> {
    let text = std::fs::read_to_string(sb.work().join("c.jsonl")).unwrap();
    text.lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|e| e["type"] == "message")
        .map(|e| {
            (
                e["role"].as_str().unwrap().to_owned(),
                e["content"][0]["text"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect()
}

/// Asserts that nothing of a spinner is left on `shown`: neither its message nor a frame.
#[track_caller]
fn no_spinner_left(shown: &[String]) {
    for line in shown {
        assert!(
            !line.contains("waiting for the model") && !line.contains(is_spinner_frame),
            "a spinner frame was left on the screen:\n{}",
            shown.join("\n")
        );
    }
}

/// Whether `c` could be a frame of the spinner (indicatif draws braille patterns).
fn is_spinner_frame(c: char) -> bool {
    ('\u{2800}'..='\u{28ff}').contains(&c)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_edits_lines_recalls_history_and_shows_the_meter_after_each_reply() {
    let server = chat_server(0).await;
    let sb = Sandbox::new();
    let cmd = chat_command(&sb, &server.uri());
    let (code, raw) = tokio::task::block_in_place(|| {
        let mut term = Terminal::spawn(cmd);
        term.wait_for_prompt();
        // "hllo", three times the left arrow, "e": the line is "hello".
        term.enter("hllo\u{1b}[D\u{1b}[D\u{1b}[De", "; m\r\n", 1);
        // The up arrow brings "hello" back from the history.
        term.enter("\u{1b}[A", "; m\r\n", 2);
        // Ctrl-D on an empty line quits.
        term.type_keys("\u{4}");
        term.finish()
    });
    let shown = screen(&raw);
    assert_eq!(code, 0, "{}", shown.join("\n"));
    assert!(!raw.contains("^[["), "arrow keys were echoed: {raw:?}");
    assert_eq!(
        messages(&sb),
        [
            ("user".to_owned(), "hello".to_owned()),
            ("assistant".to_owned(), "done".to_owned()),
            ("user".to_owned(), "hello".to_owned()),
            ("assistant".to_owned(), "done".to_owned()),
        ]
    );
    // The meter: the share of the configured window from the first reply, the request just
    // answered as the provider counted it, and the model.
    let meters: Vec<&String> = shown
        .iter()
        .filter(|l| l.starts_with("panto: context "))
        .collect();
    assert_eq!(meters.len(), 2, "{}", shown.join("\n"));
    for meter in &meters {
        let (next, share) = meter
            .strip_prefix("panto: context ")
            .and_then(|m| m.strip_suffix("; 5 in, 1 out; m"))
            .and_then(|m| m.split_once("/1k ("))
            .unwrap_or_else(|| panic!("{meter}"));
        let next: u64 = next.parse().unwrap();
        assert_eq!(share, format!("{}%)", next * 100 / 1000), "{meter}");
    }
    let history = std::fs::read_to_string(sb.dir.path().join("data/history")).unwrap();
    assert!(history.lines().any(|l| l == "hello"), "{history:?}");
    no_spinner_left(&shown);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_cancels_the_reply_in_flight_and_returns_to_the_prompt() {
    let server = chat_server(1).await;
    let sb = Sandbox::new();
    let cmd = chat_command(&sb, &server.uri());
    let started = std::time::Instant::now();
    let (code, raw, after_cancel) = tokio::task::block_in_place(|| {
        let mut term = Terminal::spawn(cmd);
        term.wait_for_prompt();
        term.type_keys("a slow question\r");
        term.wait_for("waiting for the model", 1);
        // Ctrl-C is listened to once the request is on its way.
        std::thread::sleep(Duration::from_millis(500));
        term.interrupt();
        term.wait_for("/retry sends it again", 1);
        term.wait_for_prompt();
        let after_cancel = messages(&sb);
        // The message is still in the session: /retry sends the conversation again.
        term.enter("/retry", "panto: context ", 1);
        // At the prompt Ctrl-C is a key: once warns, twice quits.
        term.type_keys("\u{3}");
        term.wait_for("press Ctrl-C again", 1);
        term.wait_for_prompt();
        term.type_keys("\u{3}");
        let (code, raw) = term.finish();
        (code, raw, after_cancel)
    });
    let shown = screen(&raw);
    assert_eq!(code, 0, "{}", shown.join("\n"));
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "the cancelled request was waited for"
    );
    assert_eq!(
        after_cancel,
        [("user".to_owned(), "a slow question".to_owned())]
    );
    assert_eq!(
        messages(&sb),
        [
            ("user".to_owned(), "a slow question".to_owned()),
            ("assistant".to_owned(), "done".to_owned()),
        ]
    );
    assert!(
        shown
            .iter()
            .any(|l| l.starts_with("panto: cancelled: no reply was appended")),
        "{}",
        shown.join("\n")
    );
    no_spinner_left(&shown);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_line_printed_under_the_spinner_is_whole_and_no_frame_stays() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(503).set_body_string("busy"))
        .up_to_n_times(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(serde_json::json!({"id": "c", "object": "chat.completion", "model": "m",
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": "done"}, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 5, "completion_tokens": 1}}))
                .set_delay(Duration::from_millis(400)),
        )
        .mount(&server)
        .await;
    let sb = Sandbox::new();
    let cmd = sb.send_openai(&format!("{}/v1", server.uri()));
    let (code, raw) = tokio::task::block_in_place(|| Terminal::spawn(cmd).finish());
    let shown = screen(&raw);
    assert_eq!(code, 0, "{}", shown.join("\n"));
    assert!(raw.contains("waiting for the model"), "no spinner: {raw:?}");
    let retry: Vec<&String> = shown.iter().filter(|l| l.contains("retrying")).collect();
    assert_eq!(retry.len(), 1, "{}", shown.join("\n"));
    assert!(
        retry[0].starts_with("panto: retrying 1/3 in ")
            && retry[0].ends_with("server error (HTTP 503): busy"),
        "{retry:?}"
    );
    // On a terminal `send` shows the meter too.
    assert!(
        shown
            .iter()
            .any(|l| l.starts_with("panto: context ") && l.ends_with("; 5 in, 1 out; m")),
        "{}",
        shown.join("\n")
    );
    no_spinner_left(&shown);
}

/// The `n`th capture (a block fenced as `text`, counting from 0) of docs/chat.md.
pub(crate) fn chat_md_capture(n: usize) -> String {
    let doc = std::fs::read_to_string(crate::support::repo_root().join("docs/chat.md")).unwrap();
    doc.split("```text\n")
        .nth(n + 1)
        .and_then(|rest| rest.split("\n```").next())
        .unwrap_or_default()
        .to_owned()
}

/// The chat a user sees when the context overflows and panto compacts, on a terminal 100
/// columns wide: the first capture in docs/chat.md is this screen, so the page shows what a
/// user sees.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_through_an_overflow_looks_as_docs_chat_md_shows() {
    use crate::fake_model::{FakeModel, Protocol};

    // The limit leaves room for the recall tool's description and schema (about 1.2 kB a
    // request) and the conversation's prompt cache key (about 60 bytes).
    let model = FakeModel::new(Protocol::OpenAiChat, 11_700);
    let server = model.clone().start().await;
    let sb = Sandbox::new();
    // A conversation that already nears the window: the second prompt overflows it.
    std::fs::rename(sb.example("debugging.jsonl"), sb.work().join("notes.jsonl")).unwrap();
    let base = Protocol::OpenAiChat.base_url(&server.uri());
    let mut cmd = sb.command(&[
        "chat",
        "notes.jsonl",
        "--provider",
        "openai",
        "--model",
        "fake-model",
        "--base-url",
        &base,
        "--keep-tokens",
        "60",
    ]);
    cmd.env("OPENAI_API_KEY", "k")
        .env("PANTO_DATA_DIR", sb.dir.path().join("data"));
    let prompts = [
        "So the rounding moved to microseconds. Pin the old version, or change our tests?",
        "Change the tests, and write down why. Then list the call sites to check by hand.",
    ];
    let shown = tokio::task::block_in_place(|| {
        let mut term = Terminal::spawn_sized(cmd, 100);
        term.wait_for_prompt();
        for (i, prompt) in prompts.iter().enumerate() {
            // Each reply's meter ends with the session's cost so far (or the model, where
            // there is room), as the meter on resuming did.
            term.enter(prompt, " cached)", i + 2);
        }
        term.enter("/summary", "/summary", 1);
        term.enter("/help", "/retry ", 1);
        // The screen with its final prompt, read before Ctrl-D: the chat erases its prompt
        // when it quits, so a screen read after the key (late, on a loaded machine) has none.
        let shown = term.screen();
        term.type_keys("\u{4}");
        let (code, _) = term.finish();
        assert_eq!(code, 0, "{}", shown.join("\n"));
        shown
    });
    no_spinner_left(&shown);
    let shown = shown.join("\n");
    assert!(shown.contains("panto: compacted (fake-model"), "{shown}");
    assert_eq!(
        chat_md_capture(0),
        shown,
        "docs/chat.md no longer shows what the chat draws; the screen now:\n{shown}"
    );
}
