//! Bad input exits with 2 and names the file, the line and the field; failures exit with 1.

use crate::support::{Sandbox, scrub};

#[test]
fn a_malformed_line_names_file_line_and_field() {
    let sb = Sandbox::new();
    let path = sb.write(
        "bad.jsonl",
        concat!(
            "{\"type\":\"message\",\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"}]}\n",
            "{\"type\":\"message\",\"role\":\"assistant\",\"content\":[{\"type\":\"tool_use\",\"id\":\"t1\",\"name\":\"x\",\"input\":{}}]}\n",
            "{\"type\":\"message\",\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"content\":\"ok\"}]}\n",
        ),
    );
    let before = std::fs::read(&path).unwrap();
    for args in [
        vec!["context", "bad.jsonl"],
        vec!["compact", "bad.jsonl"],
        vec!["transcript", "bad.jsonl"],
    ] {
        let run = sb.run(&args);
        run.expect_code(2);
        assert!(
            run.stderr.contains("bad.jsonl: line 3, column")
                && run.stderr.contains("content[0].tool_use_id: missing field"),
            "{}",
            run.stderr
        );
    }
    assert_eq!(
        std::fs::read(&path).unwrap(),
        before,
        "the file was touched"
    );
}

#[test]
fn missing_directory_and_binary_files_are_bad_input() {
    let sb = Sandbox::new();
    let run = sb.run(&["context", "nope.jsonl"]);
    run.expect_code(2);
    assert!(
        run.stderr.contains("nope.jsonl: session file not found"),
        "{}",
        run.stderr
    );

    std::fs::create_dir_all(sb.work().join("adir")).unwrap();
    let run = sb.run(&["context", "adir"]);
    run.expect_code(2);
    assert!(
        run.stderr.contains("adir: is a directory"),
        "{}",
        run.stderr
    );

    std::fs::write(sb.work().join("bin.jsonl"), [0xff, 0xfe, b'{', b'\n']).unwrap();
    let run = sb.run(&["context", "bin.jsonl"]);
    run.expect_code(2);
    assert!(run.stderr.contains("bin.jsonl: line 1"), "{}", run.stderr);
}

#[test]
fn an_empty_file_is_bad_input_for_every_command_that_reads_it() {
    let sb = Sandbox::new();
    sb.write("empty.jsonl", "");
    for args in [
        &["context", "empty.jsonl", "--json"][..],
        &["transcript", "empty.jsonl"],
        &["compact", "empty.jsonl", "--provider", "offline"],
        &[
            "compact",
            "empty.jsonl",
            "--provider",
            "offline",
            "--dry-run",
        ],
    ] {
        let run = sb.run(args);
        run.expect_code(2);
        assert!(
            run.stderr
                .contains("empty.jsonl: the session is empty: no entries yet"),
            "{args:?}: {}",
            run.stderr
        );
    }
    // Nothing was written to it.
    assert_eq!(std::fs::read(sb.work().join("empty.jsonl")).unwrap(), b"");
}

#[test]
fn a_torn_last_line_is_a_warning_not_an_error() {
    let sb = Sandbox::new();
    let path = sb.example("debugging.jsonl");
    let mut bytes = std::fs::read(&path).unwrap();
    bytes.extend_from_slice(b"{\"type\":\"message\",\"role\":\"us");
    std::fs::write(&path, &bytes).unwrap();
    let run = sb.run(&["context", path.to_str().unwrap(), "--json"]);
    run.expect_code(0);
    assert!(
        run.stderr.contains("warning") && run.stderr.contains("torn last line"),
        "{}",
        run.stderr
    );
    assert_eq!(run.json()["messages"].as_array().unwrap().len(), 27);
}

#[test]
fn bad_usage_is_exit_2() {
    let sb = Sandbox::new();
    sb.run(&["context"]).expect_code(2);
    sb.run(&["frobnicate"]).expect_code(2);
    let run = sb.run(&["context", "x.jsonl", "--provider", "acme"]);
    run.expect_code(2);
    assert!(
        run.stderr.contains("unknown provider `acme`"),
        "{}",
        run.stderr
    );
}

#[test]
fn a_bad_config_file_names_file_line_and_key() {
    let sb = Sandbox::new();
    sb.write(
        ".panto/config.toml",
        "provider = \"openai\"\nkeep_tokenz = 5\n",
    );
    let run = sb.run(&["config"]);
    run.expect_code(2);
    let err = scrub(&run.stderr, &sb);
    assert!(
        err.contains(
            "[work]/.panto/config.toml: line 2, column 1: unknown key `keep_tokenz`; did you mean `keep_tokens`?"
        ),
        "{err}"
    );
}

