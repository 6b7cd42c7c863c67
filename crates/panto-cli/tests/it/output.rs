//! Output for people and for pipes: a closed pipe ends quietly, an empty message is a usage
//! error, `panto config` tells whether the key is set without showing it, and the chat's
//! commands read from a pipe.

use std::io::{BufRead, BufReader};
use std::process::Stdio;

use crate::fake_model::{FakeModel, Protocol, chat_command};
use crate::support::Sandbox;

/// A session of `n` exchanges, so that `panto context` prints more than a pipe holds.
fn long_session(sb: &Sandbox, n: usize) -> std::path::PathBuf {
    let mut text = String::new();
    for i in 0..n {
        text.push_str(&format!(
            "{{\"type\":\"message\",\"role\":\"user\",\"content\":[{{\"type\":\"text\",\"text\":\"question {i} about the parser and its tests\"}}]}}\n{{\"type\":\"message\",\"role\":\"assistant\",\"content\":[{{\"type\":\"text\",\"text\":\"answer {i}: the parser rounds to microseconds now\"}}]}}\n"
        ));
    }
    sb.write("long.jsonl", &text)
}

#[test]
fn a_reader_that_stops_early_ends_the_output_quietly() {
    let sb = Sandbox::new();
    long_session(&sb, 2_000);
    for args in [
        &["context", "long.jsonl"][..],
        &["context", "long.jsonl", "--json"][..],
        &["transcript", "long.jsonl", "--keep-tokens", "10"][..],
    ] {
        let mut cmd = sb.command(args);
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Read one line, as `head -1` does, then stop reading.
        let mut first = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut first)
            .unwrap();
        assert!(!first.is_empty());
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {stderr}");
        assert!(!stderr.contains("Broken pipe"), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}

#[test]
fn an_empty_message_is_a_usage_error_and_writes_nothing() {
    let sb = Sandbox::new();
    for message in ["", "  \n\t"] {
        let mut cmd = sb.command(&["send", "s.jsonl", message, "--provider", "openai"]);
        cmd.env("OPENAI_API_KEY", "k");
        let run = sb.run_with(cmd);
        run.expect_code(2);
        assert!(run.stderr.contains("MESSAGE is empty"), "{}", run.stderr);
        assert_eq!(run.stderr.lines().count(), 1, "{}", run.stderr);
        assert!(!sb.work().join("s.jsonl").exists());
    }
}

#[test]
fn config_says_whether_the_key_is_set_and_never_shows_it() {
    let sb = Sandbox::new();
    let secret = "sk-test-0123456789abcdef";
    let mut cmd = sb.command(&["config", "--provider", "openai"]);
    cmd.env("OPENAI_API_KEY", secret);
    let run = sb.run_with(cmd);
    run.expect_code(0);
    let line = run
        .stdout
        .lines()
        .find(|l| l.starts_with("api_key "))
        .unwrap_or_else(|| panic!("{}", run.stdout));
    assert!(line.contains("= set "), "{line}");
    assert!(line.contains("OPENAI_API_KEY"), "{line}");
    for piece in secret.as_bytes().windows(8) {
        let piece = std::str::from_utf8(piece).unwrap();
        assert!(!run.stdout.contains(piece), "{piece} shown: {}", run.stdout);
        assert!(!run.stderr.contains(piece), "{piece} shown: {}", run.stderr);
    }
    let unset = sb.run(&["config", "--provider", "gemini"]);
    let line = unset
        .stdout
        .lines()
        .find(|l| l.starts_with("api_key "))
        .unwrap();
    assert!(
        line.contains("= not set") && line.contains("GEMINI_API_KEY"),
        "{line}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chat_commands_show_help_the_context_and_the_summary() {
    let p = Protocol::OpenAiChat;
    let server = FakeModel::new(p, 1_000_000).start().await;
    let sb = Sandbox::new();
    let cmd = chat_command(&sb, p, &server.uri());
    let output = sb.chat_with_input(
        cmd,
        // Forced: a summary of two short questions cannot be smaller than they are.
        "/help\n/summary\nFirst question.\nSecond question.\n/compact --force\n/summary\n/context\n/retry\n/nope\n",
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    // /help lists the commands.
    assert!(stdout.starts_with("/help "), "{stdout}");
    assert!(stdout.contains("\n/retry "), "{stdout}");
    // /summary before any compaction, then after one.
    assert!(stderr.contains("panto: no summary yet"), "{stderr}");
    let summary = stdout
        .lines()
        .find(|l| l.starts_with("SUMMARY-"))
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(summary.contains("the user is testing panto"), "{summary}");
    // /context prints the table, from the summary on.
    let header = stdout
        .lines()
        .find(|l| l.starts_with("c.jsonl: "))
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(header.contains(" exchange"), "{header}");
    assert!(header.contains("tokens for the next request"), "{header}");
    assert!(!header.contains("turn"), "{header}");
    assert!(stdout.contains("   0 summary "), "{stdout}");
    // /retry with nothing awaiting a reply, and an unknown command.
    assert!(stderr.contains("panto: nothing to resend"), "{stderr}");
    assert!(
        stderr.contains("panto: unknown command /nope; /help lists the commands"),
        "{stderr}"
    );
    // Nothing in the chat's words counts the library's turns.
    assert!(!stderr.contains(" turn"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_compaction_is_told_once() {
    use wiremock::matchers::method;
    use wiremock::{Mock, MockServer, ResponseTemplate};

    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(401).set_body_json(serde_json::json!(
            {"error": {"message": "incorrect API key provided", "type": "invalid_request_error"}}
        )))
        .mount(&server)
        .await;
    let sb = Sandbox::new();
    sb.example("debugging.jsonl");
    let before = std::fs::read(sb.work().join("debugging.jsonl")).unwrap();
    let mut cmd = sb.openai(
        &["compact", "debugging.jsonl", "--keep-tokens", "100"],
        &format!("{}/v1", server.uri()),
    );
    cmd.env("OPENAI_API_KEY", "k");
    let run = tokio::task::block_in_place(|| sb.run_with(cmd));
    run.expect_code(1);
    assert_eq!(
        run.stderr.matches("incorrect API key provided").count(),
        1,
        "{}",
        run.stderr
    );
    // The compactor's start line, then the error, once, and its hint.
    let lines: Vec<&str> = run.stderr.lines().collect();
    assert_eq!(lines.len(), 3, "{}", run.stderr);
    assert!(
        lines[0].starts_with("panto: compacting (m): "),
        "{}",
        run.stderr
    );
    assert!(
        lines[1].starts_with("panto: nothing was written to debugging.jsonl: "),
        "{}",
        run.stderr
    );
    assert!(lines[2].starts_with("hint: "), "{}", run.stderr);
    assert_eq!(
        std::fs::read(sb.work().join("debugging.jsonl")).unwrap(),
        before
    );
}

/// `panto transcript`, `panto context` and `panto ledger` go through `$PAGER` when stdout is a
/// terminal, and never when it is not; an empty `PAGER` turns it off.
#[test]
fn long_outputs_go_through_the_pager_on_a_terminal_only() {
    use crate::support::{Tty, run_on_terminal};

    let sb = Sandbox::new();
    let path = sb.example("debugging.jsonl");
    let session = path.to_str().unwrap();
    // Compacted once, so that it has a ledger, and still has something to summarize.
    sb.run(&["compact", session, "--keep-tokens", "2500"])
        .expect_code(0);
    // A pager that marks every line it shows.
    let pager = "sed 's/^/PAGED: /'";
    for command in ["transcript", "context", "ledger"] {
        let mut cmd = sb.command(&[command, session]);
        cmd.env("PAGER", pager);
        let run = run_on_terminal(cmd, Tty::Stdout);
        run.expect_code(0);
        let lines: Vec<&str> = run.stdout.lines().collect();
        assert!(lines.len() > 10, "{command}: {}", run.stdout);
        assert!(
            lines.iter().all(|l| l.starts_with("PAGED: ")),
            "{command}: a line not through the pager:\n{}",
            run.stdout
        );

        // Piped: never the pager, whatever PAGER says.
        let mut cmd = sb.command(&[command, session]);
        cmd.env("PAGER", pager);
        let run = sb.run_with(cmd);
        run.expect_code(0);
        assert!(!run.stdout.contains("PAGED"), "{command}: {}", run.stdout);
        assert!(run.stdout.lines().count() > 10, "{command}");

        // PAGER= on a terminal: printed as it is.
        let mut cmd = sb.command(&[command, session]);
        cmd.env("PAGER", "");
        let run = run_on_terminal(cmd, Tty::Stdout);
        run.expect_code(0);
        assert!(!run.stdout.contains("PAGED"), "{command}: {}", run.stdout);
    }
}
