//! Tests of the bench: the generator's sessions are valid, replay as it says, and are seeded;
//! the tables print the figures as they always did.

use std::fs;
use std::path::PathBuf;
use std::time::Duration;

use panto_model::{Entry, read_entries, replay, validate};
use panto_session::{Session, SessionOptions};

use super::MIB;
use super::generate::{Facts, history_then_tail, scale_session};
use super::process::{Peak, Sample};
use super::real::{Measured, Paired};
use super::scale::{self, History, Row};
use super::stages::STAGES;

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
    let (loaded, stats) = Session::open(&path, SessionOptions::default().fsync(false))
        .unwrap()
        .load_context_with_stats()
        .unwrap();
    assert_eq!(loaded.context, ctx);
    assert_eq!(stats.replay_from, facts.latest_compaction_offset);

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

// The tables, rendered from fixed numbers. Each `OLD_*` string is what the hand-built table
// printed for the same numbers before the bench moved to `Table`; the only deliberate change
// is the alignment row, which now right-aligns the columns of figures.

const OLD_SESSION: &str = "| history | file size | bytes read | entries replayed | load median | load min | load max | full replay |\n\
    | --- | --- | --- | --- | --- | --- | --- | --- |\n\
    | 1.0 MiB | 1.0 MiB | 337.6 KiB | 211 | 151 µs | 140 µs | 903 µs | 80.01 ms |\n\
    | 10.0 MiB | 10.0 MiB | 675.2 KiB | 212 | 301 µs | 280 µs | 1.80 ms | 320.01 ms |\n\
    | 100.0 MiB | 100.0 MiB | 1012.7 KiB | 213 | 451 µs | 420 µs | 2.70 ms | 720.01 ms |\n\
    | 1.00 GiB | 1.00 GiB | 1.3 MiB | 214 | 601 µs | 560 µs | 3.60 ms | 1.28 s |\n";

const OLD_APPEND: &str = "| fsync | median | min | max |\n\
    | --- | --- | --- | --- |\n\
    | off | 13 µs | 10 µs | 2.40 ms |\n\
    | on | 25 µs | 20 µs | 4.80 ms |\n";

const OLD_PROCESS: &str = "| size | file | command | runs | CPU | parse CPU | **ratio** (min to max) | peak memory | × file | parse peak |\n\
    | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n\
    | ×1 | 2.2 MiB | `panto context --json` | 21 | 40.01 ms | 35.01 ms | **1.12×** (1.00× to 1.70×) | 7.7 MiB | 3.43× | 4.5 MiB |\n\
    | ×1 | 2.2 MiB | `panto transcript` | 21 | 80.01 ms | 35.01 ms | **1.25×** (1.10× to 1.90×) | 8.6 MiB | 3.85× | 4.5 MiB |\n\
    | ×1 | 2.2 MiB | `panto compact --dry-run --provider offline` | 21 | 120.01 ms | 35.01 ms | **1.37×** (1.20× to 2.10×) | 9.6 MiB | 4.28× | 4.5 MiB |\n\
    | ×10 | 22.4 MiB | `panto context --json` | 11 | 400.01 ms | 350.01 ms | **1.12×** (1.00× to 1.70×) | 68.1 MiB | 3.04× | 44.7 MiB |\n\
    | ×10 | 22.4 MiB | `panto transcript` | 11 | 800.01 ms | 350.01 ms | **1.25×** (1.10× to 1.90×) | 69.0 MiB | 3.09× | 44.7 MiB |\n\
    | ×10 | 22.4 MiB | `panto compact --dry-run --provider offline` | 11 | 1.20 s | 350.01 ms | **1.37×** (1.20× to 2.10×) | 70.0 MiB | 3.13× | 44.7 MiB |\n\
    | ×100 | 223.7 MiB | `panto context --json` | 7 | 4.00 s | 3.50 s | **1.12×** (1.00× to 1.70×) | 672.1 MiB | 3.00× | 447.4 MiB |\n\
    | ×100 | 223.7 MiB | `panto transcript` | 7 | 8.00 s | 3.50 s | **1.25×** (1.10× to 1.90×) | 673.0 MiB | 3.01× | 447.4 MiB |\n\
    | ×100 | 223.7 MiB | `panto compact --dry-run --provider offline` | 7 | 12.00 s | 3.50 s | **1.37×** (1.20× to 2.10×) | 674.0 MiB | 3.01× | 447.4 MiB |\n";

const OLD_MEMORY: &str = "| messages before the latest compaction | file | effective context | `context --json` | peak memory | `compact --dry-run` | peak memory |\n\
    | --- | --- | --- | --- | --- | --- | --- |\n\
    | 0 | 4.8 MiB | 10001 messages, 3.8 MiB | 803 µs | ≥ 19.1 MiB | 1.90 ms | ≥ 28.6 MiB |\n\
    | 20000 | 9.5 MiB | 10001 messages, 3.8 MiB | 1.60 ms | ≥ 19.1 MiB | 3.80 ms | ≥ 28.6 MiB |\n\
    | 120000 | 14.3 MiB | 10001 messages, 3.8 MiB | 2.40 ms | ≥ 19.1 MiB | 5.70 ms | ≥ 28.6 MiB |\n";

