//! The in-process figures of the `scale` section, measured with criterion's library API in a
//! child process (`xtask bench __stages DIR LABEL...`).
//!
//! The child reads each generated session into memory, checks it against what the generator
//! says it wrote, records the facts the parent prints (`LABEL.facts.json`), and runs one
//! criterion group per session: the baselines (every line parsed into `serde_json::Value`, and
//! the lines of the effective context alone; a copy of as many bytes as the transcript) and the
//! stages of panto on the same bytes, timed as the thread's CPU time ([`ThreadTime`]).
//! Criterion writes its estimates under `DIR/criterion`
//! (`CRITERION_HOME`), where the parent reads the medians; its own report goes to the child's
//! stdout, which the parent sends to `DIR/criterion.log`. A child keeps the gigabytes of decoded
//! sessions out of the parent, which then runs the `panto` processes on a quiet machine.

use std::hint::black_box;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use criterion::measurement::{Measurement, ValueFormatter};
use criterion::{BatchSize, Criterion, SamplingMode, Throughput};
use panto_compact::{DEFAULT_KEEP_TOKENS, Plan, plan};
use panto_model::{EffectiveContext, Entry, Replayer, entries, read_entries, replay, turns};
use panto_size::{Sizer, UsageSizer};
use panto_transcript::render_transcript;
use serde_json::{Value, json};

use super::generate::Facts;

/// The stages, in the order criterion runs them; the parent reads their medians by these names.
pub(super) const STAGES: &[&str] = &[
    "parse_value",
    "pipeline",
    "parse_value_effective",
    "decode",
    "replay",
    "turns",
    "sizing",
    "plan",
    "render",
    "copy",
];

/// Parses every line of `bytes` into a `serde_json::Value` and drops it: the practical floor of
/// any pipeline that reads JSON lines. Returns the number of values.
pub(super) fn parse_values(bytes: &[u8]) -> usize {
    let mut n = 0;
    let mut start = 0;
    for end in memchr::memchr_iter(b'\n', bytes).chain(std::iter::once(bytes.len())) {
        let line = &bytes[start..end];
        start = end + 1;
        if line.is_empty() {
            continue;
        }
        let v: Value = serde_json::from_slice(line).expect("the generated lines are JSON");
        black_box(&v);
        n += 1;
    }
    n
}

/// What panto does before it can compact: decode every line and replay it (streamed, as a loader
/// does), size the messages of the effective context, and plan the retention (which segments
/// the conversation into turns).
fn pipeline(bytes: &[u8]) -> (EffectiveContext, Plan) {
    let mut replayer = Replayer::new();
    for entry in entries(bytes) {
        replayer.push(entry.expect("the generated lines decode"));
    }
    let ctx = replayer.finish();
    let sizes = UsageSizer::default().message_sizes(&ctx.messages);
    let p = plan(&ctx, &sizes, DEFAULT_KEEP_TOKENS);
    (ctx, p)
}

/// criterion's measurement here: the CPU time of the measuring thread
/// (`CLOCK_THREAD_CPUTIME_ID`), kernel time on its behalf (page faults) included.
///
/// On this shared two-core machine other builds often keep both cores busy; wall time then also
/// counts the time the thread waited for a core, which moves by tens of percent from one minute
/// to the next. CPU time does not, and for this single-threaded code on an idle machine it
/// equals wall time.
pub(super) struct ThreadTime;

pub(super) fn thread_cpu_now() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(
        t.tv_sec.max(0) as u64,
        t.tv_nsec.clamp(0, 999_999_999) as u32,
    )
}

impl Measurement for ThreadTime {
    type Intermediate = Duration;
    type Value = Duration;

    fn start(&self) -> Duration {
        thread_cpu_now()
    }

    fn end(&self, start: Duration) -> Duration {
        thread_cpu_now().saturating_sub(start)
    }

    fn add(&self, a: &Duration, b: &Duration) -> Duration {
        *a + *b
    }

    fn zero(&self) -> Duration {
        Duration::ZERO
    }

    fn to_f64(&self, value: &Duration) -> f64 {
        value.as_nanos() as f64
    }

    fn formatter(&self) -> &dyn ValueFormatter {
        &Nanoseconds
    }
}

/// Formats nanoseconds for criterion's report.
struct Nanoseconds;

