//! `cargo xtask bench [SECTION...] [--quick] [--keep] [--sweep] [--sweep-warm]`: measurements, one section each, printed
//! as Markdown tables (`docs/benchmarks.md` holds the latest).
//!
//! Sections, in the order a full run takes them:
//! - `scale`: seeded sessions of 1k to 1M messages ([`generate`](mod@generate)); every
//!   in-process stage (decode, replay, turns, sizing, plan, rendering) measured with criterion
//!   beside the cost of parsing the same bytes into `serde_json::Value`
//!   ([`stages`](mod@stages), in a child process), and the release `panto context` and
//!   `panto compact --dry-run` as processes with their peak memory ([`process`](mod@process));
//! - `memory`: the peak memory of those processes when only the history grows;
//! - `session`: the effective context of a long session loads in time that does not grow with
//!   the history, and append latency;
//! - `stores`: the same load and a one-message append on each store (JSONL, SQLite, PostgreSQL,
//!   plain and with TLS) for a session of 1,000,000 messages, and `panto import` of it into each
//!   store with its throughput and peak memory ([`stores`](mod@stores), [`imports`](mod@imports));
//! - `process`: the real pi session ×1, ×10 and ×100 through the `panto` processes, each run's
//!   CPU time paired with a process parsing the same lines ([`real`](mod@real));
//! - `cost`: a scripted 300-turn tool-using session on each protocol against emulators of the
//!   providers' prompt caching, billed with panto's caching and without ([`cost`](mod@cost));
//! - `huge`: one tool result of 1 to 10 MiB compacted at a 4,096-token window by the summary
//!   and tiered strategies, in an older turn and in the last: model requests and panto's time,
//!   which must grow linearly with the result ([`huge`](mod@huge)).
//!
//! The measurements run in a release build: from a debug build of xtask, the command re-runs
//! itself with `cargo run --release`. Generated data goes under `target/bench/`, never into the
//! repository, and is deleted afterwards (`--keep` keeps the generated sessions of `scale` and
//! `memory` for the next run, which reuses them, and the `recall` section's JSONL and SQLite
//! sessions for `xtask bench __recall`, a profiler's run of one query). Timings are medians over repetitions, with
//! the files in the page cache. `--quick` stops the sessions at 100k messages and 100 MB.

mod cost;
mod fetch;
mod generate;
mod huge;
mod imports;
mod process;
mod real;
mod recall;
mod scale;
mod stages;
mod stores;
#[cfg(test)]
mod tests;

use std::fs;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use panto_model::{
    CompactionEntry, ContentBlock, Entry, KEPT_BY, Message, Role, Usage, encode_line,
};
use panto_session::{Session, SessionOptions};
use serde_json::json;

use crate::table::Table;

/// A section: its name, what it measures, and the function that prints its table.
type Section = (&'static str, &'static str, fn(&Path, &Flags) -> Result<()>);

const SECTIONS: &[Section] = &[
    (
        "scale",
        "every stage over sessions of growing size, against parsing the same bytes",
        scale::scale,
    ),
    (
        "memory",
        "peak memory of the panto processes when only the history grows",
        scale::memory,
    ),
    (
        "session",
        "effective-context load time over growing histories, and append latency",
        session,
    ),
    (
        "stores",
        "the effective-context load of a 1,000,000-message session and append latency, per store",
        stores::stores,
    ),
    (
        "recall",
        "recall on a 1,000,000-message session per store: cold, index build, warm, update, size",
        recall::recall,
    ),
    (
        "process",
        "the real pi session ×1, ×10 and ×100 through the panto processes, paired with a parse",
        real::process,
    ),
    (
        "cost",
        "a 300-turn tool-using session billed with panto's prompt caching and without, per protocol",
        cost::cost,
    ),
    (
        "huge",
        "one tool result of 1 to 10 MiB compacted at a 4k window, by the summary and tiered strategies",
        huge::huge,
    ),
];

/// What `cargo xtask bench --help` prints.
const USAGE: &str = "\
usage: cargo xtask bench [SECTION...] [--quick] [--keep] [--sweep] [--sweep-warm]