const OLD_SESSIONS: &str = "| session | messages | file | tool calls | thinking blocks | compactions (kept copies) | effective context | turns | summarized / kept turns | transcript |\n\
    | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n\
    | 1k | 1003 | 1.2 MiB | 121 | 32 | 2 (4) | 507 messages, 619.7 KiB | 41 | 30 / 11 | 217.0 KiB |\n\
    | 10k | 10003 | 11.8 MiB | 1201 | 302 | 2 (40) | 5007 messages, 6.1 MiB | 401 | 300 / 101 | 2.1 MiB |\n\
    | 100k | 100003 | 117.7 MiB | 12001 | 3002 | 2 (400) | 50007 messages, 60.5 MiB | 4001 | 3000 / 1001 | 21.2 MiB |\n";

const OLD_PIPELINE: &str = "| session | baseline: parse → Value | decode | replay | turns | sizing | plan | **pipeline** |\n\
    | --- | --- | --- | --- | --- | --- | --- | --- |\n\
    | 1k | 1.01 ms (1220 MB/s) | 2.12 ms (2.10×) | 2.49 ms (2.46×) | 2.86 ms (2.83×) | 3.23 ms (3.19×) | 3.60 ms (3.56×) | **1.38 ms (1.37×)** |\n\
    | 10k | 11.23 ms (1099 MB/s) | 22.33 ms (1.99×) | 26.03 ms (2.32×) | 29.73 ms (2.65×) | 33.43 ms (2.98×) | 37.13 ms (3.31×) | **14.93 ms (1.33×)** |\n\
    | 100k | 223.45 ms (553 MB/s) | 334.45 ms (1.50×) | 371.45 ms (1.66×) | 408.45 ms (1.83×) | 445.45 ms (1.99×) | 482.45 ms (2.16×) | **260.45 ms (1.17×)** |\n";

const OLD_GROWTH: &str = "| step | file growth | parse_value | decode | replay | turns | sizing | plan | pipeline | render |\n\
    | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n\
    | 1k → 10k | 10.00× | 11.10× | 10.52× | 10.45× | 10.39× | 10.34× | 10.31× | 10.80× | 10.28× |\n\
    | 10k → 100k | 10.00× | 19.89× | 14.97× | 14.27× | 13.74× | 13.32× | 12.99× | 17.44× | 12.72× |\n";

const OLD_RENDER: &str = "| session | summarized messages | transcript | render | MB/s | baseline: copy | copy MB/s | render / copy |\n\
    | --- | --- | --- | --- | --- | --- | --- | --- |\n\
    | 1k | 405 | 217.0 KiB | 3.97 ms | 56 | 4.34 ms | 51 | 0.91× |\n\
    | 10k | 4005 | 2.1 MiB | 40.83 ms | 54 | 44.53 ms | 50 | 0.92× |\n\
    | 100k | 40005 | 21.2 MiB | 519.45 ms | 43 | 556.45 ms | 40 | 0.93× |\n";

const OLD_CONTEXT: &str = "| session | effective context | baseline: parse effective | `context --json` | ratio | peak memory | memory / effective | `compact --dry-run` | ratio | peak memory |\n\
    | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n\
    | 1k | 619.7 KiB | 1.75 ms | 2.52 ms | 1.44× | 9.4 MiB | 15.6× | 3.10 ms | 1.77× | 11.8 MiB |\n\
    | 10k | 6.1 MiB | 18.63 ms | 25.02 ms | 1.34× | 94.2 MiB | 15.6× | 31.00 ms | 1.66× | 117.7 MiB |\n\
    | 100k | 60.5 MiB | 297.45 ms | 250.02 ms | 0.84× | 941.9 MiB | 15.6× | 310.00 ms | 1.04× | 1.15 GiB |\n";

/// `old` with its alignment row (the second line) replaced by `rule`.
fn realigned(old: &str, rule: &str) -> String {
    let mut lines: Vec<&str> = old.lines().collect();
    lines[1] = rule;
    lines.iter().map(|l| format!("{l}\n")).collect()
}

#[test]
fn the_session_tables_print_as_before_with_figures_aligned_right() {
    let ms = Duration::from_micros;
    let loads: Vec<super::Load> = [(1u64, MIB), (2, 10 * MIB), (3, 100 * MIB), (4, 1024 * MIB)]
        .into_iter()
        .map(|(k, size)| super::Load {
            size,
            len: size + 4_321 * k,
            bytes_read: 345_678 * k,
            entries: 210 + k as usize,
            load: [ms(150 * k + 1), ms(140 * k), ms(900 * k + 3)],
            full: ms(80_000 * k * k + 9),
        })
        .collect();
    assert_eq!(
        super::load_table(&loads).to_string(),
        realigned(
            OLD_SESSION,
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
        )
    );
    let appends: Vec<(bool, [Duration; 3])> = [false, true]
        .into_iter()
        .map(|fsync| {
            let k = u64::from(fsync) + 1;
            (fsync, [ms(12 * k + 1), ms(10 * k), ms(2_400 * k + 3)])
        })
        .collect();
    assert_eq!(
        super::append_table(&appends).to_string(),
        realigned(OLD_APPEND, "| --- | ---: | ---: | ---: |")
    );
}

