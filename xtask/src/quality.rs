//! `cargo xtask quality`: how many must-keep facts of the summarized part of real sessions a
//! summary keeps, for the offline summarizer (or any provider) and a same-size baseline.
//!
//! For each session file it asks the real `panto` binary for the transcript a compaction would
//! summarize (`panto transcript`) and for the summary (`panto compact --dry-run --json`), with
//! keep budgets of a half and of an eighth of the session's estimated size (two prefixes each).
//! From the transcript it extracts facts on its own (this file shares no code with the ledger):
//! the user's requests, the files modified and the other files, failing tool results, shell
//! commands, identifiers named three times or more, the open todos of the latest todo list, the
//! user's answers to question tools, and the bullet points of a summary inside the transcript. A
//! fact counts as kept when the summary holds it: a path verbatim, a text when most of its words
//! are in the summary. The baseline is the first user request followed by the latest ones, cut
//! to the summary's length.
//!
//! The sessions folder is `../shared/data/sessions` relative to the repository root (as for
//! `calibrate`; `PANTO_CALIBRATE_SESSIONS` overrides it). Without it the command says so and
//! succeeds. With the offline summarizer the thresholds below are checked and a miss fails.
//!
//! `cargo xtask quality --pressure` (`pressure.rs`) counts the same facts through overflow
//! compactions at small windows, against a loopback model that enforces them (`loopback.rs`),
//! on the shared sessions read as turns (`turns.rs`). `cargo xtask quality --recall`
//! (`recall.rs`) is a needle exam: how many exact strings of the summarized part (SHAs,
//! numbers, config values, ...) the effective context still holds after an offline compaction,
//! in every store. `cargo xtask quality --strategies` (`strategies.rs`) compares the compaction
//! strategies over five chained compactions (issue 37).

mod loopback;
mod pressure;
mod recall;
mod strategies;
#[cfg(test)]
mod tests;
mod turns;

