//! The `process` section of `cargo xtask bench`: the real pi session of
//! `../shared/data/sessions/pi-large.jsonl` repeated 1, 10 and 100 times, and the release
//! `panto context --json`, `panto transcript` and `panto compact --dry-run --provider offline`
//! run on it as whole processes, each run paired with a process that parses the same lines
//! into `serde_json::Value` as it reads them (`xtask bench __parse FILE`, a streaming parse):
//! CPU time (perf's task-clock), the ratio of each pair, and peak memory; then, in this
//! process, the two parts of the compact path that read every byte (decoding and the ledger)
//! beside the same parse ([`parts`]).

use std::fs;
use std::hint::black_box;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use serde_json::Value;

use super::process::{Peak, Run, Runner};
use super::scale::verdict;
use super::stages::{parse_values, thread_cpu_now};
use super::{Flags, bench_dir, fmt_bytes, fmt_duration};
use crate::table::Table;

/// The real session, relative to the repository root.
const SESSION: &str = "../shared/data/sessions/pi-large.jsonl";

/// How many times the session is repeated, and the paired runs at that size (more at ×100,
/// whose ratio decides a target and where the machine's noise moves the median most).
const SIZES: &[(u64, usize)] = &[(1, 21), (10, 11), (100, 15)];

/// The measured commands: a label and the arguments after the session path is put in.
const COMMANDS: &[(&str, &[&str])] = &[
    ("`panto context --json`", &["context", "{}", "--json"]),
    ("`panto transcript`", &["transcript", "{}"]),
    (
        "`panto compact --dry-run --provider offline`",
        &[
            "compact",
            "{}",
            "--dry-run",
            "--provider",
            "offline",
            "--json",
        ],
    ),
];

/// The figures of one command at one size.
pub(super) struct Paired {
    /// The command's CPU time: median, min and max.
    pub cpu: [Duration; 3],
    /// The paired parse's CPU time: median, min and max.
    pub base: [Duration; 3],
    /// The command's CPU time over its pair's: median, min and max.
    pub ratio: [f64; 3],
    /// The command's median peak memory, in bytes.
    pub peak: u64,
    /// The parse's median peak memory, in bytes.
    pub base_peak: u64,
}

/// One command at one size: a row of the process table.
pub(super) struct Measured {
    /// How many times the session is repeated.
    pub times: u64,
    /// Bytes of the repeated session.
    pub len: u64,
    pub label: &'static str,
    /// The paired runs.
    pub reps: usize,
    pub pair: Paired,
}

/// The process table: each command at each size beside its paired parse.
pub(super) fn process_table(rows: &[Measured]) -> Table {
    let mut t = Table::new([
        "size",
        "file",
        "command",
        "runs",
        "CPU",
        "parse CPU",
        "**ratio** (min to max)",
        "peak memory",
        "× file",
        "parse peak",
    ])
    .right([1, 3, 4, 5, 6, 7, 8, 9]);
    for m in rows {
        let p = &m.pair;
        t.row([
            format!("×{}", m.times),
            fmt_bytes(m.len),
            m.label.to_owned(),
            m.reps.to_string(),
            fmt_duration(p.cpu[0]),
            fmt_duration(p.base[0]),
            format!(
                "**{:.2}×** ({:.2}× to {:.2}×)",
                p.ratio[0], p.ratio[1], p.ratio[2]
            ),
            fmt_bytes(p.peak),
            format!("{:.2}×", p.peak as f64 / m.len as f64),
            fmt_bytes(p.base_peak),
        ]);
    }
    t
}

/// Median, minimum and maximum of `values`.
fn spread<T: Copy + PartialOrd>(mut values: Vec<T>) -> [T; 3] {
    values.sort_by(|a, b| a.partial_cmp(b).expect("comparable"));
    [
        values[values.len() / 2],
        values[0],
        values[values.len() - 1],
    ]
}