#[test]
fn the_process_table_prints_as_before_with_figures_aligned_right() {
    let mut rows = Vec::new();
    for (times, reps) in [(1u64, 21usize), (10, 11), (100, 7)] {
        let len = 2_345_678 * times;
        let labels = [
            "`panto context --json`",
            "`panto transcript`",
            "`panto compact --dry-run --provider offline`",
        ];
        for (k, label) in (1u64..).zip(labels) {
            let kf = k as f64;
            let pair = Paired {
                cpu: [
                    Duration::from_micros(40_000 * times * k + 11),
                    Duration::ZERO,
                    Duration::ZERO,
                ],
                base: [
                    Duration::from_micros(35_000 * times + 7),
                    Duration::ZERO,
                    Duration::ZERO,
                ],
                ratio: [1.0 + 0.123 * kf, 0.9 + 0.1 * kf, 1.5 + 0.2 * kf],
                peak: 3 * len + 1_000_000 * k,
                base_peak: 2 * len + 77,
            };
            rows.push(Measured {
                times,
                len,
                label,
                reps,
                pair,
            });
        }
    }
    assert_eq!(
        super::real::process_table(&rows).to_string(),
        realigned(
            OLD_PROCESS,
            "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
        )
    );
}

/// Three scale sessions with made-up figures that grow unevenly from one to the next.
fn scale_rows() -> Vec<Row> {
    let row = |label: &'static str, k: u64| {
        let f = k as f64;
        Row {
            label,
            gen_facts: Facts {
                messages: 1_000 * k + 3,
                compactions: 2,
                kept_copies: 4 * k,
                tool_calls: 120 * k + 1,
                thinking_blocks: 30 * k + 2,
                bytes: 1_234_567 * k,
                latest_compaction_offset: 600_000 * k,
                effective_messages: 500 * k + 7,
                latest_compaction: Some("mc1".to_owned()),
            },
            facts: serde_json::json!({
                "effective_messages": 500 * k + 7,
                "effective_bytes": 634_567 * k,
                "turns": 40 * k + 1,
                "summarized_turns": 30 * k,
                "kept_turns": 10 * k + 1,
                "transcript_bytes": 222_222 * k,
                "summarized_messages": 400 * k + 5,
            }),
            // Stage `i` of `STAGES` takes a little longer than stage `i - 1`.
            medians: (0..STAGES.len())
                .map(|i| 1_000_000.0 * f * (1.0 + i as f64 * 0.37) + 12_345.0 * f * f)
                .collect(),
            context: Sample {
                wall: Duration::from_micros(2_500 * k + 17),
                peak: 9_876_543 * k,
            },
            compact: Sample {
                wall: Duration::from_micros(3_100 * k + 5),
                peak: 12_345_678 * k,
            },
        }
    };
    vec![row("1k", 1), row("10k", 10), row("100k", 100)]
}

#[test]
fn the_scale_tables_print_as_before_with_figures_aligned_right() {
    let rows = scale_rows();
    let rule = |figures: usize| format!("| --- |{}", " ---: |".repeat(figures));
    assert_eq!(
        scale::sessions_table(&rows).to_string(),
        realigned(OLD_SESSIONS, &rule(9))
    );
    assert_eq!(
        scale::pipeline_table(&rows).to_string(),
        realigned(OLD_PIPELINE, &rule(7))
    );
    assert_eq!(
        scale::growth_table(&rows).to_string(),
        realigned(OLD_GROWTH, &rule(9))
    );
    assert_eq!(
        scale::render_table(&rows).to_string(),
        realigned(OLD_RENDER, &rule(7))
    );
    assert_eq!(
        scale::process_table(&rows, Peak::GnuTime).to_string(),
        realigned(OLD_CONTEXT, &rule(9))
    );
}

#[test]
fn the_memory_table_prints_as_before_with_every_column_aligned_right() {
    let rows: Vec<History> = [(1u64, 0u64), (2, 10_000), (3, 100_000)]
        .into_iter()
        .map(|(k, history)| {
            let bytes = 5_000_000 * k + 123;
            History {
                facts: Facts {
                    messages: history + 10_000 * k,
                    bytes,
                    latest_compaction_offset: bytes - 4_000_000,
                    effective_messages: 10_001,
                    ..Facts::default()
                },
                context: Sample {
                    wall: Duration::from_micros(800 * k + 3),
                    peak: 20_000_000 + k * 1000,
                },
                compact: Sample {
                    wall: Duration::from_micros(1_900 * k + 3),
                    peak: 30_000_000 + k * 1000,
                },
            }
        })
        .collect();
    // Polled peaks are lower bounds, and say so.
    assert_eq!(
        scale::memory_table(&rows, Peak::Polled).to_string(),
        realigned(OLD_MEMORY, &format!("|{}", " ---: |".repeat(7)))
    );
}
