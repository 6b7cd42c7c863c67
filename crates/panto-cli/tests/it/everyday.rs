//! The everyday chat on a terminal (a pseudo-terminal 100 and 60 columns wide): a resumed chat
//! shows the last exchange and the meter, the meter fits 60 columns and shows the share of a
//! known window from the first reply, `\` + Enter types a newline, a bare `clear` is not sent,
//! `/model` switches the model for the next requests, `/clear` starts a new session file,
//! `/compact` refuses a compaction that saves nothing and `/compact --force` writes it, and a
//! reply cut short ends its line, says so in plain words and offers `/retry`. The second
//! capture in docs/chat.md is the 60-column screen of the first test.

use serde_json::{Value, json};

use crate::fake_model::{FakeModel, Protocol, Seen};
use crate::support::{Sandbox, Terminal, screen_at, unwrapped};

/// The widths every test here runs at.
const WIDTHS: [usize; 2] = [100, 60];

/// A session of one exchange, as an earlier chat left it.
fn earlier_session(sb: &Sandbox) {
    let lines = [
        json!({"type": "message", "id": "m1", "role": "user",
            "content": [{"type": "text", "text": "What does panto do with a long conversation?"}]}),
        json!({"type": "message", "id": "m2", "role": "assistant", "model": "fake-model",
            "usage": {"input_tokens": 40, "output_tokens": 12},
            "content": [{"type": "text", "text": "It summarizes the older part\nand keeps the recent turns."}]}),
    ];
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    sb.write("notes.jsonl", &text);
}

/// `panto chat notes.jsonl` with `fake-model` at `server`, the window configured.
fn chat(sb: &Sandbox, server: &str, window: Option<u64>) -> std::process::Command {
    if let Some(w) = window {
        std::fs::write(
            sb.user_config.join("config.toml"),
            format!("context_window = {w}\n"),
        )
        .unwrap();
    }
    let base = Protocol::OpenAiChat.base_url(server);
    let mut cmd = sb.command(&[
        "chat",
        "notes.jsonl",
        "--provider",
        "openai",
        "--model",
        "fake-model",
        "--base-url",
        &base,
    ]);
    cmd.env("OPENAI_API_KEY", "k")
        .env("PANTO_DATA_DIR", sb.dir.path().join("data"));
    cmd
}

