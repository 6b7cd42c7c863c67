//! Rough throughput check of transcript rendering and parsing, in MB/s of transcript text.
//!
//! Run with `cargo run --release -p panto-transcript --example throughput [ROUNDS]`. The default,
//! 200 rounds, gives about 3.5 MB of transcript (some 900k tokens, the largest context windows of
//! today); 2000 rounds give 35 MB, where allocating fresh pages starts to dominate. This is a
//! sanity check for development, not a benchmark: targets belong in `cargo xtask bench`.

#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "an example shows what it measured"
)]

use std::hint::black_box;
use std::time::{Duration, Instant};

use panto_model::{ContentBlock, Message, Role, ToolResultBlock, ToolResultContent};
use panto_transcript::{parse_transcript, render_request, render_transcript};
use serde_json::json;

/// A synthetic agent session: prose, tool loops with source files and logs, some non-ASCII.
fn session(rounds: usize) -> Vec<Message> {
    let code: String = (0..120)
        .map(|i| {
            format!(
                "    let value_{i} = compute(&input[{i}..], Options::default())?; // step {i}\n"
            )
        })
        .collect();
    let log: String = (0..80)
        .map(|i| {
            format!(
                "[INFO] 2026-01-01T00:00:{:02}Z worker {i} finished <ok> in {i}ms\n",
                i % 60
            )
        })
        .collect();
    let prose = "The failing test reads a fixture that the build script regenerates; \
                 when the script runs after the test binary is built, the fixture is stale. \
                 Café, naïve, 日本語 and — dashes — appear here too.\n"
        .repeat(6);
    let mut messages = Vec::new();
    for r in 0..rounds {
        messages.push(Message::user_text(format!(
            "Round {r}: why does the test fail?\n{prose}"
        )));
        messages.push(Message::new(
            Role::Assistant,
            vec![
                ContentBlock::text(prose.clone()),
                ContentBlock::tool_use(
                    format!("toolu_{r}_a"),
                    "read",
                    json!({"path": format!("crates/panto-size/src/file_{r}.rs")}),
                ),
                ContentBlock::tool_use(
                    format!("toolu_{r}_b"),
                    "bash",
                    json!({"command": "cargo test -p panto-size -- --nocapture", "timeout_ms": 120000}),
                ),
            ],
        ));
        messages.push(Message::new(
            Role::User,
            vec![
                ContentBlock::tool_result(format!("toolu_{r}_a"), code.clone(), false),
                ContentBlock::ToolResult(ToolResultBlock::new(
                    format!("toolu_{r}_b"),
                    ToolResultContent::Blocks(vec![ContentBlock::text(log.clone())]),
                    Some(r % 3 == 0),
                )),
            ],
        ));
        messages.push(Message::assistant_text(prose.clone()));
    }
    messages
}

/// Runs `f` repeatedly for about a second; returns the best MB/s for `bytes` bytes per run.
fn measure(bytes: usize, mut f: impl FnMut()) -> f64 {
    let mut best = Duration::MAX;
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(2) {
        let t = Instant::now();
        f();
        best = best.min(t.elapsed());
    }
    bytes as f64 / best.as_secs_f64() / 1e6
}

fn main() {
    let rounds = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(200);
    let messages = session(rounds);
    let transcript = render_transcript(&messages);
    let bytes = transcript.len();
    println!(
        "transcript: {} messages, {:.1} MB",
        messages.len(),
        bytes as f64 / 1e6
    );
    let render = measure(bytes, || {
        black_box(render_transcript(black_box(&messages)));
    });
    println!("render_transcript: {render:.0} MB/s of output");
    let request = measure(bytes, || {
        black_box(render_request(
            black_box(&messages),
            Some("previous summary"),
        ));
    });
    println!("render_request:    {request:.0} MB/s of output");
    let mut reused = String::new();
    let into = measure(bytes, || {
        reused.clear();
        panto_transcript::render_transcript_into(&mut reused, black_box(&messages));
    });
    println!("render_transcript_into, reused buffer: {into:.0} MB/s of output");
    let copy = measure(bytes, || {
        black_box(black_box(&transcript).clone());
    });
    println!("floor: cloning the transcript: {copy:.0} MB/s");
    let parse = measure(bytes, || {
        black_box(parse_transcript(black_box(&transcript)));
    });
    println!("parse_transcript:  {parse:.0} MB/s of input");
}
