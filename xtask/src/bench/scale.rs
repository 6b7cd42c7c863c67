//! The `scale` and `memory` sections of `cargo xtask bench`: every stage of panto over generated
//! sessions of growing size, beside the cost of parsing the same bytes, and the peak memory of
//! the `panto` processes.
//!
//! Why one file: each stage is measured by a few lines beside the same baseline, and the tables
//! are read in the order the stages run.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use serde_json::Value;

use super::generate::{Facts, history_then_tail, scale_session};
use super::process::{Peak, Runner, Sample};
use super::stages::{STAGES, read_facts, write_facts};
use super::{Flags, bench_dir, fmt_bytes, fmt_duration};
use crate::table::Table;

/// Bump when the generator's output changes, so that kept sessions are not reused.
const GENERATOR_VERSION: u32 = 1;
/// The seed of the scale sessions.
const SEED: u64 = 7;

/// The scale sessions: label and message count.
fn sizes(flags: &Flags) -> &'static [(&'static str, u64)] {
    if flags.quick {
        &[("1k", 1_000), ("10k", 10_000), ("100k", 100_000)]
    } else {
        &[
            ("1k", 1_000),
            ("10k", 10_000),
            ("100k", 100_000),
            ("1m", 1_000_000),
        ]
    }
}

/// Generates (or, with `--keep` from an earlier run, reuses) one session and its facts.
fn session(dir: &Path, label: &str, make: impl FnOnce(&Path) -> Result<Facts>) -> Result<Facts> {
    let path = dir.join(format!("{label}.jsonl"));
    let facts_path = dir.join(format!("{label}.gen.json"));
    let stamp_path = dir.join(format!("{label}.version"));
    let stamp = GENERATOR_VERSION.to_string();
    if fs::read_to_string(&stamp_path).ok().as_deref() == Some(stamp.as_str())
        && let Ok(facts) = read_facts(&facts_path)
        && fs::metadata(&path).is_ok_and(|m| m.len() == facts.bytes)
    {
        return Ok(facts);
    }
    let _ = fs::remove_file(&stamp_path);
    let start = Instant::now();
    let facts = make(&path)?;
    let took = start.elapsed();
    eprintln!(
        "bench: generated {} ({}, {} messages) in {} ({:.0} MB/s)",
        path.display(),
        fmt_bytes(facts.bytes),
        facts.messages,
        fmt_duration(took),
        facts.bytes as f64 / took.as_secs_f64() / 1e6
    );
    write_facts(&facts_path, &facts)?;
    fs::write(&stamp_path, stamp)?;
    Ok(facts)
}

/// Removes a generated session unless `--keep` was given.
fn cleanup(dir: &Path, label: &str, flags: &Flags) {
    if flags.keep {
        return;
    }
    for ext in ["jsonl", "gen.json", "version"] {
        let _ = fs::remove_file(dir.join(format!("{label}.{ext}")));
    }
}

/// The median (ns) criterion estimated for `stage` of session `label`.
fn median_ns(dir: &Path, label: &str, stage: &str) -> Result<f64> {
    let path = dir
        .join("criterion")
        .join(label)
        .join(stage)
        .join("new")
        .join("estimates.json");
    let v: Value = serde_json::from_slice(
        &fs::read(&path).with_context(|| format!("read {}", path.display()))?,
    )?;
    v["median"]["point_estimate"]
        .as_f64()
        .with_context(|| format!("{}: no median", path.display()))
}

fn secs(ns: f64) -> Duration {
    Duration::from_secs_f64(ns / 1e9)
}

fn mbps(bytes: u64, ns: f64) -> f64 {
    bytes as f64 / (ns / 1e9) / 1e6
}

