//! A `llama-server` child process that is always stopped, and a minimal HTTP/1.1 client for
//! the few requests the suite makes itself (`/health`, `/props`, `/tokenize`).
//!
//! [`Server`] is a guard: dropping it stops the process (SIGTERM, then SIGKILL after 5 s), so
//! the server goes away on success, on an error returned with `?` and on a panic alike. A Ctrl-C
//! in a terminal reaches the server directly: it runs in the terminal's foreground process group
//! with xtask, so the same SIGINT stops both.

use std::ffi::{OsStr, OsString};
use std::fs;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// Greedy sampling (panto sends no temperature), so that a run answers like the run before it.
const GREEDY: [&str; 2] = ["--temp", "0"];

/// Ollama's default sampling: temperature 0.8, top-k 40, top-p 0.9, no min-p, a repeat penalty
/// of 1.1 over the last 64 tokens (`docs/modelfile.md` of ollama/ollama, "Valid Parameters and
/// Values"), with a fixed seed. What a person running a small model locally gets; answers vary
/// from one run to the next all the same.
const OLLAMA_SAMPLING: [&str; 14] = [
    "--temp",
    "0.8",
    "--top-k",
    "40",
    "--top-p",
    "0.9",
    "--min-p",
    "0",
    "--repeat-penalty",
    "1.1",
    "--repeat-last-n",
    "64",
    "--seed",
    "42",
];

/// The arguments of one server configuration (the host and port are added by [`Server::start`]).
#[derive(Clone, Debug)]
pub(super) struct ServerArgs(Vec<OsString>);

impl ServerArgs {
    /// One model, one slot, one thread (two threads crawl when another process uses the CPU),
    /// the model's own chat template, a context of `ctx` tokens, and greedy sampling.
    pub(super) fn single(gguf: &Path, ctx: u32) -> ServerArgs {
        ServerArgs(vec![]).arg("-m").arg(gguf).common(ctx, &GREEDY)
    }

    /// The same with Ollama's default sampling instead of greedy decoding: greedy decoding makes
    /// SmolLM2-135M repeat itself until the output limit on any transcript of a few thousand
    /// tokens, so no summary of its could ever pass panto's checks.
    pub(super) fn sampled(gguf: &Path, ctx: u32) -> ServerArgs {
        ServerArgs(vec![])
            .arg("-m")
            .arg(gguf)
            .common(ctx, &OLLAMA_SAMPLING)
    }

    /// Router mode: every `NAME.gguf` in `dir` is a model called `NAME`, loaded on first use by
    /// a child server; an unknown name is answered with 400 `model 'x' not found`.
    pub(super) fn router(dir: &Path, ctx: u32) -> ServerArgs {
        ServerArgs(vec![])
            .arg("--models-dir")
            .arg(dir)
            .common(ctx, &GREEDY)
    }

    fn common(self, ctx: u32, sampling: &[&str]) -> ServerArgs {
        self.arg("-c")
            .arg(ctx.to_string())
            .args(["-np", "1", "-t", "1", "--jinja"])
            .args(sampling)
    }

    /// Adds one argument.
    pub(super) fn arg(mut self, a: impl AsRef<OsStr>) -> ServerArgs {
        self.0.push(a.as_ref().to_owned());
        self
    }

    /// Adds several arguments.
    pub(super) fn args<I: IntoIterator<Item = S>, S: AsRef<OsStr>>(mut self, all: I) -> ServerArgs {
        self.0
            .extend(all.into_iter().map(|a| a.as_ref().to_owned()));
        self
    }
}

/// A running server, stopped when dropped.
#[derive(Debug)]
pub(super) struct Server {
    child: Child,
    name: String,
    /// The loopback port it listens on.
    pub port: u16,
    /// Its stdout and stderr.
    pub log: PathBuf,
}

impl Server {
    /// Starts `binary` on a free loopback port, its output going to `log`.
    ///
    /// # Errors
    /// When no port is free or the process cannot start.
    pub(super) fn start(
        binary: &Path,
        args: &ServerArgs,
        log: &Path,
        name: &str,
    ) -> Result<Server> {
        let port = free_port()?;
        let out =
            fs::File::create(log).with_context(|| format!("cannot create {}", log.display()))?;
        let child = Command::new(binary)
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .args(&args.0)
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .with_context(|| format!("cannot start {}", binary.display()))?;
        Ok(Server {
            child,
            name: name.to_owned(),
            port,
            log: log.to_owned(),
        })
    }

