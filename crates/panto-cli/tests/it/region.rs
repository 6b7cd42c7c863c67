//! What the chat draws below its output (the spinner, the queued messages, the prompt) is
//! erased before anything else prints: when the reply fails while the spinner turns, when the
//! stream is cut half-way, and when the terminal changes width under it. Each test reads the
//! screen at the end for a spinner frame or a queued line left behind, and for the error or
//! the reply printed whole.

use std::time::Duration;

use crate::keyboard::{End, First, REFUSAL, Streamer, chat, is_spinner_frame, messages};
use crate::support::{screen_at, unwrapped};

/// Asserts that `shown` holds neither a spinner (its message or a frame) nor a queued line.
#[track_caller]
fn nothing_transient_left(shown: &[String]) {
    let text = shown.join("\n");
    for line in shown {
        assert!(
            !line.contains("waiting for the model") && !line.contains(is_spinner_frame),
            "a spinner frame was left on the screen:\n{text}"
        );
        assert!(
            !line.starts_with("queued:"),
            "a queued line was left on the screen:\n{text}"
        );
    }
}

/// Clears the draft the failed reply gave back (Ctrl-C), then quits (Ctrl-D); the exit code
/// and everything drawn.
fn clear_and_quit(mut term: crate::support::Terminal) -> (i32, String) {
    term.type_keys("\u{3}");
    term.wait_for_prompt();
    term.type_keys("\u{4}");
    term.finish()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_while_the_spinner_turns_prints_whole_and_leaves_nothing_drawn_behind() {
    let server = Streamer::scripted(First {
        wait: Duration::from_secs(3),
        pause: Duration::ZERO,
        end: End::Refused,
    })
    .await;
    let sb = crate::support::Sandbox::new();
    let (code, raw) = tokio::task::block_in_place(|| {
        let mut term = chat(&sb, &server.url, 80);
        term.type_keys("first question\r");
        term.wait_for("waiting for the model", 1);
        // Below the spinner: two queued messages and a draft, so the region is four rows high.
        term.type_keys("typed while it waits\r");
        term.wait_for("queued: typed while it waits", 1);
        term.type_keys("and more\r");
        term.wait_for("queued: and more", 1);
        term.type_keys("a draft");
        term.wait_for("> a draft", 1);
        term.wait_for("req_7f3a91)", 1);
        term.wait_for("back in the draft", 1);
        clear_and_quit(term)
    });
    let shown = screen_at(&raw, 80);
    assert_eq!(code, 0, "{}", shown.join("\n"));
    nothing_transient_left(&shown);
    // The provider's message, longer than the terminal is wide, is one line as written.
    let lines = unwrapped(&raw, 80);
    let error = lines
        .iter()
        .find(|l| l.contains("req_7f3a91)"))
        .unwrap_or_else(|| panic!("no error line:\n{}", shown.join("\n")));
    assert!(
        error.starts_with("panto: ") && error.contains(REFUSAL),
        "the error is not whole: {error:?}\n{}",
        shown.join("\n")
    );
    assert_eq!(server.prompts(), ["first question"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_cut_mid_stream_keeps_its_half_and_leaves_nothing_drawn_behind() {
    let server = Streamer::scripted(First {
        wait: Duration::ZERO,
        pause: Duration::from_secs(3),
        end: End::Cut,
    })
    .await;
    let sb = crate::support::Sandbox::new();
    let (code, raw) = tokio::task::block_in_place(|| {
        let mut term = chat(&sb, &server.url, 80);
        term.type_keys("first question\r");
        term.wait_for("Reply 1, first half", 1);
        // Two queued messages: the region is two rows high when the error prints.
        term.type_keys("typed ahead\r");
        term.wait_for("queued: typed ahead", 1);
        term.type_keys("and more\r");
        term.wait_for("queued: and more", 1);
        term.wait_for("/retry sends it again", 1);
        term.wait_for("back in the draft", 1);
        clear_and_quit(term)
    });
    let shown = screen_at(&raw, 80);
    let text = shown.join("\n");
    assert_eq!(code, 0, "{text}");
    nothing_transient_left(&shown);
    // The half shown stays on its own line, and the error follows it whole.
    let at = shown
        .iter()
        .position(|l| l == "Reply 1, first half")
        .unwrap_or_else(|| panic!("the half reply is not on its own line:\n{text}"));
    assert!(shown[at + 1].starts_with("panto: "), "{text}");
    // Nothing of the cut reply was stored, and the typed-ahead line was never sent.
    assert_eq!(
        messages(&sb),
        [("user".to_owned(), "first question".to_owned())]
    );
    assert_eq!(server.prompts(), ["first question"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn narrowing_the_terminal_while_the_spinner_turns_and_the_reply_streams_leaves_nothing_behind()
 {
    let server = Streamer::scripted(First {
        wait: Duration::from_secs(3),
        pause: Duration::from_secs(3),
        end: End::Whole,
    })
    .await;
    let sb = crate::support::Sandbox::new();
    // 90 characters: its queued row fits 100 columns, not 60, where the terminal re-wraps it.
    let ahead = format!("a long follow-up {}", "x".repeat(73));
    let (code, raw) = tokio::task::block_in_place(|| {
        let mut term = chat(&sb, &server.url, 100);
        term.type_keys("first question\r");
        term.wait_for("waiting for the model", 1);
        term.type_keys(&format!("{ahead}\r"));
        term.wait_for("queued: a long follow-up", 1);
        term.type_keys("a draft");
        term.wait_for("> a draft", 1);
        // While the spinner turns: 100 columns to 60.
        term.resize(60);
        std::thread::sleep(Duration::from_millis(400));
        term.wait_for("Reply 1, first half", 1);
        // While the reply waits half-way: 60 columns to 45.
        term.resize(45);
        std::thread::sleep(Duration::from_millis(400));
        term.wait_for("; 50 in, 9 out; m", 2);
        term.wait_for("> a draft", 2);
        clear_and_quit(term)
    });
    let shown = screen_at(&raw, 100);
    let text = shown.join("\n");
    assert_eq!(code, 0, "{text}");
    nothing_transient_left(&shown);
    let lines = unwrapped(&raw, 100);
    for whole in [
        "Reply 1, first half and second half.",
        &format!("> {ahead}"),
        "Reply 2, first half and second half.",
    ] {
        assert!(
            lines.iter().any(|l| l == whole),
            "{whole:?} is not whole:\n{text}"
        );
    }
    assert_eq!(server.prompts(), ["first question", ahead.as_str()]);
}
