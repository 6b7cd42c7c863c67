//! The main job on a fresh machine: the offline summarizer, `context`, `transcript` and
//! `compact`, with the JSON documents of Contract 3.

use insta::assert_snapshot;
use serde_json::Value;

use crate::support::{Sandbox, scrub};

#[test]
fn context_json_of_a_session_compacted_twice() {
    let sb = Sandbox::new();
    let path = sb.example("compacted-twice.jsonl");
    let run = sb.run(&["context", path.to_str().unwrap(), "--json"]);
    run.expect_code(0);
    let doc = run.json();
    let messages = doc["messages"].as_array().unwrap();
    // The latest compaction leads, as one user message with one compaction block.
    assert_eq!(messages[0]["role"], "user");
    assert_eq!(messages[0]["content"][0]["type"], "compaction");
    assert!(
        messages[0]["content"][0]["summary"]
            .as_str()
            .unwrap()
            .contains("23 passed")
    );
    // Then the three kept copies of c2 and the four messages written after it.
    assert_eq!(messages.len(), 1 + 3 + 4);
    assert!(messages[1..4].iter().all(|m| m["kept_by"] == "c2"));
    assert_eq!(doc["turns"], 5);
    assert!(doc["estimated_tokens"].as_u64().unwrap() > 100);
    assert_eq!(doc["compaction"]["id"], "c2");
}

#[test]
fn context_for_humans_lists_messages_with_sizes() {
    let sb = Sandbox::new();
    let path = sb.example("debugging.jsonl");
    let run = sb.run(&["context", path.to_str().unwrap()]);
    run.expect_code(0);
    assert!(
        run.stdout.contains("27 messages, 3 exchanges;"),
        "{}",
        run.stdout
    );
    assert!(run.stdout.contains("[bash {\"command\""), "{}", run.stdout);
}

#[test]
fn transcript_prints_the_compaction_user_prompt() {
    let sb = Sandbox::new();
    let path = sb.example("debugging.jsonl");
    let run = sb.run(&[
        "transcript",
        path.to_str().unwrap(),
        "--keep-tokens",
        "1500",
    ]);
    run.expect_code(0);
    assert!(
        run.stdout
            .contains("<transcript>\n[User]: The `parse_duration` tests")
    );
    assert!(run.stdout.contains("[Tool error bash (toolu_04)]:"));
    assert!(run.stdout.trim_end().ends_with("</transcript>"));
    assert!(!run.stdout.contains("<previous-summary>"));
}

#[test]
fn dry_run_summaries_of_the_example_sessions() {
    for (name, keep) in [
        ("debugging.jsonl", "1500"),
        ("design-discussion.jsonl", "1500"),
        ("compacted-twice.jsonl", "200"),
    ] {
        let sb = Sandbox::new();
        let path = sb.example(name);
        let before = std::fs::read(&path).unwrap();
        // Forced: the snapshots show what the summarizer writes, also where it saves nothing
        // (compacted-twice's prefix is mostly a pasted summary, which the summary carries).
        let run = sb.run(&[
            "compact",
            path.to_str().unwrap(),
            "--dry-run",
            "--force",
            "--keep-tokens",
            keep,
        ]);
        run.expect_code(0);
        assert_eq!(
            std::fs::read(&path).unwrap(),
            before,
            "dry run wrote to {name}"
        );
        assert!(run.stderr.contains("dry run: nothing was written"));
        assert_snapshot!(name.trim_end_matches(".jsonl"), run.stdout);
    }
}

#[test]
fn compact_json_document_and_the_session_after_it() {
    let sb = Sandbox::new();
    let path = sb.example("debugging.jsonl");
    let p = path.to_str().unwrap();
    let before = std::fs::read(&path).unwrap();
    let run = sb.run(&["compact", p, "--json", "--keep-tokens", "1500"]);
    run.expect_code(0);
    let doc = run.json();
    for key in [
        "summary",
        "tokens_before",
        "tokens_after",
        "kept_turns",
        "summarized_turns",
        "model",
    ] {
        assert!(doc.get(key).is_some(), "missing {key} in {doc}");
    }
    assert_eq!(doc["model"], "offline-extractive");
    let (kept, summarized) = (
        doc["kept_turns"].as_u64().unwrap(),
        doc["summarized_turns"].as_u64().unwrap(),
    );
    assert!(kept >= 1 && summarized >= 1, "{doc}");
    assert!(doc["tokens_after"].as_u64() < doc["tokens_before"].as_u64());

    // Appended, never rewritten: the old bytes are a prefix of the new file.
    let after = std::fs::read(&path).unwrap();
    assert!(after.len() > before.len() && after.starts_with(&before));

    // The next context is the summary followed by the kept turns.
    let ctx = sb.run(&["context", p, "--json"]).expect_code(0).json();
    assert_eq!(ctx["messages"][0]["content"][0]["summary"], doc["summary"]);
    assert_eq!(ctx["turns"].as_u64().unwrap(), kept);
}

