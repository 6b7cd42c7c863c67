//! The chains of `quality --strategies`: a shared session written in [`CHAIN`] parts, with one
//! `panto compact` (offline summarizer) after each part, by one strategy; and the search for the
//! keep budget that makes a chain retain a given number of tokens ([`Runner::tuned`]).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use panto_model::Message;
use panto_size::estimate;
use serde_json::Value;

use crate::quality::pressure::strings;
use crate::quality::recall::questions::{Draw, Haystack, Question, questions};
use crate::quality::turns::{parts, turns_of};

/// The compactions of a chain: one after each of this many parts of a session.
pub(crate) const CHAIN: usize = 5;

/// The most questions of one category per session (as the recall exam asks).
const CAP: usize = 25;

/// How close to the target a tuned chain's retained tokens must come (a share of the target).
pub(super) const TOLERANCE: f64 = 0.05;

/// The most chains run to tune one strategy's keep budget.
const TRIES: usize = 6;

/// A shared session cut in parts, with its questions.
pub(super) struct Session {
    pub name: String,
    /// The session's lines of each part, each line ending in a newline.
    pub pieces: Vec<String>,
    /// The whole session's estimated tokens.
    pub tokens: u64,
    /// The share of the session's bytes that tool results hold.
    pub tool_share: f64,
    /// The needles of the parts before the last, not answered by the last part: the same
    /// questions for every strategy.
    pub asked: Vec<Question>,
}

impl Session {
    /// Reads `path` and cuts it in [`CHAIN`] parts of whole turns.
    pub(super) fn read(path: &Path) -> Result<Session> {
        let name = path
            .file_stem()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        let pieces = parts(turns_of(path)?, CHAIN);
        let mut texts = Vec::new();
        let mut before: Vec<Message> = Vec::new();
        let mut last_text = String::new();
        let mut all: Vec<Message> = Vec::new();
        let (mut bytes, mut tool_bytes) = (0usize, 0usize);
        let n = pieces.len();
        for (i, piece) in pieces.into_iter().enumerate() {
            let mut text = String::new();
            for (line, original) in piece {
                text.push_str(&line);
                text.push('\n');
                bytes += line.len();
                let Some(original) = original else { continue };
                if let Some(blocks) = original.content.as_array() {
                    tool_bytes += blocks
                        .iter()
                        .filter(|b| b["type"] == "tool_result")
                        .map(|b| b.to_string().len())
                        .sum::<usize>();
                }
                if i + 1 == n {
                    last_text.push_str(&strings(&original.content));
                } else {
                    before.push(original.message.clone());
                }
                all.push(original.message);
            }
            texts.push(text);
        }
        let asked = questions(&before, &Haystack::new(&last_text), CAP, Draw::Occurrences);
        Ok(Session {
            name,
            pieces: texts,
            tokens: estimate("", "", &all).total(),
            tool_share: tool_bytes as f64 / bytes.max(1) as f64,
            asked,
        })
    }
}

/// One compaction of a chain.
#[derive(Clone, Debug, Default)]
pub(super) struct Cycle {
    /// Model requests it made.
    pub requests: u64,
    /// Model tokens it spent: each request's input and its summary, as panto estimates them.
    pub tokens: u64,
    /// The wall time of the `panto compact` process.
    pub wall: Duration,
    /// What it wrote (`summary` or `clear`), or `None` when it wrote nothing.
    pub written: Option<String>,
}

/// A chain of one strategy on one session.
pub(super) struct Chain {
    pub keep: u64,
    pub cycles: Vec<Cycle>,
    /// The effective context's estimated tokens after the last cycle, the summary and the
    /// messages (`conversation_tokens`: not the system prompt, which a real session's usage
    /// measures and no strategy changes).
    pub retained: u64,
    /// Every string of the effective context's messages after the last cycle.
    pub context: String,
    /// Chains run to find its keep budget.
    pub tries: usize,
}

impl Chain {
    /// The compactions written.
    pub(super) fn written(&self) -> usize {
        self.cycles.iter().filter(|c| c.written.is_some()).count()
    }

    /// The questions of `session` the effective context answers (closed-book).
    pub(super) fn answered(&self, session: &Session) -> usize {
        let context = Haystack::new(&self.context);
        session
            .asked
            .iter()
            .filter(|q| q.found_in(&context))
            .count()
    }
}

/// The strategy that runs tiered but, where tiered would summarize the cleared conversation,
/// runs the summary of the original one: what tiered would do if its summary saw the originals
/// (a dry run of tiered tells which it would write).
pub(super) const TIERED_ORIGINALS: &str = "tiered, summary of originals";

/// Runs `panto` for the chains, each in a folder of its own under `work`.
pub(super) struct Runner<'a> {
    pub panto: &'a Path,
    pub work: &'a Path,
    /// The summarizer's name in the tables and folders.
    pub summarizer: &'static str,
    /// The flags that choose the summarizer's provider.
    pub provider: Vec<String>,
}