Runs the measurements of docs/benchmarks.md in a release build and prints them as Markdown.
With no SECTION, every section runs (about 10 minutes).

sections:
  scale    every stage over generated sessions of 1k to 1M messages, against parsing the same
           bytes into serde_json::Value, and the panto processes with their peak memory
  memory   peak memory of the panto processes when only the history grows
  session  effective-context load time over growing histories, and append latency
  stores   per store (JSONL, SQLite, PostgreSQL when PANTO_TEST_POSTGRES is set, and with TLS
           when PANTO_TEST_POSTGRES_TLS is): the load of a 1,000,000-message session with a
           compaction near the end, append latency, and `panto import` of it with throughput
           and peak memory (PANTO_BENCH_IMPORT_GIB=N imports a generated file of N GiB instead)
  recall   per store: a recall of a 1,000,000-message session cold, the index's build, a warm
           query, the update after an append, and the index's size against the session's
  process  the real pi session (../shared/data/sessions/pi-large.jsonl) ×1, ×10, ×100 through
           panto context --json, panto transcript and panto compact --dry-run --provider
           offline, each run paired with a process parsing the same lines (CPU time by perf)
  cost     a scripted 300-turn tool-using session per protocol (Anthropic, OpenAI Chat and
           Responses) against loopback emulators of the providers' prompt caching: the input
           billed with panto's caching and without, what the first request after a
           compaction writes, and the cache-aware proactive rule against the plain one
  huge     one tool result of 1, 2, 5 and 10 MiB (--quick: 1 and 2) in an older turn and in
           the last, compacted at a 4,096-token window by the summary and tiered strategies
           against a model in process: model requests and wall time

options:
  --quick  sessions up to 100k messages, histories up to 100 MB
  --keep   keep the generated sessions under target/bench/ and reuse them next run
  --sweep  cost: instead of the default run, the cache-aware rule's parts on and off over
           windows of 24,000 to 64,000 and three patterns of pauses, per protocol
  --sweep-warm  cost: instead of the default run, the warm wait compacting to the waited
           share's headroom against the configured share's, on Anthropic, over the same
           windows and pauses
  --help   print this
";

/// Flags shared by the sections.
#[derive(Debug, Default)]
pub(crate) struct Flags {
    /// Smaller data for a quick look (sessions stop at 100k messages, the history at 100 MB).
    quick: bool,
    /// Keep the generated sessions of `scale` and `memory` (and reuse kept ones).
    keep: bool,
    /// `cost`: sweep windows, pauses and the parts of the cache-aware rule instead of the
    /// default run.
    sweep: bool,
    /// `cost`: sweep the warm wait's headroom (the waited share's or the configured one's)
    /// instead of the default run.
    sweep_warm: bool,
}

pub(crate) fn run(root: &Path, args: &[String]) -> Result<()> {
    if args
        .iter()
        .any(|a| matches!(a.as_str(), "--help" | "-h" | "help"))
    {
        print!("{USAGE}");
        return Ok(());
    }
    if args.first().map(String::as_str) == Some("__parse") {
        // The baseline process of the `process` section.
        return real::parse(&args[1..]);
    }
    if args.first().map(String::as_str) == Some("__stages") {
        // The criterion child of the `scale` section (already a release build).
        return stages::child(&args[1..]);
    }
    if args.first().map(String::as_str) == Some("__recall") {
        return recall::profile(&args[1..]);
    }
    if args.first().map(String::as_str) == Some("__profile") {
        // One stage alone, for a profiler; run the release build directly.
        return stages::profile(&args[1..]);
    }
    if cfg!(debug_assertions) {
        // Timings of a debug build mean nothing: run the release build of this same command.
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
        let status = Command::new(cargo)
            // With the feature: without it, the release build would lack `bench` and forward
            // once more (`forward` in main.rs), building xtask a third way.
            .args([
                "run",
                "--release",
                "--quiet",
                "--package",
                "xtask",
                "--features",
                "bench",
                "--",
                "bench",
            ])
            .args(args)
            .current_dir(root)
            .status()
            .context("could not run the release build of xtask")?;
        if !status.success() {
            bail!("bench failed ({status})");
        }
        return Ok(());
    }
    let mut flags = Flags::default();
    let mut chosen = Vec::new();
    for a in args {
        match a.as_str() {
            "--quick" => flags.quick = true,
            "--keep" => flags.keep = true,
            "--sweep" => flags.sweep = true,
            "--sweep-warm" => flags.sweep_warm = true,
            name => match SECTIONS.iter().find(|s| s.0 == name) {
                Some(s) => chosen.push(s),
                None => bail!("unknown bench argument `{name}`\n\n{USAGE}"),
            },
        }
    }
    if chosen.is_empty() {
        chosen = SECTIONS.iter().collect();
    }
    let start = Instant::now();
    println!("Machine: {}.\n", machine());
    println!(
        "Load average at the start (1, 5, 15 min): {}.\n",
        load_average()
    );
    for (name, what, f) in chosen {
        println!("## {name}: {what}\n");
        f(root, &flags)?;
        println!();
    }
    println!(
        "Load average at the end (1, 5, 15 min): {}. The run took {}.",
        load_average(),
        fmt_duration(start.elapsed())
    );
    Ok(())
}

