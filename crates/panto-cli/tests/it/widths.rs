//! Output that fits the terminal: `/context` in a chat, `panto context` and `panto sessions`
//! on a terminal 60 columns wide draw no line wider than the terminal (the terminal never
//! wraps one), rows cut with `…` and sentences wrapped between words.

use crate::support::{Sandbox, Terminal, screen_at, unwrapped};

/// Asserts that the terminal wrapped no line of `raw` at `columns` from the first line that
/// starts with `from` on: each line the program wrote there is one row of the screen.
#[track_caller]
fn nothing_wrapped_from(raw: &str, columns: usize, from: &str) -> Vec<String> {
    let tail = |rows: Vec<String>| {
        let at = rows.iter().position(|r| r.starts_with(from)).unwrap_or(0);
        rows[at..].to_vec()
    };
    let rows = tail(screen_at(raw, columns));
    assert_eq!(
        tail(unwrapped(raw, columns)),
        rows,
        "a line wider than {columns} columns:\n{}",
        rows.join("\n")
    );
    rows
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn context_fits_60_columns_in_the_chat_and_on_the_command_line() {
    let sb = Sandbox::new();
    sb.example("debugging.jsonl");
    let raw = tokio::task::block_in_place(|| {
        let mut cmd = sb.command(&["context", "debugging.jsonl"]);
        cmd.env("PAGER", "cat");
        Terminal::spawn_sized(cmd, 60).finish().1
    });
    let rows = nothing_wrapped_from(&raw, 60, "");
    assert!(rows.len() > 30, "{}", rows.join("\n"));
    assert!(rows.iter().any(|r| r.ends_with('…')), "{}", rows.join("\n"));
    // Piped, the rows are as before: whole sentences, previews of 100 characters.
    let piped = sb.run(&["context", "debugging.jsonl"]);
    assert!(piped.stdout.lines().any(|l| l.chars().count() > 100));

    let raw = tokio::task::block_in_place(|| {
        let mut cmd = sb.openai(&["chat", "debugging.jsonl"], "http://127.0.0.1:9/v1");
        cmd.env("OPENAI_API_KEY", "k");
        let mut term = Terminal::spawn_sized(cmd, 60);
        term.wait_for_prompt();
        term.enter("/context", "   0 user", 1);
        term.type_keys("\u{4}");
        term.finish().1
    });
    let rows = nothing_wrapped_from(&raw, 60, "> /context");
    assert_eq!(
        crate::terminal::chat_md_capture(3),
        rows.join("\n"),
        "docs/chat.md's capture of /context no longer shows what the chat draws; the screen now:\n{}",
        rows.join("\n")
    );
    assert!(
        rows.iter().any(|r| r.starts_with("  26 assistant")),
        "{}",
        rows.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_fit_60_columns_on_a_terminal_and_stay_whole_in_a_pipe() {
    let sb = Sandbox::new();
    let long = format!("{}.jsonl", "a-long-session-name-".repeat(4));
    sb.write(&long, "");
    let raw = tokio::task::block_in_place(|| {
        Terminal::spawn_sized(sb.command(&["sessions"]), 60)
            .finish()
            .1
    });
    let rows = nothing_wrapped_from(&raw, 60, "");
    assert_eq!(rows, [format!("{}…", &long[..59])]);
    let piped = sb.run(&["sessions"]);
    assert_eq!(piped.stdout.trim_end(), long);
}
