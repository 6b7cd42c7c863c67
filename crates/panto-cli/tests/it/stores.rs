//! The same `panto` on every store (issue 29): `--store` with JSONL, SQLite and PostgreSQL
//! (`PANTO_TEST_POSTGRES`; skipped with a line without one, a failure in CI). Import then export
//! gives the file back byte for byte, the effective context and the compaction are the same on
//! every store, a malformed line imports nothing, concurrent `panto send`s keep every prompt and
//! refuse the late replies with a clear message, and `kill -9` in the middle of an import leaves
//! nothing or everything (`store_checks.rs` and `store_faults.rs` have the rest).

use std::io::Write;
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::raw_http::{read_request, write_chat_reply};
use crate::support::{Run, Sandbox, repo_root};

/// The stores to run a test on: `(label, --store value)`. The PostgreSQL one gets a schema of
/// its own, so tests never see each other's sessions.
pub(crate) fn stores(test: &str) -> Vec<(&'static str, String)> {
    let mut out = vec![
        ("jsonl", "jsonl:sessions".to_owned()),
        ("sqlite", "sqlite:sessions.sqlite3".to_owned()),
    ];
    if let Some(server) = panto_store_postgres::testing::server(test) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let url = runtime.block_on(panto_store_postgres::testing::fresh_url(&server));
        out.push(("postgres", url));
    }
    out
}

/// A sandbox whose `sessions` folder exists (for the JSONL store's sessions).
pub(crate) fn sandbox() -> Sandbox {
    let sb = Sandbox::new();
    std::fs::create_dir_all(sb.work().join("sessions")).unwrap();
    sb
}

pub(crate) fn panto(sb: &Sandbox, store: &str, args: &[&str]) -> Run {
    let mut all = args.to_vec();
    all.extend(["--store", store]);
    sb.run(&all)
}

pub(crate) fn example(name: &str) -> (String, String) {
    let path = repo_root().join("examples/sessions").join(name);
    let text = std::fs::read_to_string(&path).unwrap();
    (path.display().to_string(), text)
}

#[test]
fn import_then_export_gives_the_file_back_and_the_same_context_on_every_store() {
    let sb = sandbox();
    let mut contexts = Vec::new();
    let mut compactions = Vec::new();
    for (label, store) in stores("import_then_export_gives_the_file_back") {
        for name in [
            "debugging.jsonl",
            "compacted-twice.jsonl",
            "design-discussion.jsonl",
        ] {
            let (path, text) = example(name);
            panto(&sb, &store, &["import", &path, name]).expect_code(0);
            let out = panto(&sb, &store, &["export", name]);
            out.expect_code(0);
            assert!(
                out.stdout == text,
                "{label} {name}: the export differs from the file"
            );
            let context = panto(&sb, &store, &["context", name, "--json"]);
            context.expect_code(0);
            contexts.push((label, name, context.json()));
            let compacted = panto(
                &sb,
                &store,
                &[
                    "compact",
                    name,
                    "--dry-run",
                    "--json",
                    // The same result on every store is the point, not whether it saves
                    // anything (compacted-twice's short prefix does not).
                    "--force",
                    "--keep-tokens",
                    "300",
                ],
            );
            compacted.expect_code(0);
            let mut doc = compacted.json();
            strip_ids(&mut doc);
            compactions.push((label, name, doc));
        }
        let listed = panto(&sb, &store, &["sessions"]);
        listed.expect_code(0);
        assert_eq!(
            listed.stdout, "compacted-twice.jsonl\ndebugging.jsonl\ndesign-discussion.jsonl\n",
            "{label}"
        );
    }
    // The JSONL file itself is the reference: every store loads what it loads.
    for name in [
        "debugging.jsonl",
        "compacted-twice.jsonl",
        "design-discussion.jsonl",
    ] {
        let (path, _) = example(name);
        let reference = sb.run(&["context", &path, "--json"]);
        for (label, n, doc) in &contexts {
            if *n == name {
                assert_eq!(doc, &reference.json(), "{label} {name}: effective context");
            }
        }
        let reference = sb.run(&[
            "compact",
            &path,
            "--dry-run",
            "--json",
            "--force",
            "--keep-tokens",
            "300",
        ]);
        let mut reference = reference.json();
        strip_ids(&mut reference);
        for (label, n, doc) in &compactions {
            if *n == name {
                assert_eq!(doc, &reference, "{label} {name}: compaction");
            }
        }
    }
}

