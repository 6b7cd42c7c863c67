//! Unit tests of the pressure mode's parts: the loopback model enforces its window and says so
//! in `OpenAI`'s words, tells compactions from conversation requests and answers both; its
//! summaries name no fact; sessions split into whole turns; and every check rejects what it
//! should.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;

use serde_json::{Value, json};

use super::loopback::{AGENT_PROMPT, Loopback, REPLY, summary};
use super::pressure::{RunScores, check, strings};
use super::turns::{parts, turns_of};

/// One exchange with the loopback server: the status and the body.
fn post(server: &Loopback, body: &Value) -> (u16, String) {
    let url = server.base_url();
    let port = url
        .trim_start_matches("http://127.0.0.1:")
        .trim_end_matches("/v1");
    let mut stream = TcpStream::connect(format!("127.0.0.1:{port}")).unwrap();
    let body = body.to_string();
    write!(
        stream,
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut reader = BufReader::new(stream);
    let mut status = String::new();
    reader.read_line(&mut status).unwrap();
    let mut length = 0;
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        if line.trim().is_empty() {
            break;
        }
        if let Some(v) = line.to_lowercase().strip_prefix("content-length:") {
            length = v.trim().parse().unwrap();
        }
    }
    let mut answer = vec![0; length];
    reader.read_exact(&mut answer).unwrap();
    let code = status.split_whitespace().nth(1).unwrap().parse().unwrap();
    (code, String::from_utf8(answer).unwrap())
}

fn request(system: &str, user: &str, max_tokens: u64, stream: bool) -> Value {
    json!({"model": "m", "max_tokens": max_tokens, "stream": stream, "messages": [
        {"role": "system", "content": system},
        {"role": "user", "content": user},
    ]})
}

#[test]
fn the_loopback_model_rejects_a_request_over_its_window_in_openai_words() {
    let server = Loopback::start(100).unwrap();
    let body = request(AGENT_PROMPT, &"word ".repeat(60), 50, false);
    let (status, answer) = post(&server, &body);
    assert_eq!(status, 400);
    let error: Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(error["error"]["code"], "context_length_exceeded");
    let message = error["error"]["message"].as_str().unwrap();
    let input = body.to_string().len().div_ceil(3);
    assert!(
        message.starts_with("This model's maximum context length is 100 tokens.")
            && message.contains(&format!(
                "you requested {} tokens ({input} in the messages, 50 in the completion)",
                input + 50
            )),
        "{message}"
    );
    let seen = server.take();
    assert_eq!(seen.len(), 1);
    assert!(!seen[0].fitted && !seen[0].compaction && seen[0].max_output == 50);
    assert_eq!(seen[0].output, 0, "a rejected request has no output");
    assert!(server.take().is_empty(), "take empties the log");
}

#[test]
fn the_output_counts_against_the_window() {
    let server = Loopback::start(200).unwrap();
    let body = request(AGENT_PROMPT, "hi", 10, false);
    let input = body.to_string().len().div_ceil(3) as u64;
    // Fits with an output of 200 - input, not with one more token.
    for (output, fits) in [(200 - input, true), (201 - input, false)] {
        let (status, _) = post(&server, &request(AGENT_PROMPT, "hi", output, false));
        assert_eq!(status == 200, fits, "output {output}");
    }
}

#[test]
fn conversation_requests_get_the_reply_and_compactions_a_summary() {
    let server = Loopback::start(100_000).unwrap();
    let (status, answer) = post(&server, &request(AGENT_PROMPT, "go on", 10, false));
    assert_eq!(status, 200);
    let doc: Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(doc["choices"][0]["message"]["content"], REPLY);
    assert_eq!(doc["choices"][0]["finish_reason"], "stop");

    let prompt = "Summarize.\n\n<transcript>\n[User]: fix req-7 in src/a.rs\n\n</transcript>";
    let (status, answer) = post(&server, &request("# Compaction", prompt, 300, true));
    assert_eq!(status, 200);
    assert!(answer.ends_with("data: [DONE]\n\n"), "{answer}");
    let first: Value = serde_json::from_str(
        answer
            .lines()
            .next()
            .unwrap()
            .strip_prefix("data: ")
            .unwrap(),
    )
    .unwrap();
    let text = first["choices"][0]["delta"]["content"].as_str().unwrap();
    assert_eq!(text, summary(prompt));
    let seen = server.take();
    assert_eq!(
        seen.iter().map(|s| s.compaction).collect::<Vec<_>>(),
        [false, true]
    );
    // The output counted is the answer's, a token for every three bytes.
    assert_eq!(seen[0].output, REPLY.len().div_ceil(3) as u64);
    assert_eq!(seen[1].output, summary(prompt).len().div_ceil(3) as u64);
}