/// Runs `args` and the baseline parse `reps` times, alternating (the parse first), after one
/// untimed run of each whose output is kept in `out` for checking.
fn paired(runner: &Runner, args: &[&str], file: &str, out: &Path, reps: usize) -> Result<Paired> {
    let xtask = std::env::current_exe().context("no path of the running xtask")?;
    let parse = ["bench", "__parse", file];
    runner.run(&xtask, &parse, None, true)?;
    runner.run(runner.panto(), args, Some(out), true)?;
    let mut runs: Vec<(Run, Run)> = Vec::with_capacity(reps);
    for _ in 0..reps {
        let base = runner.run(&xtask, &parse, None, true)?;
        let run = runner.run(runner.panto(), args, None, true)?;
        runs.push((base, run));
    }
    let cpu = |r: &Run| r.cpu.unwrap_or(r.wall);
    Ok(Paired {
        cpu: spread(runs.iter().map(|(_, r)| cpu(r)).collect()),
        base: spread(runs.iter().map(|(b, _)| cpu(b)).collect()),
        ratio: spread(
            runs.iter()
                .map(|(b, r)| cpu(r).as_secs_f64() / cpu(b).as_secs_f64())
                .collect(),
        ),
        peak: spread(runs.iter().map(|(_, r)| r.peak).collect())[0],
        base_peak: spread(runs.iter().map(|(b, _)| b.peak).collect())[0],
    })
}

/// Checks the first run's output: a context with every message, a compaction that summarized.
fn check(label: &str, out: &Path, messages: usize) -> Result<()> {
    let bytes = fs::read(out)?;
    if label.contains("transcript") {
        let text = String::from_utf8_lossy(&bytes);
        ensure!(
            text.lines().any(|l| l == "<transcript>") && text.contains("\n[User"),
            "panto transcript printed no transcript"
        );
        return Ok(());
    }
    let doc: Value = serde_json::from_slice(&bytes)
        .with_context(|| format!("{label} printed no JSON document"))?;
    if label.contains("context") {
        let n = doc["messages"].as_array().map_or(0, Vec::len);
        ensure!(
            n == messages,
            "context has {n} messages, expected {messages}"
        );
    } else {
        let summarized = doc["summarized_turns"].as_u64().unwrap_or(0);
        ensure!(
            summarized > 0 && doc["summary"].is_string(),
            "the dry run summarized nothing: {doc}"
        );
    }
    Ok(())
}

/// The `process` section.
pub(super) fn process(root: &Path, _flags: &Flags) -> Result<()> {
    let source = root.join(SESSION);
    let Ok(session) = fs::read(&source) else {
        bail!(
            "the real session {} is absent: the process section needs it",
            source.display()
        );
    };
    let messages = session
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .count();
    let dir = bench_dir(root, "process")?;
    let runner = Runner::new(root, &dir)?;
    ensure!(
        runner.peak == Peak::GnuTime,
        "the process section needs GNU time at /usr/bin/time for exact peaks"
    );
    println!(
        "The real pi session (`{SESSION}`, {}, {messages} lines) repeated 1, 10 and 100 times.",
        fmt_bytes(session.len() as u64)
    );
    println!(
        "Whole processes: each run of a command is paired with a run of `xtask bench __parse` (a"
    );
    println!(
        "streaming parse: line by line through a BufReader into `serde_json::Value`), the parse first."
    );
    println!(
        "CPU is {}; the",
        if runner.perf {
            "`perf stat`'s task-clock (user and system, every thread)"
        } else {
            "wall time (perf is not available)"
        }
    );
    println!(
        "ratio is the command's over its pair's, median (min to max) of the pairs. Peak memory:"
    );
    println!("`ru_maxrss` of the process, median.\n");
    let mut measured = Vec::new();
    for &(times, reps) in SIZES {
        let path = dir.join(format!("pi-x{times}.jsonl"));
        {
            let mut w = BufWriter::new(fs::File::create(&path)?);
            for _ in 0..times {
                w.write_all(&session)?;
            }
            w.flush()?;
        }
        let file = path.to_str().context("non-UTF-8 path")?;
        let len = fs::metadata(&path)?.len();
        for &(label, template) in COMMANDS {
            let args: Vec<&str> = template
                .iter()
                .map(|a| if *a == "{}" { file } else { a })
                .collect();
            let out = dir.join("out.txt");
            let pair = paired(&runner, &args, file, &out, reps)?;
            check(label, &out, messages * times as usize)?;
            let _ = fs::remove_file(&out);
            measured.push(Measured {
                times,
                len,
                label,
                reps,
                pair,
            });
        }
        fs::remove_file(&path)?;
    }
    print!("{}", process_table(&measured));
    println!(
        "\nIn process at ×100 (the bytes in memory; thread CPU, median of {PARTS_REPS} runs), the two"
    );
    println!(
        "parts of the compact path that read every byte beside the parse: decoding the lines, and the"
    );
    println!("ledger of the messages (every text and tool output scanned for identifiers).\n");
    print!("{}", parts_table(&parts(&session.repeat(100))?));
    println!("\nTargets:\n");
    for m in measured.iter().filter(|m| m.times == 100) {
        let (label, ratio, peak, len) = (m.label, m.pair.ratio[0], m.pair.peak, m.len);
        verdict(
            ratio <= 1.5,
            &format!("{label} at ×100 at most 1.5× the parse: {ratio:.2}×"),
        );
        if label.contains("compact") {
            verdict(
                peak < 2 * len,
                &format!(
                    "{label} at ×100 peaks under twice the file ({}): {}",
                    fmt_bytes(len),
                    fmt_bytes(peak)
                ),
            );
        }
    }
    Ok(())
}