#[test]
fn a_compaction_written_on_any_store_reloads_as_the_same_context() {
    let sb = sandbox();
    let (path, _) = example("debugging.jsonl");
    let mut after = Vec::new();
    for (label, store) in stores("a_compaction_written_on_any_store") {
        panto(&sb, &store, &["import", &path, "s"]).expect_code(0);
        let compacted = panto(
            &sb,
            &store,
            &["compact", "s", "--json", "--keep-tokens", "300"],
        );
        compacted.expect_code(0);
        let context = panto(&sb, &store, &["context", "s", "--json"]);
        context.expect_code(0);
        let mut doc = context.json();
        // Ids are unique per run; everything else must agree.
        strip_ids(&mut doc);
        after.push((label, doc));
        // The export holds the compaction entry with `copies_marked`, written by the compactor.
        let export = panto(&sb, &store, &["export", "s"]);
        assert!(export.stdout.contains(r#""copies_marked":true"#), "{label}");
    }
    for (label, doc) in &after[1..] {
        assert_eq!(doc, &after[0].1, "{label} differs from {}", after[0].0);
    }
}

fn strip_ids(v: &mut Value) {
    match v {
        Value::Object(map) => {
            map.remove("id");
            map.remove("kept_by");
            for (_, v) in map.iter_mut() {
                strip_ids(v);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(strip_ids),
        _ => {}
    }
}

#[test]
fn a_malformed_line_imports_nothing_and_names_the_file_line_and_field() {
    let sb = sandbox();
    let good = r#"{"type":"message","role":"user","content":[{"type":"text","text":"x"}]}"#;
    let bad = r#"{"type":"message","role":"user","content":[{"type":"tool_result"}]}"#;
    let file = sb.write("bad.jsonl", &format!("{good}\n{good}\n{bad}\n{good}\n"));
    for (label, store) in stores("a_malformed_line_imports_nothing") {
        let run = panto(&sb, &store, &["import", &file.display().to_string(), "s"]);
        run.expect_code(2);
        assert!(
            run.stderr.contains("bad.jsonl: line 3, column"),
            "{label}: {}",
            run.stderr
        );
        assert!(
            run.stderr.contains("tool_use_id"),
            "{label}: {}",
            run.stderr
        );
        assert!(
            run.stderr.contains("nothing was imported"),
            "{label}: {}",
            run.stderr
        );
        let export = panto(&sb, &store, &["export", "s"]);
        export.expect_code(2);
        assert!(export.stdout.is_empty());
    }
}

/// A model server on loopback that answers every chat request after 2 s.
fn slow_model() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}/v1", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for socket in listener.incoming() {
            let Ok(mut socket) = socket else { return };
            std::thread::spawn(move || {
                if read_request(&mut socket) {
                    std::thread::sleep(Duration::from_secs(2));
                    write_chat_reply(&mut socket, "Slow reply.");
                }
            });
        }
    });
    base
}

#[test]
fn three_concurrent_sends_keep_every_prompt_and_refuse_late_replies_clearly() {
    let base = slow_model();
    for (label, store) in stores("three_concurrent_sends") {
        let sb = sandbox();
        let prompts = ["First writer.", "Second writer.", "Third writer."];
        let children: Vec<_> = prompts
            .iter()
            .map(|prompt| {
                let mut cmd = sb.openai(&["send", "s", prompt, "--store", &store], &base);
                cmd.env("OPENAI_API_KEY", "k")
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped());
                cmd.spawn().unwrap()
            })
            .collect();
        let outputs: Vec<_> = children
            .into_iter()
            .map(|c| c.wait_with_output().unwrap())
            .collect();
        let codes: Vec<i32> = outputs.iter().map(|o| o.status.code().unwrap()).collect();
        let stderr: Vec<String> = outputs
            .iter()
            .map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
            .collect();
        let export = panto(&sb, &store, &["export", "s"]);
        export.expect_code(0);
        let entries: Vec<Value> = export
            .stdout
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let texts: Vec<String> = entries.iter().map(Value::to_string).collect();
        for prompt in prompts {
            assert_eq!(
                texts.iter().filter(|t| t.contains(prompt)).count(),
                1,
                "{label}: every prompt kept once\n{texts:#?}\n{stderr:#?}"
            );
        }
        let replies = texts.iter().filter(|t| t.contains("Slow reply.")).count();
        let winners = codes.iter().filter(|&&c| c == 0).count();
        assert!(winners >= 1, "{label}: {codes:?} {stderr:#?}");
        assert_eq!(
            replies, winners,
            "{label}: one reply per winning writer\n{texts:#?}"
        );
        for (code, err) in codes.iter().zip(&stderr) {
            if *code != 0 {
                assert_eq!(*code, 1, "{label}: {err}");
                assert!(err.contains("another writer appended"), "{label}: {err}");
                assert!(
                    err.contains("hint: another writer appended to this session"),
                    "{label}: {err}"
                );
            }
        }
    }
}

