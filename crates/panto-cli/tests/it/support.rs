//! Running the `panto` binary in an isolated environment: its own working directory, its own
//! user configuration folder, and no provider variables from the caller's environment.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

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
