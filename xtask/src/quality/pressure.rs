//! `cargo xtask quality --pressure`: what panto keeps of real sessions when a small window
//! forces overflow compactions, at windows of 4,096, 8,192 and 16,384 tokens.
//!
//! For each window a loopback model (`loopback.rs`) enforces the window and states it in an
//! `OpenAI` overflow error. Each shared session is then driven through the real `panto` binary
//! twice: written whole and sent one prompt (`panto send`: one overflow compaction that folds
//! the whole conversation), and written in [`CHAIN`] parts of about equal size with one prompt
//! sent after each part (a chain of up to that many overflow compactions, each merging the
//! record of the one before). A session that fits the window is not compacted and is listed as
//! such.
//!
//! What counts: the facts `quality` extracts (requests, files, errors, commands, ...) from the
//! messages that are no longer verbatim in the effective context, the summarized part. A fact
//! is kept when the effective context (`panto context --json`: the summary with its ledger
//! rendering, and the kept turns) or the record stored on the compaction entry
//! (`panto ledger --json`) holds it, by the same rule as `quality`. The model's summaries name
//! no fact, so the figures are what panto keeps whatever the model writes.
//!
//! Every run also checks what the issue of nothing forgotten under pressure promises: every
//! `send` succeeds, every compaction is the model's (never panto's own record), no compaction
//! request allows fewer than 256 output tokens, and no request is sent twice. A miss fails the
//! command, as does a kept share below [`THRESHOLDS`].

use std::collections::HashSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use panto_model::Message;
use panto_transcript::transcript_items;
use serde_json::Value;

use super::loopback::{AGENT_PROMPT, Loopback, Seen};
use super::turns::{parts, turns_of};
use super::{CATEGORIES, Haystack, extract};
use crate::table::Table;

/// The windows, in tokens.
pub(super) const WINDOWS: &[u64] = &[4096, 8192, 16_384];

/// The most parts a session is written in for the chained runs.
const CHAIN: usize = 5;

/// The prompt sent after each part.
const PROMPT: &str = "Please go on with the work.";

/// The least output a compaction request may allow (`panto_compact::MIN_OUTPUT_TOKENS`).
const OUTPUT_FLOOR: u64 = 256;

/// The model name panto sends (the loopback model answers any).
const MODEL: &str = "pressure-model";

/// The model a compaction names when panto wrote its own record.
const RECORD_ONLY_MODEL: &str = "panto-record";

/// The least share of each category's facts that must be kept, in every window and mode.
pub(super) const THRESHOLDS: &[(&str, f64)] = &[
    ("user requests", 1.0),
    ("files modified", 1.0),
    ("other files", 1.0),
    ("errors", 1.0),
    ("commands", 1.0),
];

/// How a session is fed to panto.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// Written whole, then one `send`.
    Once,
    /// Written in up to [`CHAIN`] parts, a `send` after each.
    Chained,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Once => "once",
            Mode::Chained => "chained",
        }
    }
}

/// What one run (a window, a session, a mode) did and kept.
#[derive(Default)]
pub(super) struct RunScores {
    /// category -> (facts, kept by the context, kept by the ledger, kept by either)
    counts: Vec<(&'static str, [usize; 4])>,
    /// `panto send` commands run.
    pub sends: usize,
    /// Compaction entries written.
    pub compactions: usize,
    /// Of those, panto's own records.
    pub records: usize,
    /// Compaction requests the model received.
    pub compaction_requests: usize,
    /// Requests the model rejected for their size.
    pub rejected: usize,
    /// The least output a compaction request allowed.
    pub least_output: Option<u64>,
    /// Requests whose messages and output equal an earlier one's.
    pub repeated: usize,
    /// The request bound of issue 26, summed over the compactions.
    pub bound: usize,
    /// Compactions that sent more requests than their bound.
    pub over_bound: usize,
    /// Commands that failed, with what they printed.
    pub failures: Vec<String>,
}

impl RunScores {
    /// The counts of `category`, added when missing.
    fn slot(&mut self, category: &'static str) -> &mut [usize; 4] {
        let i = match self.counts.iter().position(|(c, _)| *c == category) {
            Some(i) => i,
            None => {
                self.counts.push((category, [0; 4]));
                self.counts.len() - 1
            }
        };
        &mut self.counts[i].1
    }

