//! Terminal behaviour: a spinner on stderr while the provider works, only when stderr is a
//! terminal (a pseudo-terminal here), coloured unless `NO_COLOR` is set.

use std::process::Stdio;
use std::time::Duration;

use wiremock::matchers::method;
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::support::{Sandbox, Tty, run_on_terminal};

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
