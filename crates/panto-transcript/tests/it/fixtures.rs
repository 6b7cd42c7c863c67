//! Snapshot tests: each session under `tests/fixtures/` rendered as the compaction request a
//! compaction of its effective context would send (previous summary included when it has one).
//!
//! Snapshots show the invisible line terminators other than LF as `⟦CR⟧`, `⟦VT⟧`, `⟦FF⟧`,
//! `⟦NEL⟧`, `⟦LS⟧` and `⟦PS⟧`, so that no editor or checkout can change them unseen.

use std::path::Path;

use panto_model::{read_entries, replay};
use panto_transcript::{ParsedRequest, parse_request, render_request, transcript_items};

/// Renders the request for the fixture `name`, checks that it parses back, and snapshots it.
#[track_caller]
fn check(name: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(format!("{name}.jsonl"));
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let entries = read_entries(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let context = replay(entries);
    assert!(
        context.skipped.is_empty(),
        "{name}: replay skipped {:?}",
        context.skipped
    );
    let prefix = context.conversation();
    let request = render_request(prefix, context.summary());
    assert_eq!(
        parse_request(&request),
        Ok(ParsedRequest::new(
            context.summary().map(str::to_owned),
            transcript_items(prefix)
        )),
        "{name}: the request does not parse back"
    );
    assert!(!request.contains('⟦'), "{name}: the fixture must not use ⟦");
    insta::assert_snapshot!(name, visible(&request));
}

/// The text with every line terminator but LF written as a visible name.
fn visible(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\r' => out.push_str("⟦CR⟧"),
            '\u{0B}' => out.push_str("⟦VT⟧"),
            '\u{0C}' => out.push_str("⟦FF⟧"),
            '\u{85}' => out.push_str("⟦NEL⟧"),
            '\u{2028}' => out.push_str("⟦LS⟧"),
            '\u{2029}' => out.push_str("⟦PS⟧"),
            c => out.push(c),
        }
    }
    out
}

#[test]
fn short_chat() {
    check("short-chat");
}

#[test]
fn tool_loop_with_parallel_calls() {
    check("tool-loop");
}

#[test]
fn failed_tool_call() {
    check("failed-tool");
}

#[test]
fn thinking_and_images() {
    check("thinking-images");
}

#[test]
fn request_with_previous_summary() {
    check("previous-summary");
}

#[test]
fn adversarial_markers_and_tags() {
    check("adversarial");
}
