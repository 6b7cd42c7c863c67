//! Running the `panto` binary in an isolated environment: its own working directory, its own
//! user configuration folder, and no provider variables from the caller's environment.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use rustix::pty::{OpenptFlags, grantpt, openpt, ptsname, unlockpt};

use tempfile::TempDir;

/// A sandbox: a working directory and a user configuration folder.
pub struct Sandbox {
    pub dir: TempDir,
    pub user_config: PathBuf,
}

/// The outcome of one run.
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Sandbox {
    pub fn new() -> Sandbox {
        let dir = tempfile::tempdir().expect("temp dir");
        let user_config = dir.path().join("user-config");
        std::fs::create_dir_all(&user_config).unwrap();
        std::fs::create_dir_all(dir.path().join("work")).unwrap();
        Sandbox { dir, user_config }
    }

    /// The working directory the binary runs in.
    pub fn work(&self) -> PathBuf {
        self.dir.path().join("work")
    }

    /// Copies an example session of the repository into the sandbox, returning its path.
    pub fn example(&self, name: &str) -> PathBuf {
        let src = repo_root().join("examples/sessions").join(name);
        let dst = self.work().join(name);
        std::fs::copy(&src, &dst).unwrap_or_else(|e| panic!("copy {}: {e}", src.display()));
        dst
    }

    /// Writes a file under the working directory.
    pub fn write(&self, rel: &str, text: &str) -> PathBuf {
        let path = self.work().join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::fs::write(&path, text).unwrap();
        path
    }

    /// A command for the binary with a clean environment.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_panto"));
        cmd.args(args)
            .current_dir(self.work())
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.dir.path())
            .env("PANTO_CONFIG_DIR", &self.user_config)
            .stdin(Stdio::null());
        cmd
    }

    /// `panto send s.jsonl hi` to an OpenAI-compatible server at `base` (with its `/v1`).
    pub fn send_openai(&self, base: &str) -> Command {
        self.command(&[
            "send",
            "s.jsonl",
            "hi",
            "--provider",
            "openai",
            "--model",
            "m",
            "--base-url",
            base,
        ])
    }

    /// Runs the binary and collects its output.
    pub fn run(&self, args: &[&str]) -> Run {
        self.run_with(self.command(args))
    }

    pub fn run_with(&self, mut cmd: Command) -> Run {
        let out: Output = cmd.output().expect("run panto");
        Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

impl Run {
    /// Asserts the exit code, showing the output when it differs.
    #[track_caller]
    pub fn expect_code(&self, code: i32) -> &Run {
        assert_eq!(
            self.code, code,
            "exit code\n--- stdout\n{}\n--- stderr\n{}",
            self.stdout, self.stderr
        );
        self
    }

    /// Parses stdout as one JSON document.
    #[track_caller]
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not one JSON document ({e}):\n{}", self.stdout))
    }
}

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .unwrap()
        .to_path_buf()
}

/// Replaces the sandbox path in text, so snapshots do not depend on it.
pub fn scrub(text: &str, sandbox: &Sandbox) -> String {
    text.replace(&sandbox.work().display().to_string(), "[work]")
        .replace(&sandbox.dir.path().display().to_string(), "[sandbox]")
}

/// Which output of the binary goes to a pseudo-terminal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tty {
    Stdout,
    Stderr,
}

/// Runs `cmd` with stdout or stderr on a fresh pseudo-terminal and the other piped. Returns
/// the run, whose field for the terminal's stream holds what the terminal received.
pub fn run_on_terminal(mut cmd: Command, tty: Tty) -> Run {
    // A terminal that can show colour.
    cmd.env("TERM", "xterm-256color");
    let master = openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY).unwrap();
    grantpt(&master).unwrap();
    unlockpt(&master).unwrap();
    let name = ptsname(&master, Vec::new()).unwrap();
    let slave = File::options()
        .read(true)
        .write(true)
        .open(name.to_str().unwrap())
        .unwrap();
    match tty {
        Tty::Stdout => cmd.stdout(Stdio::from(slave)).stderr(Stdio::piped()),
        Tty::Stderr => cmd.stderr(Stdio::from(slave)).stdout(Stdio::piped()),
    };
    let child = cmd.spawn().unwrap();
    let mut master = File::from(master);
    let reader = std::thread::spawn(move || {
        let mut out = Vec::new();
        let mut buf = [0u8; 4096];
        // Reading ends with an error (EIO) once the child's side is closed.
        while let Ok(n) = master.read(&mut buf) {
            if n == 0 {
                break;
            }
            out.extend_from_slice(&buf[..n]);
        }
        out
    });
    let out = child.wait_with_output().unwrap();
    drop(cmd);
    let shown = String::from_utf8_lossy(&reader.join().unwrap()).into_owned();
    let piped = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let code = out.status.code().unwrap_or(-1);
    match tty {
        Tty::Stdout => Run {
            code,
            stdout: shown,
            stderr: piped(&out.stderr),
        },
        Tty::Stderr => Run {
            code,
            stdout: piped(&out.stdout),
            stderr: shown,
        },
    }
}
