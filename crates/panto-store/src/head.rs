//! `Head`: where a session ends, as a writer last saw it.

use std::fmt;

/// Where a session ends, as a writer last saw it: the condition of the next append, and a
/// position in the history. Opaque to callers; each store decides what it counts (the JSONL
/// store the file's length in bytes, a database the number of entries). Positions of one
/// session only grow.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Head(u64);

impl Head {
    /// The head of a session with nothing in it (or of one that does not exist yet: appending
    /// at it creates the session).
    pub const EMPTY: Head = Head(0);

    /// A head at store position `position`.
    pub const fn new(position: u64) -> Head {
        Head(position)
    }

    /// The store position.
    pub const fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for Head {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "position {}", self.get())
    }
}