/// Runs the criterion child over the sessions; its report goes to `DIR/criterion.log`.
fn run_stages(dir: &Path, labels: &[&str], flags: &Flags) -> Result<()> {
    let criterion = dir.join("criterion");
    let _ = fs::remove_dir_all(&criterion);
    let log_path = dir.join("criterion.log");
    let log = fs::File::create(&log_path)?;
    let exe = std::env::current_exe().context("cannot find the xtask executable")?;
    let start = Instant::now();
    let status = Command::new(exe)
        .arg("bench")
        .arg("__stages")
        .arg(dir)
        .arg(if flags.quick { "quick" } else { "full" })
        .args(labels)
        .env("CRITERION_HOME", &criterion)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .status()
        .context("could not run the criterion child")?;
    if !status.success() {
        let text = fs::read_to_string(&log_path).unwrap_or_default();
        let tail: Vec<&str> = text.lines().rev().take(30).collect();
        bail!(
            "the in-process benchmarks failed ({status}); end of {}:\n{}",
            log_path.display(),
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        );
    }
    eprintln!(
        "bench: criterion ran {} benchmarks in {} (report in {})",
        labels.len() * STAGES.len(),
        fmt_duration(start.elapsed()),
        log_path.display()
    );
    Ok(())
}

/// Everything the tables need about one session.
pub(super) struct Row {
    pub label: &'static str,
    pub gen_facts: Facts,
    /// What the in-process replay counted (`LABEL.facts.json`).
    pub facts: Value,
    /// Criterion medians in ns, in [`STAGES`] order.
    pub medians: Vec<f64>,
    pub context: Sample,
    pub compact: Sample,
}

impl Row {
    fn stage(&self, name: &str) -> f64 {
        let i = STAGES.iter().position(|s| *s == name).unwrap_or(0);
        self.medians[i]
    }

    fn fact(&self, name: &str) -> u64 {
        self.facts[name].as_u64().unwrap_or(0)
    }
}

fn peak_str(peak: Peak, bytes: u64) -> String {
    match peak {
        Peak::GnuTime => fmt_bytes(bytes),
        Peak::Polled => format!("≥ {}", fmt_bytes(bytes)),
    }
}

/// Checks the output of `panto context --json` against the in-process facts.
fn check_context_output(path: &Path, row_facts: &Value) -> Result<()> {
    let doc: Value = serde_json::from_slice(&fs::read(path)?)
        .context("panto context --json did not print one JSON document")?;
    let messages = doc["messages"].as_array().map_or(0, Vec::len) as u64;
    ensure!(
        Some(messages) == row_facts["effective_messages"].as_u64()
            && doc["turns"] == row_facts["turns"],
        "panto context --json disagrees with the in-process replay: {messages} messages, {} turns",
        doc["turns"]
    );
    Ok(())
}

/// Checks the output of `panto compact --dry-run --json` against the in-process plan.
fn check_compact_output(path: &Path, row_facts: &Value) -> Result<()> {
    let doc: Value = serde_json::from_slice(&fs::read(path)?)
        .context("panto compact --json did not print one JSON document")?;
    ensure!(
        doc["summarized_turns"] == row_facts["summarized_turns"]
            && doc["kept_turns"] == row_facts["kept_turns"]
            && doc["summary"].as_str().is_some_and(|s| !s.is_empty()),
        "panto compact --dry-run disagrees with the in-process plan: {doc}"
    );
    Ok(())
}

pub(super) fn scale(root: &Path, flags: &Flags) -> Result<()> {
    let dir = bench_dir(root, "scale")?;
    let sizes = sizes(flags);
    let mut gens = Vec::new();
    for &(label, messages) in sizes {
        gens.push(session(&dir, label, |p| scale_session(p, messages, SEED))?);
    }
    let labels: Vec<&str> = sizes.iter().map(|s| s.0).collect();
    run_stages(&dir, &labels, flags)?;
    let runner = Runner::new(root, &dir)?;
    let mut rows = Vec::new();
    for (&(label, _), gen_facts) in sizes.iter().zip(gens) {
        let facts: Value =
            serde_json::from_slice(&fs::read(dir.join(format!("{label}.facts.json")))?)?;
        let medians = STAGES
            .iter()
            .map(|s| median_ns(&dir, label, s))
            .collect::<Result<Vec<_>>>()?;
        let session = dir.join(format!("{label}.jsonl"));
        let session = session.to_str().context("non-UTF-8 path")?;
        let reps = if gen_facts.bytes > 500_000_000 { 3 } else { 5 };
        let out = dir.join("out.json");
        let context = runner.measure(&["context", session, "--json"], &out, reps)?;
        check_context_output(&out, &facts)?;
        let compact = runner.measure(
            &[
                "compact",
                session,
                "--dry-run",
                "--provider",
                "offline",
                "--json",
            ],
            &out,
            reps,
        )?;
        check_compact_output(&out, &facts)?;
        let _ = fs::remove_file(&out);
        rows.push(Row {
            label,
            gen_facts,
            facts,
            medians,
            context,
            compact,
        });
    }
    print_scale(&rows, runner.peak);
    for &(label, _) in sizes {
        cleanup(&dir, label, flags);
    }
    Ok(())
}

