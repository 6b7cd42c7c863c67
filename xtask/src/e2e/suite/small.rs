//! The small scenarios, one behaviour each: a pause in `panto chat` past the keep-alive, a
//! wrong key, an answer cut at its output limit, a stream's pings, and the window panto reads.

use std::fs;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};

use super::{
    COMMAND_TIMEOUT, CONFIG_TOML, KEY, MODEL, Protocol, Setup, TRUNCATE_AT, WRONG_KEY, checks,
    note, server, shorten,
};

/// `panto chat` with a pause longer than the server's 5 s keep-alive between two turns: the
/// second turn must go through on the first attempt.
pub(in crate::e2e) fn chat_pause(setup: &Setup, p: Protocol) -> Result<()> {
    let mut panto = setup.panto(p, "chat", false)?;
    panto.log_filter = Some("panto_providers=debug".to_owned());
    let session = panto.dir.join("chat.jsonl");
    let run = panto.run_with_input(&["chat", "chat.jsonl"], move |stdin| {
        writeln!(stdin, "Say hello in three words.")?;
        stdin.flush()?;
        // Wait for the first reply to be stored, then stay idle past the keep-alive. The empty
        // lines (which chat skips) end the wait with a broken pipe if panto has exited.
        let deadline = Instant::now() + COMMAND_TIMEOUT;
        while !fs::read_to_string(&session).is_ok_and(|t| t.contains("\"assistant\"")) {
            ensure!(
                Instant::now() < deadline,
                "the first chat turn never finished"
            );
            std::thread::sleep(Duration::from_millis(100));
            stdin.write_all(b"\n")?;
            stdin.flush()?;
        }
        std::thread::sleep(Duration::from_secs(6));
        writeln!(stdin, "Now say goodbye in three words.")?;
        writeln!(stdin, "/exit")?;
        Ok(())
    })?;
    let run = run.expect(0)?;
    let entries = panto.session("chat.jsonl")?;
    ensure!(
        checks::replies(&entries).len() == 2,
        "expected two replies in the chat session"
    );
    let sends: Vec<&str> = run
        .stderr
        .lines()
        .filter(|l| l.contains("sending request"))
        .collect();
    ensure!(
        sends.len() == 2 && sends.iter().all(|l| l.contains("retry=0")),
        "the turn after the pause needed a retry: {sends:?}"
    );
    Ok(())
}

/// A wrong key: exit 1 with a hint naming the variable, no compaction, the key nowhere.
pub(in crate::e2e) fn wrong_key(setup: &Setup, p: Protocol) -> Result<()> {
    let mut panto = setup.panto(p, "wrong-key", false)?;
    panto.key = WRONG_KEY.to_owned();
    let run = panto.run(&["send", "k.jsonl", "Hello?"])?.expect(1)?;
    ensure!(
        run.stderr
            .contains(&format!("check the key in {}", p.key_var())),
        "no hint about the key: {}",
        run.stderr
    );
    ensure!(
        !run.stderr.contains(WRONG_KEY) && !panto.session_text("k.jsonl").contains(WRONG_KEY),
        "the key was repeated"
    );
    let entries = panto.session("k.jsonl")?;
    ensure!(
        checks::compactions(&entries).is_empty() && checks::replies(&entries).is_empty(),
        "a rejected key produced a compaction or a reply"
    );
    Ok(())
}