#[test]
fn a_second_compaction_merges_the_first_summary() {
    let sb = Sandbox::new();
    let path = sb.example("debugging.jsonl");
    let p = path.to_str().unwrap();
    let first = sb
        .run(&["compact", p, "--json", "--keep-tokens", "3000"])
        .expect_code(0)
        .json();
    let second = sb
        .run(&["compact", p, "--json", "--keep-tokens", "300"])
        .expect_code(0)
        .json();
    let first = first["summary"].as_str().unwrap();
    let second = second["summary"].as_str().unwrap();
    // The goal of the first summary survives, and the tools are counted across both.
    assert!(first.contains("## Goal") && second.contains("## Goal"));
    let goal = |s: &str| {
        s.split("## Goal\n")
            .nth(1)
            .unwrap()
            .lines()
            .next()
            .unwrap()
            .to_owned()
    };
    assert_eq!(goal(first), goal(second));
    let bash = |s: &str| -> u64 {
        s.lines()
            .find_map(|l| l.strip_prefix("- `bash` ×"))
            .map_or(0, |n| n.parse().unwrap())
    };
    assert!(bash(second) > bash(first), "{first}\n---\n{second}");
}

#[test]
fn instructions_pick_out_matching_lines() {
    let sb = Sandbox::new();
    let path = sb.example("design-discussion.jsonl");
    let run = sb.run(&[
        "compact",
        path.to_str().unwrap(),
        "--dry-run",
        "--json",
        "--keep-tokens",
        "800",
        "--instructions",
        "keep everything about Lua and hash tags",
    ]);
    run.expect_code(0);
    let summary = run.json()["summary"].as_str().unwrap().to_owned();
    assert!(summary.contains("## Asked to keep"), "{summary}");
    assert!(summary.contains("Instructions for this run: keep everything about Lua and hash tags"));
    assert!(summary.to_lowercase().contains("lua"), "{summary}");
}

#[test]
fn nothing_to_compact_is_a_normal_outcome() {
    let sb = Sandbox::new();
    let path = sb.write(
        "one.jsonl",
        "{\"type\":\"message\",\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"hi\"}]}\n",
    );
    let p = path.to_str().unwrap();
    let run = sb.run(&["compact", p]);
    run.expect_code(0);
    assert!(run.stderr.contains("nothing to compact"), "{}", run.stderr);
    let doc = sb.run(&["compact", p, "--json"]).expect_code(0).json();
    assert_eq!(doc["nothing_to_compact"], true);
    assert_eq!(doc["summary"], Value::Null);
}

#[test]
fn send_without_a_provider_says_how_to_configure_one() {
    let sb = Sandbox::new();
    let run = sb.run(&["send", "new.jsonl", "hello"]);
    run.expect_code(2);
    assert_snapshot!(scrub(&run.stderr, &sb));
}