fn ratio(a: f64, b: f64) -> String {
    format!("{:.2}×", a / b)
}

fn print_scale(rows: &[Row], peak: Peak) {
    println!(
        "Generated sessions (seed {SEED}), two earlier compactions at a quarter and at half of"
    );
    println!("the messages, so the effective context is the second half. A *message* is a");
    println!("message entry, kept copies included.\n");
    print!("{}", sessions_table(rows));

    println!(
        "\nIn-process stages: criterion medians of the measuring thread's CPU time (10 samples,"
    );
    println!("flat sampling), each with its ratio to the baseline, parsing every line of the same");
    println!("file into `serde_json::Value` (measured right before the pipeline).");
    println!(
        "`decode` and `replay` cover the whole file; `turns`, `sizing` and `plan` the effective"
    );
    println!("context. `pipeline` is what runs before a compaction request: decode and replay");
    println!("streamed, sizing, and the plan (which segments the turns itself).\n");
    print!("{}", pipeline_table(rows));

    println!(
        "\nScaling: time at ten times the messages over time at the smaller size (target ≤ 11),"
    );
    println!("with the growth of the file beside it (the sessions grow by whole rounds).\n");
    print!("{}", growth_table(rows));

    println!(
        "\nTranscript rendering of the summarized prefix (`render_transcript`), beside copying"
    );
    println!("as many bytes into a fresh buffer (target ≥ 500 MB/s of output).\n");
    print!("{}", render_table(rows));

    println!(
        "\nThe release `panto` binary as a process: median wall time of 5 runs (3 for files over"
    );
    println!("500 MB) after one checked run, and peak resident memory (`ru_maxrss`). Baseline:");
    println!("parsing the lines of the effective context (what `panto` reads, backwards from the");
    println!("end) into `serde_json::Value`. `context --json` also prints the whole context.\n");
    print!("{}", process_table(rows, peak));

    println!("\nTargets:\n");
    let worst_pipeline = rows
        .iter()
        .map(|r| (r.stage("pipeline") / r.stage("parse_value"), r.label))
        .fold((0.0, ""), |a, b| if b.0 > a.0 { b } else { a });
    verdict(
        worst_pipeline.0 <= 1.5,
        &format!(
            "load + replay + segmentation + sizing + planning ≤ 1.5× the baseline parse at every size: worst {:.2}× ({})",
            worst_pipeline.0, worst_pipeline.1
        ),
    );
    let mut worst_scale = (0.0f64, String::new());
    for w in rows.windows(2) {
        let r = w[1].stage("pipeline") / w[0].stage("pipeline");
        if r > worst_scale.0 {
            worst_scale = (r, format!("{} → {}", w[0].label, w[1].label));
        }
    }
    verdict(
        worst_scale.0 <= 11.0,
        &format!(
            "ten times the messages costs at most eleven times the time (pipeline): worst {:.2}× ({})",
            worst_scale.0, worst_scale.1
        ),
    );
    let slowest = rows
        .iter()
        .map(|r| (mbps(r.fact("transcript_bytes"), r.stage("render")), r.label))
        .fold((f64::MAX, ""), |a, b| if b.0 < a.0 { b } else { a });
    verdict(
        slowest.0 >= 500.0,
        &format!(
            "transcript rendering ≥ 500 MB/s of output: slowest {:.0} MB/s ({})",
            slowest.0, slowest.1
        ),
    );
}

/// What each generated session holds, as the generator and the in-process replay counted it.
pub(super) fn sessions_table(rows: &[Row]) -> Table {
    let mut t = Table::new([
        "session",
        "messages",
        "file",
        "tool calls",
        "thinking blocks",
        "compactions (kept copies)",
        "effective context",
        "turns",
        "summarized / kept turns",
        "transcript",
    ])
    .right(1..10);
    for r in rows {
        let g = &r.gen_facts;
        t.row([
            r.label.to_owned(),
            g.messages.to_string(),
            fmt_bytes(g.bytes),
            g.tool_calls.to_string(),
            g.thinking_blocks.to_string(),
            format!("{} ({})", g.compactions, g.kept_copies),
            format!(
                "{} messages, {}",
                r.fact("effective_messages"),
                fmt_bytes(r.fact("effective_bytes"))
            ),
            r.fact("turns").to_string(),
            format!("{} / {}", r.fact("summarized_turns"), r.fact("kept_turns")),
            fmt_bytes(r.fact("transcript_bytes")),
        ]);
    }
    t
}