/// Cores, CPU model, memory, kernel, compiler and commit, for the record.
fn machine() -> String {
    let cores = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
    let cpuinfo = fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map_or_else(
            || "unknown CPU".to_owned(),
            |l| l.trim_start_matches([' ', '\t', ':']).to_owned(),
        );
    let meminfo = fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let memory = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|l| l.trim().trim_end_matches(" kB").parse::<u64>().ok())
        .map_or_else(|| "unknown".to_owned(), |kib| fmt_bytes(kib * 1024));
    let output = |program: &str, args: &[&str]| {
        Command::new(program)
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map_or_else(
                || "unknown".to_owned(),
                |o| String::from_utf8_lossy(&o.stdout).trim().to_owned(),
            )
    };
    format!(
        "{cores} cores ({cpu}), {memory} of memory, Linux {}, {}, commit {}",
        output("uname", &["-r"]),
        output("rustc", &["--version"]),
        output("git", &["rev-parse", "--short", "HEAD"]),
    )
}

/// The load averages from `/proc/loadavg`.
fn load_average() -> String {
    fs::read_to_string("/proc/loadavg").ok().map_or_else(
        || "unknown".to_owned(),
        |s| s.split_whitespace().take(3).collect::<Vec<_>>().join(", "),
    )
}

/// Median, minimum and maximum of `reps` timed runs of `f`, after `warmup` untimed ones.
fn time<T>(
    warmup: usize,
    reps: usize,
    mut f: impl FnMut() -> Result<T>,
) -> Result<(Duration, Duration, Duration, T)> {
    for _ in 0..warmup {
        f()?;
    }
    let mut times = Vec::with_capacity(reps);
    let mut last = None;
    for _ in 0..reps {
        let start = Instant::now();
        let out = f()?;
        times.push(start.elapsed());
        last = Some(out);
    }
    times.sort();
    let out = last.context("no repetitions")?;
    Ok((
        times[times.len() / 2],
        times[0],
        times[times.len() - 1],
        out,
    ))
}

fn fmt_duration(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us < 1000.0 {
        format!("{us:.0} µs")
    } else if us < 1e6 {
        format!("{:.2} ms", us / 1000.0)
    } else {
        format!("{:.2} s", us / 1e6)
    }
}

fn fmt_bytes(n: u64) -> String {
    const MB: f64 = 1024.0 * 1024.0;
    let n = n as f64;
    if n >= 1024.0 * MB {
        format!("{:.2} GiB", n / (1024.0 * MB))
    } else if n >= MB {
        format!("{:.1} MiB", n / MB)
    } else {
        format!("{:.1} KiB", n / 1024.0)
    }
}

// ---------------------------------------------------------------------------------------------
// session

const MIB: u64 = 1024 * 1024;

fn bench_dir(root: &Path, name: &str) -> Result<PathBuf> {
    let dir = root.join("target").join("bench").join(name);
    fs::create_dir_all(&dir).with_context(|| format!("could not create {}", dir.display()))?;
    Ok(dir)
}

