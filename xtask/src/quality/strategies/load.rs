//! The pressure runs of `quality --strategies`: a shared session written in the chain's parts,
//! one `panto send` after each, against the loopback model of `quality --pressure` at a small
//! window, so that every compaction is one an overflow forced; and the 5 MB tool result at a
//! window of 4,096 tokens ([`huge`]).

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde_json::json;

use super::chain::Session;
use crate::quality::loopback::{AGENT_PROMPT, Loopback, Seen};
use crate::quality::pressure::{json_of, panto_command, session_entries, strings};
use crate::quality::recall::questions::Haystack;

/// The prompt sent after each part.
const PROMPT: &str = "Please go on with the work.";

/// What one strategy did to one session at one window.
#[derive(Default)]
pub(super) struct Load {
    pub sends: usize,
    /// Compaction entries written (clearings included).
    pub compactions: usize,
    /// Of those, clearings.
    pub clearings: usize,
    /// Compaction requests the model received.
    pub requests: u64,
    /// Model tokens of the compaction requests: the input the server counted and the output
    /// it answered with.
    pub tokens: u64,
    /// The wall time of the sends that compacted (their conversation requests included).
    pub wall: Duration,
    /// The effective context's estimated tokens at the end (`conversation_tokens`).
    pub retained: u64,
    /// Questions of the session the effective context answers at the end.
    pub answered: usize,
    /// Sends that failed, with what they printed.
    pub failures: Vec<String>,
}

/// The configuration of a pressure run's folder.
fn configure(dir: &Path, strategy: &str) -> Result<()> {
    fs::create_dir_all(dir.join(".panto"))?;
    fs::write(
        dir.join(".panto/config.toml"),
        format!(
            "max_output_tokens = 256\nsystem_prompt = \"{AGENT_PROMPT}\"\ntimeout_secs = 300\n\
             compaction_strategy = \"{strategy}\"\n"
        ),
    )?;
    Ok(())
}

/// Drives `session` through `panto send` at the server's window with `strategy`.
pub(super) fn load(
    panto: &Path,
    work: &Path,
    server: &Loopback,
    session: &Session,
    strategy: &str,
) -> Result<Load> {
    let dir = work
        .join(format!("pressure-{}", server.window()))
        .join(strategy)
        .join(&session.name);
    let _ = fs::remove_dir_all(&dir);
    configure(&dir, strategy)?;
    let file = dir.join("s.jsonl");
    let mut load = Load::default();
    let mut entries_seen = 0;
    for piece in &session.pieces {
        let mut text = fs::read_to_string(&file).unwrap_or_default();
        text.push_str(piece);
        fs::write(&file, text)?;
        load.sends += 1;
        let started = Instant::now();
        let out = panto_command(panto, work, &dir, server, &["send", "s.jsonl", PROMPT])
            .output()
            .context("cannot run panto send")?;
        let wall = started.elapsed();
        let seen = server.take();
        keep_requests(&dir, load.sends, &seen)?;
        if !out.status.success() {
            load.failures.push(format!(
                "{} at {} with {strategy}, send {}: {}",
                session.name,
                server.window(),
                load.sends,
                String::from_utf8_lossy(&out.stderr).trim()
            ));
            break;
        }
        let entries = session_entries(&file)?;
        let new = &entries[entries_seen..];
        entries_seen = entries.len();
        let Some(entry) = new.iter().find(|e| e["type"] == "compaction") else {
            continue;
        };
        load.compactions += 1;
        load.clearings += usize::from(entry["strategy"] == "clear");
        let (requests, tokens) = spent(&seen);
        load.requests += requests;
        load.tokens += tokens;
        load.wall += wall;
    }
    let context = json_of(panto, work, &dir, server, &["context", "s.jsonl", "--json"])?;
    load.retained = context["conversation_tokens"].as_u64().unwrap_or(0);
    let text = Haystack::new(&strings(&context["messages"]));
    load.answered = session.asked.iter().filter(|q| q.found_in(&text)).count();
    Ok(load)
}