#[test]
fn the_offline_summary_is_bounded_on_a_long_session() {
    let sb = Sandbox::new();
    let mut lines = Vec::new();
    for i in 0..1500 {
        let user = serde_json::json!({"type": "message", "role": "user", "content": [{"type": "text", "text": format!("Request {i}: change `item_{i}` in src/mod_{i}.rs and keep going.")}]});
        let call = serde_json::json!({"type": "message", "role": "assistant", "content": [
            {"type": "text", "text": format!("Working on `item_{i}`.")},
            {"type": "tool_use", "id": format!("t{i}"), "name": format!("tool_{}", i % 40), "input": {"path": format!("src/mod_{i}.rs")}}]});
        let result = serde_json::json!({"type": "message", "role": "user", "content": [
            {"type": "tool_result", "tool_use_id": format!("t{i}"), "content": format!("error: failure number {i}"), "is_error": i % 3 == 0}]});
        lines.extend([user, call, result]);
    }
    let summary = dry_run_summary(&sb, "long.jsonl", &lines, "100");
    // The offline text is bounded, and so is the ledger's rendering after it (half of the
    // 8,192-token output budget, 16,384 characters, and its heading and closing note).
    let (own, ledger) = summary.split_once("## Ledger").expect("the ledger follows");
    assert!(own.len() < 4_000, "{} bytes", own.len());
    assert!(ledger.len() < 16_384 + 400, "{} bytes", ledger.len());
    // Bounded, but both say what they left out, and the most recent request is there.
    assert!(
        own.contains("more left out")
            && ledger.contains("(Left out here: 1376 requests, 476 errors, 3832 identifiers and 749 files read; the compaction entry keeps them whole"),
        "{summary}"
    );
    assert!(
        ledger.contains("Request 1499: change `item_1499`"),
        "{ledger}"
    );
    assert!(
        summary.contains("Request 0: change `item_0`"),
        "the goal is the first prompt"
    );
}

#[test]
fn an_earlier_summary_pasted_in_a_message_is_carried_whole_and_a_slash_command_is_no_goal() {
    // The shape issue 18 describes: a session that opens with `/mode`, then an earlier
    // agent's long handoff pasted as a message, whose pending tasks come at its end.
    let sb = Sandbox::new();
    let mut handoff =
        String::from("This session is being continued from a previous conversation. Summary:\n");
    for i in 0..300 {
        handoff.push_str(&format!("## Part {i}\n- Detail {i} about `module_{i}`.\n"));
    }
    handoff.push_str("## Pending tasks\n- Port user-message-selector.ts to the theme API.\n");
    assert!(handoff.len() > 10_000);
    let lines = [
        serde_json::json!({"type": "message", "role": "user", "content": [{"type": "text", "text": "/mode"}]}),
        serde_json::json!({"type": "message", "role": "user", "content": [{"type": "text", "text": handoff}]}),
        serde_json::json!({"type": "message", "role": "assistant", "content": [{"type": "text", "text": "Picking up the pending tasks."}]}),
        serde_json::json!({"type": "message", "role": "user", "content": [{"type": "text", "text": "Start with the selector."}]}),
        serde_json::json!({"type": "message", "role": "assistant", "content": [{"type": "text", "text": "Reading it now."}]}),
        serde_json::json!({"type": "message", "role": "user", "content": [{"type": "text", "text": "Then the footer."}]}),
    ];
    let summary = dry_run_summary(&sb, "pasted.jsonl", &lines, "10");
    let (own, ledger) = summary.split_once("## Ledger").unwrap();
    assert!(
        own.contains("- Port user-message-selector.ts to the theme API."),
        "the pending tasks were lost:\n{own}"
    );
    assert!(!own.contains("## Goal\n/mode"), "{own}");
    assert!(ledger.contains("Start with the selector."), "{ledger}");
    assert!(!ledger.contains("1. /mode"), "{ledger}");
}

#[test]
fn a_handoff_pasted_twice_is_carried_once_and_two_different_ones_both() {
    let handoff = |name: &str| {
        let mut h = format!("Summary of the {name} session:\n");
        for i in 0..80 {
            h.push_str(&format!("## Part {i}\n- Detail {i} of {name}.\n"));
        }
        h
    };
    let user = |text: &str| serde_json::json!({"type": "message", "role": "user", "content": [{"type": "text", "text": text}]});
    let assistant = |text: &str| serde_json::json!({"type": "message", "role": "assistant", "content": [{"type": "text", "text": text}]});
    let lines = [
        user(&handoff("first")),
        assistant("Noted."),
        user(&handoff("first")),
        assistant("Noted again."),
        user(&handoff("second")),
        assistant("Noted too."),
        user("Go on."),
        assistant("Going on."),
        user("Then stop."),
    ];
    let sb = Sandbox::new();
    let summary = dry_run_summary(&sb, "pasted-twice.jsonl", &lines, "10");
    let (own, _) = summary.split_once("## Ledger").unwrap();
    assert_eq!(
        own.matches("Summary of the first session:").count(),
        1,
        "{own}"
    );
    assert_eq!(
        own.matches("Summary of the second session:").count(),
        1,
        "{own}"
    );
}