/// How many times each part of the compact path is timed in process.
const PARTS_REPS: usize = 5;

/// The median thread CPU time of [`PARTS_REPS`] runs of `f`.
fn median_cpu(mut f: impl FnMut()) -> Duration {
    let times = (0..PARTS_REPS)
        .map(|_| {
            let start = thread_cpu_now();
            f();
            thread_cpu_now().saturating_sub(start)
        })
        .collect();
    spread(times)[0]
}

/// The in-process parts at ×100: a label and its median thread CPU time, the parse first (the
/// `scale` section's, [`parse_values`]).
fn parts(bytes: &[u8]) -> Result<Vec<(&'static str, Duration)>> {
    let parse = median_cpu(|| {
        black_box(parse_values(bytes));
    });
    let entries = panto_model::read_entries(bytes).context("the repeated session decodes")?;
    let decode = median_cpu(|| {
        black_box(panto_model::read_entries(bytes).expect("decoded above"));
    });
    let messages = panto_model::replay(entries).messages;
    let ledger = median_cpu(|| {
        black_box(panto_transcript::Ledger::from_messages(&messages));
    });
    Ok(vec![
        ("streaming parse (`serde_json::Value`)", parse),
        ("decode (`panto_model::read_entries`)", decode),
        ("ledger (`Ledger::from_messages`)", ledger),
    ])
}

/// The in-process table: each part's CPU time and its ratio to the parse's.
fn parts_table(rows: &[(&'static str, Duration)]) -> Table {
    let mut t = Table::new(["part", "CPU", "× parse"]).right([1, 2]);
    let parse = rows[0].1.as_secs_f64();
    for (label, cpu) in rows {
        t.row([
            (*label).to_owned(),
            fmt_duration(*cpu),
            format!("{:.2}×", cpu.as_secs_f64() / parse),
        ]);
    }
    t
}

/// `xtask bench __parse FILE`: the baseline process, a streaming parse: FILE read line by line
/// through a `BufReader` (never whole), each line parsed into a `serde_json::Value` and
/// dropped; prints the number of lines. Reading the whole file first would flatter the ratio
/// of a command that streams (issue 42: 1.45× against it was about 2× against this).
pub(super) fn parse(args: &[String]) -> Result<()> {
    let [file] = args else {
        bail!("usage: xtask bench __parse FILE");
    };
    let reader = std::io::BufReader::new(
        fs::File::open(file).with_context(|| format!("could not read {file}"))?,
    );
    let mut lines = 0u64;
    for line in std::io::BufRead::lines(reader) {
        let line = line.with_context(|| format!("could not read {file}"))?;
        if line.is_empty() {
            continue;
        }
        let value: Value = serde_json::from_str(&line)
            .with_context(|| format!("{file}: line {} is not JSON", lines + 1))?;
        drop(value);
        lines += 1;
    }
    println!("{lines}");
    Ok(())
}