/// One round of an agent conversation: a prompt, a tool call, its result, an answer.
fn round(i: usize) -> Vec<Entry> {
    let mut prompt = Message::user_text(format!(
        "Round {i}: please look at the failing test in module {} and fix it.",
        i % 97
    ));
    prompt.id = Some(format!("u{i}").into());
    let mut call = Message::new(
        Role::Assistant,
        vec![
            ContentBlock::text("Reading the file first."),
            ContentBlock::tool_use(
                format!("toolu_{i}"),
                "read",
                json!({"path": format!("src/module_{}.rs", i % 97)}),
            ),
        ],
    );
    call.id = Some(format!("a{i}").into());
    call.model = Some("claude-sonnet-4-5".into());
    call.stop_reason = Some("tool_use".into());
    call.usage = Some(Usage::new(5_000 + i as u64 % 50_000, 88));
    let body =
        "fn example() -> u32 {\n    // A line of source code in the tool result.\n    42\n}\n"
            .repeat(12);
    let mut result = Message::new(
        Role::User,
        vec![ContentBlock::tool_result(format!("toolu_{i}"), body, false)],
    );
    result.id = Some(format!("r{i}").into());
    let mut answer = Message::assistant_text(format!(
        "Fixed round {i}: the assertion compared the wrong fields."
    ));
    answer.id = Some(format!("b{i}").into());
    answer.usage = Some(Usage::new(6_000 + i as u64 % 50_000, 40));
    [prompt, call, result, answer]
        .into_iter()
        .map(Entry::Message)
        .collect()
}

/// A compaction keeping the messages of `kept`, followed by their copies.
fn compaction(id: &str, kept: &[Entry]) -> Vec<Entry> {
    let mut c = CompactionEntry::new(
        format!("Summary {id}: the user is fixing failing tests one module at a time; ").repeat(20),
    );
    c.id = Some(id.into());
    c.kept_messages = Some(kept.len() as u64);
    let mut out = vec![Entry::Compaction(c)];
    for e in kept {
        if let Entry::Message(m) = e {
            let mut copy = m.clone();
            copy.id = Some(format!("{}-{id}", m.id.as_deref().unwrap_or("x")).into());
            copy.extra.insert(KEPT_BY.into(), json!(id));
            out.push(Entry::Message(copy));
        }
    }
    out
}

/// Bytes of about 1 MiB of history: rounds of conversation with a compaction every 200 rounds.
fn history_block() -> Vec<u8> {
    let mut out = Vec::new();
    let mut i = 0;
    while (out.len() as u64) < MIB {
        let r = round(i);
        for e in &r {
            out.extend_from_slice(encode_line(e).as_bytes());
        }
        if i % 200 == 199 {
            for e in compaction(&format!("old{i}"), &r) {
                out.extend_from_slice(encode_line(&e).as_bytes());
            }
        }
        i += 1;
    }
    out
}

/// The same tail for every size: the latest compaction (keeping two rounds) and 50 rounds after
/// it, so the effective context has 1 + 8 + 200 messages.
fn tail() -> Vec<u8> {
    let mut kept = round(1_000_000);
    kept.extend(round(1_000_001));
    let mut entries = compaction("latest", &kept);
    for i in 0..50 {
        entries.extend(round(2_000_000 + i));
    }
    entries
        .iter()
        .flat_map(|e| encode_line(e).into_bytes())
        .collect()
}

/// Writes a session of at least `size` bytes: history blocks, then the tail.
fn generate(path: &Path, size: u64, block: &[u8], tail: &[u8]) -> Result<()> {
    let file =
        fs::File::create(path).with_context(|| format!("could not create {}", path.display()))?;
    let mut w = BufWriter::with_capacity(4 * MIB as usize, file);
    let mut written = 0u64;
    while written + (tail.len() as u64) < size {
        w.write_all(block)?;
        written += block.len() as u64;
    }
    w.write_all(tail)?;
    w.flush()?;
    Ok(())
}

