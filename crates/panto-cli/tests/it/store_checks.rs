//! What an operator finds on every store (issue 41): an import takes a byte-order mark, says
//! what it skipped, and leaves nothing when it fails; imports and exports stream in bounded
//! memory; `jsonl:DIR` keeps sessions in its folder; a command that only reads creates no
//! database; a store the user must fix exits 2; the SQLite file is private; no piece of a
//! PostgreSQL password is ever printed.

use std::process::Stdio;

use crate::stores::{panto, sandbox, stores};

#[test]
fn import_takes_a_byte_order_mark_and_says_what_it_skipped() {
    let sb = sandbox();
    let one =
        r#"{"type":"message","id":"u1","role":"user","content":[{"type":"text","text":"one"}]}"#;
    let two = r#"{"type":"message","id":"a1","role":"assistant","content":[{"type":"text","text":"two"}]}"#;
    // A byte-order mark before the first line, and a last line cut off by a crash.
    let file = sb.write(
        "bom.jsonl",
        &format!("\u{feff}{one}\n{two}\n{{\"type\":\"message\",\"ro"),
    );
    for (label, store) in stores("import_takes_a_byte_order_mark") {
        let run = panto(&sb, &store, &["import", &file.display().to_string(), "s"]);
        run.expect_code(0);
        assert!(
            run.stderr.contains("imported 2 entries"),
            "{label}: {}",
            run.stderr
        );
        assert!(
            run.stderr.contains("warning:") && run.stderr.contains("line 3"),
            "{label}: the torn last line is said: {}",
            run.stderr
        );
        assert!(
            run.stderr.to_lowercase().contains("byte-order mark"),
            "{label}: {}",
            run.stderr
        );
        let export = panto(&sb, &store, &["export", "s"]);
        export.expect_code(0);
        assert_eq!(export.stdout, format!("{one}\n{two}\n"), "{label}");
    }
}

#[test]
fn a_failed_import_leaves_no_session_on_any_store() {
    let sb = sandbox();
    let good = r#"{"type":"message","role":"user","content":[{"type":"text","text":"x"}]}"#;
    // The bad line comes after a few MiB of good ones: batches were already written.
    let mut text = format!("{good}\n").repeat(40_000);
    text.push_str("{\"type\":\"message\",\"role\":\"user\",\"content\":7}\n");
    let file = sb.write("late.jsonl", &text).display().to_string();
    for (label, store) in stores("a_failed_import_leaves_no_session") {
        let run = panto(&sb, &store, &["import", &file, "s"]);
        run.expect_code(2);
        assert!(run.stderr.contains("line 40001"), "{label}: {}", run.stderr);
        assert!(
            run.stderr.contains("nothing was imported"),
            "{label}: {}",
            run.stderr
        );
        let listed = panto(&sb, &store, &["sessions"]);
        listed.expect_code(0);
        assert_eq!(listed.stdout, "", "{label}: no session is left behind");
        let hidden = std::fs::read_dir(sb.work().join("sessions"))
            .unwrap()
            .count();
        assert_eq!(hidden, 0, "{label}: no file is left in the folder");
    }
}