impl ValueFormatter for Nanoseconds {
    fn scale_values(&self, typical: f64, values: &mut [f64]) -> &'static str {
        let (factor, unit) = if typical < 1e3 {
            (1.0, "ns")
        } else if typical < 1e6 {
            (1e-3, "µs")
        } else if typical < 1e9 {
            (1e-6, "ms")
        } else {
            (1e-9, "s")
        };
        for v in values {
            *v *= factor;
        }
        unit
    }

    fn scale_throughputs(
        &self,
        _: f64,
        throughput: &Throughput,
        values: &mut [f64],
    ) -> &'static str {
        let per = match throughput {
            Throughput::Bytes(n) | Throughput::BytesDecimal(n) => *n as f64 / 1e6,
            Throughput::Elements(n) => *n as f64,
        };
        for v in values {
            *v = per / (*v / 1e9);
        }
        match throughput {
            Throughput::Elements(_) => "elem/s",
            _ => "MB/s",
        }
    }

    fn scale_for_machines(&self, _: &mut [f64]) -> &'static str {
        "ns"
    }
}

/// The child's entry point: `DIR QUICK LABEL...`.
pub(super) fn child(args: &[String]) -> Result<()> {
    let [dir, quick, labels @ ..] = args else {
        bail!("usage: xtask bench __stages DIR QUICK LABEL...");
    };
    let dir = Path::new(dir);
    let quick = quick == "quick";
    let mut c = Criterion::default()
        .with_measurement(ThreadTime)
        .without_plots()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(if quick { 100 } else { 300 }))
        .measurement_time(Duration::from_secs(if quick { 1 } else { 2 }))
        .nresamples(10_000);
    for label in labels {
        one(&mut c, dir, label)?;
    }
    c.final_summary();
    Ok(())
}

fn one(c: &mut Criterion<ThreadTime>, dir: &Path, label: &str) -> Result<()> {
    let path = dir.join(format!("{label}.jsonl"));
    let bytes = std::fs::read(&path).with_context(|| format!("read {}", path.display()))?;
    let facts: Facts = read_facts(&dir.join(format!("{label}.gen.json")))?;
    ensure!(bytes.len() as u64 == facts.bytes, "{label}: size differs");
    let effective = &bytes[facts.latest_compaction_offset as usize..];

    // Check the session against the generator's account before timing anything.
    let all = read_entries(&bytes).map_err(|e| anyhow::anyhow!("{label}: {e}"))?;
    let messages = all
        .iter()
        .filter(|e| matches!(e, Entry::Message(_)))
        .count();
    ensure!(messages as u64 == facts.messages, "{label}: message count");
    let ctx = replay(all.clone());
    ensure!(
        ctx.skipped.is_empty()
            && ctx.compaction.as_ref().and_then(|c| c.id.clone()) == facts.latest_compaction,
        "{label}: replay did not end at the latest compaction"
    );
    ensure!(
        ctx.messages.len() as u64 == facts.effective_messages,
        "{label}: effective context has {} messages, expected {}",
        ctx.messages.len(),
        facts.effective_messages
    );
    let problems = panto_model::validate(ctx.conversation());
    ensure!(
        problems.is_empty(),
        "{label}: invalid conversation: {:?}",
        &problems[..problems.len().min(3)]
    );
    let conversation_turns = turns(ctx.conversation()).len();
    let sizes = UsageSizer::default().message_sizes(&ctx.messages);
    let measured = UsageSizer::default()
        .measure(&ctx.messages)
        .iter()
        .filter(|s| !matches!(s.source, panto_size::Source::Heuristic(_)))
        .count();
    let p = plan(&ctx, &sizes, DEFAULT_KEEP_TOKENS);
    let (ctx2, p2) = pipeline(&bytes);
    ensure!(ctx2 == ctx && p2 == p, "{label}: the pipeline disagrees");
    drop(ctx2);
    let transcript = render_transcript(&ctx.messages[p.prefix()]);
    let record = json!({
        "entries": all.len(),
        "effective_bytes": effective.len(),
        "effective_messages": ctx.messages.len(),
        "turns": conversation_turns,
        "measured_sizes": measured,
        "tokens": sizes.iter().sum::<u64>(),
        "summarized_turns": p.summarized_turns,
        "kept_turns": p.kept_turns,
        "summarized_messages": p.prefix().len(),
        "transcript_bytes": transcript.len(),
    });
    std::fs::write(
        dir.join(format!("{label}.facts.json")),
        serde_json::to_vec_pretty(&record)?,
    )?;

    // The baseline and the pipeline run first, one after the other, on a heap as clean as a
    // fresh process's: the checks' values are dropped, and rebuilt afterwards for the stages.
    drop((all, ctx, sizes, transcript));
    let mut g = c.benchmark_group(label);
    g.sampling_mode(SamplingMode::Flat);
    g.bench_function("parse_value", |b| {
        b.iter(|| parse_values(black_box(&bytes)));
    });
    g.bench_function("pipeline", |b| b.iter(|| pipeline(black_box(&bytes))));
    g.bench_function("parse_value_effective", |b| {
        b.iter(|| parse_values(black_box(effective)));
    });
    g.bench_function("decode", |b| b.iter(|| read_entries(black_box(&bytes))));
    let all = read_entries(&bytes).map_err(|e| anyhow::anyhow!("{label}: {e}"))?;
    g.bench_function("replay", |b| {
        b.iter_batched(|| all.clone(), replay, BatchSize::PerIteration);
    });
    let ctx = replay(all);
    let sizes = UsageSizer::default().message_sizes(&ctx.messages);
    g.bench_function("turns", |b| b.iter(|| turns(black_box(ctx.conversation()))));
    g.bench_function("sizing", |b| {
        b.iter(|| UsageSizer::default().message_sizes(black_box(&ctx.messages)));
    });
    g.bench_function("plan", |b| {
        b.iter(|| plan(black_box(&ctx), black_box(&sizes), DEFAULT_KEEP_TOKENS));
    });
    let prefix = &ctx.messages[p.prefix()];
    let transcript = render_transcript(prefix);
    g.bench_function("render", |b| {
        b.iter(|| render_transcript(black_box(prefix)));
    });
    g.bench_function("copy", |b| {
        b.iter(|| black_box(transcript.as_bytes()).to_vec());
    });
    g.finish();
    Ok(())
}