/// Writes `lines` as the session `name` and returns the summary of a dry-run compaction that
/// keeps `keep` tokens (forced: what the summarizer writes is the point, whether it saves or
/// not; a summary that carries a pasted one whole can be larger than what it replaces).
fn dry_run_summary(sb: &Sandbox, name: &str, lines: &[Value], keep: &str) -> String {
    let text: String = lines.iter().map(|v| format!("{v}\n")).collect();
    let path = sb.write(name, &text);
    let run = sb.run(&[
        "compact",
        path.to_str().unwrap(),
        "--dry-run",
        "--force",
        "--json",
        "--keep-tokens",
        keep,
    ]);
    run.expect_code(0);
    run.json()["summary"].as_str().unwrap().to_owned()
}

/// The offline summarizer quotes the conversation by design, so a summary of it is never
/// refused as an echo: here an earlier summary (carried whole) and the last message share the
/// same pasted code, which the copy check would otherwise take for a summary that only copies.
#[test]
fn an_offline_summary_that_quotes_pasted_code_is_never_refused_as_a_copy() {
    let code = "fn loads_the_example() {\n    let s = load(Path::new(\"tests/fixtures/a.jsonl\")).unwrap();\n    assert_eq!(s.messages.len(), 12, \"{:?}\", s);\n}\n".repeat(6);
    let mut lines = vec![
        serde_json::json!({"type": "compaction", "id": "c1", "summary": format!("## Goal\nFix the loader.\n\n## Files\n{code}"), "kept_messages": 0}),
    ];
    for i in 0..6 {
        lines.push(serde_json::json!({"type": "message", "id": format!("u{i}"), "role": "user",
            "content": [{"type": "text", "text": format!("Round {i}: look at this again.\n{code}")}]}));
        lines.push(
            serde_json::json!({"type": "message", "id": format!("a{i}"), "role": "assistant",
            "content": [{"type": "text", "text": code.clone()}]}),
        );
    }
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    let sb = Sandbox::new();
    let path = sb.write("pasted.jsonl", &text);
    let run = sb.run(&[
        "compact",
        path.to_str().unwrap(),
        "--dry-run",
        "--json",
        "--keep-tokens",
        "50",
    ]);
    run.expect_code(0);
    assert!(
        run.json()["summary"]
            .as_str()
            .is_some_and(|s| !s.is_empty())
    );
}

/// Issue 39, point 8: a stored ledger that cannot be read is an error that says where it is,
/// not a ledger that "records nothing"; an entry with no ledger at all says that.
#[test]
fn ledger_tells_an_unreadable_record_from_an_empty_one() {
    let sb = Sandbox::new();
    let head = r#"{"type":"message","id":"m1","role":"user","content":[{"type":"text","text":"Fix the parser."}]}"#;
    let tail = r#"{"type":"message","id":"m2","role":"user","content":[{"type":"text","text":"And the lexer."}]}"#;
    let unreadable = sb.write(
        "unreadable.jsonl",
        &format!(
            "{head}\n{}\n{tail}\n",
            r#"{"type":"compaction","id":"c1","summary":"The parser was fixed.","ledger":"not a ledger"}"#
        ),
    );
    let run = sb.run(&["ledger", unreadable.to_str().unwrap()]);
    run.expect_code(2);
    assert!(!run.stdout.contains("records nothing"), "{}", run.stdout);
    assert!(
        run.stderr.contains("c1")
            && run.stderr.contains("`ledger`")
            && run.stderr.contains("cannot be read"),
        "{}",
        run.stderr
    );
    let none = sb.write(
        "none.jsonl",
        &format!(
            "{head}\n{}\n{tail}\n",
            r#"{"type":"compaction","id":"c1","summary":"The parser was fixed."}"#
        ),
    );
    let run = sb.run(&["ledger", none.to_str().unwrap()]);
    run.expect_code(0);
    assert!(run.stdout.contains("stores no ledger"), "{}", run.stdout);
}