/// An answer cut at the output limit is recorded as `max_tokens` (on `/v1/responses` the server
/// says `completed` all the same; the adapter reads the cut from the output count).
pub(in crate::e2e) fn truncated(setup: &Setup, p: Protocol) -> Result<()> {
    let panto = setup.panto(p, "truncated", false)?;
    fs::write(
        panto.dir.join(".panto/config.toml"),
        CONFIG_TOML.replacen(
            "max_output_tokens = 32",
            &format!("max_output_tokens = {TRUNCATE_AT}"),
            1,
        ),
    )?;
    panto
        .run(&[
            "send",
            "t.jsonl",
            "Tell me a long story about a dragon and a knight, with many details.",
        ])?
        .expect(0)?;
    let entries = panto.session("t.jsonl")?;
    let reply = checks::replies(&entries)
        .pop()
        .context("no reply in the session")?;
    ensure!(
        reply["usage"]["output_tokens"] == TRUNCATE_AT && reply["stop_reason"] == "max_tokens",
        "an answer cut at {TRUNCATE_AT} tokens is recorded as {} with usage {}",
        reply["stop_reason"],
        reply["usage"]
    );
    Ok(())
}

/// The server sends `:` comment lines while it processes a long prompt (every second here), in
/// the same streams panto reads: the long notes of the overflow scenario arrive behind them.
pub(in crate::e2e) fn pings(setup: &Setup, p: Protocol) -> Result<()> {
    let text = note(100 + p as usize, setup.note_sentences);
    let message = serde_json::json!([{"role": "user", "content": text}]);
    let (path, body) = match p {
        Protocol::OpenAi => (
            "/v1/chat/completions",
            serde_json::json!({"model": MODEL, "max_tokens": 1, "stream": true, "messages": message}),
        ),
        Protocol::Anthropic => (
            "/v1/messages",
            serde_json::json!({"model": MODEL, "max_tokens": 1, "stream": true, "messages": message}),
        ),
        Protocol::OpenAiResponses => (
            "/v1/responses",
            serde_json::json!({"model": MODEL, "max_output_tokens": 1, "stream": true, "input": message}),
        ),
    };
    let auth = format!("Bearer {KEY}");
    let answer = server::request(
        setup.main.port,
        "POST",
        path,
        &[("Authorization", auth.as_str())],
        Some(&serde_json::to_vec(&body)?),
        COMMAND_TIMEOUT,
    )?;
    let text = String::from_utf8_lossy(&answer.body);
    ensure!(
        answer.status == 200,
        "{path} answered {}: {text}",
        answer.status
    );
    let comments = text
        .lines()
        .take_while(|l| !l.starts_with("data:") && !l.starts_with("event:"))
        .filter(|l| l.starts_with(':'))
        .count();
    ensure!(
        comments > 0,
        "no `:` comment line before the first event of {path}:\n{}",
        shorten(&text)
    );
    Ok(())
}

/// The window is discovered from the server itself (`GET /props`, whose
/// `default_generation_settings.n_ctx` is the `-c` it was started with), kept in the data
/// folder, and shown by `panto context` with its source; a `send` with `auto_compact` uses it
/// without asking again.
pub(in crate::e2e) fn window(setup: &Setup, p: Protocol) -> Result<()> {
    let panto = setup.panto(p, "window", false)?;
    let run = panto.run(&["window"])?.expect(0)?;
    let heading = format!("{MODEL}: a window of {} tokens", setup.n_ctx);
    ensure!(
        run.stdout.starts_with(&heading)
            && run
                .stdout
                .contains("discovered: llama-server GET /props default_generation_settings.n_ctx"),
        "`panto window` did not discover the server's {} tokens:\n{}{}",
        setup.n_ctx,
        run.stdout,
        run.stderr
    );
    let kept = fs::read_to_string(panto.dir.join("data/windows.toml"))
        .context("the discovered window was not kept")?;
    ensure!(
        kept.contains(&format!("tokens = {}", setup.n_ctx)) && !kept.contains(KEY),
        "windows.toml: {kept}"
    );
    panto
        .run(&["send", "w.jsonl", "Hello there.", "--auto-compact", "0.8"])?
        .expect(0)?;
    let doc = panto
        .run(&["context", "w.jsonl", "--json"])?
        .expect(0)?
        .json()?;
    ensure!(
        doc["window"]["tokens"] == setup.n_ctx && doc["window"]["source"] == "discovered",
        "`panto context --json` shows the window {}",
        doc["window"]
    );
    Ok(())
}