/// The in-process stages of each session, each beside its ratio to the baseline parse.
pub(super) fn pipeline_table(rows: &[Row]) -> Table {
    let mut t = Table::new([
        "session",
        "baseline: parse → Value",
        "decode",
        "replay",
        "turns",
        "sizing",
        "plan",
        "**pipeline**",
    ])
    .right(1..8);
    for r in rows {
        let base = r.stage("parse_value");
        let cell = |stage: &str| {
            let ns = r.stage(stage);
            format!("{} ({})", fmt_duration(secs(ns)), ratio(ns, base))
        };
        t.row([
            r.label.to_owned(),
            format!(
                "{} ({:.0} MB/s)",
                fmt_duration(secs(base)),
                mbps(r.gen_facts.bytes, base)
            ),
            cell("decode"),
            cell("replay"),
            cell("turns"),
            cell("sizing"),
            cell("plan"),
            format!("**{}**", cell("pipeline")),
        ]);
    }
    t
}

/// The stages whose growth from one session to the next the growth table shows.
const SCALED: [&str; 8] = [
    "parse_value",
    "decode",
    "replay",
    "turns",
    "sizing",
    "plan",
    "pipeline",
    "render",
];

/// The growth of the file and of each stage from one session to the next.
pub(super) fn growth_table(rows: &[Row]) -> Table {
    let mut t =
        Table::new(["step", "file growth"].into_iter().chain(SCALED)).right(1..SCALED.len() + 2);
    for w in rows.windows(2) {
        let (a, b) = (&w[0], &w[1]);
        let mut cells = vec![
            format!("{} → {}", a.label, b.label),
            ratio(b.gen_facts.bytes as f64, a.gen_facts.bytes as f64),
        ];
        cells.extend(SCALED.iter().map(|s| ratio(b.stage(s), a.stage(s))));
        t.row(cells);
    }
    t
}

/// Rendering the summarized prefix of each session, beside copying as many bytes.
pub(super) fn render_table(rows: &[Row]) -> Table {
    let mut t = Table::new([
        "session",
        "summarized messages",
        "transcript",
        "render",
        "MB/s",
        "baseline: copy",
        "copy MB/s",
        "render / copy",
    ])
    .right(1..8);
    for r in rows {
        let bytes = r.fact("transcript_bytes");
        let (render, copy) = (r.stage("render"), r.stage("copy"));
        t.row([
            r.label.to_owned(),
            r.fact("summarized_messages").to_string(),
            fmt_bytes(bytes),
            fmt_duration(secs(render)),
            format!("{:.0}", mbps(bytes, render)),
            fmt_duration(secs(copy)),
            format!("{:.0}", mbps(bytes, copy)),
            ratio(render, copy),
        ]);
    }
    t
}

/// The `panto` processes on each session, beside parsing its effective context.
pub(super) fn process_table(rows: &[Row], peak: Peak) -> Table {
    let mut t = Table::new([
        "session",
        "effective context",
        "baseline: parse effective",
        "`context --json`",
        "ratio",
        "peak memory",
        "memory / effective",
        "`compact --dry-run`",
        "ratio",
        "peak memory",
    ])
    .right(1..10);
    let wall = |s: &Sample| s.wall.as_secs_f64() * 1e9;
    for r in rows {
        let base = r.stage("parse_value_effective");
        let eff = r.fact("effective_bytes");
        t.row([
            r.label.to_owned(),
            fmt_bytes(eff),
            fmt_duration(secs(base)),
            fmt_duration(r.context.wall),
            ratio(wall(&r.context), base),
            peak_str(peak, r.context.peak),
            format!("{:.1}×", r.context.peak as f64 / eff as f64),
            fmt_duration(r.compact.wall),
            ratio(wall(&r.compact), base),
            peak_str(peak, r.compact.peak),
        ]);
    }
    t
}