/// The peak resident memory of `cmd`'s process, in bytes (polled until it exits), and its
/// exit code.
#[cfg(target_os = "linux")]
fn peak_memory(mut cmd: std::process::Command) -> (u64, i32) {
    let mut child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let status = format!("/proc/{}/status", child.id());
    let mut peak = 0;
    loop {
        if let Ok(text) = std::fs::read_to_string(&status)
            && let Some(kb) = text
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        {
            peak = peak.max(kb * 1024);
        }
        if let Some(code) = child.try_wait().unwrap() {
            return (peak, code.code().unwrap_or(-1));
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// An import and an export hold a batch and a page, not the history: a 64 MiB session goes in
/// and out of every store in well under 48 MiB (holding the history alone would pass 64 MiB).
#[cfg(target_os = "linux")]
#[test]
fn imports_and_exports_stream_in_bounded_memory() {
    const BOUND: u64 = 48 << 20;
    let sb = sandbox();
    let body = "y".repeat(4000);
    let mut text = String::with_capacity(66 << 20);
    for i in 0..16_600 {
        text.push_str(&format!(
            r#"{{"type":"message","id":"m{i}","role":"user","content":[{{"type":"text","text":"{i} {body}"}}]}}"#
        ));
        text.push('\n');
    }
    assert!(text.len() > 64 << 20);
    let file = sb.write("big.jsonl", &text).display().to_string();
    drop(text);
    for (label, store) in stores("imports_and_exports_stream_in_bounded_memory") {
        let (peak, code) = peak_memory(sb.command(&["import", &file, "big", "--store", &store]));
        assert_eq!(code, 0, "{label}: import");
        assert!(
            peak < BOUND,
            "{label}: the import peaked at {} MiB",
            peak >> 20
        );
        let (peak, code) = peak_memory(sb.command(&["export", "big", "--store", &store]));
        assert_eq!(code, 0, "{label}: export");
        assert!(
            peak < BOUND,
            "{label}: the export peaked at {} MiB",
            peak >> 20
        );
    }
}

#[test]
fn jsonl_dir_keeps_sessions_in_its_folder() {
    let sb = sandbox();
    let (path, _) = crate::stores::example("debugging.jsonl");
    for name in [
        "../outside.jsonl",
        "/tmp/panto-outside.jsonl",
        "sub/../../x.jsonl",
    ] {
        let run = panto(&sb, "jsonl:sessions", &["import", &path, name]);
        run.expect_code(2);
        assert!(
            run.stderr.contains("is not a file name in the folder"),
            "{name}: {}",
            run.stderr
        );
        let run = panto(&sb, "jsonl:sessions", &["context", name]);
        run.expect_code(2);
    }
    assert!(!sb.work().join("outside.jsonl").exists());
    assert!(!std::path::Path::new("/tmp/panto-outside.jsonl").exists());
}

#[test]
fn a_command_that_only_reads_creates_no_database() {
    let sb = sandbox();
    for args in [
        &["context", "s"][..],
        &["sessions"],
        &["export", "s"],
        &["recall", "s", "anything"],
        &["compact", "s", "--dry-run"],
    ] {
        let run = panto(&sb, "sqlite:typo.sqlite3", args);
        run.expect_code(2);
        assert!(
            run.stderr.contains("no database there"),
            "{args:?}: {}",
            run.stderr
        );
        assert!(
            !sb.work().join("typo.sqlite3").exists(),
            "{args:?} created it"
        );
    }
    if let Some((_, url)) = stores("a_command_that_only_reads_creates_no_database")
        .into_iter()
        .find(|(l, _)| *l == "postgres")
    {
        let listed = panto(&sb, &url, &["sessions"]);
        listed.expect_code(0);
        assert_eq!(
            listed.stdout, "",
            "a database without panto's tables holds no session"
        );
        for args in [&["context", "s"][..], &["export", "s"]] {
            panto(&sb, &url, args).expect_code(2);
        }
        let tables: i64 = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(async {
                panto_store_postgres::testing::client(&url)
                    .await
                    .query_one(
                        "SELECT count(*) FROM pg_tables WHERE schemaname = current_schema()",
                        &[],
                    )
                    .await
                    .unwrap()
                    .get(0)
            });
        assert_eq!(tables, 0, "reading created no table");
    }
}

#[test]
fn a_store_the_user_must_fix_exits_2_saying_what() {
    let sb = sandbox();
    let (path, _) = crate::stores::example("debugging.jsonl");
    for (store, says) in [
        (
            "sqlite:no-such-folder/agent.sqlite3",
            "cannot create the database",
        ),
        ("jsonl:no-such-folder", "no-such-folder"),
    ] {
        let run = panto(&sb, store, &["import", &path, "s"]);
        run.expect_code(2);
        assert!(run.stderr.contains(says), "{store}: {}", run.stderr);
        assert!(
            !run.stderr.contains("cannot create the session"),
            "{store}: {}",
            run.stderr
        );
    }
}

#[cfg(unix)]
#[test]
fn the_sqlite_database_is_private() {
    use std::os::unix::fs::PermissionsExt;
    let sb = sandbox();
    let (path, _) = crate::stores::example("debugging.jsonl");
    panto(&sb, "sqlite:agent.sqlite3", &["import", &path, "s"]).expect_code(0);
    let mode = std::fs::metadata(sb.work().join("agent.sqlite3"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
}

#[test]
fn no_piece_of_a_postgres_password_is_printed_wherever_it_sits() {
    let sb = sandbox();
    // Nothing listens on port 1: every command fails, and says where without the password.
    for url in [
        "postgres://agent@127.0.0.1:1/db?password=QXZJ-hunter2-KWQX",
        "postgres://agent:QXZJ/hunter2?KWQX@127.0.0.1:1/db",
        "postgres://agent:QXZJ?hunter2@127.0.0.1:1/db?sslmode=require",
        "postgresql://agent:QXZJ@hunter2#KWQX@127.0.0.1:1/db",
    ] {
        for args in [
            &["config"][..],
            &["context", "s"],
            &["sessions"],
            &["import", "x.jsonl", "s"],
        ] {
            let run = panto(&sb, url, args);
            let all = format!("{}{}", run.stdout, run.stderr);
            for piece in ["QXZJ", "hunter2", "KWQX"] {
                assert!(!all.contains(piece), "{url} {args:?}: {all}");
            }
        }
    }
    // The environment's password.
    let mut cmd = sb.command(&["context", "s", "--store", "postgres://agent@127.0.0.1:1/db"]);
    cmd.env("PGPASSWORD", "QXZJ-env-hunter2");
    let run = sb.run_with(cmd);
    run.expect_code(1);
    assert!(!run.stderr.contains("hunter2"), "{}", run.stderr);
}