/// Writes the compaction requests among `seen` (those of send `send`) to `compaction-requests.jsonl`
/// in `dir`, one a line with the server's counts, so that where a run's tokens went can be read
/// after it (docs/compaction.md, "Strategies compared").
pub(super) fn keep_requests(dir: &Path, send: usize, seen: &[Seen]) -> Result<()> {
    use std::io::Write as _;
    let mut file = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("compaction-requests.jsonl"))?;
    for s in seen.iter().filter(|s| s.compaction) {
        let line = json!({"send": send, "input": s.input, "output": s.output, "fitted": s.fitted,
            "max_output": s.max_output, "messages": s.messages});
        writeln!(file, "{line}")?;
    }
    Ok(())
}

/// The compaction requests among `seen`, and the tokens they cost (input and output of those
/// the model answered).
fn spent(seen: &[Seen]) -> (u64, u64) {
    let compaction: Vec<&Seen> = seen.iter().filter(|s| s.compaction).collect();
    let tokens = compaction
        .iter()
        .filter(|s| s.fitted)
        .map(|s| s.input + s.output)
        .sum();
    (compaction.len() as u64, tokens)
}

/// The size of the huge tool result, in bytes.
pub(super) const HUGE_BYTES: usize = 5_000_000;

/// The window of the huge run, in tokens.
pub(super) const HUGE_WINDOW: u64 = 4096;

/// What one send with a 5 MB tool result in the conversation cost.
pub(super) struct Huge {
    /// Every request the model received (the conversation's included).
    pub requests: usize,
    /// Of those, compaction requests.
    pub compaction_requests: usize,
    /// The wall time of the send.
    pub wall: Duration,
    /// What the compaction wrote (`clear` or `summary`), if any.
    pub written: Option<String>,
    /// What the send printed on failure.
    pub failure: Option<String>,
}

/// A session of one turn whose tool result is [`HUGE_BYTES`] of build log, then one `panto send`
/// with `strategy` against the loopback model at [`HUGE_WINDOW`].
pub(super) fn huge(panto: &Path, work: &Path, strategy: &str) -> Result<Huge> {
    let server = Loopback::start(HUGE_WINDOW)?;
    let dir = work.join("huge").join(strategy);
    let _ = fs::remove_dir_all(&dir);
    configure(&dir, strategy)?;
    let mut log = String::with_capacity(HUGE_BYTES + 100);
    let mut n = 0u64;
    while log.len() < HUGE_BYTES {
        n += 1;
        log.push_str(&format!(
            "[{n:07}] Compiling crate-{} v0.{}.{} (/src/crates/crate-{}/src/lib.rs:{})\n",
            n % 997,
            n % 13,
            n % 7,
            n % 997,
            n % 400
        ));
    }
    let lines = [
        json!({"type": "message", "role": "user", "id": "u1",
            "content": [{"type": "text", "text": "Build the workspace and show me the log."}]}),
        json!({"type": "message", "role": "assistant", "id": "a1",
            "content": [{"type": "tool_use", "id": "call_build", "name": "bash",
                "input": {"command": "cargo build --workspace 2>&1"}}]}),
        json!({"type": "message", "role": "user", "id": "r1",
            "content": [{"type": "tool_result", "tool_use_id": "call_build", "content": log,
                "is_error": false}]}),
        json!({"type": "message", "role": "assistant", "id": "a2",
            "content": [{"type": "text", "text": "The build finished; the log is above."}]}),
    ];
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    fs::write(dir.join("s.jsonl"), text)?;
    let started = Instant::now();
    let out = panto_command(panto, work, &dir, &server, &["send", "s.jsonl", PROMPT])
        .output()
        .context("cannot run panto send")?;
    let wall = started.elapsed();
    let seen = server.take();
    let written = session_entries(&dir.join("s.jsonl"))?
        .iter()
        .find(|e| e["type"] == "compaction")
        .map(|e| e["strategy"].as_str().unwrap_or("summary").to_owned());
    Ok(Huge {
        requests: seen.len(),
        compaction_requests: seen.iter().filter(|s| s.compaction).count(),
        wall,
        written,
        failure: (!out.status.success())
            .then(|| String::from_utf8_lossy(&out.stderr).trim().to_owned()),
    })
}
