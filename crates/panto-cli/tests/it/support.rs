//! Running the `panto` binary in an isolated environment: its own working directory, its own
//! user configuration folder, and no provider variables from the caller's environment.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use rustix::pty::{OpenptFlags, grantpt, openpt, ptsname, unlockpt};

use tempfile::TempDir;

/// A sandbox: a working directory and a user configuration folder.
pub(crate) struct Sandbox {
    pub dir: TempDir,
    pub user_config: PathBuf,
}

/// The outcome of one run.
pub(crate) struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Sandbox {
    pub(crate) fn new() -> Sandbox {
        let dir = tempfile::tempdir().expect("temp dir");
        let user_config = dir.path().join("user-config");
        std::fs::create_dir_all(&user_config).unwrap();
        std::fs::create_dir_all(dir.path().join("work")).unwrap();
        Sandbox { dir, user_config }
    }

    /// The user's data folder (`PANTO_DATA_DIR`), where learned windows are kept.
    pub(crate) fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// The working directory the binary runs in.
    pub(crate) fn work(&self) -> PathBuf {
        self.dir.path().join("work")
    }

    /// Copies an example session of the repository into the sandbox, returning its path.
    pub(crate) fn example(&self, name: &str) -> PathBuf {
        let src = repo_root().join("examples/sessions").join(name);
        let dst = self.work().join(name);
        std::fs::copy(&src, &dst).unwrap_or_else(|e| panic!("copy {}: {e}", src.display()));
        dst
    }

    /// Writes a file under the working directory.
    pub(crate) fn write(&self, rel: &str, text: &str) -> PathBuf {
        let path = self.work().join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::fs::write(&path, text).unwrap();
        path
    }

    /// A command for the binary with a clean environment.
    pub(crate) fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_panto"));
        cmd.args(args)
            .current_dir(self.work())
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.dir.path())
            .env("PANTO_CONFIG_DIR", &self.user_config)
            .env("PANTO_DATA_DIR", self.data())
            .stdin(Stdio::null());
        cmd
    }

    /// `panto send s.jsonl hi` to an OpenAI-compatible server at `base` (with its `/v1`).
    pub(crate) fn send_openai(&self, base: &str) -> Command {
        self.openai(&["send", "s.jsonl", "hi"], base)
    }

    /// `panto ARGS` with model `m` of an OpenAI-compatible server at `base` (with its `/v1`).
    pub(crate) fn openai(&self, args: &[&str], base: &str) -> Command {
        let mut all = args.to_vec();
        all.extend(["--provider", "openai", "--model", "m", "--base-url", base]);
        self.command(&all)
    }

    /// Runs `cmd` (a `chat`) with `input` on its standard input, off the async runtime.
    pub(crate) fn chat_with_input(&self, mut cmd: Command, input: &str) -> Output {
        use std::io::Write;
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        tokio::task::block_in_place(|| {
            let mut child = cmd.spawn().unwrap();
            let mut stdin = child.stdin.take().unwrap();
            stdin.write_all(input.as_bytes()).unwrap();
            drop(stdin);
            child.wait_with_output().unwrap()
        })
    }

    /// Runs the binary and collects its output.
    pub(crate) fn run(&self, args: &[&str]) -> Run {
        self.run_with(self.command(args))
    }

    pub(crate) fn run_with(&self, mut cmd: Command) -> Run {
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
    pub(crate) fn expect_code(&self, code: i32) -> &Run {
        assert_eq!(
            self.code, code,
            "exit code\n--- stdout\n{}\n--- stderr\n{}",
            self.stdout, self.stderr
        );
        self
    }

    /// Parses stdout as one JSON document.
    #[track_caller]
    pub(crate) fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not one JSON document ({e}):\n{}", self.stdout))
    }
}

pub(crate) fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .unwrap()
        .to_path_buf()
}

