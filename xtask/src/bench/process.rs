//! Runs the release `panto` binary (or another program) as a process and measures its wall
//! time, its CPU time (with `perf stat`, when perf is there) and its peak memory.
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

/// One run of a process.
#[derive(Clone, Copy, Debug)]
pub(super) struct Run {
    /// Wall time.
    pub wall: Duration,
    /// CPU time of the process and its threads (`perf stat`'s task-clock), when perf is there.
    pub cpu: Option<Duration>,
    /// Peak resident memory, in bytes.
    pub peak: u64,
}

/// Runs `panto` in a clean environment.
pub(super) struct Runner {
    panto: PathBuf,
    config_dir: PathBuf,
    /// An empty data folder: no learned window of the developer's is read.
    data_dir: PathBuf,
    cwd: PathBuf,
    scratch: PathBuf,
    /// How peak memory is read.
    pub peak: Peak,
    /// Whether `perf stat` can count the CPU time of a run.
    pub perf: bool,
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
        let data_dir = dir.join("empty-data");
        let cwd = dir.join("cwd");
        for empty in [&config_dir, &data_dir] {
            let _ = fs::remove_dir_all(empty);
            fs::create_dir_all(empty)?;
        }
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
        let perf = Command::new("perf")
            .args(["stat", "-x,", "-e", "task-clock", "-o", "/dev/null", "true"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        Ok(Runner {
            panto,
            config_dir,
            data_dir,
            cwd,
            scratch: dir.to_path_buf(),
            peak: if gnu { Peak::GnuTime } else { Peak::Polled },
            perf,
        })
    }

    /// Runs `panto ARGS` once; stdout goes to `stdout` (a file) or is discarded. Returns the wall
    /// time and the peak resident memory in bytes.
    ///
    /// # Errors
    /// When the process cannot start or exits with a failure (its stderr is quoted).
    pub(super) fn once(&self, args: &[&str], stdout: Option<&Path>) -> Result<(Duration, u64)> {
        let run = self.run(&self.panto, args, stdout, false)?;
        Ok((run.wall, run.peak))
    }

    /// Runs `program ARGS` once in the clean environment, its CPU time counted by `perf stat`
    /// when `cpu` is set and perf is there; stdout goes to `stdout` (a file) or is discarded.
    ///
    /// # Errors
    /// When the process cannot start or exits with a failure (its stderr is quoted).
    pub(super) fn run(
        &self,
        program: &Path,
        args: &[&str],
        stdout: Option<&Path>,
        cpu: bool,
    ) -> Result<Run> {
        let rss_file = self.scratch.join("peak.txt");
        let err_file = self.scratch.join("panto.stderr");
        let cpu_file = self.scratch.join("cpu.txt");
        let perf = cpu && self.perf;
        let mut wrappers: Vec<std::ffi::OsString> = Vec::new();
        if perf {
            // perf counts the CPU time of everything below it; GNU time adds about a
            // millisecond to it, and reads the peak of `program` alone.
            wrappers.extend(["perf", "stat", "-x,", "-e", "task-clock", "-o"].map(Into::into));
            wrappers.push(cpu_file.clone().into());
            wrappers.push("--".into());
        }
        if self.peak == Peak::GnuTime {
            wrappers.extend(["/usr/bin/time", "-f", "%M", "-o"].map(Into::into));
            wrappers.push(rss_file.clone().into());
        }
        wrappers.push(program.into());
        let mut cmd = Command::new(&wrappers[0]);
        cmd.args(&wrappers[1..]);
        cmd.args(args)
            .current_dir(&self.cwd)
            .env("PANTO_CONFIG_DIR", &self.config_dir)
            .env("PANTO_DATA_DIR", &self.data_dir)
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
            .with_context(|| format!("could not run {}", program.display()))?;
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
            bail!(
                "{} {} failed ({status}):\n{err}",
                program.display(),
                args.join(" ")
            );
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
        let cpu = if perf {
            Some(task_clock(&fs::read_to_string(&cpu_file)?)?)
        } else {
            None
        };
        Ok(Run {
            wall,
            cpu,
            peak: kib * 1024,
        })
    }

    /// The release `panto` binary.
    pub(super) fn panto(&self) -> &Path {
        &self.panto
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

/// The task-clock of a `perf stat -x,` report (in milliseconds there).
pub(super) fn task_clock(report: &str) -> Result<Duration> {
    let ms = report
        .lines()
        .find(|l| l.contains(",task-clock"))
        .and_then(|l| l.split(',').next())
        .and_then(|v| v.trim().parse::<f64>().ok())
        .with_context(|| format!("no task-clock in the perf report: {report:?}"))?;
    Ok(Duration::from_secs_f64(ms / 1000.0))
}
