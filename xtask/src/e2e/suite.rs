//! The end-to-end scenarios: the real `panto` binary against a real `llama-server`, once per
//! protocol (Chat Completions, Anthropic Messages, Responses).
//!
//! Every scenario works in its own folder under the run's work folder, with a project
//! `.panto/config.toml` that keeps answers short, an empty user configuration folder
//! (`PANTO_CONFIG_DIR`), and no provider variables from the caller's environment except the
//! key of the protocol under test. The checks themselves live in `checks.rs`; this file runs
//! commands and gathers the server-side evidence (the server's log and the prompts it rendered,
//! from `--log-prompts-dir`). The scenarios live in `suite/`, one file per kind.

use std::collections::BTreeSet;
use std::fs;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use serde_json::Value;

use super::checks::{self, Expect, Figures};
use super::server;

mod manual;
mod overflow;
mod pressure;
mod small;

pub(super) use self::manual::{fallback, manual};
pub(super) use self::overflow::{overflow, overflow_twice};
pub(super) use self::pressure::{Window, Windowed, twice_the_window};
#[cfg(test)]
pub(super) use self::pressure::{announced_steps, model_answer_refused};
pub(super) use self::small::{chat_pause, pings, truncated, window, wrong_key};

/// The model name panto sends to the single-model server (which ignores it).
pub(super) const MODEL: &str = "smollm2-135m";
/// The model a compaction names when panto wrote its own record (no model's summary held).
const RECORD_ONLY_MODEL: &str = "panto-record";
/// The model the router serves (`main-model.gguf` in its models folder).
pub(super) const ROUTED_MODEL: &str = "main-model";
/// A compaction model the router does not have.
pub(super) const MISSING_MODEL: &str = "no-such-model";
/// The key both servers are started with (`--api-key`).
/// It shares no run of 8 bytes with the paths the server reports (its model path lies under
/// the `panto-e2e` cache), since panto scrubs any such piece of a key from what it stores.
pub(super) const KEY: &str = "Kq7v-x2mZ-e9Lt";
/// A key the servers reject.
const WRONG_KEY: &str = "wrong-e2e-key-4711";
/// How long one `panto` command may take before it is killed and the scenario fails.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(300);
/// How long a `send` may take whose overflow compaction folds a conversation of several windows:
/// every request of the fold is a prompt of up to a window, processed on one thread, and on this
/// shared 2-core machine other builds run at the same time (measured: 40 to 50 s a request under
/// that load, 25 to 30 s when the machine is quiet; a fold at 4,096 tokens takes 4 to 7 requests).
const FOLD_TIMEOUT: Duration = Duration::from_secs(900);
/// The most long notes the overflow scenario sends before giving up on an overflow.
const MAX_NOTES: usize = 8;
/// The server's error message for an oversized request.
const OVERFLOW_LOG: &str = "exceeds the available context size";
/// The id prefix of the answers the folding overflow scenario writes itself (with no usage).
const WRITTEN: &str = "written-a";
/// How many windows of notes the folding overflow scenario writes before its one `send`.
const FOLD_WINDOWS: u64 = 2;
/// The heading under which `/compact` instructions reach the compaction system prompt.
const INSTRUCTIONS_HEADING: &str = "## Additional instructions for this compaction run";
/// The instructions of the manual compaction.
const INSTRUCTIONS: &str = "Keep the name of the user's cat.";
/// The output limit of the truncation scenario.
const TRUNCATE_AT: u64 = 6;

/// The project configuration of every scenario: short answers, short summaries (the model's
/// window is small, and a 135M model writes nothing better at length).
const CONFIG_TOML: &str = "\
max_output_tokens = 32
compaction_max_output_tokens = 160
system_prompt = \"You are a helpful assistant. Answer in one or two short sentences.\"
timeout_secs = 300
first_byte_timeout_secs = 300
idle_timeout_secs = 300
";

/// One of the three protocols llama-server speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Protocol {
    /// `/v1/chat/completions`.
    OpenAi,
    /// `/v1/messages`.
    Anthropic,
    /// `/v1/responses`.
    OpenAiResponses,
}

impl Protocol {
    /// Every protocol, in the order the suite runs them.
    pub(super) const ALL: [Protocol; 3] = [
        Protocol::OpenAi,
        Protocol::Anthropic,
        Protocol::OpenAiResponses,
    ];

    /// The `--provider` value, also the provider name panto records.
    pub(super) fn flag(self) -> &'static str {
        match self {
            Protocol::OpenAi => "openai",
            Protocol::Anthropic => "anthropic",
            Protocol::OpenAiResponses => "openai-responses",
        }
    }

    /// Parses a `--provider` value.
    pub(super) fn parse(s: &str) -> Option<Protocol> {
        Protocol::ALL.into_iter().find(|p| p.flag() == s)
    }

    /// The base URL a user would give for this protocol.
    pub(super) fn base_url(self, origin: &str) -> String {
        match self {
            Protocol::Anthropic => origin.to_owned(),
            Protocol::OpenAi | Protocol::OpenAiResponses => format!("{origin}/v1"),
        }
    }

    /// The variable panto reads the key from.
    pub(super) fn key_var(self) -> &'static str {
        match self {
            Protocol::Anthropic => "ANTHROPIC_API_KEY",
            Protocol::OpenAi | Protocol::OpenAiResponses => "OPENAI_API_KEY",
        }
    }
}

