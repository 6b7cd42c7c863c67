//! What a cloned repository or a hostile server cannot do through the binary: make panto read
//! files outside the project through links, write raw escape sequences to the terminal, leave
//! session files readable by others, or make it allocate without bound.

use std::os::unix::fs::{PermissionsExt, symlink};

use serde_json::json;
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::support::{Sandbox, Tty, run_on_terminal, scrub};

const SECRET: &str = "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG\n";

/// A credentials file outside the project (beside the working directory).
fn credentials(sb: &Sandbox) -> std::path::PathBuf {
    let path = sb.dir.path().join("credentials");
    std::fs::write(&path, SECRET).unwrap();
    path
}

/// A credentials file outside the project, linked from `rel` inside it.
fn linked_from(sb: &Sandbox, rel: &str) -> std::path::PathBuf {
    let secret = credentials(sb);
    let link = sb.work().join(rel);
    std::fs::create_dir_all(link.parent().unwrap()).unwrap();
    symlink(&secret, link).unwrap();
    secret
}

/// Asserts that nothing of the credentials was shown and that they keep their bytes.
#[track_caller]
fn assert_untouched(run: &crate::support::Run, secret: &std::path::Path) {
    assert!(!run.stderr.contains("wJalr") && !run.stdout.contains("wJalr"));
    assert_eq!(std::fs::read_to_string(secret).unwrap(), SECRET);
}

#[test]
fn a_project_config_linked_outside_the_project_is_refused_without_quoting_it() {
    let sb = Sandbox::new();
    let secret = linked_from(&sb, ".panto/config.toml");
    let run = sb.run(&["config"]);
    run.expect_code(2);
    assert_eq!(
        scrub(&run.stderr, &sb),
        "panto: [work]/.panto/config.toml: cannot read the configuration file: it is a symbolic link that leads outside [work]; panto reads a project's files only inside the project\n"
    );
    assert_untouched(&run, &secret);
}

#[test]
fn a_project_compaction_prompt_linked_outside_the_project_is_refused() {
    let sb = Sandbox::new();
    let session = sb.example("debugging.jsonl");
    let secret = linked_from(&sb, ".panto/COMPACTION.md");
    let run = sb.run(&[
        "compact",
        session.to_str().unwrap(),
        "--dry-run",
        "--keep-tokens",
        "1500",
    ]);
    run.expect_code(2);
    assert!(
        scrub(&run.stderr, &sb).contains(
            "cannot read compaction prompt [work]/.panto/COMPACTION.md: it is a symbolic link that leads outside [work]"
        ),
        "{}",
        run.stderr
    );
    assert_untouched(&run, &secret);
}

#[test]
fn a_session_lock_linked_to_another_file_is_refused_and_the_file_keeps_its_bytes() {
    let sb = Sandbox::new();
    let session = sb.example("debugging.jsonl");
    let before = std::fs::read(&session).unwrap();
    let secret = linked_from(&sb, "debugging.jsonl.lock");
    let run = sb.run(&[
        "compact",
        session.to_str().unwrap(),
        "--keep-tokens",
        "1500",
    ]);
    run.expect_code(2);
    assert_eq!(
        scrub(&run.stderr, &sb),
        "panto: [work]/debugging.jsonl.lock: is a symbolic link; panto does not follow links to files it writes\n"
    );
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), SECRET);
    assert_eq!(std::fs::read(&session).unwrap(), before);
}

/// A session whose text carries an OSC 52 clipboard write, a colour and a title change.
const HOSTILE: &str = "look \u{1b}]52;c;ZXZpbA==\u{7} here \u{1b}[31mred\u{1b}[0m \u{1b}]0;title\u{7} \u{202e}txt.exe";

fn hostile_session(sb: &Sandbox) -> String {
    let line =
        json!({"type": "message", "role": "user", "content": [{"type": "text", "text": HOSTILE}]});
    sb.write("h.jsonl", &format!("{line}\n"))
        .to_str()
        .unwrap()
        .to_owned()
}