/// `xtask bench __profile STAGE SESSION [REPS]`: runs one stage of [`STAGES`] over a session
/// `REPS` times (1 by default), for a profiler such as `valgrind --tool=callgrind`
/// (`docs/benchmarks.md` shows the command). Setup is the same as the benchmark's.
pub(super) fn profile(args: &[String]) -> Result<()> {
    let [stage, path, rest @ ..] = args else {
        bail!("usage: xtask bench __profile STAGE SESSION [REPS]");
    };
    let reps: usize = rest.first().map_or(Ok(1), |r| r.parse())?;
    let bytes = std::fs::read(path).with_context(|| format!("read {path}"))?;
    let (ctx, p) = pipeline(&bytes);
    let sizes = UsageSizer::default().message_sizes(&ctx.messages);
    let prefix = &ctx.messages[p.prefix()];
    let transcript = if stage == "copy" {
        render_transcript(prefix)
    } else {
        String::new()
    };
    for _ in 0..reps {
        match stage.as_str() {
            "parse_value" => drop(black_box(parse_values(&bytes))),
            "decode" => drop(black_box(read_entries(&bytes))),
            "turns" => drop(black_box(turns(ctx.conversation()))),
            "sizing" => drop(black_box(
                UsageSizer::default().message_sizes(&ctx.messages),
            )),
            "plan" => drop(black_box(plan(&ctx, &sizes, DEFAULT_KEEP_TOKENS))),
            "pipeline" => drop(black_box(pipeline(&bytes))),
            "render" => drop(black_box(render_transcript(prefix))),
            "copy" => drop(black_box(black_box(transcript.as_bytes()).to_vec())),
            other => bail!("no profile for stage `{other}`"),
        }
    }
    Ok(())
}

/// Reads the generator's facts that the parent saved beside a session.
pub(super) fn read_facts(path: &Path) -> Result<Facts> {
    let v: Value = serde_json::from_slice(
        &std::fs::read(path).with_context(|| format!("read {}", path.display()))?,
    )?;
    let n = |k: &str| {
        v[k].as_u64()
            .with_context(|| format!("{}: {k}", path.display()))
    };
    Ok(Facts {
        messages: n("messages")?,
        compactions: n("compactions")?,
        kept_copies: n("kept_copies")?,
        tool_calls: n("tool_calls")?,
        thinking_blocks: n("thinking_blocks")?,
        bytes: n("bytes")?,
        latest_compaction_offset: n("latest_compaction_offset")?,
        effective_messages: n("effective_messages")?,
        latest_compaction: v["latest_compaction"].as_str().map(str::to_owned),
    })
}

/// Saves the generator's facts beside a session.
pub(super) fn write_facts(path: &Path, f: &Facts) -> Result<()> {
    let v = json!({
        "messages": f.messages,
        "compactions": f.compactions,
        "kept_copies": f.kept_copies,
        "tool_calls": f.tool_calls,
        "thinking_blocks": f.thinking_blocks,
        "bytes": f.bytes,
        "latest_compaction_offset": f.latest_compaction_offset,
        "effective_messages": f.effective_messages,
        "latest_compaction": f.latest_compaction,
    });
    std::fs::write(path, serde_json::to_vec_pretty(&v)?)
        .with_context(|| format!("write {}", path.display()))
}