/// A server the scenarios talk to.
#[derive(Clone, Debug)]
pub(super) struct Target {
    /// `http://127.0.0.1:PORT`.
    pub origin: String,
    /// Its port.
    pub port: u16,
    /// Its log file.
    pub log: PathBuf,
    /// Where it writes every prompt it renders (`--log-prompts-dir`).
    pub prompts: PathBuf,
}

/// Everything the scenarios need.
#[derive(Debug)]
pub(super) struct Setup {
    /// The `panto` binary.
    pub panto: PathBuf,
    /// The run's work folder.
    pub work: PathBuf,
    /// The single-model server.
    pub main: Target,
    /// The router-mode server.
    pub router: Target,
    /// The sampling servers of the scenarios under pressure, by [`Window`].
    pub pressure: [Windowed; 2],
    /// The server's context size, in tokens.
    pub n_ctx: u64,
    /// The model path the single-model server reports as `model`.
    pub server_model: String,
    /// How many sentences make a long note of about a third of the window.
    pub note_sentences: usize,
    /// How many sentences make a note of the overflow scenario: three of them and the short
    /// turns before come to about 8% over the window.
    pub overflow_sentences: usize,
    /// The first line of the built-in COMPACTION.md.
    pub builtin_prompt_line: String,
    /// The first line of its short form, COMPACTION-SHORT.md (used below 8,192 tokens).
    pub short_prompt_line: String,
}

/// A compaction a scenario performed, for the report.
#[derive(Debug)]
pub(super) struct Compaction {
    /// `overflow`, `manual` or `fallback`.
    pub kind: &'static str,
    /// The entry's figures.
    pub figures: Figures,
    /// A short note (how the overflow was reached, the size the server reported, ...).
    pub note: String,
}

/// One finished `panto` command.
#[derive(Debug)]
struct Run {
    command: String,
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Run {
    fn expect(self, code: i32) -> Result<Run> {
        ensure!(
            self.code == Some(code),
            "`{}` exited with {:?}, expected {code}\nstdout: {}\nstderr: {}",
            self.command,
            self.code,
            self.stdout.trim_end(),
            self.stderr.trim_end()
        );
        Ok(self)
    }

    fn json(&self) -> Result<Value> {
        serde_json::from_str(&self.stdout)
            .with_context(|| format!("`{}` printed no JSON: {}", self.command, self.stdout))
    }
}

/// Runs `panto` for one protocol against one server, in one folder.
struct Panto<'a> {
    setup: &'a Setup,
    protocol: Protocol,
    origin: String,
    model: String,
    key: String,
    dir: PathBuf,
    log_filter: Option<String>,
    /// How long one command may take ([`COMMAND_TIMEOUT`] unless a scenario says otherwise).
    timeout: Duration,
}

impl Panto<'_> {
    fn command(&self, args: &[&str]) -> (Command, String) {
        let base = self.protocol.base_url(&self.origin);
        let mut all: Vec<&str> = args.to_vec();
        all.extend([
            "--provider",
            self.protocol.flag(),
            "--model",
            &self.model,
            "--base-url",
            &base,
        ]);
        let mut cmd = Command::new(&self.setup.panto);
        cmd.args(&all).current_dir(&self.dir);
        for var in [
            "ANTHROPIC_API_KEY",
            "OPENAI_API_KEY",
            "GEMINI_API_KEY",
            "ANTHROPIC_BASE_URL",
            "OPENAI_BASE_URL",
            "GEMINI_BASE_URL",
            "PANTO_LOG",
        ] {
            cmd.env_remove(var);
        }
        cmd.env("PANTO_CONFIG_DIR", self.setup.work.join("user-config"))
            .env("PANTO_DATA_DIR", self.dir.join("data"))
            .env(self.protocol.key_var(), &self.key)
            .env("NO_COLOR", "1");
        if let Some(filter) = &self.log_filter {
            cmd.env("PANTO_LOG", filter);
        }
        let shown = format!("panto {}", shorten(&all.join(" ")));
        (cmd, shown)
    }

    fn run(&self, args: &[&str]) -> Result<Run> {
        self.run_with_input(args, |_| Ok(()))
    }

    /// Runs a command, feeding its standard input from `input` (on its own thread).
    fn run_with_input(
        &self,
        args: &[&str],
        input: impl FnOnce(&mut dyn Write) -> Result<()> + Send + 'static,
    ) -> Result<Run> {
        let (mut cmd, shown) = self.command(args);
        eprintln!("e2e:   $ {shown}");
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("cannot start {}", self.setup.panto.display()))?;
        let mut stdin = child.stdin.take().context("no stdin")?;
        let writer = std::thread::spawn(move || input(&mut stdin));
        let read = |mut r: Box<dyn Read + Send>| {
            std::thread::spawn(move || {
                let mut s = String::new();
                let _ = r.read_to_string(&mut s);
                s
            })
        };
        let out = read(Box::new(child.stdout.take().context("no stdout")?));
        let err = read(Box::new(child.stderr.take().context("no stderr")?));
        let started = Instant::now();
        let status = loop {
            if let Some(status) = child.try_wait()? {
                break status;
            }
            if started.elapsed() > self.timeout {
                let _ = child.kill();
                let _ = child.wait();
                bail!("`{shown}` did not finish in {} s", self.timeout.as_secs());
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let fed = writer
            .join()
            .map_err(|_| anyhow::anyhow!("the input thread panicked"))?;
        let run = Run {
            command: shown,
            code: status.code(),
            stdout: out.join().unwrap_or_default(),
            stderr: err.join().unwrap_or_default(),
        };
        fed.with_context(|| format!("feeding `{}`", run.command))?;
        Ok(run)
    }

    fn session(&self, name: &str) -> Result<Vec<Value>> {
        let path = self.dir.join(name);
        let text =
            fs::read_to_string(&path).with_context(|| format!("cannot read {}", path.display()))?;
        checks::entries(&text).with_context(|| format!("in {}", path.display()))
    }

    fn session_text(&self, name: &str) -> String {
        fs::read_to_string(self.dir.join(name)).unwrap_or_default()
    }
}