use std::collections::{BTreeMap, HashSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use panto_model::{Role, read_entries, replay};
use panto_size::estimate;
use panto_transcript::{TranscriptItem, parse_request};
use serde_json::Value;

use crate::calibrate::{SESSIONS_ENV, sessions_dir};
use crate::table::Table;

/// The categories of facts, in the order of the table.
const CATEGORIES: &[&str] = &[
    "user requests",
    "files modified",
    "other files",
    "errors",
    "commands",
    "identifiers",
    "open todos",
    "answers",
    "earlier summary",
];

/// The thresholds the offline summarizer must meet: (category, least share kept).
pub(crate) const THRESHOLDS: &[(&str, f64)] = &[
    ("user requests", 0.90),
    ("files modified", 0.90),
    ("errors", 0.80),
    ("commands", 0.60),
];

/// The largest summary, as a share of the summarized transcript (over all sessions).
pub(crate) const MAX_SIZE_SHARE: f64 = 0.15;

/// The keep budgets, as fractions of a session's estimated size (1/2: half of it is kept
/// verbatim; 1/8: most of it is summarized). Each gives one summarized prefix per session.
pub(super) const KEEP_SHARES: &[u64] = &[2, 8];

/// The share of a text fact's words that the summary must hold for the fact to count as kept.
const WORDS_KEPT: f64 = 0.7;

pub(crate) fn run(root: &Path, args: &[String]) -> Result<()> {
    let dir = sessions_dir(root);
    if !dir.is_dir() {
        eprintln!(
            "quality: SKIPPED: no sessions folder at {} (set {SESSIONS_ENV} to use another)",
            dir.display()
        );
        return Ok(());
    }
    let panto = crate::e2e::build_panto(root)?;
    if args.first().is_some_and(|a| a == "--pressure") {
        if args.len() > 1 {
            bail!("quality --pressure takes no other argument");
        }
        return pressure::run(root, &panto, &session_files(&dir)?);
    }
    if args.first().is_some_and(|a| a == "--strategies") {
        return strategies::run(root, &panto, &session_files(&dir)?, &args[1..]);
    }
    if args.first().is_some_and(|a| a == "--recall") {
        return recall::run(root, &panto, &session_files(&dir)?, &args[1..]);
    }
    let provider_args: Vec<String> = if args.is_empty() {
        vec!["--provider".into(), "offline".into()]
    } else {
        args.to_vec()
    };
    let offline = args.is_empty();
    let paths = session_files(&dir)?;
    let mut total = Scores::default();
    let mut sizes = Table::new([
        "session",
        "kept",
        "transcript chars",
        "summary chars",
        "share",
    ]);
    for path in &paths {
        for keep_share in KEEP_SHARES {
            let name = path.file_name().unwrap_or_default().to_string_lossy();
            let Some(one) = score_session(&panto, path, *keep_share, &provider_args)? else {
                eprintln!("quality: {name}, keeping 1/{keep_share}: nothing to compact");
                continue;
            };
            sizes.row([
                name.into_owned(),
                format!("1/{keep_share}"),
                one.prefix_chars.to_string(),
                one.summary_chars.to_string(),
                format!(
                    "{:.1}%",
                    100.0 * one.summary_chars as f64 / one.prefix_chars.max(1) as f64
                ),
            ]);
            total.add(&one);
        }
    }
    println!("{}", total.table(offline));
    print!("{sizes}");
    let share = total.summary_chars as f64 / total.prefix_chars.max(1) as f64;
    println!(
        "\nsummary size: {:.1}% of the summarized transcripts (at most {:.0}%)",
        100.0 * share,
        100.0 * MAX_SIZE_SHARE
    );
    if !offline {
        return Ok(());
    }
    let misses = total.misses(share);
    if misses.is_empty() {
        eprintln!("quality: the offline summarizer meets every threshold");
        Ok(())
    } else {
        bail!("quality: thresholds missed: {}", misses.join("; "))
    }
}

/// The `.jsonl` files of the sessions folder, sorted.
fn session_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut paths: Vec<PathBuf> = fs::read_dir(dir)
        .with_context(|| format!("could not list {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    paths.sort();
    Ok(paths)
}

/// Kept and total facts per category, for the summary and the baseline.
#[derive(Default)]
struct Scores {
    /// category -> (facts, kept by the summary, kept by the baseline)
    counts: BTreeMap<&'static str, (usize, usize, usize)>,
    prefix_chars: usize,
    summary_chars: usize,
}

impl Scores {
    fn add(&mut self, other: &Scores) {
        for (k, (n, s, b)) in &other.counts {
            let e = self.counts.entry(k).or_default();
            e.0 += n;
            e.1 += s;
            e.2 += b;
        }
        self.prefix_chars += other.prefix_chars;
        self.summary_chars += other.summary_chars;
    }

    fn share(&self, category: &str) -> Option<(f64, f64)> {
        let &(n, s, b) = self.counts.get(category)?;
        (n > 0).then(|| (s as f64 / n as f64, b as f64 / n as f64))
    }

    fn table(&self, offline: bool) -> Table {
        let name = if offline {
            "offline summary"
        } else {
            "summary"
        };
        let mut table = Table::new([
            "fact",
            "facts",
            name,
            "first + latest user messages cut to the same size",
        ]);
        let (mut sum_s, mut sum_b, mut n) = (0.0, 0.0, 0);
        for c in CATEGORIES {
            let Some((s, b)) = self.share(c) else {
                continue;
            };
            let facts = self.counts[c].0;
            let (summary, baseline) = if facts < 10 {
                (
                    format!("{} of {facts}", self.counts[c].1),
                    format!("{} of {facts}", self.counts[c].2),
                )
            } else {
                (format!("{:.0}%", 100.0 * s), format!("{:.0}%", 100.0 * b))
            };
            table.row([c.to_string(), facts.to_string(), summary, baseline]);
            sum_s += s;
            sum_b += b;
            n += 1;
        }
        let n = f64::from(n.max(1));
        table.row([
            "mean over categories".to_owned(),
            String::new(),
            format!("{:.0}%", 100.0 * sum_s / n),
            format!("{:.0}%", 100.0 * sum_b / n),
        ]);
        table
    }

    fn misses(&self, share: f64) -> Vec<String> {
        let mut misses = Vec::new();
        for (c, least) in THRESHOLDS {
            if let Some((s, _)) = self.share(c)
                && s < *least
            {
                misses.push(format!("{c} {:.0}% < {:.0}%", 100.0 * s, 100.0 * least));
            }
        }
        if share > MAX_SIZE_SHARE {
            misses.push(format!(
                "size {:.1}% > {:.0}%",
                100.0 * share,
                100.0 * MAX_SIZE_SHARE
            ));
        }
        misses
    }
}

/// Scores one session: `None` when a compaction would have nothing to summarize.
fn score_session(
    panto: &Path,
    path: &Path,
    keep_share: u64,
    provider_args: &[String],
) -> Result<Option<Scores>> {
    let bytes = fs::read(path).with_context(|| format!("could not read {}", path.display()))?;
    let entries = read_entries(&bytes).with_context(|| format!("{}", path.display()))?;
    let context = replay(entries);
    let keep = (estimate("", "", &context.messages).total() / keep_share)
        .max(1)
        .to_string();
    let file = path.to_str().context("the session path is not UTF-8")?;
    let transcript = run_panto(panto, &["transcript", file, "--keep-tokens", &keep], &[])?;
    if !transcript.contains("<transcript>") {
        return Ok(None);
    }
    let parsed = parse_request(&transcript)
        .map_err(|e| anyhow::anyhow!("{}: cannot read the transcript back: {e}", path.display()))?;
    let out = run_panto(
        panto,
        &[
            "compact",
            file,
            "--dry-run",
            // What the summarizer writes is measured, also where it would save nothing.
            "--force",
            "--json",
            "--keep-tokens",
            &keep,
        ],
        provider_args,
    )?;
    let doc: Value = serde_json::from_str(&out).context("panto compact --json printed no JSON")?;
    let Some(summary) = doc["summary"].as_str() else {
        return Ok(None);
    };
    let facts = extract(&parsed.items);
    let baseline = baseline(&parsed.items, summary.len());
    let in_summary = Haystack::new(summary);
    let in_baseline = Haystack::new(&baseline);
    let mut scores = Scores {
        prefix_chars: transcript.len(),
        summary_chars: summary.len(),
        ..Scores::default()
    };
    for (category, fact) in &facts {
        let e = scores.counts.entry(category).or_default();
        e.0 += 1;
        e.1 += usize::from(in_summary.holds(fact));
        e.2 += usize::from(in_baseline.holds(fact));
    }
    Ok(Some(scores))
}

fn run_panto(panto: &Path, args: &[&str], extra: &[String]) -> Result<String> {
    let mut cmd = Command::new(panto);
    cmd.args(args).args(extra).env("NO_COLOR", "1");
    stdout_of(&mut cmd, &args.join(" "))
}

/// The standard output of a `panto` command whose arguments are `what`, or an error that names
/// them with what it printed on standard error.
pub(super) fn stdout_of(cmd: &mut Command, what: &str) -> Result<String> {
    let out = cmd.output().context("cannot run panto")?;
    if !out.status.success() {
        bail!(
            "panto {what} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A fact: a path that must appear as it is, or a text most of whose words must appear.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Fact {
    Exact(String),
    Words(String),
}

/// The text searched for facts: as it is, and as a set of lowercase words.
struct Haystack<'a> {
    text: &'a str,
    words: HashSet<String>,
}

impl<'a> Haystack<'a> {
    fn new(text: &'a str) -> Haystack<'a> {
        Haystack {
            text,
            words: words(text).into_iter().collect(),
        }
    }

    fn holds(&self, fact: &Fact) -> bool {
        match fact {
            Fact::Exact(s) => self.text.contains(s.as_str()),
            Fact::Words(s) => {
                let w = words(s);
                let w: Vec<&String> = w.iter().take(25).collect();
                if w.is_empty() {
                    return true;
                }
                let found = w.iter().filter(|x| self.words.contains(x.as_str())).count();
                found as f64 >= WORDS_KEPT * w.len() as f64
            }
        }
    }
}

/// The words of a text worth matching: runs of letters, digits and `_`, of three or more
/// characters, lowercase.
fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|w| w.chars().count() >= 3)
        .map(str::to_lowercase)
        .collect()
}

fn is_user_request(text: &str) -> bool {
    let t = text.trim();
    let bare_slash = t.starts_with('/') && !t.contains(' ') && t.matches('/').count() == 1;
    !(t.is_empty()
        || bare_slash
        || t.starts_with("[Request interrupted")
        || t.starts_with("<local-command-"))
}

fn tool_path(input: &Value) -> Option<String> {
    ["file_path", "path", "filePath", "notebook_path", "filename"]
        .iter()
        .find_map(|k| input.get(*k).and_then(Value::as_str))
        .map(|p| p.trim().to_owned())
        .filter(|p| !p.is_empty())
}

/// The facts of a transcript, each with its category, without duplicates.
fn extract(items: &[TranscriptItem]) -> Vec<(&'static str, Fact)> {
    let mut facts: Vec<(&'static str, Fact)> = Vec::new();
    let mut push = |c: &'static str, f: Fact| {
        if !facts.iter().any(|(k, g)| *k == c && *g == f) {
            facts.push((c, f));
        }
    };
    let mut modified: Vec<String> = Vec::new();
    let mut other: Vec<String> = Vec::new();
    let mut question_calls: Vec<String> = Vec::new();
    let mut todos: Vec<String> = Vec::new();
    let mut spans: BTreeMap<String, usize> = BTreeMap::new();
    for item in items {
        match item {
            TranscriptItem::Text { role, text } => {
                if *role == Role::User && is_user_request(text) {
                    push(
                        "user requests",
                        Fact::Words(text.chars().take(300).collect()),
                    );
                }
                for (i, span) in text.split('`').enumerate() {
                    if i % 2 == 1 && (3..=60).contains(&span.len()) && !span.contains(' ') {
                        *spans.entry(span.to_owned()).or_default() += 1;
                    }
                }
            }
            TranscriptItem::ToolCall {
                id, name, input, ..
            } => {
                let lower = name.to_lowercase();
                if ["edit", "write", "patch", "create"]
                    .iter()
                    .any(|w| lower.contains(w))
                {
                    if let Some(p) = tool_path(input) {
                        modified.push(p);
                    }
                } else if let Some(p) = tool_path(input) {
                    other.push(p);
                }
                if ["bash", "shell", "exec", "terminal"]
                    .iter()
                    .any(|w| lower.contains(w))
                    && let Some(c) = input.get("command").and_then(Value::as_str)
                    && let Some(line) = c.lines().map(str::trim).find(|l| !l.is_empty())
                {
                    push("commands", Fact::Words(line.chars().take(100).collect()));
                }
                if lower.contains("todo")
                    && let Some(list) = input.get("todos").and_then(Value::as_array)
                {
                    todos = list
                        .iter()
                        .filter(|t| t["status"].as_str() != Some("completed"))
                        .filter_map(|t| t["content"].as_str().map(str::to_owned))
                        .collect();
                }
                if lower.contains("question") {
                    question_calls.push(id.clone());
                }
            }
            TranscriptItem::ToolResult {
                id, is_error, text, ..
            } => {
                if *is_error {
                    let lines: Vec<&str> = text
                        .lines()
                        .map(str::trim)
                        .filter(|l| !l.is_empty())
                        .collect();
                    let line = lines
                        .iter()
                        .find(|l| l.to_lowercase().contains("error"))
                        .or(lines.first())
                        .copied()
                        .unwrap_or("");
                    push("errors", Fact::Words(line.chars().take(160).collect()));
                } else if question_calls.contains(id) {
                    push("answers", Fact::Words(text.chars().take(300).collect()));
                }
            }
            TranscriptItem::Summary { text } => {
                for line in text.lines().filter_map(|l| l.trim().strip_prefix("- ")) {
                    push("earlier summary", Fact::Words(line.to_owned()));
                }
            }
            _ => {}
        }
    }
    for p in &modified {
        push("files modified", Fact::Exact(p.clone()));
    }
    for p in other.iter().filter(|p| !modified.contains(p)) {
        push("other files", Fact::Exact(p.clone()));
    }
    for t in todos {
        push("open todos", Fact::Words(t));
    }
    for (span, n) in spans {
        if n >= 3 {
            push("identifiers", Fact::Exact(span));
        }
    }
    facts
}

/// The baseline: the first user request, then the latest ones, cut to `chars` characters.
fn baseline(items: &[TranscriptItem], chars: usize) -> String {
    let requests: Vec<&str> = items
        .iter()
        .filter_map(|i| match i {
            TranscriptItem::Text {
                role: Role::User,
                text,
            } if is_user_request(text) => Some(text.as_str()),
            _ => None,
        })
        .collect();
    let Some((first, rest)) = requests.split_first() else {
        return String::new();
    };
    let head: String = first.chars().take(chars / 2).collect();
    let mut room = chars.saturating_sub(head.len());
    let mut latest: Vec<&str> = Vec::new();
    for r in rest.iter().rev() {
        if r.len() + 2 > room {
            break;
        }
        room -= r.len() + 2;
        latest.push(r);
    }
    let mut out = head;
    for r in latest.iter().rev() {
        out.push_str("\n\n");
        out.push_str(r);
    }
    out
}
