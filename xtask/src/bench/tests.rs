//! Tests of the bench generator: its sessions are valid, replay as it says, and are seeded.

use std::fs;
use std::path::PathBuf;

use panto_model::{Entry, read_entries, replay, validate};
use panto_session::{Session, SessionOptions};

use super::generate::{history_then_tail, scale_session};

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("panto-xtask-{name}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn scale_sessions_are_valid_and_replay_as_the_generator_counted() {
    let dir = temp_dir("gen");
    let path = dir.join("s.jsonl");
    let facts = scale_session(&path, 2_000, 7).unwrap();
    let bytes = fs::read(&path).unwrap();
    assert_eq!(bytes.len() as u64, facts.bytes);

    let entries = read_entries(&bytes).unwrap();
    let messages = entries
        .iter()
        .filter(|e| matches!(e, Entry::Message(_)))
        .count() as u64;
    assert_eq!(messages, facts.messages);
    assert!(facts.messages >= 2_000);
    assert_eq!(facts.compactions, 2);
    assert!(facts.kept_copies >= 2 && facts.tool_calls > 100 && facts.thinking_blocks > 10);

    let ctx = replay(entries);
    assert!(ctx.skipped.is_empty());
    assert_eq!(ctx.compaction.as_ref().unwrap().id, facts.latest_compaction);
    assert_eq!(ctx.messages.len() as u64, facts.effective_messages);
    assert!(ctx.kept >= 2);
    assert_eq!(validate(ctx.conversation()), vec![]);
    // The latest compaction entry starts at the recorded offset.
    let line = &bytes[facts.latest_compaction_offset as usize..];
    assert!(line.starts_with(br#"{"type":"compaction","id":"mc1""#));

    // The store's backwards load agrees, and reads only from the latest compaction.
    let loaded = Session::open(&path, SessionOptions::default().fsync(false))
        .unwrap()
        .load_context()
        .unwrap();
    assert_eq!(loaded.context, ctx);
    assert_eq!(loaded.stats.replay_from, facts.latest_compaction_offset);

    // Usage is plausible enough that the sizer trusts most of it.
    let measured = panto_size::UsageSizer::default()
        .measure(&ctx.messages)
        .iter()
        .filter(|s| !matches!(s.source, panto_size::Source::Heuristic(_)))
        .count();
    assert!(
        measured * 10 > ctx.messages.len() * 8,
        "{measured} of {}",
        ctx.messages.len()
    );

    // Seeded: the same seed gives the same bytes, another seed other bytes.
    let again = dir.join("again.jsonl");
    scale_session(&again, 2_000, 7).unwrap();
    assert_eq!(fs::read(&again).unwrap(), bytes);
    scale_session(&again, 2_000, 8).unwrap();
    assert_ne!(fs::read(&again).unwrap(), bytes);
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn the_tail_is_the_same_whatever_the_history() {
    let dir = temp_dir("tail");
    let (a, b) = (dir.join("a.jsonl"), dir.join("b.jsonl"));
    let fa = history_then_tail(&a, 0, 1_000, 300).unwrap();
    let fb = history_then_tail(&b, 3_000, 1_000, 300).unwrap();
    let (ba, bb) = (fs::read(&a).unwrap(), fs::read(&b).unwrap());
    assert_eq!(
        ba[fa.latest_compaction_offset as usize..],
        bb[fb.latest_compaction_offset as usize..]
    );
    assert!(fb.bytes > fa.bytes * 5);
    assert!(fb.compactions > fa.compactions);
    let (ca, cb) = (
        replay(read_entries(&ba).unwrap()),
        replay(read_entries(&bb).unwrap()),
    );
    assert_eq!(ca, cb);
    assert_eq!(ca.messages.len() as u64, fa.effective_messages);
    assert_eq!(validate(cb.conversation()), vec![]);
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn perf_task_clock_is_read_from_its_csv_report() {
    let report = "# started on Tue Dec  1 18:13:03 2026\n\n45.92,msec,task-clock,45917320,100.00,0.319,CPUs utilized\n";
    let cpu = super::process::task_clock(report).unwrap();
    assert_eq!(cpu.as_micros(), 45_920);
    let error = super::process::task_clock("# started\n").unwrap_err();
    assert!(error.to_string().contains("no task-clock"), "{error}");
}

#[test]
fn bench_help_prints_the_usage_without_running_anything() {
    // `--help` is answered before the release build is started or any argument is read.
    let root = temp_dir("help");
    super::run(&root, &["--help".to_owned()]).unwrap();
    super::run(&root, &["scale".to_owned(), "-h".to_owned()]).unwrap();
    assert!(super::USAGE.contains("process"));
    assert!(!root.join("target").exists());
}

#[test]
fn the_parse_baseline_counts_the_lines_and_names_a_bad_one() {
    let dir = temp_dir("parse");
    let good = dir.join("good.jsonl");
    fs::write(&good, "{\"a\":1}\n\n[2]\n").unwrap();
    super::real::parse(&[good.display().to_string()]).unwrap();
    let bad = dir.join("bad.jsonl");
    fs::write(&bad, "{\"a\":1}\nnot json\n").unwrap();
    let error = super::real::parse(&[bad.display().to_string()]).unwrap_err();
    assert!(error.to_string().contains("line 2"), "{error}");
}