#[test]
fn an_empty_compaction_prompt_override_is_bad_input() {
    let sb = Sandbox::new();
    let path = sb.example("debugging.jsonl");
    sb.write(".panto/COMPACTION.md", "  \n");
    let run = sb.run(&["compact", path.to_str().unwrap(), "--dry-run"]);
    run.expect_code(2);
    assert!(
        run.stderr.contains("COMPACTION.md is empty"),
        "{}",
        run.stderr
    );
}

#[test]
fn a_missing_key_names_its_variable() {
    let sb = Sandbox::new();
    for (provider, var) in [
        ("anthropic", "ANTHROPIC_API_KEY"),
        ("openai", "OPENAI_API_KEY"),
        ("openai-responses", "OPENAI_API_KEY"),
        ("gemini", "GEMINI_API_KEY"),
    ] {
        let run = sb.run(&[
            "send",
            "k.jsonl",
            "hi",
            "--provider",
            provider,
            "--model",
            "m",
        ]);
        run.expect_code(2);
        assert!(run.stderr.contains(var), "{provider}: {}", run.stderr);
        assert!(
            !sb.work().join("k.jsonl").exists(),
            "{provider}: a session was created"
        );
    }
}

#[test]
fn an_unreachable_base_url_keeps_the_prompt_and_says_what_to_check() {
    let sb = Sandbox::new();
    // A port that nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let base = format!("http://127.0.0.1:{port}/v1");
    let mut cmd = sb.openai(&["send", "u.jsonl", "Keep this prompt."], &base);
    // One attempt is enough to show the message; no retries to wait for.
    sb.write(".panto/config.toml", "retries = 0\n");
    cmd.env("OPENAI_API_KEY", "k");
    let run = sb.run_with(cmd);
    run.expect_code(1);
    // panto's sentence first, the library's words as the cause on a line of their own, then
    // the advice.
    let lines: Vec<&str> = run.stderr.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.starts_with("panto: connection failed: "))
        .unwrap_or_else(|| panic!("{}", run.stderr));
    assert_eq!(
        lines[at],
        format!(
            "panto: connection failed: connection refused by 127.0.0.1:{port}: nothing is listening there"
        )
    );
    assert!(lines[at + 1].starts_with("cause: "), "{}", run.stderr);
    assert!(!lines[at].contains("os error"), "{}", run.stderr);
    assert!(
        lines[at + 2].starts_with(&format!(
            "hint: check that the server at {base} is running; another URL: --base-url URL, OPENAI_BASE_URL, or `base_url = \"URL\"` in "
        )),
        "{}",
        run.stderr
    );
    let file = std::fs::read_to_string(sb.work().join("u.jsonl")).unwrap();
    assert!(
        file.contains("Keep this prompt."),
        "the prompt was lost: {file}"
    );
}

#[test]
fn every_command_has_an_example_in_its_help() {
    let sb = Sandbox::new();
    for command in [
        "context",
        "transcript",
        "compact",
        "send",
        "chat",
        "config",
        "trust",
    ] {
        let run = sb.run(&[command, "--help"]);
        run.expect_code(0);
        assert!(run.stdout.contains("Example"), "{command}: {}", run.stdout);
        assert!(
            run.stdout.contains(&format!("panto {command}")),
            "{command}: {}",
            run.stdout
        );
    }
}

/// Issue 39, point 8: `panto compact --json` that fails prints one JSON document on stdout
/// (`--json` promises one), saying nothing was written and why, besides stderr and exit 1.
#[test]
fn a_failed_compact_json_prints_one_document() {
    let sb = Sandbox::new();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let base = format!("http://127.0.0.1:{port}/v1");
    let path = sb.example("debugging.jsonl");
    let before = std::fs::read(&path).unwrap();
    sb.write(".panto/config.toml", "retries = 0\n");
    let mut cmd = sb.openai(
        &[
            "compact",
            path.to_str().unwrap(),
            "--json",
            "--keep-tokens",
            "50",
        ],
        &base,
    );
    cmd.env("OPENAI_API_KEY", "k");
    let run = sb.run_with(cmd);
    run.expect_code(1);
    let doc = run.json();
    assert_eq!(doc["written"], false, "{doc}");
    assert!(doc["summary"].is_null(), "{doc}");
    let error = doc["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("nothing was written") && error.contains("connection"),
        "{doc}"
    );
    assert!(run.stderr.contains("nothing was written"), "{}", run.stderr);
    assert_eq!(std::fs::read(&path).unwrap(), before);
}