#[test]
fn ledger_prints_the_whole_record_of_the_latest_compaction() {
    let sb = Sandbox::new();
    let path = sb.example("debugging.jsonl");
    let session = path.to_str().unwrap();
    // Before any compaction there is no ledger, and the command says where the turns are.
    let run = sb.run(&["ledger", session]);
    run.expect_code(0);
    assert!(
        run.stderr.contains("has not been compacted"),
        "{}",
        run.stderr
    );
    sb.run(&[
        "compact",
        session,
        "--provider",
        "offline",
        "--keep-tokens",
        "1500",
    ])
    .expect_code(0);
    let run = sb.run(&["ledger", session, "--json"]);
    run.expect_code(0);
    let doc = run.json();
    let requests = doc["requests"].as_array().unwrap();
    assert!(!requests.is_empty(), "{doc}");
    // The same record as the one stored on the entry, and readable for a person.
    let stored = std::fs::read_to_string(&path).unwrap();
    let entry: Value = stored
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .rfind(|e| e["type"] == "compaction")
        .unwrap();
    assert_eq!(entry["ledger"], doc);
    let run = sb.run(&["ledger", session]);
    run.expect_code(0);
    assert!(run.stdout.starts_with("## Ledger"), "{}", run.stdout);
    let first = requests[0].as_str().unwrap();
    assert!(
        run.stdout
            .contains(first.split_whitespace().next().unwrap()),
        "{}",
        run.stdout
    );
}

/// A chained compaction by the offline summarizer: a long summary a model wrote before, carried
/// whole, and a long prefix of new turns. What the offline summary adds about the new turns is a
/// small share of what it carries; it quotes by design and is not held to the copy-through
/// check (docs/compaction.md, 2d), which would refuse it if the 1,000 characters it adds here
/// were fewer.
#[test]
fn an_offline_summary_that_carries_a_long_earlier_summary_is_not_a_copy_through() {
    let sb = Sandbox::new();
    let earlier: String = (0..150)
        .map(|i| {
            format!(
                "- Decision {i}: module {i} keeps its parser; its tests cover the edge cases.\n"
            )
        })
        .collect();
    let mut lines = vec![serde_json::json!({"type": "compaction", "id": "c1",
        "summary": format!("## Goal\nPort the loader to TOML.\n\n## Decisions\n{earlier}"), "kept_messages": 0})];
    for i in 0..400 {
        lines.push(serde_json::json!({"type": "message", "id": format!("u{i}"), "role": "user",
            "content": [{"type": "text", "text": format!("Request {i}: move `table_{i}` to TOML. {}", "Keep the old reader until the tests pass. ".repeat(20))}]}));
        lines.push(serde_json::json!({"type": "message", "id": format!("a{i}"), "role": "assistant",
            "content": [{"type": "text", "text": format!("Moved `table_{i}`; the readers of `src/tables/t{i}.rs` follow. {}", "All checks are green again. ".repeat(20))}]}));
    }
    let summary = dry_run_summary(&sb, "chained.jsonl", &lines, "100");
    assert!(
        summary.contains("Decision 149: module 149"),
        "the earlier summary is carried"
    );
    assert!(summary.contains("table_399"), "{summary}");
}

/// The first command of README.md and the compact example of `panto --help` compact the
/// example session with the defaults: a real compaction, not "nothing to compact".
#[test]
fn the_first_example_compacts_with_the_defaults() {
    let readme = std::fs::read_to_string(crate::support::repo_root().join("README.md")).unwrap();
    let first = readme
        .split("```sh\n")
        .nth(1)
        .and_then(|block| block.lines().next())
        .unwrap();
    let args: Vec<&str> = first
        .strip_prefix("cargo run -q -p panto-cli -- ")
        .unwrap_or_else(|| panic!("README's first command changed: {first}"))
        .split(' ')
        .collect();
    let help = Sandbox::new().run(&["--help"]);
    let example = help
        .stdout
        .lines()
        .find(|l| l.trim_start().starts_with("panto compact "))
        .unwrap()
        .trim();
    assert_eq!(
        example,
        format!("panto {}", args.join(" ")),
        "README and --help differ"
    );
    let sb = Sandbox::new();
    sb.example("debugging.jsonl");
    std::fs::create_dir_all(sb.work().join("examples/sessions")).unwrap();
    std::fs::rename(
        sb.work().join("debugging.jsonl"),
        sb.work().join("examples/sessions/debugging.jsonl"),
    )
    .unwrap();
    let run = sb.run(&args);
    run.expect_code(0);
    assert!(!run.stderr.contains("nothing to compact"), "{}", run.stderr);
    assert!(
        run.stderr.contains(
            "panto: compacted (offline-extractive): conversation about 3682 -> 2724 tokens"
        ),
        "{}",
        run.stderr
    );
    assert!(run.stdout.contains("## Goal"), "{}", run.stdout);
}