#[test]
fn a_summary_names_no_fact_and_differs_from_one_chunk_to_the_next() {
    let a = summary(
        "<transcript>\n[User]: Please fix req-41 in src/parser.rs\n\n[Assistant tool call bash (1)]: {\"command\":\"make check\"}\n\n</transcript>",
    );
    let b = summary("<transcript>\n[User]: Now req-42, please.\n\n</transcript>");
    for fact in ["req-41", "parser", "make check", "req-42"] {
        assert!(!a.contains(fact) && !b.contains(fact), "{fact}");
    }
    let long_lines = |s: &str| -> Vec<String> {
        s.lines()
            .filter(|l| l.len() >= 20 && !l.starts_with('#'))
            .map(str::to_owned)
            .collect()
    };
    let (la, lb) = (long_lines(&a), long_lines(&b));
    assert!(!la.is_empty());
    assert!(
        la.iter().all(|l| !lb.contains(l)),
        "a line repeats:\n{a}\n{b}"
    );
}

fn line(role: &str, content: &Value) -> String {
    json!({"type": "message", "role": role, "content": content}).to_string()
}

#[test]
fn a_session_splits_into_whole_turns_and_parts_of_about_equal_size() {
    let text = |t: &str| json!([{"type": "text", "text": t}]);
    let lines = [
        line("user", &text("first request")),
        line(
            "assistant",
            &json!([{"type": "tool_use", "id": "t1", "name": "bash", "input": {"command": "ls"}}]),
        ),
        line(
            "user",
            &json!([{"type": "tool_result", "tool_use_id": "t1", "content": "a b"}]),
        ),
        line("assistant", &text("done")),
        line("user", &text("second request")),
        line("assistant", &text("ok")),
        line("user", &text("third request")),
        line("assistant", &text("ok")),
    ];
    let path = std::env::temp_dir().join(format!("panto-pressure-{}.jsonl", std::process::id()));
    std::fs::write(&path, lines.join("\n")).unwrap();
    let turns = turns_of(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    let sizes: Vec<usize> = turns.iter().map(Vec::len).collect();
    assert_eq!(sizes, [4, 2, 2], "a tool result continues its turn");
    assert!(turns.iter().flatten().all(|(_, m)| m.is_some()));

    let all: Vec<String> = turns.iter().flatten().map(|(l, _)| l.clone()).collect();
    for n in 1..=4 {
        let split = parts(turns_of_lines(&turns), n);
        assert!(
            split.len() <= n && !split.is_empty(),
            "{n}: {}",
            split.len()
        );
        let joined: Vec<String> = split.iter().flatten().map(|(l, _)| l.clone()).collect();
        assert_eq!(joined, all, "{n}: every line once, in order");
        // Every part starts a turn.
        for p in &split {
            assert!(p[0].0.contains("request"), "{n}: {}", p[0].0);
        }
    }
    assert_eq!(parts(turns_of_lines(&turns), 3).len(), 3);
}

fn turns_of_lines<T>(turns: &[Vec<(String, T)>]) -> Vec<Vec<(String, ())>> {
    turns
        .iter()
        .map(|t| t.iter().map(|(l, _)| (l.clone(), ())).collect())
        .collect()
}

#[test]
fn strings_collects_every_string_of_a_document() {
    let doc = json!({"a": ["x", {"b": "y", "n": 3}], "c": "z", "d": null});
    let s = strings(&doc);
    let mut got: Vec<&str> = s.lines().collect();
    got.sort_unstable();
    assert_eq!(got, ["x", "y", "z"]);
}

#[test]
fn every_check_rejects_what_it_should() {
    let clean = || {
        let mut s = RunScores::default();
        s.compactions = 1;
        s.least_output = Some(256);
        for _ in 0..10 {
            s.add_fact("user requests", [false, true, true]);
        }
        s
    };
    assert!(check(4096, "once", &clean()).is_empty());

    let mut records = clean();
    records.records = 1;
    let mut floor = clean();
    floor.least_output = Some(255);
    let mut repeated = clean();
    repeated.repeated = 1;
    let mut over = clean();
    over.over_bound = 1;
    let mut failed = clean();
    failed.failures.push("send 1 failed".to_owned());
    let mut forgot = clean();
    forgot.add_fact("user requests", [false, false, false]);
    for (what, s) in [
        ("record", records),
        ("floor", floor),
        ("repeated", repeated),
        ("bound", over),
        ("failure", failed),
        ("forgotten", forgot),
    ] {
        assert_eq!(check(4096, "once", &s).len(), 1, "{what}");
    }
}
