//! Runs the release `panto` binary as a process and measures its wall time and peak memory.
//!
//! Peak memory is the child's `ru_maxrss` as reported by GNU time (`/usr/bin/time -f %M`),
//! which reads it from `wait4` for that one child: exact, and unaffected by other processes.
//! Where GNU time is missing, `/proc/<pid>/status` `VmHWM` (the resident high-water mark) is
//! polled every millisecond until the process exits; the last value read is a lower bound and
//! is printed with `≥`. The processes run with `PANTO_CONFIG_DIR` set to an empty folder and from
//! a working directory with no `.panto/` above it, so no user or project configuration applies.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// How peak memory is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Peak {
    /// `/usr/bin/time -f %M` (`ru_maxrss` of the child from `wait4`).
    GnuTime,
    /// `VmHWM` polled from `/proc/<pid>/status`.
    Polled,
}

/// One measured command: medians over the timed runs.
#[derive(Clone, Copy, Debug)]
pub(super) struct Sample {
    /// Median wall time.
    pub wall: Duration,
    /// Median peak resident memory, in bytes.
    pub peak: u64,
}

/// Runs `panto` in a clean environment.
pub(super) struct Runner {
    panto: PathBuf,
    config_dir: PathBuf,
    cwd: PathBuf,
    scratch: PathBuf,
    /// How peak memory is read.
    pub peak: Peak,
}

impl Runner {
    /// Builds the release binary and prepares the empty configuration folder and working
    /// directory under `dir`.
    ///
    /// # Errors
    /// When the build fails, or a `.panto` folder lies above the working directory.
    pub(super) fn new(root: &Path, dir: &Path) -> Result<Runner> {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
        let status = Command::new(cargo)
            .args([
                "build",
                "--release",
                "--quiet",
                "--package",
                "panto-cli",
                "--bin",
                "panto",
            ])
            .current_dir(root)
            .status()
            .context("could not run cargo build for panto")?;
        if !status.success() {
            bail!("building panto failed ({status})");
        }
        let target =
            std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from);
        let panto = target.join("release").join("panto");
        let config_dir = dir.join("empty-config");
        let cwd = dir.join("cwd");
        let _ = fs::remove_dir_all(&config_dir);
        fs::create_dir_all(&config_dir)?;
        fs::create_dir_all(&cwd)?;
        for ancestor in cwd.ancestors() {
            if ancestor.join(".panto").exists() {
                bail!(
                    "{} holds a .panto folder, whose configuration would apply to the measured runs",
                    ancestor.display()
                );
            }
        }
        let gnu = Command::new("/usr/bin/time")
            .args(["-f", "%M", "-o", "/dev/null", "true"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        Ok(Runner {
            panto,
            config_dir,
            cwd,
            scratch: dir.to_path_buf(),
            peak: if gnu { Peak::GnuTime } else { Peak::Polled },
        })
    }

    /// Runs `panto ARGS` once; stdout goes to `stdout` (a file) or is discarded. Returns the wall
    /// time and the peak resident memory in bytes.
    ///
    /// # Errors
    /// When the process cannot start or exits with a failure (its stderr is quoted).
    pub(super) fn once(&self, args: &[&str], stdout: Option<&Path>) -> Result<(Duration, u64)> {
        let rss_file = self.scratch.join("peak.txt");
        let err_file = self.scratch.join("panto.stderr");
        let mut cmd = match self.peak {
            Peak::GnuTime => {
                let mut c = Command::new("/usr/bin/time");
                c.arg("-f").arg("%M").arg("-o").arg(&rss_file);
                c.arg(&self.panto);
                c
            }
            Peak::Polled => Command::new(&self.panto),
        };
        cmd.args(args)
            .current_dir(&self.cwd)
            .env("PANTO_CONFIG_DIR", &self.config_dir)
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stderr(fs::File::create(&err_file)?)
            .stdout(match stdout {
                Some(p) => Stdio::from(fs::File::create(p)?),
                None => Stdio::null(),
            });
        let start = Instant::now();
        let mut child = cmd
            .spawn()
            .with_context(|| format!("could not run {}", self.panto.display()))?;
        let mut polled = 0u64;
        let status = match self.peak {
            Peak::GnuTime => child.wait()?,
            Peak::Polled => loop {
                if let Some(kib) = vm_hwm_kib(child.id()) {
                    polled = polled.max(kib);
                }
                if let Some(status) = child.try_wait()? {
                    break status;
                }
                std::thread::sleep(Duration::from_millis(1));
            },
        };
        let wall = start.elapsed();
        if !status.success() {
            let err = fs::read_to_string(&err_file).unwrap_or_default();
            bail!("panto {} failed ({status}):\n{err}", args.join(" "));
        }
        let kib = match self.peak {
            Peak::GnuTime => {
                let text = fs::read_to_string(&rss_file)?;
                text.trim()
                    .lines()
                    .last()
                    .and_then(|l| l.trim().parse::<u64>().ok())
                    .with_context(|| format!("unexpected output of /usr/bin/time: {text:?}"))?
            }
            Peak::Polled => polled,
        };
        Ok((wall, kib * 1024))
    }

    /// One untimed run whose stdout is kept in `output` (for checking it), then `reps` timed
    /// runs with stdout discarded. Returns the medians.
    ///
    /// # Errors
    /// As [`Runner::once`].
    pub(super) fn measure(&self, args: &[&str], output: &Path, reps: usize) -> Result<Sample> {
        self.once(args, Some(output))?;
        let mut walls = Vec::with_capacity(reps);
        let mut peaks = Vec::with_capacity(reps);
        for _ in 0..reps {
            let (wall, peak) = self.once(args, None)?;
            walls.push(wall);
            peaks.push(peak);
        }
        walls.sort();
        peaks.sort();
        Ok(Sample {
            wall: walls[walls.len() / 2],
            peak: peaks[peaks.len() / 2],
        })
    }
}

/// `VmHWM` of a process in KiB, while it runs.
fn vm_hwm_kib(pid: u32) -> Option<u64> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}