/// The messages of session `name`, as (role, text).
fn messages(sb: &Sandbox, name: &str) -> Vec<(String, String)> {
    let text = std::fs::read_to_string(sb.work().join(name)).unwrap();
    text.lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["type"] == "message")
        .map(|e| {
            (
                e["role"].as_str().unwrap().to_owned(),
                e["content"][0]["text"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect()
}

fn pair(role: &str, text: &str) -> (String, String) {
    (role.to_owned(), text.to_owned())
}

/// Every meter line on `shown` is whole (not wrapped: it ends with the model's name) and fits
/// 60 columns.
#[track_caller]
fn meters_fit(shown: &[String], models: &[&str]) -> usize {
    let meters: Vec<&String> = shown
        .iter()
        .filter(|l| l.starts_with("panto: context "))
        .collect();
    for m in &meters {
        assert!(
            m.chars().count() <= 60,
            "a meter wider than 60 columns: {m}"
        );
        assert!(
            models
                .iter()
                .any(|model| m.ends_with(&format!("; {model}"))),
            "a meter that does not end with the model (wrapped?): {m}\n{}",
            shown.join("\n")
        );
    }
    meters.len()
}

/// The everyday commands at `columns`: what the terminal received, and the requests the model
/// saw.
async fn everyday_at(columns: usize) -> (String, Sandbox, Vec<Seen>) {
    let model = FakeModel::new(Protocol::OpenAiChat, 1_000_000);
    let server = model.clone().start().await;
    let sb = Sandbox::new();
    earlier_session(&sb);
    let cmd = chat(&sb, &server.uri(), None);
    let shown = tokio::task::block_in_place(|| {
        let mut term = Terminal::spawn_sized(cmd, columns);
        // Resuming: the last exchange, then the meter.
        term.wait_for("; fake-model", 1);
        term.wait_for_prompt();
        // A bare `clear` typed out of habit is not sent.
        term.enter("clear", "was not sent", 1);
        // A backslash at the end of a line, then Enter: a second line of the same message.
        term.type_keys("Two lines:\\\r");
        term.enter("the second one.", " out; fake-model", 1);
        // Another model for the next requests, shown in the meter at once and after a reply.
        term.enter("/model other-model", "; other-model", 1);
        term.enter("Which model is this?", " out; other-model", 1);
        // A new session file; the old one stays.
        term.enter("/clear", "a new conversation", 1);
        term.enter("A fresh start.", " out; other-model", 2);
        // A compaction that would not make so short a conversation smaller is refused, with
        // the way to force it; forced, it is written.
        term.enter("/compact", "/compact --force writes it anyway", 1);
        term.enter("/compact --force", "panto: compacted (other-model)", 1);
        // Undone, the conversation is as it was; a second undo finds nothing to undo.
        term.enter("/undo", "undid the compaction", 1);
        term.enter("/undo", "nothing to undo", 1);
        term.type_keys("\u{4}");
        let (code, raw) = term.finish();
        assert_eq!(code, 0, "{}", screen_at(&raw, columns).join("\n"));
        raw
    });
    (shown, sb, model.seen())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_everyday_chat_commands_at_100_and_60_columns() {
    for columns in WIDTHS {
        let (raw, sb, seen) = everyday_at(columns).await;
        let shown = screen_at(&raw, columns);
        let text = shown.join("\n");
        let at = |needle: &str| {
            shown
                .iter()
                .position(|l| l.contains(needle))
                .unwrap_or_else(|| panic!("{needle:?} is not on the screen:\n{text}"))
        };
        // Resumed: the last exchange and the meter (the window is unknown, said once).
        assert!(at("The last exchange:") < at("> What does panto do with a long conversation?"));
        assert!(
            text.contains("It summarizes the older part\nand keeps the recent turns."),
            "{text}"
        );
        assert_eq!(text.matches("window unknown").count(), 1, "{text}");
        assert!(
            meters_fit(&shown, &["fake-model", "other-model"]) >= 5,
            "{text}"
        );
        // `clear` was held back: the model never saw it.
        assert!(
            seen.iter()
                .all(|s| !s.body.to_string().contains("\"clear\""))
        );
        // The message of two lines, the model switch and the new session.
        assert_eq!(
            seen.iter()
                .filter(|s| !s.compaction)
                .map(|s| s.model.as_str())
                .collect::<Vec<_>>(),
            ["fake-model", "other-model", "other-model"]
        );
        // Both compactions asked the active model; only the forced one was written.
        assert_eq!(
            seen.iter()
                .filter(|s| s.compaction)
                .map(|s| s.model.as_str())
                .collect::<Vec<_>>(),
            ["other-model", "other-model"]
        );
        assert_eq!(
            messages(&sb, "notes.jsonl"),
            [
                pair("user", "What does panto do with a long conversation?"),
                pair(
                    "assistant",
                    "It summarizes the older part\nand keeps the recent turns."
                ),
                pair("user", "Two lines:\nthe second one."),
                pair("assistant", "Reply 1 from fake-model."),
                pair("user", "Which model is this?"),
                pair("assistant", "Reply 2 from other-model."),
            ],
            "{text}"
        );
        // The refused compaction wrote nothing; the forced one was written, and its line says
        // that it saved nothing.
        let second = std::fs::read_to_string(sb.work().join("notes-2.jsonl")).unwrap();
        assert_eq!(
            second.matches("\"type\":\"compaction\"").count(),
            1,
            "{second}"
        );
        // `/undo` appended one undo entry, naming it; the second found nothing to undo.
        assert_eq!(second.matches("\"type\":\"undo\"").count(), 1, "{second}");
        let lines = unwrapped(&raw, columns);
        let refused = lines
            .iter()
            .position(|l| {
                l.starts_with("panto: the compaction would not make the conversation smaller: ")
            })
            .unwrap_or_else(|| panic!("{text}"));
        assert!(lines[refused].ends_with("; nothing was written"), "{text}");
        assert_eq!(
            lines[refused + 1],
            "hint: /compact --force writes it anyway"
        );
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with("panto: compacted (other-model): ")
                    && l.ends_with(
                        "this compaction saves nothing, and went ahead only because it was forced"
                    )),
            "{text}"
        );
        assert_eq!(
            messages(&sb, "notes-2.jsonl")[..2],
            [
                pair("user", "A fresh start."),
                pair("assistant", "Reply 3 from other-model."),
            ]
        );
        let clear = at("panto: a new conversation, in notes-2.jsonl");
        assert_eq!(
            shown[clear + 1],
            "panto: the earlier one stays in notes.jsonl",
            "{text}"
        );
        if columns == 60 {
            let capture = crate::terminal::chat_md_capture(1);
            assert_eq!(
                capture, text,
                "docs/chat.md's second capture no longer shows what the chat draws; the screen now:\n{text}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_meter_shows_the_share_of_a_configured_window_from_the_first_reply() {
    for columns in WIDTHS {
        let server = FakeModel::new(Protocol::OpenAiChat, 1_000_000)
            .start()
            .await;
        let sb = Sandbox::new();
        earlier_session(&sb);
        let cmd = chat(&sb, &server.uri(), Some(128_000));
        let shown = tokio::task::block_in_place(|| {
            let mut term = Terminal::spawn_sized(cmd, columns);
            term.wait_for("; fake-model", 1);
            term.wait_for_prompt();
            term.enter("Hello.", " out; fake-model", 1);
            term.type_keys("\u{4}");
            let shown = term.screen();
            term.finish();
            shown
        });
        let text = shown.join("\n");
        assert_eq!(meters_fit(&shown, &["fake-model"]), 2, "{text}");
        let meters: Vec<&String> = shown
            .iter()
            .filter(|l| l.starts_with("panto: context "))
            .collect();
        // On resuming, and after the first reply: the share of the 128k window.
        assert!(meters[0].contains("/128k (<1%); fake-model"), "{text}");
        assert!(meters[1].contains("/128k (<1%); "), "{text}");
        assert!(!text.contains("window unknown"), "{text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_cut_short_ends_its_line_says_so_and_offers_retry() {
    for columns in WIDTHS {
        let mut model = FakeModel::new(Protocol::OpenAiChat, 1_000_000);
        model.cut_replies = true;
        let server = model.clone().start().await;
        let sb = Sandbox::new();
        earlier_session(&sb);
        let cmd = chat(&sb, &server.uri(), None);
        let raw = tokio::task::block_in_place(|| {
            let mut term = Terminal::spawn_sized(cmd, columns);
            term.wait_for("; fake-model", 1);
            term.wait_for_prompt();
            term.enter("Tell me more.", "/retry sends it again", 1);
            term.type_keys("\u{4}");
            term.finish().1
        });
        let shown = unwrapped(&raw, columns);
        let text = shown.join("\n");
        // The partial reply keeps its own line; panto's sentence starts the next one.
        let cut = shown
            .iter()
            .position(|l| l == "Half a rep")
            .unwrap_or_else(|| panic!("the partial reply is not on a line of its own:\n{text}"));
        assert_eq!(
            shown[cut + 1..cut + 4],
            [
                "panto: the connection closed before the reply finished, so nothing of it was kept",
                "cause: malformed response: the stream ended before a finish_reason or `data: [DONE]`",
                "panto: your message stays in the session; /retry sends it again",
            ],
            "{text}"
        );
        // Nothing partial was appended.
        assert_eq!(
            messages(&sb, "notes.jsonl").last().unwrap(),
            &pair("user", "Tell me more.")
        );
    }
}
