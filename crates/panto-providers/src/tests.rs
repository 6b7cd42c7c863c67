//! Unit tests of the pure parts: SSE decoding, wire preparation, retry timing, base URLs.