    /// Counts one fact: whether the context, the ledger and either of them keep it.
    pub(super) fn add_fact(&mut self, category: &'static str, kept: [bool; 3]) {
        let e = self.slot(category);
        e[0] += 1;
        for (n, k) in e[1..].iter_mut().zip(kept) {
            *n += usize::from(k);
        }
    }

    fn add(&mut self, other: &RunScores) {
        for (c, n) in &other.counts {
            for (sum, add) in self.slot(c).iter_mut().zip(n) {
                *sum += add;
            }
        }
        self.sends += other.sends;
        self.compactions += other.compactions;
        self.records += other.records;
        self.compaction_requests += other.compaction_requests;
        self.rejected += other.rejected;
        self.least_output = match (self.least_output, other.least_output) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.repeated += other.repeated;
        self.bound += other.bound;
        self.over_bound += other.over_bound;
        self.failures.extend(other.failures.iter().cloned());
    }

    fn count(&self, category: &str) -> Option<[usize; 4]> {
        self.counts
            .iter()
            .find(|(c, _)| *c == category)
            .map(|(_, n)| *n)
    }
}

pub(super) fn run(root: &Path, panto: &Path, sessions: &[PathBuf]) -> Result<()> {
    let work = crate::e2e::target_dir(root).join("quality-pressure");
    let _ = fs::remove_dir_all(&work);
    fs::create_dir_all(work.join("user-config"))?;
    let started = Instant::now();
    let mut runs = Table::new([
        "window",
        "session",
        "mode",
        "sends",
        "compactions",
        "panto's records",
        "compaction requests",
        "rejected",
        "least output",
        "time",
    ]);
    let mut misses = Vec::new();
    let mut windows = Vec::new();
    for &window in WINDOWS {
        let server = Loopback::start(window)?;
        let mut by_mode = [RunScores::default(), RunScores::default()];
        for path in sessions {
            let name = path
                .file_stem()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned();
            for (m, mode) in [Mode::Once, Mode::Chained].into_iter().enumerate() {
                let t0 = Instant::now();
                let dir = work.join(window.to_string()).join(mode.name()).join(&name);
                let one = run_one(panto, &work, &server, path, &dir, mode)?;
                let compactions = if one.compactions == 0 {
                    "none (fits)".to_owned()
                } else {
                    one.compactions.to_string()
                };
                runs.row([
                    window.to_string(),
                    name.clone(),
                    mode.name().to_owned(),
                    one.sends.to_string(),
                    compactions,
                    one.records.to_string(),
                    if one.compactions == 0 {
                        "0".to_owned()
                    } else {
                        format!("{} (bound {})", one.compaction_requests, one.bound)
                    },
                    one.rejected.to_string(),
                    one.least_output
                        .map_or_else(|| "-".to_owned(), |o| o.to_string()),
                    format!("{:.1} s", t0.elapsed().as_secs_f64()),
                ]);
                by_mode[m].add(&one);
            }
        }
        windows.push((window, by_mode));
    }
    for (window, [once, chained]) in &windows {
        println!(
            "\nwindow {window} tokens: facts of the summarized part kept in the effective context or the stored ledger\n"
        );
        println!("{}", facts_table(once, chained));
        for (mode, scores) in [("one overflow", once), ("chained", chained)] {
            misses.extend(check(*window, mode, scores));
        }
    }
    println!("{runs}");
    println!(
        "pressure: {} windows x {} sessions x 2 modes in {:.1} s",
        WINDOWS.len(),
        sessions.len(),
        started.elapsed().as_secs_f64()
    );
    if misses.is_empty() {
        eprintln!("quality --pressure: nothing forgotten, every check holds");
        Ok(())
    } else {
        bail!("quality --pressure: {}", misses.join("; "))
    }
}

/// The misses of one window and mode: failed sends, panto's own records, requests under the
/// output floor, requests sent twice, shares under the thresholds.
pub(super) fn check(window: u64, mode: &str, s: &RunScores) -> Vec<String> {
    let mut misses: Vec<String> = s
        .failures
        .iter()
        .map(|f| format!("{window} {mode}: {f}"))
        .collect();
    if s.records > 0 {
        misses.push(format!(
            "{window} {mode}: {} compactions are panto's own record, not a model's",
            s.records
        ));
    }
    if s.least_output.is_some_and(|o| o < OUTPUT_FLOOR) {
        misses.push(format!(
            "{window} {mode}: a compaction request allowed {} output tokens (< {OUTPUT_FLOOR})",
            s.least_output.unwrap_or(0)
        ));
    }
    if s.repeated > 0 {
        misses.push(format!(
            "{window} {mode}: {} requests were sent twice",
            s.repeated
        ));
    }
    if s.over_bound > 0 {
        misses.push(format!(
            "{window} {mode}: {} compactions sent more requests than the bound",
            s.over_bound
        ));
    }
    for (category, least) in THRESHOLDS {
        if let Some([n, _, _, either]) = s.count(category)
            && n > 0
            && (either as f64) < least * n as f64
        {
            misses.push(format!(
                "{window} {mode}: {category} {either} of {n} kept (< {:.0}%)",
                100.0 * least
            ));
        }
    }
    misses
}

fn share(kept: usize, n: usize) -> String {
    if n < 10 {
        format!("{kept} of {n}")
    } else {
        format!("{:.0}%", 100.0 * kept as f64 / n as f64)
    }
}

fn facts_table(once: &RunScores, chained: &RunScores) -> Table {
    let mut table = Table::new([
        "fact",
        "facts (one overflow)",
        "kept",
        "by the context alone",
        "facts (chained)",
        "kept",
        "by the context alone",
    ]);
    let mut totals = [[0usize; 4]; 2];
    for c in CATEGORIES {
        let a = once.count(c).unwrap_or_default();
        let b = chained.count(c).unwrap_or_default();
        if a[0] == 0 && b[0] == 0 {
            continue;
        }
        for j in 0..4 {
            totals[0][j] += a[j];
            totals[1][j] += b[j];
        }
        table.row([
            (*c).to_owned(),
            a[0].to_string(),
            share(a[3], a[0]),
            share(a[1], a[0]),
            b[0].to_string(),
            share(b[3], b[0]),
            share(b[1], b[0]),
        ]);
    }
    let [a, b] = totals;
    table.row([
        "all facts".to_owned(),
        a[0].to_string(),
        share(a[3], a[0]),
        share(a[1], a[0]),
        b[0].to_string(),
        share(b[3], b[0]),
        share(b[1], b[0]),
    ]);
    table
}

/// Drives one session through panto at one window, in one mode, and scores what it kept.
fn run_one(
    panto: &Path,
    work: &Path,
    server: &Loopback,
    path: &Path,
    dir: &Path,
    mode: Mode,
) -> Result<RunScores> {
    fs::create_dir_all(dir.join(".panto"))?;
    fs::write(
        dir.join(".panto/config.toml"),
        format!(
            "max_output_tokens = 256\nsystem_prompt = \"{AGENT_PROMPT}\"\ntimeout_secs = 120\n"
        ),
    )?;
    let turns = turns_of(path)?;
    let pieces = match mode {
        Mode::Once => parts(turns, 1),
        Mode::Chained => parts(turns, CHAIN),
    };
    let session = dir.join("s.jsonl");
    let mut written = String::new();
    let mut originals = Vec::new();
    let mut scores = RunScores::default();
    let mut bodies: HashSet<String> = HashSet::new();
    let mut entries_seen = 0;
    for piece in pieces {
        for (line, original) in piece {
            written.push_str(&line);
            written.push('\n');
            originals.extend(original);
        }
        // The session as panto left it, then the part: appended, as an agent's log grows.
        let mut text = fs::read_to_string(&session).unwrap_or_default();
        text.push_str(&written);
        written.clear();
        fs::write(&session, text)?;
        scores.sends += 1;
        let out = panto_command(panto, work, dir, server, &["send", "s.jsonl", PROMPT])
            .output()
            .context("cannot run panto send")?;
        let seen = server.take();
        if !out.status.success() {
            scores.failures.push(format!(
                "{} send {} failed ({}): {}",
                path.display(),
                scores.sends,
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ));
            break;
        }
        let entries = session_entries(&session)?;
        let new = &entries[entries_seen..];
        entries_seen = entries.len();
        let compaction = new.iter().find(|e| e["type"] == "compaction");
        tally(&mut scores, &seen, &mut bodies, compaction, server.window());
    }
    if scores.compactions == 0 || !scores.failures.is_empty() {
        return Ok(scores);
    }
    let context = json_of(panto, work, dir, server, &["context", "s.jsonl", "--json"])?;
    let ledger = json_of(panto, work, dir, server, &["ledger", "s.jsonl", "--json"])?;
    let verbatim: HashSet<String> = context["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| m["content"].to_string())
        .collect();
    let summarized: Vec<Message> = originals
        .into_iter()
        .filter(|o| !verbatim.contains(&o.content.to_string()))
        .map(|o| o.message)
        .collect();
    let facts = extract(&transcript_items(&summarized));
    let context_text = strings(&context["messages"]);
    let ledger_text = strings(&ledger);
    let in_context = Haystack::new(&context_text);
    let in_ledger = Haystack::new(&ledger_text);
    for (category, fact) in &facts {
        let c = in_context.holds(fact);
        let l = in_ledger.holds(fact);
        scores.add_fact(category, [c, l, c || l]);
    }
    Ok(scores)
}

/// Counts one `send`'s requests and its compaction entry. The compaction requests must number
/// at most `2 + ceil(conversation / (window / 2))` (issue 26, point 9, the limit stated), the
/// conversation as the server counted it in the request that overflowed.
fn tally(
    scores: &mut RunScores,
    seen: &[Seen],
    bodies: &mut HashSet<String>,
    compaction: Option<&Value>,
    window: u64,
) {
    for s in seen {
        if !bodies.insert(format!("{}\u{0}{}", s.max_output, s.messages)) {
            scores.repeated += 1;
        }
        if s.compaction {
            scores.compaction_requests += 1;
            scores.least_output = Some(
                scores
                    .least_output
                    .map_or(s.max_output, |o| o.min(s.max_output)),
            );
        }
        scores.rejected += usize::from(!s.fitted);
    }
    if let Some(entry) = compaction {
        scores.compactions += 1;
        if entry["model"] == RECORD_ONLY_MODEL || entry["degraded"] == true {
            scores.records += 1;
        }
        let conversation = seen
            .iter()
            .find(|s| !s.compaction && !s.fitted)
            .map_or(0, |s| s.input);
        let bound = 2 + conversation.div_ceil(window / 2);
        scores.bound += bound as usize;
        let sent = seen.iter().filter(|s| s.compaction).count() as u64;
        if sent > bound {
            scores.over_bound += 1;
        }
    }
}

pub(super) fn session_entries(path: &Path) -> Result<Vec<Value>> {
    let text = fs::read_to_string(path)?;
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).context("a session line is not JSON"))
        .collect()
}

