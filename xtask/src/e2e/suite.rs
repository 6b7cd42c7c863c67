//! The end-to-end scenarios: the real `panto` binary against a real `llama-server`, once per
//! protocol (Chat Completions, Anthropic Messages, Responses).
//!
//! Every scenario works in its own folder under the run's work folder, with a project
//! `.panto/config.toml` that keeps answers short, an empty user configuration folder
//! (`PANTO_CONFIG_DIR`), and no provider variables from the caller's environment except the
//! key of the protocol under test. The checks themselves live in `checks.rs`; this file runs
//! commands and gathers the server-side evidence (the server's log and the prompts it rendered,
//! from `--log-prompts-dir`).

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

mod pressure;

#[cfg(test)]
pub(super) use self::pressure::model_answer_refused;
pub(super) use self::pressure::{Window, Windowed, twice_the_window};

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

/// Sends until the real server rejects a request for its size; checks the one compaction, the
/// retry, the replay, the usage and the server's side of it.
pub(super) fn overflow(setup: &Setup, p: Protocol) -> Result<Compaction> {
    let panto = setup.panto(p, "overflow", false)?;
    let s = "overflow.jsonl";
    for message in [
        "Hello! My name is Ada and I am testing you today.",
        "Which name did I give you?",
    ] {
        let run = panto.run(&["send", s, message])?.expect(0)?;
        ensure!(!run.stdout.trim().is_empty(), "the reply printed nothing");
    }

    let evidence = Evidence::mark(&setup.main);
    let mut overflowed_at = None;
    for i in 1..=MAX_NOTES {
        let run = panto
            .run(&["send", s, &note(i, setup.overflow_sentences)])?
            .expect(0)?;
        ensure!(
            !run.stdout.trim().is_empty(),
            "the reply to note {i} printed nothing"
        );
        if checks::compactions(&panto.session(s)?).is_empty() {
            ensure!(
                !run.stderr.contains("compact"),
                "note {i}: panto talks of compaction but wrote none: {}",
                run.stderr
            );
            continue;
        }
        overflowed_at = Some((i, run));
        break;
    }
    let (i, run) = overflowed_at.with_context(|| {
        format!("the server never rejected a request for its size in {MAX_NOTES} long notes")
    })?;
    ensure!(
        i >= 2,
        "the first long note overflowed: the notes are too long for the test"
    );
    let (figures, note) = recovered(setup, &panto, s, &evidence, &run, i, 1..i)?;
    Ok(Compaction {
        kind: "overflow",
        figures,
        note: format!("long note {i}: {note}"),
    })
}