impl Runner<'_> {
    /// The chain of `strategy` on `session` with the keep budget `keep`, in a session whose
    /// configured window is `window` (its `context_window`) when given.
    pub(super) fn chain(
        &self,
        session: &Session,
        strategy: &str,
        keep: u64,
        window: Option<u64>,
    ) -> Result<Chain> {
        let folder = strategy.replace([',', ' '], "");
        let dir = self
            .work
            .join(self.summarizer)
            .join(&session.name)
            .join(format!("{folder}-{keep}"));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(dir.join(".panto"))?;
        let config = window.map_or_else(String::new, |w| format!("context_window = {w}\n"));
        fs::write(dir.join(".panto/config.toml"), config)?;
        let file = dir.join("s.jsonl");
        let mut cycles = Vec::new();
        for piece in &session.pieces {
            let mut text = fs::read_to_string(&file).unwrap_or_default();
            text.push_str(piece);
            fs::write(&file, text)?;
            cycles.push(self.compact(&dir, strategy, keep)?);
        }
        let context = self.json(&dir, &["context", "s.jsonl", "--json"])?;
        Ok(Chain {
            keep,
            cycles,
            retained: context["conversation_tokens"].as_u64().unwrap_or(0),
            context: strings(&context["messages"]),
            tries: 1,
        })
    }

    /// The chain of `strategy` whose retained tokens come closest to `target`, its keep budget
    /// found by the secant on the last two chains (the retained tokens grow with the budget),
    /// from `start`; it stops within [`TOLERANCE`] of the target or after [`TRIES`] chains.
    pub(super) fn tuned(
        &self,
        session: &Session,
        strategy: &str,
        target: u64,
        start: u64,
        window: Option<u64>,
    ) -> Result<Chain> {
        let close = |c: &Chain| c.retained.abs_diff(target);
        let mut best = self.chain(session, strategy, start, window)?;
        let mut last = (best.keep, best.retained);
        let mut previous: Option<(u64, u64)> = None;
        let mut tries = 1;
        while tries < TRIES && close(&best) as f64 > TOLERANCE * target as f64 {
            let (k, r) = last;
            let slope = match previous {
                Some((k0, r0)) if k0 != k && r0 != r => {
                    (r as f64 - r0 as f64) / (k as f64 - k0 as f64)
                }
                _ => 1.0,
            };
            let slope = if slope > 0.05 { slope } else { 1.0 };
            let next = (k as f64 + (target as f64 - r as f64) / slope)
                .round()
                .max(1.0) as u64;
            if next == k {
                break;
            }
            let chain = self.chain(session, strategy, next, window)?;
            eprintln!(
                "quality --strategies: {} {strategy}: keep {next} retains {} (target {target})",
                session.name, chain.retained
            );
            tries += 1;
            previous = Some(last);
            last = (chain.keep, chain.retained);
            if close(&chain) < close(&best) {
                best = chain;
            }
        }
        best.tries = tries;
        Ok(best)
    }

    /// One `panto compact` of the session in `dir`: what it asked and wrote. A compaction that
    /// would not make the conversation smaller, or finds nothing to compact or to clear, writes
    /// nothing; any other failure fails the exam.
    fn compact(&self, dir: &Path, strategy: &str, keep: u64) -> Result<Cycle> {
        let strategy = if strategy == TIERED_ORIGINALS {
            let dry = self.compact_once(dir, "tiered", keep, true)?;
            if dry.written.as_deref() == Some("summary") {
                "summary"
            } else {
                "tiered"
            }
        } else {
            strategy
        };
        self.compact_once(dir, strategy, keep, false)
    }

    fn compact_once(&self, dir: &Path, strategy: &str, keep: u64, dry: bool) -> Result<Cycle> {
        let keep = keep.to_string();
        let mut args = vec![
            "compact",
            "s.jsonl",
            "--compaction-strategy",
            strategy,
            "--keep-tokens",
            &keep,
            "--json",
        ];
        args.extend(self.provider.iter().map(String::as_str));
        if dry {
            args.push("--dry-run");
        }
        let started = Instant::now();
        let out = self
            .command(dir, &args)
            .output()
            .context("cannot run panto")?;
        let wall = started.elapsed();
        let doc: Value = serde_json::from_slice(&out.stdout).with_context(|| {
            format!(
                "panto compact printed no JSON: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )
        })?;
        if doc["nothing_to_compact"] == true {
            return Ok(Cycle {
                wall,
                ..Cycle::default()
            });
        }
        if !out.status.success() {
            let error = doc["error"].as_str().unwrap_or_default();
            if error.contains("smaller") || error.contains("nothing to clear") {
                return Ok(Cycle {
                    wall,
                    ..Cycle::default()
                });
            }
            bail!("panto compact --compaction-strategy {strategy} failed: {error}");
        }
        let tokens = doc["steps"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|s| {
                s["input_tokens"].as_u64().unwrap_or(0) + s["summary_tokens"].as_u64().unwrap_or(0)
            })
            .sum();
        Ok(Cycle {
            requests: doc["requests"].as_u64().unwrap_or(0),
            tokens,
            wall,
            written: doc["strategy"].as_str().map(str::to_owned),
        })
    }

    fn json(&self, dir: &Path, args: &[&str]) -> Result<Value> {
        let out = self
            .command(dir, args)
            .output()
            .context("cannot run panto")?;
        if !out.status.success() {
            bail!(
                "panto {} failed ({}): {}",
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        serde_json::from_slice(&out.stdout)
            .with_context(|| format!("panto {} printed no JSON", args[0]))
    }

    /// `panto` in `dir`, with an empty user configuration and no store or provider from the
    /// environment.
    fn command(&self, dir: &Path, args: &[&str]) -> Command {
        let mut cmd = Command::new(self.panto);
        cmd.current_dir(dir)
            .args(args)
            .env("PANTO_CONFIG_DIR", self.work.join("user-config"))
            .env("PANTO_DATA_DIR", self.work.join("user-data"))
            .env("NO_COLOR", "1")
            .env("OPENAI_API_KEY", "strategies-key");
        for var in [
            "PANTO_STORE",
            "PANTO_LOG",
            "PANTO_PROVIDER",
            "PANTO_MODEL",
            "OPENAI_BASE_URL",
        ] {
            cmd.env_remove(var);
        }
        cmd
    }
}

/// The folder the chains run in.
pub(super) fn work_dir(root: &Path) -> PathBuf {
    crate::e2e::target_dir(root).join("quality-strategies")
}
