//! The chat's keyboard on a pseudo-terminal, in raw mode for the whole chat: a paste of any
//! size arrives whole and shows collapsed, text typed while a reply streams is queued (shown as
//! queued, never echoed into the reply) and sent after it, Ctrl-C cancels a reply and quits
//! only when pressed twice within a second at an empty prompt, Ctrl-J and Shift-Enter insert a
//! newline, and Tab completes a command.
//!
//! The model is a loopback server that streams its answers as OpenAI's Chat Completions does
//! (server-sent events), pausing in the middle of the first answer, so that keys arrive while a
//! reply is half shown.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::{Sandbox, Terminal, screen_at};

/// A streaming OpenAI-compatible server: each answer is "Reply N, first half" then, after
/// `pause` (the first answer only), " and second half."; the bodies it received are kept.
pub(crate) struct Streamer {
    pub(crate) url: String,
    bodies: Arc<Mutex<Vec<Value>>>,
}

/// How the server takes the first request; later ones are answered at once.
#[derive(Clone, Copy)]
pub(crate) struct First {
    /// How long it waits before its first byte (the spinner turns meanwhile).
    pub(crate) wait: Duration,
    /// How long it pauses after the first half of the answer.
    pub(crate) pause: Duration,
    /// How the first answer ends.
    pub(crate) end: End,
}

#[derive(Clone, Copy)]
pub(crate) enum End {
    /// The second half and the end of the stream.
    Whole,
    /// The connection is dropped after the first half, as by a proxy or a crashed server.
    Cut,
    /// No answer at all: an HTTP 400 with OpenAI's error body, after `wait`.
    Refused,
}

/// The error message the server gives with [`End::Refused`]: long, so that its line wraps.
pub(crate) const REFUSAL: &str = "This model's maximum output length was exceeded by the requested max_tokens; lower max_tokens and send the request again (request req_7f3a91)";

impl Streamer {
    async fn start(pause: Duration) -> Streamer {
        Streamer::scripted(First {
            wait: Duration::ZERO,
            pause,
            end: End::Whole,
        })
        .await
    }

    pub(crate) async fn scripted(first: First) -> Streamer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/v1", listener.local_addr().unwrap());
        let bodies = Arc::new(Mutex::new(Vec::new()));
        let seen = bodies.clone();
        tokio::spawn(async move {
            loop {
                let Ok((socket, _)) = listener.accept().await else {
                    return;
                };
                let seen = seen.clone();
                tokio::spawn(async move {
                    let _ = answer(socket, seen, first).await;
                });
            }
        });
        Streamer { url, bodies }
    }

    /// The text of the last user message of each request, in order.
    pub(crate) fn prompts(&self) -> Vec<String> {
        self.bodies
            .lock()
            .unwrap()
            .iter()
            .map(|b| {
                let last = b["messages"].as_array().unwrap().last().unwrap().clone();
                match &last["content"] {
                    Value::String(s) => s.clone(),
                    other => other[0]["text"].as_str().unwrap_or("").to_owned(),
                }
            })
            .collect()
    }
}

/// Reads one request and streams the answer.
async fn answer(
    mut socket: tokio::net::TcpStream,
    seen: Arc<Mutex<Vec<Value>>>,
    first: First,
) -> std::io::Result<()> {
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 65536];
    let body_start = loop {
        let n = socket.read(&mut chunk).await?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..body_start]).to_lowercase();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .map_or(0, |v| v.trim().parse().unwrap());
    while buf.len() < body_start + length {
        let n = socket.read(&mut chunk).await?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let body: Value = serde_json::from_slice(&buf[body_start..body_start + length]).unwrap();
    let n = {
        let mut seen = seen.lock().unwrap();
        seen.push(body);
        seen.len()
    };
    let event = |content: &str, finish: Option<&str>| {
        let mut chunk = json!({"id": "c", "object": "chat.completion.chunk", "model": "m",
            "choices": [{"index": 0, "delta": {"content": content}, "finish_reason": finish}]});
        if finish.is_some() {
            chunk["usage"] = json!({"prompt_tokens": 50, "completion_tokens": 9});
        }
        format!("data: {chunk}\n\n")
    };
    let first = (n == 1).then_some(first);
    if let Some(first) = first {
        tokio::time::sleep(first.wait).await;
    }
    if let Some(First {
        end: End::Refused, ..
    }) = first
    {
        let body = json!({"error": {"message": REFUSAL, "type": "invalid_request_error",
            "param": null, "code": null}})
        .to_string();
        let head = format!(
            "HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
            body.len()
        );
        socket.write_all(head.as_bytes()).await?;
        socket.write_all(body.as_bytes()).await?;
        return socket.shutdown().await;
    }
    socket
        .write_all(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n",
        )
        .await?;
    socket
        .write_all(event(&format!("Reply {n}, first half"), None).as_bytes())
        .await?;
    socket.flush().await?;
    if let Some(first) = first {
        tokio::time::sleep(first.pause).await;
        if let End::Cut = first.end {
            // Dropped without the stream's end: no finish reason, no `[DONE]`.
            return Ok(());
        }
    }
    socket
        .write_all(event(" and second half.", Some("stop")).as_bytes())
        .await?;
    socket.write_all(b"data: [DONE]\n\n").await?;
    socket.shutdown().await
}