fn session(root: &Path, flags: &Flags) -> Result<()> {
    let dir = bench_dir(root, "session")?;
    let block = history_block();
    let tail = tail();
    let sizes: &[u64] = if flags.quick {
        &[MIB, 10 * MIB, 100 * MIB]
    } else {
        &[MIB, 10 * MIB, 100 * MIB, 1024 * MIB]
    };
    println!("Load of the effective context (`Session::open` + `load_context`), latest compaction");
    println!(
        "209 messages before the end, median of 50 runs after 5 warm-up runs, file in the page"
    );
    println!(
        "cache. Full replay: `history()` streamed through `panto_model::Replayer`, one run.\n"
    );
    let opts = SessionOptions::default().fsync(false);
    let mut loads = Vec::new();
    for &size in sizes {
        let path = dir.join(format!("history-{}m.jsonl", size / MIB));
        generate(&path, size, &block, &tail)?;
        let len = fs::metadata(&path)?.len();
        let (median, min, max, (loaded, stats)) = time(5, 50, || {
            let s = Session::open(&path, opts.clone())?;
            Ok(s.load_context_with_stats()?)
        })?;
        if loaded.context.summary().is_none() || loaded.context.messages.len() != 209 {
            bail!(
                "unexpected context: {} messages",
                loaded.context.messages.len()
            );
        }
        let (full, _, _, n) = time(0, 1, || {
            let s = Session::open(&path, opts.clone())?;
            let mut replayer = panto_model::Replayer::new();
            for item in s.history()? {
                replayer.push(item?.1);
            }
            Ok(replayer.finish().messages.len())
        })?;
        if n != 209 {
            bail!("full replay disagrees: {n} messages");
        }
        fs::remove_file(&path)?;
        loads.push(Load {
            size,
            len,
            bytes_read: stats.bytes_read,
            entries: stats.entries,
            load: [median, min, max],
            full,
        });
    }
    print!("{}", load_table(&loads));
    if let Some(largest) = loads.last() {
        let (size, median) = (largest.size, largest.load[0]);
        println!("\nTargets:\n");
        scale::verdict(
            median < Duration::from_millis(100),
            &format!(
                "effective-context load of a {} session with a recent compaction under 100 ms: {}",
                fmt_bytes(size),
                fmt_duration(median)
            ),
        );
    }

    println!(
        "\nAppend of one message to a session of 1 MiB (lock, end check, one write), median of 200.\n"
    );
    let mut appends = Vec::new();
    for fsync in [false, true] {
        let path = dir.join("append.jsonl");
        generate(&path, MIB, &block, &tail)?;
        let s = Session::open(&path, SessionOptions::default().fsync(fsync))?;
        let msg = [Entry::Message(Message::user_text("one more prompt"))];
        let (median, min, max, _) = time(5, 200, || Ok(s.append(&msg)?))?;
        appends.push((fsync, [median, min, max]));
        fs::remove_file(&path)?;
        let _ = fs::remove_file(dir.join("append.jsonl.lock"));
    }
    print!("{}", append_table(&appends));
    Ok(())
}

/// The load of one session size: its sizes, what the backwards load read, and the times.
struct Load {
    /// The history size asked for.
    size: u64,
    /// The size of the generated file.
    len: u64,
    bytes_read: u64,
    entries: usize,
    /// Median, min and max of the effective-context load.
    load: [Duration; 3],
    /// One full replay.
    full: Duration,
}

/// The load table: one row per session size.
fn load_table(rows: &[Load]) -> Table {
    let mut t = Table::new([
        "history",
        "file size",
        "bytes read",
        "entries replayed",
        "load median",
        "load min",
        "load max",
        "full replay",
    ])
    .right(1..8);
    for r in rows {
        let [median, min, max] = r.load.map(fmt_duration);
        t.row([
            fmt_bytes(r.size),
            fmt_bytes(r.len),
            fmt_bytes(r.bytes_read),
            r.entries.to_string(),
            median,
            min,
            max,
            fmt_duration(r.full),
        ]);
    }
    t
}

/// The append table: fsync off or on, and the median, min and max of one append.
fn append_table(rows: &[(bool, [Duration; 3])]) -> Table {
    let mut t = Table::new(["fsync", "median", "min", "max"]).right(1..4);
    for &(fsync, times) in rows {
        let [median, min, max] = times.map(fmt_duration);
        t.row([
            if fsync { "on" } else { "off" }.to_owned(),
            median,
            min,
            max,
        ]);
    }
    t
}
