//! Advice that works as given (issue 30): each hint panto prints is followed literally, by
//! taking the file, the lines, the flag or the command it names from its own text, and the
//! command then succeeds (or gets past what the hint was about).

use crate::fake_model::{FakeModel, Protocol};
use crate::support::Sandbox;

/// The text between `start` and the next `end` in `text`.
fn between<'a>(text: &'a str, start: &str, end: &str) -> &'a str {
    let rest = text
        .split_once(start)
        .unwrap_or_else(|| panic!("{start:?} not in:\n{text}"))
        .1;
    rest.split(end).next().unwrap()
}

/// Appends `lines` to the file at `path`, creating it and its folder.
fn append(path: &str, lines: &str) {
    let path = std::path::Path::new(path);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let mut text = std::fs::read_to_string(path).unwrap_or_default();
    text.push_str(lines);
    text.push('\n');
    std::fs::write(path, text).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_provider_the_lines_it_shows_in_the_file_it_names() {
    let server = FakeModel::new(Protocol::Anthropic, 1_000_000).start().await;
    let sb = Sandbox::new();
    let run = sb.run(&["send", "s.jsonl", "hello"]);
    run.expect_code(2);
    // The hint names a file and the lines to put in it.
    let file = between(&run.stderr, "or once for every command, in ", ":\n");
    let lines: Vec<&str> = between(&run.stderr, ":\n    provider", "\n(")
        .lines()
        .collect();
    let block = format!("provider{}\n{}", lines[0], lines[1].trim());
    assert_eq!(
        block,
        "provider = \"anthropic\"\nmodel = \"claude-sonnet-4-5\""
    );
    append(file, &block);
    // With the key it names (and a base URL to reach the loopback server), it works.
    let mut cmd = sb.command(&["send", "s.jsonl", "hello"]);
    cmd.env("ANTHROPIC_API_KEY", "k")
        .env("ANTHROPIC_BASE_URL", server.uri());
    let run = sb.run_with(cmd);
    run.expect_code(0);
    assert_eq!(run.stdout.trim(), "Reply 1 from claude-sonnet-4-5.");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_model_the_line_it_shows_in_the_file_it_names() {
    let server = FakeModel::new(Protocol::OpenAiChat, 1_000_000)
        .start()
        .await;
    let sb = Sandbox::new();
    let base = format!("{}/v1", server.uri());
    let args = [
        "send",
        "s.jsonl",
        "hello",
        "--provider",
        "openai",
        "--base-url",
        &base,
    ];
    let mut cmd = sb.command(&args);
    cmd.env("OPENAI_API_KEY", "k");
    let run = sb.run_with(cmd);
    run.expect_code(2);
    let line = between(&run.stderr, "or write `", "` in ");
    let file = between(&run.stderr, &format!("or write `{line}` in "), "\n").trim();
    append(file, &line.replace("NAME", "my-model"));
    let mut cmd = sb.command(&args);
    cmd.env("OPENAI_API_KEY", "k");
    let run = sb.run_with(cmd);
    run.expect_code(0);
    assert_eq!(run.stdout.trim(), "Reply 1 from my-model.");
}

#[test]
fn an_unknown_key_the_key_it_suggests() {
    let sb = Sandbox::new();
    let file = sb.write(".panto/config.toml", "modle = \"gpt-4o\"\n");
    let run = sb.run(&["config"]);
    run.expect_code(2);
    let suggested = between(&run.stderr, "did you mean `", "`?");
    assert_eq!(suggested, "model");
    std::fs::write(&file, format!("{suggested} = \"gpt-4o\"\n")).unwrap();
    let run = sb.run(&["config"]);
    run.expect_code(0);
    assert!(
        run.stdout.lines().any(|l| l.starts_with("model ")
            && l.contains("= gpt-4o ")
            && l.contains("project file")),
        "{}",
        run.stdout
    );
}

#[test]
fn an_untrusted_project_the_command_it_names() {
    let sb = Sandbox::new();
    sb.write(".panto/config.toml", "provider = \"openai\"\n");
    let run = sb.run(&["config"]);
    run.expect_code(0);
    let command = between(&run.stderr, "run `", "`");
    let dir = command
        .strip_prefix("panto trust ")
        .unwrap_or_else(|| panic!("{command}"));
    sb.run(&["trust", dir]).expect_code(0);
    let run = sb.run(&["config"]);
    run.expect_code(0);
    assert!(!run.stderr.contains("ignoring"), "{}", run.stderr);
    assert!(
        run.stdout.lines().any(|l| l.starts_with("provider ")
            && l.contains("= openai ")
            && l.contains("project file")),
        "{}",
        run.stdout
    );
}

#[test]
fn nothing_to_compact_the_flag_it_names() {
    let sb = Sandbox::new();
    let path = sb.example("debugging.jsonl");
    let p = path.to_str().unwrap();
    // A budget given on the command line is honoured as it is: everything fits.
    let run = sb.run(&["compact", p, "--dry-run", "--keep-tokens", "50000"]);
    run.expect_code(0);
    assert!(run.stderr.contains("nothing to compact"), "{}", run.stderr);
    assert!(
        run.stderr
            .contains("a smaller --keep-tokens summarizes the older part")
    );
    let run = sb.run(&["compact", p, "--dry-run", "--keep-tokens", "1500"]);
    run.expect_code(0);
    assert!(
        run.stderr.contains("dry run: nothing was written"),
        "{}",
        run.stderr
    );
    // "without it a manual compaction keeps at most half of the conversation"
    let run = sb.run(&["compact", p, "--dry-run"]);
    run.expect_code(0);
    assert!(
        run.stderr.contains("dry run: nothing was written"),
        "{}",
        run.stderr
    );
}

#[test]
fn a_compaction_that_saves_nothing_the_command_it_gives() {
    let sb = Sandbox::new();
    let path = sb.example("compacted-twice.jsonl");
    let p = path.to_str().unwrap();
    let before = std::fs::read(&path).unwrap();
    let run = sb.run(&["compact", p]);
    run.expect_code(1);
    assert!(
        run.stderr
            .contains("the compaction would not make the conversation smaller"),
        "{}",
        run.stderr
    );
    assert_eq!(std::fs::read(&path).unwrap(), before, "it was written");
    let command = between(&run.stderr, "hint: `", "`");
    let args: Vec<&str> = command.split(' ').collect();
    assert_eq!(args[0], "panto");
    sb.run(&args[1..]).expect_code(0);
    assert!(
        std::fs::read(&path).unwrap().len() > before.len(),
        "nothing was written"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_connection_the_flag_it_names() {
    let server = FakeModel::new(Protocol::OpenAiChat, 1_000_000)
        .start()
        .await;
    let sb = Sandbox::new();
    sb.write(".panto/config.toml", "retries = 0\n");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut cmd = sb.openai(
        &["send", "s.jsonl", "hi"],
        &format!("http://127.0.0.1:{port}/v1"),
    );
    cmd.env("OPENAI_API_KEY", "k");
    let run = sb.run_with(cmd);
    run.expect_code(1);
    let flag = between(&run.stderr, "another URL: ", " URL,");
    assert_eq!(flag, "--base-url");
    // The same command with the flag naming the running server: the prompt that stayed in the
    // session is answered together with the new one.
    let mut cmd = sb.openai(&["send", "s.jsonl", "hi"], &format!("{}/v1", server.uri()));
    cmd.env("OPENAI_API_KEY", "k");
    sb.run_with(cmd).expect_code(0);
}

#[test]
fn a_bad_value_the_example_it_shows() {
    let sb = Sandbox::new();
    let file = sb.write(".panto/config.toml", "keep_tokens = \"lots\"\n");
    let run = sb.run(&["config"]);
    run.expect_code(2);
    let example = between(&run.stderr, "like ", "; it is");
    assert_eq!(example, "keep_tokens = 20000");
    std::fs::write(&file, format!("{example}\n")).unwrap();
    sb.run(&["config"]).expect_code(0);
}