    /// Waits until `GET /health` answers 200 (it answers 503 while the model loads).
    ///
    /// # Errors
    /// When the process exits first or `timeout` passes; the message quotes the server's log.
    pub(super) fn wait_healthy(&mut self, timeout: Duration) -> Result<Duration> {
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait()? {
                bail!(
                    "{} exited ({status}) before it was healthy; the end of {}:\n{}",
                    self.name,
                    self.log.display(),
                    tail(&self.log, 30)
                );
            }
            let health = get(self.port, "/health", &[], Duration::from_secs(5));
            if health.is_ok_and(|r| r.status == 200) {
                return Ok(started.elapsed());
            }
            if started.elapsed() > timeout {
                bail!(
                    "{} was not healthy after {} s; the end of {}:\n{}",
                    self.name,
                    timeout.as_secs(),
                    self.log.display(),
                    tail(&self.log, 30)
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `http://127.0.0.1:PORT`.
    pub(super) fn origin(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Stops the process: SIGTERM (a router then stops its children), SIGKILL after 5 s.
    fn stop(&mut self) {
        if matches!(self.child.try_wait(), Ok(Some(_))) {
            return;
        }
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .stderr(Stdio::null())
            .status();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A port on 127.0.0.1 that nothing listens on right now.
///
/// # Errors
/// When the system has no free port.
pub(super) fn free_port() -> Result<u16> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).context("no free loopback port")?;
    Ok(listener.local_addr()?.port())
}

/// An HTTP answer.
#[derive(Debug)]
pub(super) struct Response {
    /// The status code.
    pub status: u16,
    /// The status line and headers, as received.
    pub head: String,
    /// The body (chunked transfer decoded).
    pub body: Vec<u8>,
}

impl Response {
    /// The value of header `name` (case-insensitive), if present.
    pub(super) fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().skip(1).find_map(|line| {
            let (k, v) = line.split_once(':')?;
            k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }

    /// The body as JSON.
    ///
    /// # Errors
    /// When the body is not JSON.
    pub(super) fn json(&self) -> Result<serde_json::Value> {
        serde_json::from_slice(&self.body).with_context(|| {
            format!(
                "the answer is not JSON: {}",
                String::from_utf8_lossy(&self.body)
            )
        })
    }
}

/// `GET path` on the loopback port.
///
/// # Errors
/// When the connection fails or the answer is not HTTP.
pub(super) fn get(
    port: u16,
    path: &str,
    headers: &[(&str, &str)],
    timeout: Duration,
) -> Result<Response> {
    request(port, "GET", path, headers, None, timeout)
}

/// One HTTP/1.1 exchange with `Connection: close`, so the answer ends where the stream ends.
///
/// # Errors
/// When the connection fails, times out, or the answer is not HTTP.
pub(super) fn request(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
    timeout: Duration,
) -> Result<Response> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut stream = TcpStream::connect_timeout(&addr, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    let mut head =
        format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n");
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    if let Some(body) = body {
        head.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            body.len()
        ));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes())?;
    if let Some(body) = body {
        stream.write_all(body)?;
    }
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw)?;
    parse_response(&raw)
}

/// Splits a raw HTTP/1.1 answer into status, head and (de-chunked) body.
///
/// # Errors
/// When the answer has no status line or a malformed chunk.
pub(super) fn parse_response(raw: &[u8]) -> Result<Response> {
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .context("the answer has no end of headers")?;
    let head = String::from_utf8_lossy(&raw[..end]).into_owned();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .with_context(|| format!("no status in {head:?}"))?;
    let mut response = Response {
        status,
        head,
        body: raw[end + 4..].to_vec(),
    };
    if response
        .header("transfer-encoding")
        .is_some_and(|v| v.eq_ignore_ascii_case("chunked"))
    {
        response.body = dechunk(&response.body)?;
    }
    Ok(response)
}

fn dechunk(mut data: &[u8]) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let line_end = data
            .windows(2)
            .position(|w| w == b"\r\n")
            .context("a chunk size line has no end")?;
        let size_text = String::from_utf8_lossy(&data[..line_end]);
        let size_text = size_text.split(';').next().unwrap_or("").trim();
        let size = usize::from_str_radix(size_text, 16)
            .with_context(|| format!("bad chunk size {size_text:?}"))?;
        data = &data[line_end + 2..];
        if size == 0 {
            return Ok(out);
        }
        if data.len() < size {
            bail!("a chunk is cut short");
        }
        out.extend_from_slice(&data[..size]);
        data = data.get(size + 2..).unwrap_or_default();
    }
}

/// The last `lines` lines of a text file (empty when it cannot be read).
pub(super) fn tail(path: &Path, lines: usize) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