/// `panto chat c.jsonl` with model `m` at `url`, on a terminal `columns` wide.
pub(crate) fn chat(sb: &Sandbox, url: &str, columns: usize) -> Terminal {
    let mut cmd = sb.openai(&["chat", "c.jsonl"], url);
    cmd.env("OPENAI_API_KEY", "k");
    let term = Terminal::spawn_sized(cmd, columns);
    term.wait_for_prompt();
    term
}

/// The messages of the session file, as (role, text).
pub(crate) fn messages(sb: &Sandbox) -> Vec<(String, String)> {
    let text = std::fs::read_to_string(sb.work().join("c.jsonl")).unwrap();
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

/// A paste of `lines` lines of 99 characters and a newline each, numbered.
fn big_paste(lines: usize) -> String {
    (0..lines)
        .map(|i| format!("{i:05} {}\n", "x".repeat(93)))
        .collect::<String>()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_20_kb_paste_and_typed_text_during_a_streamed_reply_are_queued_and_sent_whole() {
    // The pause leaves time to read the screen while the reply waits, on a loaded machine too.
    let server = Streamer::start(Duration::from_secs(8)).await;
    let sb = Sandbox::new();
    let paste = big_paste(205);
    assert!(paste.len() >= 20 * 1024, "{}", paste.len());
    let (shown, raw, waiting) = tokio::task::block_in_place(|| {
        let mut term = chat(&sb, &server.url, 100);
        term.type_keys("first question\r");
        term.wait_for("Reply 1, first half", 1);
        // While the reply is half shown: a paste, bracketed as terminals send it, and Enter.
        term.type_keys(&format!(
            "\u{1b}[200~{}\u{1b}[201~\r",
            paste.replace('\n', "\r")
        ));
        term.wait_for("queued: [Pasted text #1: 205 lines, 20500 characters]", 1);
        // Then a line typed ahead.
        term.type_keys("and a follow-up\r");
        term.wait_for("queued: and a follow-up", 1);
        // The screen while the reply waits: what docs/chat.md shows of a queue.
        std::thread::sleep(Duration::from_millis(300));
        let waiting = term.screen().join("\n");
        term.wait_for("Reply 3, first half", 1);
        term.wait_for("; 50 in, 9 out; m", 3);
        term.wait_for_prompt();
        // Read before Ctrl-D, which ends the chat and takes its prompt away.
        let shown = term.screen();
        term.type_keys("\u{4}");
        let (code, raw) = term.finish();
        assert_eq!(code, 0, "{}", shown.join("\n"));
        (shown, raw, waiting)
    });
    // Nothing typed reached the reply's line; the queue was sent after it, in order.
    let text = shown.join("\n");
    assert_eq!(
        crate::terminal::chat_md_capture(2),
        format!("{waiting}\n\n{}", shown[3..].join("\n")),
        "docs/chat.md's capture of a queued message no longer shows what the chat draws; the screen while the reply waited:\n{waiting}\n\nafter it:\n{text}"
    );
    assert!(
        shown
            .iter()
            .any(|l| l == "Reply 1, first half and second half."),
        "{text}"
    );
    let echo = "> [Pasted text #1: 205 lines, 20500 characters]";
    let at = |needle: &str| shown.iter().position(|l| l == needle);
    assert!(
        at("Reply 1, first half and second half.") < at(echo),
        "{text}"
    );
    assert!(at(echo) < at("> and a follow-up"), "{text}");
    assert!(!raw.contains(&paste[..200]), "the paste was echoed in full");
    // The model and the session got every byte of the paste.
    let prompts = server.prompts();
    assert_eq!(prompts.len(), 3, "{prompts:?}");
    assert_eq!(prompts[1], paste.trim_end_matches('\n'));
    assert_eq!(prompts[2], "and a follow-up");
    let stored = messages(&sb);
    assert_eq!(stored[2].1, paste.trim_end_matches('\n'));
    assert_eq!(stored.len(), 6, "{stored:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_cancels_then_counts_only_at_an_empty_prompt_and_leaves_no_spinner() {
    let server = Streamer::start(Duration::from_secs(20)).await;
    let sb = Sandbox::new();
    let (code, shown) = tokio::task::block_in_place(|| {
        let mut term = chat(&sb, &server.url, 60);
        term.type_keys("a slow question\r");
        term.wait_for("Reply 1, first half", 1);
        // Typed ahead, then Ctrl-C: the reply is cancelled and the queue comes back unsent.
        term.type_keys("typed ahead\r");
        term.wait_for("queued: typed ahead", 1);
        term.type_keys("\u{3}");
        term.wait_for("/retry sends it again", 1);
        term.wait_for("back in the draft", 1);
        // The draft holds the queued message: Ctrl-C clears it, and does not count.
        term.type_keys("\u{3}");
        term.wait_for_prompt();
        // One Ctrl-C at an empty prompt warns, and the chat goes on.
        term.type_keys("\u{3}");
        term.wait_for("press Ctrl-C again to quit", 1);
        std::thread::sleep(Duration::from_millis(1500));
        // Too late for the first: this one warns again.
        term.type_keys("\u{3}");
        term.wait_for("press Ctrl-C again to quit", 2);
        // Two within a second quit.
        term.type_keys("\u{3}");
        let shown = term.screen();
        let (code, _) = term.finish();
        (code, shown)
    });
    assert_eq!(code, 0, "{}", shown.join("\n"));
    let text = shown.join("\n");
    for line in &shown {
        assert!(
            !line.contains("waiting for the model") && !line.contains(is_spinner_frame),
            "a spinner frame was left on the screen:\n{text}"
        );
    }
    // The cancelled reply kept its half on its own line; the typed-ahead text was never sent.
    assert!(shown.iter().any(|l| l == "Reply 1, first half"), "{text}");
    assert_eq!(server.prompts(), ["a slow question"]);
    assert_eq!(
        messages(&sb),
        [("user".to_owned(), "a slow question".to_owned())]
    );
}

/// Whether `c` could be a frame of the spinner (braille patterns).
pub(crate) fn is_spinner_frame(c: char) -> bool {
    ('\u{2800}'..='\u{28ff}').contains(&c)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_j_and_shift_enter_insert_newlines_and_tab_completes_a_command() {
    let server = Streamer::start(Duration::ZERO).await;
    let sb = Sandbox::new();
    let shown = tokio::task::block_in_place(|| {
        let mut term = chat(&sb, &server.url, 60);
        // Ctrl-J (a line feed), then Shift-Enter as the kitty keyboard protocol reports it.
        term.type_keys("one\nsecond\u{1b}[13;2uthird\r");
        term.wait_for("; 50 in, 9 out; m", 1);
        term.wait_for_prompt();
        // Tab completes `/cont` to `/context `; `/c` has several completions, listed.
        term.type_keys("/c\t");
        term.wait_for("/context  /compact  /clear", 1);
        term.type_keys("ont\t\r");
        term.wait_for("c.jsonl: 2 messages", 1);
        term.wait_for_prompt();
        term.type_keys("\u{4}");
        let shown = term.screen();
        let (code, _) = term.finish();
        assert_eq!(code, 0, "{}", shown.join("\n"));
        shown
    });
    assert_eq!(server.prompts(), ["one\nsecond\nthird"]);
    let text = shown.join("\n");
    assert!(text.contains("> one\n  second\n  third\n"), "{text}");
    assert!(text.contains("> /context\n"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_without_a_session_offers_the_recent_ones() {
    let server = Streamer::start(Duration::ZERO).await;
    let sb = Sandbox::new();
    let line = |text: &str| {
        format!(
            "{}\n",
            json!({"type": "message", "role": "user", "content": [{"type": "text", "text": text}]})
        )
    };
    sb.write("older.jsonl", &line("old"));
    std::thread::sleep(Duration::from_millis(1100));
    sb.write("newer.jsonl", &line("new"));
    let shown = tokio::task::block_in_place(|| {
        let mut cmd = sb.openai(&["chat"], &server.url);
        cmd.env("OPENAI_API_KEY", "k");
        let mut term = Terminal::spawn_sized(cmd, 60);
        term.wait_for("Enter for a new one (chat.jsonl)", 1);
        term.wait_for_prompt();
        let list = term.screen();
        term.enter("1", "panto chat: newer.jsonl (1 message)", 1);
        term.type_keys("\u{4}");
        let (code, raw) = term.finish();
        assert_eq!(code, 0, "{}", screen_at(&raw, 60).join("\n"));
        list
    });
    let text = shown.join("\n");
    let at = |needle: &str| shown.iter().position(|l| l.contains(needle));
    assert!(at("1  newer.jsonl  just now").is_some(), "{text}");
    assert!(at("2  older.jsonl").is_some(), "{text}");
    assert!(shown.iter().all(|l| l.chars().count() <= 60), "{text}");
}

/// The chat holds only its own end of its terminal (the test's end is closed on exec), so it
/// ends when the terminal goes away, as when a terminal emulator's window closes, and a test
/// killed half-way leaves no chat running: before, `panto chat` inherited the master's end,
/// kept its own terminal open, and ran on, parented to init (seen when a CI run was stopped).
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chat_holds_only_its_own_end_of_the_terminal() {
    let server = Streamer::start(Duration::ZERO).await;
    let sb = Sandbox::new();
    let open: Vec<std::path::PathBuf> = tokio::task::block_in_place(|| {
        let term = chat(&sb, &server.url, 100);
        let fds = std::fs::read_dir(format!("/proc/{}/fd", term.pid())).unwrap();
        fds.filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
            .collect()
    });
    assert!(
        open.iter().any(|f| f.starts_with("/dev/pts/")),
        "the chat's terminal: {open:?}"
    );
    assert!(
        !open.iter().any(|f| f.ends_with("ptmx")),
        "the chat holds the terminal's master end: {open:?}"
    );
}