/// Overflow recovery on a conversation at least [`FOLD_WINDOWS`] windows long (written to the
/// session directly, as an imported session would be): the built-in prompt, a prefix that no
/// one request can hold, so the compaction folds it through several requests.
pub(super) fn overflow_twice(setup: &Setup, p: Protocol) -> Result<Compaction> {
    let mut panto = setup.panto(p, "overflow-twice", false)?;
    panto.timeout = FOLD_TIMEOUT;
    let s = "twice.jsonl";
    // Notes of a third of the window each, with short answers: enough for FOLD_WINDOWS windows.
    let notes = usize::try_from(3 * FOLD_WINDOWS + 1)?;
    let mut lines = String::new();
    for i in 1..=notes {
        let user = serde_json::json!({"type": "message", "id": format!("u{i}"), "role": "user",
            "content": [{"type": "text", "text": note(i, setup.note_sentences)}]});
        let answer = serde_json::json!({"type": "message", "id": format!("{WRITTEN}{i}"), "role": "assistant",
            "content": [{"type": "text", "text": format!("Noted: note {i}.")}]});
        lines.push_str(&format!("{user}\n{answer}\n"));
    }
    fs::write(panto.dir.join(s), lines)?;
    let evidence = Evidence::mark(&setup.main);
    let run = panto
        .run(&["send", s, "Please remember note 99. Which note came first?"])?
        .expect(0)?;
    let (figures, note) = recovered(setup, &panto, s, &evidence, &run, 99, 1..notes + 1)?;
    // The fold was planned in several requests (`panto: compacting in N steps`).
    let planned = run
        .stderr
        .split("compacting in ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or(1);
    ensure!(
        planned >= 2,
        "a conversation of {FOLD_WINDOWS} windows was compacted without folding: {}",
        run.stderr
    );
    Ok(Compaction {
        kind: "overflow x2",
        figures,
        note: format!("{notes} notes written, one send: {note}"),
    })
}

/// Checks an overflow recovery that `run` (the `send` of note `i`) went through: one
/// compaction by the real model with the built-in prompt, every request of its fold within the
/// window, every note of `old` summarized or kept, the retry's reply, a replay that fits, and
/// one more turn. Returns the entry's figures and a note of the fold's requests and sizes.
fn recovered(
    setup: &Setup,
    panto: &Panto<'_>,
    s: &str,
    evidence: &Evidence,
    run: &Run,
    i: usize,
    old: std::ops::Range<usize>,
) -> Result<(Figures, String)> {
    ensure!(
        run.stderr.contains(
            "panto: the request was too large for the model: compacting, then retrying once"
        ),
        "note {i}: the compaction was not reported as an overflow: {}",
        run.stderr
    );
    let entries = panto.session(s)?;
    let (at, entry) = checks::single_compaction(&entries)?;
    // SmolLM2-135M often copies the last note instead of summarizing; panto rejects such a
    // summary (docs/compaction.md, "2d") and, with no model left, writes its own record so the
    // conversation goes on. Either outcome must hold every other check.
    let degraded = entry["degraded"] == true;
    let figures = checks::compaction_entry(
        entry,
        &Expect {
            trigger: "overflow",
            provider: if degraded { "panto" } else { p_flag(panto) },
            model: if degraded { RECORD_ONLY_MODEL } else { MODEL },
            fallback: false,
            instructions: None,
        },
    )?;
    if degraded {
        let why = entry["degraded_error"].as_str().unwrap_or_default();
        ensure!(
            why.contains(MODEL),
            "a record-only compaction must say why the model's summary was refused: {entry}"
        );
    }
    ensure!(
        figures.after < figures.before,
        "the compaction did not shrink the context: {} -> {}",
        figures.before,
        figures.after
    );
    ensure!(
        figures.keep <= setup.n_ctx / 4 && figures.keep >= setup.n_ctx / 8,
        "the keep budget was {}, expected about the server's window / 4 = {} (the default \
         budget is capped by the limit the overflow reported)",
        figures.keep,
        setup.n_ctx / 4
    );
    let next = checks::kept_copies(&entries, at)?;
    let in_flight = &entries[next - 1];
    ensure!(
        checks::text(in_flight).starts_with(&format!("Please remember note {i}.")),
        "the last kept copy is not the prompt that overflowed: {in_flight}"
    );
    ensure!(
        entries.len() == next + 1 && entries[next]["role"] == "assistant",
        "expected exactly the retry's reply after the kept copies, found {} entries",
        entries.len() - next
    );

    // The server's side: the conversation's rejection, the fold's requests with the built-in
    // prompt (a few rejected at most), every old note in some transcript or kept.
    let requests = entry["requests"].as_u64().unwrap_or(0);
    let steps = entry["fold_steps"].as_u64().unwrap_or(1);
    let log = evidence.new_log(&setup.main);
    let rejections = log.matches(OVERFLOW_LOG).count() as u64;
    if degraded {
        // The fold stopped at the refused summary; the record counts no model request.
        ensure!(
            (1..=4).contains(&rejections),
            "the server rejected {rejections} requests for their size"
        );
    } else {
        ensure!(
            requests >= steps && requests <= steps + 3,
            "the fold sent {requests} requests for {steps} steps"
        );
        ensure!(
            rejections == 1 + (requests - steps),
            "the server rejected {rejections} requests for their size, expected the \
             conversation's and the fold's {} rejected ones",
            requests - steps
        );
    }
    let reported = log
        .lines()
        .find(|l| l.contains(OVERFLOW_LOG))
        .and_then(|l| l.split("request (").nth(1))
        .and_then(|l| l.split(' ').next())
        .unwrap_or("?")
        .to_owned();
    let compaction_prompts: Vec<String> = evidence
        .new_prompts(&setup.main)
        .into_iter()
        .filter(|t| t.contains(&setup.builtin_prompt_line) && t.contains("<transcript>"))
        .collect();
    ensure!(
        compaction_prompts.len() as u64 >= if degraded { 1 } else { steps },
        "the server rendered {} compaction prompts for {steps} steps",
        compaction_prompts.len()
    );
    // Every old note is in some compaction request or kept.
    let kept: String = entries[at + 1..next].iter().map(checks::text).collect();
    let summary = entry["summary"].as_str().unwrap_or_default();
    // A record written after the model's summary was refused covers what its ledger budget
    // holds (a sixteenth of this small window), so the notes are checked only when a model
    // summarized them all.
    if !degraded {
        for n in old {
            let marker = format!("Please remember note {n}.");
            ensure!(
                compaction_prompts.iter().any(|t| t.contains(&marker)) || kept.contains(&marker),
                "note {n} is in no compaction request and not kept"
            );
        }
    } else {
        ensure!(
            summary.contains("No model could write this summary"),
            "a record-only compaction must say so in its summary: {summary}"
        );
    }
    let sizes: Vec<String> = run
        .stderr
        .lines()
        .filter(|l| l.starts_with("panto: step "))
        .filter_map(|l| l.split("about ").nth(1))
        .filter_map(|l| l.split(' ').next())
        .map(str::to_owned)
        .collect();

    // Replay, then one more turn on the compacted session.
    let doc = panto.run(&["context", s, "--json"])?.expect(0)?.json()?;
    checks::replay(&doc, &entries, at)?;
    let estimated = doc["estimated_tokens"].as_u64().unwrap_or(u64::MAX);
    ensure!(
        estimated < setup.n_ctx,
        "the compacted context is still estimated at {estimated} tokens, over the window"
    );
    panto
        .run(&["send", s, "Thank you. Which note did I send last?"])?
        .expect(0)?;
    let entries = panto.session(s)?;
    checks::single_compaction(&entries)?;
    // The usage of the replies the server wrote (a written session's answers carry none).
    let served: Vec<Value> = entries
        .iter()
        .filter(|e| {
            e["role"] != "assistant" || !e["id"].as_str().is_some_and(|id| id.starts_with(WRITTEN))
        })
        .cloned()
        .collect();
    checks::usage_recorded(&served)?;
    for r in checks::replies(&served) {
        // A reply without usage came from a stream that never named its model (see
        // `usage_recorded`); panto then records the model it asked for.
        let expected = if r.get("usage").is_some() {
            setup.server_model.as_str()
        } else {
            panto.model.as_str()
        };
        ensure!(
            r["model"] == expected,
            "a reply names model {}, expected {expected}",
            r["model"],
        );
    }
    ensure!(
        !panto.session_text(s).contains(KEY),
        "the key reached the session file"
    );
    let outcome = if degraded {
        format!(
            "the model's summary was refused, panto's own record written ({} compaction \
             prompts rendered)",
            compaction_prompts.len()
        )
    } else {
        format!(
            "{requests} compaction requests ({steps} steps, {} rejected)",
            requests - steps
        )
    };
    Ok((
        figures,
        format!(
            "server: request of {reported} tokens > {} ctx; {outcome}{}",
            setup.n_ctx,
            if sizes.is_empty() {
                String::new()
            } else {
                format!(", step inputs about {} tokens", sizes.join(" / "))
            }
        ),
    ))
}

fn p_flag(panto: &Panto<'_>) -> &'static str {
    panto.protocol.flag()
}

/// A manual compaction with instructions and the built-in prompt.
pub(super) fn manual(setup: &Setup, p: Protocol) -> Result<Compaction> {
    let panto = setup.panto(p, "manual", false)?;
    let s = "manual.jsonl";
    for message in [
        "My favourite colour is teal.",
        "My cat is called Miso.",
        "What is my cat called?",
    ] {
        panto.run(&["send", s, message])?.expect(0)?;
    }
    let evidence = Evidence::mark(&setup.main);
    let run = panto
        .run(&[
            "compact",
            s,
            "--instructions",
            INSTRUCTIONS,
            "--keep-tokens",
            "40",
            // A summary of three short messages is no smaller than they are; what is checked
            // here is who writes it and with which prompt, so it is written all the same.
            "--force",
            "--json",
        ])?
        .expect(0)?;
    let doc = run.json()?;
    ensure!(
        doc["summary"]
            .as_str()
            .is_some_and(|s| !s.trim().is_empty())
            && doc["model"] == MODEL,
        "unexpected `compact --json` document: {doc}"
    );
    let entries = panto.session(s)?;
    let (at, entry) = checks::single_compaction(&entries)?;
    let figures = checks::compaction_entry(
        entry,
        &Expect {
            trigger: "manual",
            provider: p.flag(),
            model: MODEL,
            fallback: false,
            instructions: Some(INSTRUCTIONS),
        },
    )?;
    ensure!(
        doc["summary"] == entry["summary"] && doc["tokens_before"] == entry["tokens_before"],
        "`compact --json` and the entry disagree: {doc} vs {entry}"
    );
    let next = checks::kept_copies(&entries, at)?;
    ensure!(next == entries.len(), "entries follow the kept copies");
    let prompts = evidence.new_prompts(&setup.main);
    ensure!(
        prompts.len() == 1,
        "the server rendered {} prompts for one compaction",
        prompts.len()
    );
    ensure!(
        prompts[0].contains(&setup.builtin_prompt_line)
            && prompts[0].contains(INSTRUCTIONS_HEADING)
            && prompts[0].contains(INSTRUCTIONS),
        "the compaction prompt lacks the built-in prompt or the instructions:\n{}",
        prompts[0]
    );
    let replayed = panto.run(&["context", s, "--json"])?.expect(0)?.json()?;
    checks::replay(&replayed, &entries, at)?;
    Ok(Compaction {
        kind: "manual",
        figures,
        note: "built-in COMPACTION.md + --instructions".to_owned(),
    })
}

/// A compaction model the router does not have: the active model writes the summary.
///
/// `SmolLM2` sometimes answers this request with one phrase repeated, which panto refuses
/// (docs/compaction.md, "2d"): then both models failed, the command exits 1 naming both causes,
/// and nothing is written. That outcome still shows the fallback, and is accepted as such.
pub(super) fn fallback(setup: &Setup, p: Protocol) -> Result<Option<Compaction>> {
    let panto = setup.panto(p, "fallback", true)?;
    let s = "fallback.jsonl";
    for message in ["My dog is called Rex.", "What is my dog called?"] {
        panto.run(&["send", s, message])?.expect(0)?;
    }
    let before = panto.session_text(s);
    let run = panto.run(&[
        "compact",
        s,
        "--compaction-model",
        MISSING_MODEL,
        "--keep-tokens",
        "20",
        // As in `manual`: the fallback is checked, not whether two messages shrink.
        "--force",
        "--json",
    ])?;
    if run.code == Some(1) {
        ensure!(
            run.stderr
                .contains(&format!("retrying once with {ROUTED_MODEL}"))
                && run.stderr.contains(MISSING_MODEL)
                && run.stderr.contains("not found")
                && run.stderr.contains("summary"),
            "the compaction failed without a fallback whose summary was refused: {}",
            run.stderr
        );
        ensure!(
            panto.session_text(s) == before,
            "a failed compaction changed the session"
        );
        return Ok(None);
    }
    let run = run.expect(0)?;
    let doc = run.json()?;
    ensure!(
        doc["fallback"] == true && doc["model"] == ROUTED_MODEL,
        "expected a fallback to {ROUTED_MODEL}: {doc}"
    );
    let entries = panto.session(s)?;
    let (at, entry) = checks::single_compaction(&entries)?;
    let figures = checks::compaction_entry(
        entry,
        &Expect {
            trigger: "manual",
            provider: p.flag(),
            model: ROUTED_MODEL,
            fallback: true,
            instructions: None,
        },
    )?;
    let why = entry["fallback_error"].as_str().unwrap_or_default();
    ensure!(
        why.contains(MISSING_MODEL) && why.contains("not found"),
        "the fallback error does not carry the server's answer: {why}"
    );
    checks::kept_copies(&entries, at)?;
    for r in checks::replies(&entries) {
        ensure!(
            r["model"] == ROUTED_MODEL,
            "the router reports the routed name, not {}",
            r["model"]
        );
    }
    Ok(Some(Compaction {
        kind: "fallback",
        figures,
        note: format!("{MISSING_MODEL} -> {ROUTED_MODEL}: {}", shorten(why)),
    }))
}

/// `panto chat` with a pause longer than the server's 5 s keep-alive between two turns: the
/// second turn must go through on the first attempt.
pub(super) fn chat_pause(setup: &Setup, p: Protocol) -> Result<()> {
    let mut panto = setup.panto(p, "chat", false)?;
    panto.log_filter = Some("panto_providers=debug".to_owned());
    let session = panto.dir.join("chat.jsonl");
    let run = panto.run_with_input(&["chat", "chat.jsonl"], move |stdin| {
        writeln!(stdin, "Say hello in three words.")?;
        stdin.flush()?;
        // Wait for the first reply to be stored, then stay idle past the keep-alive. The empty
        // lines (which chat skips) end the wait with a broken pipe if panto has exited.
        let deadline = Instant::now() + COMMAND_TIMEOUT;
        while !fs::read_to_string(&session).is_ok_and(|t| t.contains("\"assistant\"")) {
            ensure!(
                Instant::now() < deadline,
                "the first chat turn never finished"
            );
            std::thread::sleep(Duration::from_millis(100));
            stdin.write_all(b"\n")?;
            stdin.flush()?;
        }
        std::thread::sleep(Duration::from_secs(6));
        writeln!(stdin, "Now say goodbye in three words.")?;
        writeln!(stdin, "/exit")?;
        Ok(())
    })?;
    let run = run.expect(0)?;
    let entries = panto.session("chat.jsonl")?;
    ensure!(
        checks::replies(&entries).len() == 2,
        "expected two replies in the chat session"
    );
    let sends: Vec<&str> = run
        .stderr
        .lines()
        .filter(|l| l.contains("sending request"))
        .collect();
    ensure!(
        sends.len() == 2 && sends.iter().all(|l| l.contains("retry=0")),
        "the turn after the pause needed a retry: {sends:?}"
    );
    Ok(())
}

/// A wrong key: exit 1 with a hint naming the variable, no compaction, the key nowhere.
pub(super) fn wrong_key(setup: &Setup, p: Protocol) -> Result<()> {
    let mut panto = setup.panto(p, "wrong-key", false)?;
    panto.key = WRONG_KEY.to_owned();
    let run = panto.run(&["send", "k.jsonl", "Hello?"])?.expect(1)?;
    ensure!(
        run.stderr
            .contains(&format!("check the key in {}", p.key_var())),
        "no hint about the key: {}",
        run.stderr
    );
    ensure!(
        !run.stderr.contains(WRONG_KEY) && !panto.session_text("k.jsonl").contains(WRONG_KEY),
        "the key was repeated"
    );
    let entries = panto.session("k.jsonl")?;
    ensure!(
        checks::compactions(&entries).is_empty() && checks::replies(&entries).is_empty(),
        "a rejected key produced a compaction or a reply"
    );
    Ok(())
}

/// An answer cut at the output limit is recorded as `max_tokens` (on `/v1/responses` the server
/// says `completed` all the same; the adapter reads the cut from the output count).
pub(super) fn truncated(setup: &Setup, p: Protocol) -> Result<()> {
    let panto = setup.panto(p, "truncated", false)?;
    fs::write(
        panto.dir.join(".panto/config.toml"),
        CONFIG_TOML.replacen(
            "max_output_tokens = 32",
            &format!("max_output_tokens = {TRUNCATE_AT}"),
            1,
        ),
    )?;
    panto
        .run(&[
            "send",
            "t.jsonl",
            "Tell me a long story about a dragon and a knight, with many details.",
        ])?
        .expect(0)?;
    let entries = panto.session("t.jsonl")?;
    let reply = checks::replies(&entries)
        .pop()
        .context("no reply in the session")?;
    ensure!(
        reply["usage"]["output_tokens"] == TRUNCATE_AT && reply["stop_reason"] == "max_tokens",
        "an answer cut at {TRUNCATE_AT} tokens is recorded as {} with usage {}",
        reply["stop_reason"],
        reply["usage"]
    );
    Ok(())
}

/// The server sends `:` comment lines while it processes a long prompt (every second here), in
/// the same streams panto reads: the long notes of the overflow scenario arrive behind them.
pub(super) fn pings(setup: &Setup, p: Protocol) -> Result<()> {
    let text = note(100 + p as usize, setup.note_sentences);
    let message = serde_json::json!([{"role": "user", "content": text}]);
    let (path, body) = match p {
        Protocol::OpenAi => (
            "/v1/chat/completions",
            serde_json::json!({"model": MODEL, "max_tokens": 1, "stream": true, "messages": message}),
        ),
        Protocol::Anthropic => (
            "/v1/messages",
            serde_json::json!({"model": MODEL, "max_tokens": 1, "stream": true, "messages": message}),
        ),
        Protocol::OpenAiResponses => (
            "/v1/responses",
            serde_json::json!({"model": MODEL, "max_output_tokens": 1, "stream": true, "input": message}),
        ),
    };
    let auth = format!("Bearer {KEY}");
    let answer = server::request(
        setup.main.port,
        "POST",
        path,
        &[("Authorization", auth.as_str())],
        Some(&serde_json::to_vec(&body)?),
        COMMAND_TIMEOUT,
    )?;
    let text = String::from_utf8_lossy(&answer.body);
    ensure!(
        answer.status == 200,
        "{path} answered {}: {text}",
        answer.status
    );
    let comments = text
        .lines()
        .take_while(|l| !l.starts_with("data:") && !l.starts_with("event:"))
        .filter(|l| l.starts_with(':'))
        .count();
    ensure!(
        comments > 0,
        "no `:` comment line before the first event of {path}:\n{}",
        shorten(&text)
    );
    Ok(())
}

/// The window is discovered from the server itself (`GET /props`, whose
/// `default_generation_settings.n_ctx` is the `-c` it was started with), kept in the data
/// folder, and shown by `panto context` with its source; a `send` with `auto_compact` uses it
/// without asking again.
pub(super) fn window(setup: &Setup, p: Protocol) -> Result<()> {
    let panto = setup.panto(p, "window", false)?;
    let run = panto.run(&["window"])?.expect(0)?;
    let heading = format!("{MODEL}: a window of {} tokens", setup.n_ctx);
    ensure!(
        run.stdout.starts_with(&heading)
            && run
                .stdout
                .contains("discovered: llama-server GET /props default_generation_settings.n_ctx"),
        "`panto window` did not discover the server's {} tokens:\n{}{}",
        setup.n_ctx,
        run.stdout,
        run.stderr
    );
    let kept = fs::read_to_string(panto.dir.join("data/windows.toml"))
        .context("the discovered window was not kept")?;
    ensure!(
        kept.contains(&format!("tokens = {}", setup.n_ctx)) && !kept.contains(KEY),
        "windows.toml: {kept}"
    );
    panto
        .run(&["send", "w.jsonl", "Hello there.", "--auto-compact", "0.8"])?
        .expect(0)?;
    let doc = panto
        .run(&["context", "w.jsonl", "--json"])?
        .expect(0)?
        .json()?;
    ensure!(
        doc["window"]["tokens"] == setup.n_ctx && doc["window"]["source"] == "discovered",
        "`panto context --json` shows the window {}",
        doc["window"]
    );
    Ok(())
}