#[test]
fn context_on_a_terminal_shows_control_characters_as_escapes() {
    let sb = Sandbox::new();
    let session = hostile_session(&sb);
    // No pager: the terminal receives panto's own bytes (a pager adds its own terminal
    // controls; it is given the same neutralised text, see output.rs).
    let mut cmd = sb.command(&["context", &session]);
    cmd.env("PAGER", "");
    let run = run_on_terminal(cmd, Tty::Stdout);
    run.expect_code(0);
    assert!(
        !run.stdout.contains('\u{1b}'),
        "raw escape on the terminal: {:?}",
        run.stdout
    );
    assert!(!run.stdout.contains('\u{7}') && !run.stdout.contains('\u{202e}'));
    // The row is cut to the terminal's width (80 here) after the characters are escaped.
    assert!(
        run.stdout
            .contains(r"look \x1b]52;c;ZXZpbA==\x07 here \x1b[31mred\x1b[0m \x1…"),
        "{}",
        run.stdout
    );

    // `--json` stays exact, and so does text written to a pipe.
    let json = sb.run(&["context", &session, "--json"]);
    json.expect_code(0);
    assert_eq!(json.json()["messages"][0]["content"][0]["text"], HOSTILE);
    let piped = sb.run(&["context", &session]);
    assert!(piped.stdout.contains(HOSTILE), "{}", piped.stdout);
}

/// A Chat Completions server answering with `status` and `body`.
async fn answering(status: u16, body: serde_json::Value) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(status).set_body_json(body))
        .mount(&server)
        .await;
    server
}

/// A Chat Completions server whose every answer is the reply `content`.
async fn replying(content: impl Into<serde_json::Value>) -> MockServer {
    let content = content.into();
    answering(
        200,
        json!({"choices": [{"index": 0, "finish_reason": "stop",
            "message": {"role": "assistant", "content": content}}]}),
    )
    .await
}

fn send_to(sb: &Sandbox, server: &MockServer) -> std::process::Command {
    let mut cmd = sb.send_openai(&format!("{}/v1", server.uri()));
    cmd.env("OPENAI_API_KEY", "k-0123456789");
    cmd
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replies_and_provider_errors_on_a_terminal_show_no_raw_escapes() {
    let reply = replying(HOSTILE).await;
    let sb = Sandbox::new();
    let run = tokio::task::block_in_place(|| run_on_terminal(send_to(&sb, &reply), Tty::Stdout));
    run.expect_code(0);
    assert!(!run.stdout.contains('\u{1b}'), "{:?}", run.stdout);
    assert!(
        run.stdout.contains(r"\x1b]52;c;ZXZpbA==\x07"),
        "{:?}",
        run.stdout
    );
    // The session keeps the text as it came.
    let stored = std::fs::read_to_string(sb.work().join("s.jsonl")).unwrap();
    assert!(stored.contains(r"\u001b]52;c;ZXZpbA=="), "{stored}");

    let failing = answering(400, json!({"error": {"message": format!("bad request {HOSTILE}"), "type": "invalid_request_error"}})).await;
    let sb = Sandbox::new();
    let run = tokio::task::block_in_place(|| run_on_terminal(send_to(&sb, &failing), Tty::Stderr));
    run.expect_code(1);
    assert!(run.stderr.contains("bad request"), "{:?}", run.stderr);
    assert!(!run.stderr.contains("\u{1b}]"), "{:?}", run.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_and_locks_that_panto_creates_are_private() {
    let server = replying("ok").await;
    let sb = Sandbox::new();
    // Under a umask that lets everything through, as the user's shell might have.
    let inner = send_to(&sb, &server);
    let mut cmd = std::process::Command::new("sh");
    cmd.arg("-c")
        .arg("umask 000; exec \"$0\" \"$@\"")
        .arg(inner.get_program())
        .args(inner.get_args())
        .current_dir(inner.get_current_dir().unwrap())
        .env_clear()
        .stdin(std::process::Stdio::null());
    for (name, value) in inner.get_envs() {
        if let Some(value) = value {
            cmd.env(name, value);
        }
    }
    tokio::task::block_in_place(|| sb.run_with(cmd)).expect_code(0);
    for name in ["s.jsonl", "s.jsonl.lock"] {
        let mode = std::fs::metadata(sb.work().join(name))
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o600, "{name}: {mode:o}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_over_the_configured_cap_is_an_error() {
    let big = "x".repeat(2 * 1024 * 1024);
    let server = replying(big).await;
    let sb = Sandbox::new();
    std::fs::write(
        sb.user_config.join("config.toml"),
        "max_response_mib = 1\nretries = 0\n",
    )
    .unwrap();
    let run = tokio::task::block_in_place(|| sb.run_with(send_to(&sb, &server)));
    run.expect_code(1);
    assert!(
        run.stderr
            .contains("the answer is larger than the limit of 1048576 bytes (1 MiB)"),
        "{}",
        run.stderr
    );
}