fn shorten(s: &str) -> String {
    if s.chars().count() > 140 {
        let cut: String = s.chars().take(120).collect();
        format!("{cut}…")
    } else {
        s.to_owned()
    }
}

impl Setup {
    /// A runner for `protocol` in a fresh folder `<work>/<protocol>/<scenario>`.
    fn panto(&self, protocol: Protocol, scenario: &str, routed: bool) -> Result<Panto<'_>> {
        let dir = self.work.join(protocol.flag()).join(scenario);
        fs::create_dir_all(dir.join(".panto"))?;
        fs::write(dir.join(".panto/config.toml"), CONFIG_TOML)?;
        let (origin, model) = if routed {
            (self.router.origin.clone(), ROUTED_MODEL)
        } else {
            (self.main.origin.clone(), MODEL)
        };
        Ok(Panto {
            setup: self,
            protocol,
            origin,
            model: model.to_owned(),
            key: KEY.to_owned(),
            dir,
            log_filter: None,
            timeout: COMMAND_TIMEOUT,
        })
    }
}

/// What the server did while a scenario ran: its log lines and the prompts it rendered.
struct Evidence {
    log_len: usize,
    prompts: BTreeSet<PathBuf>,
}

impl Evidence {
    fn mark(target: &Target) -> Evidence {
        Evidence {
            log_len: fs::read_to_string(&target.log).map_or(0, |s| s.len()),
            prompts: prompt_files(&target.prompts),
        }
    }

    /// The log written since the mark.
    fn new_log(&self, target: &Target) -> String {
        let all = fs::read_to_string(&target.log).unwrap_or_default();
        all.get(self.log_len..).unwrap_or_default().to_owned()
    }

    /// The prompts rendered since the mark, in the order the server wrote them.
    fn new_prompts(&self, target: &Target) -> Vec<String> {
        prompt_files(&target.prompts)
            .difference(&self.prompts)
            .map(|p| fs::read_to_string(p).unwrap_or_default())
            .collect()
    }
}

fn prompt_files(dir: &Path) -> BTreeSet<PathBuf> {
    fs::read_dir(dir)
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default()
}

/// A long user message: about a third of the window of plain, varied facts.
pub(super) fn note(i: usize, sentences: usize) -> String {
    const COLOURS: [&str; 8] = [
        "red", "blue", "green", "yellow", "black", "white", "grey", "brown",
    ];
    const ANIMALS: [&str; 8] = [
        "fox", "owl", "cat", "horse", "otter", "crow", "wolf", "seal",
    ];
    const CITIES: [&str; 8] = [
        "Oslo", "Lima", "Cairo", "Perth", "Quito", "Turin", "Hanoi", "Dakar",
    ];
    const FOODS: [&str; 8] = [
        "plums", "rice", "bread", "cheese", "figs", "soup", "nuts", "honey",
    ];
    let mut out = format!("Please remember note {i}.");
    for j in 0..sentences {
        let k = i * 7 + j;
        out.push_str(&format!(
            " Fact {i}.{j}: the {} {} lives in {} and likes {}.",
            COLOURS[k % 8],
            ANIMALS[(k / 3) % 8],
            CITIES[(k / 2) % 8],
            FOODS[(k * 5) % 8]
        ));
    }
    out
}