/// Replaces the sandbox path in text, so snapshots do not depend on it.
pub(crate) fn scrub(text: &str, sandbox: &Sandbox) -> String {
    text.replace(&sandbox.work().display().to_string(), "[work]")
        .replace(&sandbox.dir.path().display().to_string(), "[sandbox]")
}

/// A fresh pseudo-terminal: the master's end, and the end a program is given. The master's
/// end is closed on exec: a program started on the terminal holds only its own end, so it sees
/// the terminal go away when the test's end closes (a test killed half-way leaves no program
/// running; one that inherited the master's end kept its terminal open and ran on).
fn open_pty() -> (std::os::fd::OwnedFd, File) {
    let master = openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC).unwrap();
    grantpt(&master).unwrap();
    unlockpt(&master).unwrap();
    let name = ptsname(&master, Vec::new()).unwrap();
    let slave = File::options()
        .read(true)
        .write(true)
        .open(name.to_str().unwrap())
        .unwrap();
    (master, slave)
}

/// Which output of the binary goes to a pseudo-terminal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Tty {
    Stdout,
    Stderr,
}

/// Runs `cmd` with stdout or stderr on a fresh pseudo-terminal and the other piped. Returns
/// the run, whose field for the terminal's stream holds what the terminal received.
pub(crate) fn run_on_terminal(mut cmd: Command, tty: Tty) -> Run {
    // A terminal that can show colour.
    cmd.env("TERM", "xterm-256color");
    let (master, slave) = open_pty();
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

/// A program running on a whole pseudo-terminal (standard input, output and error), as under
/// a terminal emulator: keys are typed into it, Ctrl-C is delivered as the terminal driver
/// delivers it (SIGINT), and what it drew is read back.
pub(crate) struct Terminal {
    child: std::process::Child,
    keys: File,
    seen: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
    reader: Option<std::thread::JoinHandle<()>>,
    columns: usize,
}

impl Drop for Terminal {
    /// A test that failed half-way leaves no program running.
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The columns of the test terminal.
pub(crate) const COLUMNS: usize = 120;

impl Terminal {
    /// Starts `cmd` with a fresh 120x40 pseudo-terminal as its standard streams.
    pub(crate) fn spawn(cmd: Command) -> Terminal {
        Terminal::spawn_sized(cmd, COLUMNS)
    }

    /// Starts `cmd` with a fresh pseudo-terminal `columns` wide and 40 rows high as its
    /// standard streams.
    pub(crate) fn spawn_sized(mut cmd: Command, columns: usize) -> Terminal {
        cmd.env("TERM", "xterm-256color");
        let (master, slave) = open_pty();
        let size = rustix::termios::Winsize {
            ws_row: 40,
            ws_col: u16::try_from(columns).unwrap(),
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        rustix::termios::tcsetwinsize(&master, size).unwrap();
        cmd.stdin(Stdio::from(slave.try_clone().unwrap()))
            .stdout(Stdio::from(slave.try_clone().unwrap()))
            .stderr(Stdio::from(slave));
        let child = cmd.spawn().unwrap();
        // The parent's copies of the terminal's end close with `cmd`, so reading ends once
        // the child is gone.
        drop(cmd);
        let mut master = File::from(master);
        let keys = master.try_clone().unwrap();
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = seen.clone();
        let reader = std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            // Reading ends with an error (EIO) once the child's side is closed.
            while let Ok(n) = master.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        });
        Terminal {
            child,
            keys,
            seen,
            reader: Some(reader),
            columns,
        }
    }

    /// The lines of the screen now, as [`screen_at`] draws them at this terminal's width.
    pub(crate) fn screen(&self) -> Vec<String> {
        screen_at(&self.raw(), self.columns)
    }

    /// Changes the terminal's width to `columns` (40 rows), as a user dragging its window's
    /// edge: the size is set on the terminal (TIOCSWINSZ) and the program told (SIGWINCH; the
    /// test's terminal is not the program's controlling one, so the kernel would not), and
    /// the screen re-wraps at that point of what it received ([`reflow`]). The program is
    /// held still (SIGSTOP) until the terminal has read all it wrote, so what it drew for the
    /// old width is read before the re-wrap, as a terminal reads it when the user is not
    /// racing the program's output.
    pub(crate) fn resize(&self, columns: usize) {
        let pid = rustix::process::Pid::from_child(&self.child);
        rustix::process::kill_process(pid, rustix::process::Signal::STOP).unwrap();
        self.drain();
        let size = rustix::termios::Winsize {
            ws_row: 40,
            ws_col: u16::try_from(columns).unwrap(),
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        {
            let mut seen = self.seen.lock().unwrap();
            rustix::termios::tcsetwinsize(&self.keys, size).unwrap();
            seen.extend_from_slice(format!("\u{1b}]{RESIZE_MARK}{columns}\u{7}").as_bytes());
        }
        rustix::process::kill_process(pid, rustix::process::Signal::CONT).unwrap();
        rustix::process::kill_process(pid, rustix::process::Signal::WINCH).unwrap();
    }

    /// Waits until nothing the program wrote is left unread: none waiting in the terminal
    /// and nothing new received for a tenth of a second.
    fn drain(&self) {
        let step = std::time::Duration::from_millis(10);
        let (mut len, mut quiet) = (usize::MAX, std::time::Duration::ZERO);
        while quiet < std::time::Duration::from_millis(100) {
            std::thread::sleep(step);
            let pending = rustix::io::ioctl_fionread(&self.keys).unwrap_or(0);
            let now = self.seen.lock().unwrap().len();
            if pending > 0 || now != len {
                (len, quiet) = (now, std::time::Duration::ZERO);
            } else {
                quiet += step;
            }
        }
    }

    /// Types `keys` (text, or escape sequences such as `\x1b[D` for the left arrow).
    pub(crate) fn type_keys(&mut self, keys: &str) {
        use std::io::Write;
        self.keys.write_all(keys.as_bytes()).unwrap();
        self.keys.flush().unwrap();
    }

    /// Presses Ctrl-C while the program is not reading keys itself: the terminal driver turns
    /// it into SIGINT for the program.
    pub(crate) fn interrupt(&self) {
        let pid = rustix::process::Pid::from_child(&self.child);
        rustix::process::kill_process(pid, rustix::process::Signal::INT).unwrap();
    }

    /// The program's process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Everything the terminal has received so far.
    pub(crate) fn raw(&self) -> String {
        String::from_utf8_lossy(&self.seen.lock().unwrap()).into_owned()
    }

    /// Waits (up to 30 s) until `done` holds for what the terminal received; else fails,
    /// saying `what` was awaited and showing the screen.
    #[track_caller]
    fn wait_until(&self, what: &str, done: impl Fn(&str) -> bool) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while !done(&self.raw()) {
            assert!(
                std::time::Instant::now() < deadline,
                "{what}; the screen:\n{}",
                self.screen().join("\n")
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// Waits until the terminal has received `needle` `times` times in all.
    #[track_caller]
    pub(crate) fn wait_for(&self, needle: &str, times: usize) {
        self.wait_until(
            &format!("{needle:?} did not appear {times} time(s)"),
            |raw| raw.matches(needle).count() >= times,
        );
    }

    /// Waits until the last line on the screen is an empty prompt `>`. Call it after waiting
    /// for what the previous line caused, so that it is not the old prompt.
    #[track_caller]
    pub(crate) fn wait_for_prompt(&self) {
        let columns = self.columns;
        self.wait_until("no prompt", |raw| {
            screen_at(raw, columns).last().map(String::as_str) == Some(">")
        });
    }

    /// Types `line` and Enter, waits until `shown` has appeared `times` times in all, then for
    /// the next prompt.
    #[track_caller]
    pub(crate) fn enter(&mut self, line: &str, shown: &str, times: usize) {
        self.type_keys(&format!("{line}\r"));
        self.wait_for(shown, times);
        self.wait_for_prompt();
    }

    /// Waits (up to 30 s) for the program to end; its exit code and everything it drew.
    #[track_caller]
    pub(crate) fn finish(mut self) -> (i32, String) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the program did not end; the screen:\n{}",
                self.screen().join("\n")
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        if let Some(reader) = self.reader.take() {
            reader.join().unwrap();
        }
        (status.code().unwrap_or(-1), self.raw())
    }
}

/// What a terminal [`COLUMNS`] wide would show after receiving `raw` (see [`screen_at`]).
pub(crate) fn screen(raw: &str) -> Vec<String> {
    screen_at(raw, COLUMNS)
}

/// What a terminal `columns` wide would show after receiving `raw`: the lines of the screen
/// (scrollback included), without trailing blanks. It follows the cursor through the moves
/// and erasures programs use for spinners and line editing (`\r`, backspace, CSI `A` `B` `C`
/// `D` `G` `K` `J`) and wraps long lines; colours and modes are ignored.
pub(crate) fn screen_at(raw: &str, columns: usize) -> Vec<String> {
    screen_rows(raw, columns)
        .into_iter()
        .map(|(line, _)| line.trim_end().to_owned())
        .collect()
}

/// [`screen_at`], each line with whether it continues the one before (the terminal wrapped
/// there).
fn screen_rows(raw: &str, columns: usize) -> Vec<(String, bool)> {
    let mut columns = columns;
    let mut lines: Vec<Vec<char>> = vec![Vec::new()];
    let mut continues: Vec<bool> = vec![false];
    let (mut row, mut col) = (0usize, 0usize);
    let mut chars = raw.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\r' => col = 0,
            '\n' => {
                row += 1;
                col = 0;
            }
            '\u{8}' => col = col.saturating_sub(1),
            '\t' => col = (col / 8 + 1) * 8,
            '\u{7}' => {}
            '\u{1b}' => match chars.next() {
                Some('[') => {
                    let mut params = String::new();
                    let mut end = ' ';
                    for p in chars.by_ref() {
                        if ('\u{40}'..='\u{7e}').contains(&p) {
                            end = p;
                            break;
                        }
                        params.push(p);
                    }
                    let n = |default: usize| params.parse::<usize>().unwrap_or(default);
                    while lines.len() <= row {
                        lines.push(Vec::new());
                    }
                    match end {
                        'A' => row = row.saturating_sub(n(1)),
                        'B' => row += n(1),
                        'C' => col += n(1),
                        'D' => col = col.saturating_sub(n(1)),
                        'G' => col = n(1).saturating_sub(1),
                        'K' => {
                            let line = &mut lines[row];
                            match n(0) {
                                0 => line.truncate(col),
                                1 => line.iter_mut().take(col + 1).for_each(|c| *c = ' '),
                                _ => line.clear(),
                            }
                        }
                        'J' if n(0) == 0 => {
                            lines[row].truncate(col);
                            lines.truncate(row + 1);
                            continues.truncate(row + 1);
                        }
                        _ => {}
                    }
                }
                // An OSC string ends with BEL or ESC \. The test's own mark of a resize is one.
                Some(']') => {
                    let mut text = String::new();
                    while let Some(p) = chars.next() {
                        if p == '\u{7}' || (p == '\u{1b}' && chars.next_if_eq(&'\\').is_some()) {
                            break;
                        }
                        text.push(p);
                    }
                    if let Some(now) = text
                        .strip_prefix(RESIZE_MARK)
                        .and_then(|n| n.parse::<usize>().ok())
                    {
                        let was = std::mem::replace(&mut columns, now.max(1));
                        (row, col) = reflow(&mut lines, &mut continues, (row, col), (was, columns));
                    }
                }
                _ => {}
            },
            c if c.is_control() => {}
            c => {
                if col >= columns {
                    row += 1;
                    col = 0;
                    while continues.len() <= row {
                        continues.push(false);
                    }
                    continues[row] = true;
                }
                while lines.len() <= row {
                    lines.push(Vec::new());
                }
                let line = &mut lines[row];
                while line.len() < col {
                    line.push(' ');
                }
                if col < line.len() {
                    line[col] = c;
                } else {
                    line.push(c);
                }
                col += 1;
            }
        }
    }
    let mut shown: Vec<(String, bool)> = lines
        .into_iter()
        .enumerate()
        .map(|(i, l)| {
            let text = l.into_iter().collect::<String>();
            // A row the next one continues keeps its blanks: they are part of the line.
            let wrapped = continues.get(i + 1).copied().unwrap_or(false);
            let text = if wrapped {
                text
            } else {
                text.trim_end().to_owned()
            };
            (text, continues.get(i).copied().unwrap_or(false))
        })
        .collect();
    while shown.last().is_some_and(|(l, _)| l.is_empty()) {
        shown.pop();
    }
    shown
}

/// The OSC string [`Terminal::resize`] puts into what the terminal received, with the new width.
const RESIZE_MARK: &str = "panto-test-resize;";

/// Re-wraps the screen's lines at `columns`, as most terminals do when their width changes
/// (VTE, kitty, iTerm2, Windows Terminal, tmux): each line, with the rows that continue it, is
/// cut into rows of the new width, and the cursor stays on the character it was on. Returns
/// the cursor's new (row, column). `widths` is (before, after).
fn reflow(
    lines: &mut Vec<Vec<char>>,
    continues: &mut Vec<bool>,
    cursor: (usize, usize),
    (was, columns): (usize, usize),
) -> (usize, usize) {
    while lines.len() <= cursor.0 {
        lines.push(Vec::new());
    }
    let continued = |i: usize| i > 0 && continues.get(i).copied().unwrap_or(false);
    // Whole lines, and the cursor as (line, offset in it).
    let mut whole: Vec<Vec<char>> = Vec::new();
    let mut at = (0, 0);
    for (i, row) in lines.iter().enumerate() {
        if !continued(i) {
            whole.push(Vec::new());
        }
        let index = whole.len() - 1;
        let line = &mut whole[index];
        if i == cursor.0 {
            at = (index, line.len() + cursor.1);
        }
        let start = line.len();
        line.extend(row);
        // A row the next continues was full: its blanks are part of the line.
        if continued(i + 1) {
            line.resize(line.len().max(start + was), ' ');
        }
    }
    lines.clear();
    continues.clear();
    let mut moved = (0, 0);
    for (i, line) in whole.iter().enumerate() {
        let first = lines.len();
        let mut chunks = line.chunks(columns).peekable();
        if chunks.peek().is_none() {
            lines.push(Vec::new());
            continues.push(false);
        }
        for (j, chunk) in chunks.enumerate() {
            lines.push(chunk.to_vec());
            continues.push(j > 0);
        }
        if i == at.0 {
            let rows = lines.len() - first;
            let mut sub = at.1 / columns;
            // Just past a full last row, the cursor waits at its end to wrap.
            if at.1 > 0 && at.1 % columns == 0 && at.1 == line.len() {
                sub -= 1;
            }
            let sub = sub.min(rows - 1);
            moved = (first + sub, at.1 - sub * columns);
        }
    }
    moved
}

/// What a terminal `columns` wide shows after receiving `raw`, as the program wrote it: a line
/// the terminal wrapped is joined with its continuation.
pub(crate) fn unwrapped(raw: &str, columns: usize) -> Vec<String> {
    screen_rows(raw, columns).into_iter().fold(
        Vec::new(),
        |mut out: Vec<String>, (line, continued)| {
            match out.last_mut() {
                Some(last) if continued => last.push_str(&line),
                _ => out.push(line),
            }
            out
        },
    )
}