/// Prints one target line.
pub(super) fn verdict(met: bool, what: &str) {
    println!("- {} {what}", if met { "**met**:" } else { "**MISSED**:" });
}

/// History sizes of the memory section (message entries before the latest compaction).
fn histories(flags: &Flags) -> &'static [(&'static str, u64)] {
    if flags.quick {
        &[("h0", 0), ("h10k", 10_000), ("h100k", 100_000)]
    } else {
        &[
            ("h0", 0),
            ("h10k", 10_000),
            ("h100k", 100_000),
            ("h1m", 1_000_000),
        ]
    }
}

/// Messages after the latest compaction in the memory section.
const TAIL: u64 = 10_000;

/// One history of the memory section: its session and the two commands measured on it.
pub(super) struct History {
    pub facts: Facts,
    pub context: Sample,
    pub compact: Sample,
}

/// The peak memory of the `panto` processes behind each history.
pub(super) fn memory_table(rows: &[History], peak: Peak) -> Table {
    let mut t = Table::new([
        "messages before the latest compaction",
        "file",
        "effective context",
        "`context --json`",
        "peak memory",
        "`compact --dry-run`",
        "peak memory",
    ])
    .right(0..7);
    for h in rows {
        let f = &h.facts;
        t.row([
            (f.messages + 1 - f.effective_messages).to_string(),
            fmt_bytes(f.bytes),
            format!(
                "{} messages, {}",
                f.effective_messages,
                fmt_bytes(f.bytes - f.latest_compaction_offset)
            ),
            fmt_duration(h.context.wall),
            peak_str(peak, h.context.peak),
            fmt_duration(h.compact.wall),
            peak_str(peak, h.compact.peak),
        ]);
    }
    t
}

pub(super) fn memory(root: &Path, flags: &Flags) -> Result<()> {
    let dir = bench_dir(root, "memory")?;
    let runner = Runner::new(root, &dir)?;
    println!(
        "Peak memory of the `panto` processes when only the history grows: the same effective"
    );
    println!(
        "context (the latest compaction, its kept round and {TAIL} more messages, byte for byte)"
    );
    println!("behind histories of growing length. Median of 3 runs after one checked run.\n");
    let mut measured = Vec::new();
    let mut effective_bytes: Option<u64> = None;
    for &(label, history) in histories(flags) {
        let facts = session(&dir, label, |p| history_then_tail(p, history, 20_000, TAIL))?;
        let eff = facts.bytes - facts.latest_compaction_offset;
        if let Some(e) = effective_bytes {
            ensure!(e == eff, "the effective context differs between histories");
        }
        effective_bytes = Some(eff);
        let path: PathBuf = dir.join(format!("{label}.jsonl"));
        let session = path.to_str().context("non-UTF-8 path")?;
        let out = dir.join("out.json");
        let context = runner.measure(&["context", session, "--json"], &out, 3)?;
        let doc: Value = serde_json::from_slice(&fs::read(&out)?)?;
        ensure!(
            doc["messages"].as_array().map(Vec::len) == Some(facts.effective_messages as usize),
            "{label}: panto context printed another context"
        );
        let compact = runner.measure(
            &[
                "compact",
                session,
                "--dry-run",
                "--provider",
                "offline",
                "--json",
            ],
            &out,
            3,
        )?;
        let _ = fs::remove_file(&out);
        measured.push(History {
            facts,
            context,
            compact,
        });
        cleanup(&dir, label, flags);
    }
    print!("{}", memory_table(&measured, runner.peak));
    let peaks = measured.iter().map(|h| h.context.peak);
    let (lo, hi) = (peaks.clone().min().unwrap_or(0), peaks.max().unwrap_or(0));
    println!("\nTargets:\n");
    verdict(
        hi as f64 <= lo as f64 * 1.25,
        &format!(
            "peak memory of `panto context` follows the effective context, not the file: {} to {} over these files (flat within 25%); the `scale` section shows it growing with the effective context",
            fmt_bytes(lo),
            fmt_bytes(hi)
        ),
    );
    if runner.peak == Peak::Polled {
        println!(
            "\n(/usr/bin/time was not found: peak memory was polled from /proc and is a lower bound.)"
        );
    }
    Ok(())
}
