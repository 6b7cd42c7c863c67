//! A model server by hand, for the tests that need to hold or cut a connection where wiremock
//! cannot: reading one request off a socket, and writing one whole OpenAI Chat answer.

use std::io::{Read, Write};
use std::net::TcpStream;

/// Reads the head and the `Content-Length` bytes of body of one request; `false` when the
/// connection ends or fails first.
pub(crate) fn read_request(socket: &mut TcpStream) -> bool {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        let Ok(n) = socket.read(&mut chunk) else {
            return false;
        };
        if n == 0 {
            return false;
        }
        buf.extend_from_slice(&chunk[..n]);
        let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
            continue;
        };
        let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        if buf.len() >= end + 4 + length {
            return true;
        }
    }
}

/// Writes a whole (not streamed) OpenAI Chat answer saying `content`, which a streaming
/// request accepts too; a connection the client already closed is not an error.
pub(crate) fn write_chat_reply(socket: &mut TcpStream, content: &str) {
    let body = format!(
        r#"{{"choices":[{{"index":0,"message":{{"role":"assistant","content":"{content}"}},"finish_reason":"stop"}}]}}"#
    );
    let answer = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let _ = socket.write_all(answer.as_bytes());
}
