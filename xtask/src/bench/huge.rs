//! The `huge` section (issue 37, point 6): one tool result of 1 to 10 MB in a conversation
//! compacted at a 4,096-token window, by the summary strategy (the fold cuts the turn into
//! parts and walks them) and by the tiered one (the clearing takes an old result with no
//! model; a result in the last turn is summarized). Each run is `Compactor::dry_run` in
//! process against a model that answers at once, so the time is panto's own work: the fold's
//! CPU must grow linearly with the size of the turn, as its requests do.
//!
//! The tool output is log-like text (timestamps, paths with lines, versions, hex ids, error
//! lines), varied line by line, so that the ledger's identifier scan and the sizing see what a
//! build log would give them.

use std::fmt::Write as _;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::Result;
use panto_compact::provider::{EventSink, Provider, ProviderError, Request, async_trait};
use panto_compact::{
    CompactOutcome, CompactRun, CompactionStrategy, Compactor, CompactorConfig, KnownWindows,
    ModelRef, Window, WindowSource,
};
use panto_model::{ContentBlock, EffectiveContext, Message, Role, replay};
use serde_json::json;

use super::stages::thread_cpu_now;
use super::{Flags, fmt_duration};
use crate::table::Table;

/// The window of every run, in tokens.
const WINDOW: u64 = 4_096;

/// The sizes of the tool result, in MiB (`--quick`: the first two).
const SIZES_MIB: [usize; 4] = [1, 2, 5, 10];

/// Where the huge result sits: in an older turn (two short turns follow it), or in the turn in
/// flight (the conversation ends with it: the request that would send it back to the model is
/// the one that does not fit).
#[derive(Clone, Copy)]
enum Place {
    Old,
    Last,
}

impl Place {
    fn name(self) -> &'static str {
        match self {
            Place::Old => "an older turn",
            Place::Last => "the turn in flight",
        }
    }
}

/// A model that answers every compaction request at once with a short summary naming the size
/// of its prompt (each answer differs, so no check takes it for a copy of the one before).
struct AtOnce {
    requests: AtomicUsize,
}

#[async_trait]
impl Provider for AtOnce {
    fn name(&self) -> &str {
        "bench"
    }

    async fn complete(
        &self,
        request: &Request,
        _events: EventSink<'_>,
    ) -> Result<Message, ProviderError> {
        let n = self.requests.fetch_add(1, Ordering::Relaxed) + 1;
        let bytes: usize = request.messages.iter().map(|m| m.text().len()).sum();
        Ok(Message::assistant_text(format!(
            "Part {n}: the build log went on ({bytes} bytes); the failing test is still t42."
        ))
        .with_stop_reason("end_turn"))
    }
}

/// `bytes` of build-log-like text, line by line.
fn log_text(bytes: usize) -> String {
    let mut out = String::with_capacity(bytes + 200);
    let mut i = 0u64;
    while out.len() < bytes {
        let _ = match i % 5 {
            0 => writeln!(
                out,
                "2026-12-05T10:{:02}:{:02}Z INFO compiling crate_{i} v0.{}.{} (/src/crates/crate_{i}/src/lib.rs:{})",
                (i / 60) % 60,
                i % 60,
                i % 7,
                i % 13,
                i % 997
            ),
            1 => writeln!(
                out,
                "warning: unused variable `value_{i}` at src/module_{}.rs:{}:{} [{:016x}]",
                i % 31,
                i % 500,
                i % 80,
                i.wrapping_mul(0x9e37_79b9_7f4a_7c15)
            ),
            2 => writeln!(
                out,
                "    test tests::case_{i} ... ok ({} ms, seed {})",
                i % 300,
                i * 7919
            ),
            3 => writeln!(
                out,
                "error[E0{:03}]: mismatched types in fn handler_{i} (see https://example.test/e/{i})",
                i % 1000
            ),
            _ => writeln!(
                out,
                "  = note: the build of target {} took {}.{:03} s with {} jobs",
                i % 17,
                i % 9,
                i % 1000,
                i % 8 + 1
            ),
        };
        i += 1;
    }
    out
}