/// `panto` in `dir`, with the loopback model, an empty user configuration and none of the
/// caller's provider variables.
pub(super) fn panto_command(
    panto: &Path,
    work: &Path,
    dir: &Path,
    server: &Loopback,
    args: &[&str],
) -> Command {
    let mut cmd = Command::new(panto);
    cmd.current_dir(dir)
        .args(args)
        .args([
            "--provider",
            "openai",
            "--model",
            MODEL,
            "--base-url",
            &server.base_url(),
        ])
        .env("PANTO_CONFIG_DIR", work.join("user-config"))
        .env("PANTO_DATA_DIR", work.join("user-data"))
        .env("OPENAI_API_KEY", "pressure-key")
        .env("NO_COLOR", "1");
    for var in [
        "ANTHROPIC_API_KEY",
        "GEMINI_API_KEY",
        "ANTHROPIC_BASE_URL",
        "OPENAI_BASE_URL",
        "GEMINI_BASE_URL",
        "PANTO_LOG",
        "PANTO_STORE",
    ] {
        cmd.env_remove(var);
    }
    cmd
}

pub(super) fn json_of(
    panto: &Path,
    work: &Path,
    dir: &Path,
    server: &Loopback,
    args: &[&str],
) -> Result<Value> {
    let what = args.join(" ");
    let out = super::stdout_of(&mut panto_command(panto, work, dir, server, args), &what)?;
    serde_json::from_str(&out).with_context(|| format!("panto {what} printed no JSON"))
}

/// Every string in a JSON value, one per line.
pub(super) fn strings(value: &Value) -> String {
    fn walk(v: &Value, out: &mut String) {
        match v {
            Value::String(s) => {
                out.push_str(s);
                out.push('\n');
            }
            Value::Array(a) => a.iter().for_each(|x| walk(x, out)),
            Value::Object(o) => o.values().for_each(|x| walk(x, out)),
            _ => {}
        }
    }
    let mut out = String::new();
    walk(value, &mut out);
    out
}