/// A model server on loopback that, while it answers its first chat request, lets another
/// writer append a prompt to the JSONL session at `session` (as another `panto` would), then
/// answers every request with a numbered reply.
fn racing_model(session: std::path::PathBuf) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}/v1", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for (n, socket) in listener.incoming().enumerate() {
            let Ok(mut socket) = socket else { return };
            if !read_request(&mut socket) {
                continue;
            }
            if n == 0 {
                let mut file = std::fs::OpenOptions::new()
                    .append(true)
                    .open(&session)
                    .unwrap();
                file.write_all(
                    b"{\"type\":\"message\",\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"Theirs.\"}]}\n",
                )
                .unwrap();
            }
            write_chat_reply(&mut socket, &format!("Reply {n}."));
        }
    });
    base
}

#[test]
fn the_same_send_after_a_lost_reply_answers_the_stored_prompt_instead_of_storing_it_again() {
    let sb = Sandbox::new();
    let session = sb.work().join("s.jsonl");
    let base = racing_model(session.clone());
    let send = || {
        let mut cmd = sb.openai(&["send", "s.jsonl", "Mine."], &base);
        cmd.env("OPENAI_API_KEY", "k");
        sb.run_with(cmd)
    };
    let first = send();
    first.expect_code(1);
    assert!(
        first
            .stderr
            .contains("Your message stays in the session: the same `panto send` again answers it without storing it twice"),
        "{}",
        first.stderr
    );
    let again = send();
    again.expect_code(0);
    assert!(
        again.stderr.contains(
            "this message is already in s.jsonl without an answer (an earlier send stored it, then failed); answering it instead of storing it again"
        ),
        "{}",
        again.stderr
    );
    assert_eq!(again.stdout.trim(), "Reply 1.");
    let lines: Vec<Value> = std::fs::read_to_string(&session)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let texts: Vec<String> = lines
        .iter()
        .map(|l| {
            format!(
                "{}: {}",
                l["role"].as_str().unwrap(),
                l["content"][0]["text"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(
        texts,
        ["user: Mine.", "user: Theirs.", "assistant: Reply 1."],
        "stored once, then answered"
    );
    // Once answered, the same message is a new prompt.
    let third = send();
    third.expect_code(0);
    assert!(!third.stderr.contains("already in"), "{}", third.stderr);
}

/// A Contract 1 file of `rounds` rounds of four messages with long tool results (about 4 KiB a
/// round), for an import that takes a while.
fn big_file(rounds: usize) -> String {
    let mut out = String::new();
    let body = "fn main() { println!(\\\"hello\\\"); }\\n".repeat(100);
    for i in 0..rounds {
        out.push_str(&format!(
            r#"{{"type":"message","id":"u{i}","role":"user","content":[{{"type":"text","text":"round {i}"}}]}}"#
        ));
        out.push('\n');
        out.push_str(&format!(
            r#"{{"type":"message","id":"a{i}","role":"assistant","content":[{{"type":"tool_use","id":"t{i}","name":"read","input":{{"path":"f{i}.rs"}}}}]}}"#
        ));
        out.push('\n');
        out.push_str(&format!(
            r#"{{"type":"message","id":"r{i}","role":"user","content":[{{"type":"tool_result","tool_use_id":"t{i}","content":"{body}"}}]}}"#
        ));
        out.push('\n');
        out.push_str(&format!(
            r#"{{"type":"message","id":"b{i}","role":"assistant","content":[{{"type":"text","text":"done {i}"}}]}}"#
        ));
        out.push('\n');
    }
    out
}

#[cfg(unix)]
#[test]
fn kill_9_in_the_middle_of_an_import_leaves_nothing_half_written() {
    let sb = sandbox();
    let text = big_file(1500);
    let file = sb.write("big.jsonl", &text).display().to_string();
    for (label, store) in stores("kill_9_in_the_middle_of_an_import") {
        // How long a whole import takes here, to kill the next ones at moments spread over
        // theirs (the rows stream all along; the commit, or the rename, comes last).
        let started = Instant::now();
        panto(&sb, &store, &["import", &file, "timing"]).expect_code(0);
        let whole = started.elapsed();
        for (i, share) in [0.5, 0.75, 0.85, 0.92, 0.97].into_iter().enumerate() {
            let name = format!("k{i}");
            let mut cmd = sb.command(&["import", &file, &name, "--store", &store]);
            cmd.stdout(Stdio::null()).stderr(Stdio::null());
            let mut child = cmd.spawn().unwrap();
            std::thread::sleep(whole.mul_f64(share));
            Command::new("kill")
                .args(["-9", &child.id().to_string()])
                .status()
                .unwrap();
            child.wait().unwrap();
            let export = panto(&sb, &store, &["export", &name]);
            let lines = export.stdout.lines().count();
            eprintln!("{label} killed at {share} of {whole:?}: {lines} entries");
            // An import is one unit on every store: the JSONL store renames a whole file into
            // place, the databases commit one transaction.
            assert!(
                lines == 0 || export.stdout == text,
                "{label} at {share} of the import: {lines} of {} entries were written",
                text.lines().count()
            );
            if export.code == 0 && lines > 0 {
                panto(&sb, &store, &["context", &name]).expect_code(0);
            }
        }
    }
}

#[test]
fn a_store_password_is_never_printed_and_an_untrusted_project_cannot_choose_the_store() {
    let sb = sandbox();
    sb.write(
        ".panto/config.toml",
        "store = \"sqlite:elsewhere.sqlite3\"\n",
    );
    let run = sb.run(&["config"]);
    run.expect_code(0);
    assert!(
        run.stdout.contains("store                         = jsonl"),
        "{}",
        run.stdout
    );
    assert!(run.stderr.contains("ignoring store from"), "{}", run.stderr);
    let url = "postgres://agent:hunter2-secret@127.0.0.1:1/db";
    let run = sb.run(&["config", "--store", url]);
    run.expect_code(0);
    assert!(
        run.stdout
            .contains("= postgres://agent:<redacted>@127.0.0.1:1/db # flag --store"),
        "{}",
        run.stdout
    );
    for args in [
        &["context", "s", "--store", url][..],
        &["sessions", "--store", url],
        &["import", "x.jsonl", "s", "--store", url],
    ] {
        let run = sb.run(args);
        let all = format!("{}{}", run.stdout, run.stderr);
        assert!(!all.contains("hunter2"), "{args:?}: {all}");
    }
    let run = sb.run(&["context", "s", "--store", url]);
    run.expect_code(1);
    assert!(
        run.stderr
            .contains("postgres://agent@127.0.0.1:1/db: cannot connect"),
        "{}",
        run.stderr
    );
    let run = sb.run(&["context", "s", "--store", "mysql://u:hunter2-secret@h/db"]);
    run.expect_code(2);
    assert!(
        run.stderr
            .contains("unknown store `mysql://u:<redacted>@h/db`"),
        "{}",
        run.stderr
    );
}

#[test]
fn undo_on_every_store_steps_back_one_compaction_at_a_time_and_survives_export() {
    let sb = sandbox();
    let (path, _) = example("debugging.jsonl");
    let original = sb.run(&["context", &path, "--json"]).json();
    for (label, store) in stores("undo_on_every_store") {
        panto(&sb, &store, &["import", &path, "s"]).expect_code(0);
        let context = |sb: &Sandbox| {
            let out = panto(sb, &store, &["context", "s", "--json"]);
            out.expect_code(0);
            out.json()
        };
        panto(&sb, &store, &["compact", "s", "--keep-tokens", "600"]).expect_code(0);
        let first = context(&sb);
        panto(&sb, &store, &["compact", "s", "--keep-tokens", "200"]).expect_code(0);
        let undone = panto(&sb, &store, &["compact", "s", "--undo", "--json"]);
        undone.expect_code(0);
        let doc = undone.json();
        assert_eq!(doc["strategy"], "summary", "{label}");
        assert!(
            doc["tokens_after"].as_u64() > doc["tokens_before"].as_u64(),
            "{label}"
        );
        assert_eq!(
            context(&sb),
            first,
            "{label}: the context before the second compaction"
        );
        let again = panto(&sb, &store, &["compact", "s", "--undo"]);
        again.expect_code(0);
        assert!(
            again.stderr.contains("undid the compaction"),
            "{label}: {}",
            again.stderr
        );
        assert_eq!(
            context(&sb),
            original,
            "{label}: the context before the first"
        );
        let nothing = panto(&sb, &store, &["compact", "s", "--undo"]);
        nothing.expect_code(2);
        assert!(
            nothing.stderr.contains("nothing to undo"),
            "{label}: {}",
            nothing.stderr
        );
        // The undo entries travel with the session: a copy of it honours them too.
        let export = panto(&sb, &store, &["export", "s"]);
        export.expect_code(0);
        assert_eq!(
            export.stdout.matches(r#"{"type":"undo""#).count(),
            2,
            "{label}"
        );
        let copy = sb.work().join("copy.jsonl");
        std::fs::write(&copy, &export.stdout).unwrap();
        let copied = sb.run(&["context", &copy.display().to_string(), "--json"]);
        assert_eq!(copied.json(), original, "{label}: the exported copy");
    }
}