/// A conversation with one tool result of `bytes` bytes at `place`.
fn conversation(bytes: usize, place: Place) -> EffectiveContext {
    let mut messages = vec![
        Message::user_text("Build the workspace and tell me which test fails."),
        Message::new(
            Role::Assistant,
            vec![
                ContentBlock::text("Building it."),
                ContentBlock::tool_use("call_1", "bash", json!({"command": "cargo build 2>&1"})),
            ],
        ),
        Message::new(
            Role::User,
            vec![ContentBlock::tool_result("call_1", log_text(bytes), false)],
        ),
    ];
    if let Place::Old = place {
        messages.extend([
            Message::assistant_text("The build passed; test t42 fails with a mismatched type."),
            Message::user_text("Fix t42."),
            Message::assistant_text("Fixed: the handler now returns the right type."),
            Message::user_text("Run the tests again."),
            Message::assistant_text("All tests pass."),
        ]);
    }
    replay(messages.into_iter().map(panto_model::Entry::Message))
}

/// One compaction of `context` by `strategy`: its model requests, its wall time, the CPU time
/// of the thread that ran it (the machine is shared: the wall time includes waiting for a
/// core), and what came of it.
struct Measured {
    requests: usize,
    time: Duration,
    cpu: Duration,
    outcome: String,
}

fn compact(
    runtime: &tokio::runtime::Runtime,
    context: &EffectiveContext,
    strategy: CompactionStrategy,
) -> Result<Measured> {
    let model = Arc::new(AtOnce {
        requests: AtomicUsize::new(0),
    });
    let mut compactor = Compactor::new(ModelRef::new(model.clone(), "bench"))
        .with_config(CompactorConfig::new().with_compaction_strategy(strategy));
    let mut windows = KnownWindows::new().with(Window::new(WINDOW, WindowSource::Configured));
    let (start, cpu) = (Instant::now(), thread_cpu_now());
    let outcome =
        runtime.block_on(compactor.dry_run(context, CompactRun::manual(None), &mut windows));
    let (time, cpu) = (start.elapsed(), thread_cpu_now() - cpu);
    let outcome = match outcome {
        Ok(CompactOutcome::Compacted(c)) => {
            let r = &c.report;
            let how = if r.cleared.is_empty() {
                "summary"
            } else if r.steps.is_empty() {
                "clearing"
            } else {
                "clearing, then summary"
            };
            format!("{how}, {} → {} tokens", r.tokens_before, r.tokens_after)
        }
        Ok(CompactOutcome::NothingToCompact(_)) => "nothing to compact".to_owned(),
        // What the user would be told, its first clause.
        Err(e) => {
            let e = e.to_string();
            format!("error: {}", e.split(':').next().unwrap_or(&e))
        }
    };
    Ok(Measured {
        requests: model.requests.load(Ordering::Relaxed),
        time,
        cpu,
        outcome,
    })
}

/// The section: every size, place and strategy, with the time per MiB to show the growth.
pub(super) fn huge(_root: &Path, flags: &Flags) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let sizes = if flags.quick {
        &SIZES_MIB[..2]
    } else {
        &SIZES_MIB[..]
    };
    println!(
        "One tool result of each size in a conversation compacted by hand (`Compactor::dry_run`) \
         at a {WINDOW}-token window, against a model in process that answers at once: the time \
         is panto's own (plan, rendering, cutting, sizing, ledger, checks): the CPU time of the \
         thread that ran it, and its wall time, of one run each.\n"
    );
    let mut table = Table::new([
        "result in",
        "strategy",
        "size",
        "requests",
        "CPU time",
        "CPU per MiB",
        "wall time",
        "outcome",
    ])
    .right([2, 3, 4, 5, 6]);
    for place in [Place::Old, Place::Last] {
        for strategy in [CompactionStrategy::Summary, CompactionStrategy::Tiered] {
            for &mib in sizes {
                let context = conversation(mib << 20, place);
                let m = compact(&runtime, &context, strategy)?;
                table.row([
                    place.name().to_owned(),
                    strategy.as_str().to_owned(),
                    format!("{mib} MiB"),
                    m.requests.to_string(),
                    fmt_duration(m.cpu),
                    fmt_duration(m.cpu / u32::try_from(mib)?),
                    fmt_duration(m.time),
                    m.outcome,
                ]);
            }
        }
    }
    println!("{table}");
    Ok(())
}
