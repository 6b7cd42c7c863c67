//! Turns on a session that other writers share: [`Driver::send_shared`] retries a turn that
//! lost to another writer the way [`Conflict`]'s docs say, with jittered pauses that let every
//! writer have its turn (docs/session.md, "Several writers on one session").
//!
//! Why pauses and not a lock: the stores decide conflicts themselves and no lock is held while
//! a model answers (`Store`'s contract), so a writer that crashes or hangs mid-turn never
//! stalls the others, and the JSONL, SQLite and PostgreSQL stores (and PostgreSQL behind a
//! pooler in transaction mode, where a session-level advisory lock is not kept) behave alike.
//! What optimistic appends lack is fairness: a writer whose turn is quicker than another's
//! reload and append wins every race, and the other's prompt is refused again and again. The
//! pauses restore it: every turn starts after a random pause of up to `pause`, and a writer
//! that lost waits less the more often it lost in a row, so the longest waiting goes first.

use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

use panto_model::Message;
use panto_provider::EventSink;
use panto_store::Store;

use super::{Driver, Reply};
use crate::error::{CompactError, Conflict};

/// How [`Driver::send_shared`] takes turns with other writers of its session.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SharedTurns {
    /// The longest pause before a turn starts: each turn waits a random part of it, so that
    /// writers that finished a turn together do not start the next together, and a writer
    /// that lost gets the gap. Keep it above a reload and an append of the store (a few
    /// milliseconds on a local database; more over a network).
    pub pause: Duration,
    /// How many tries a turn may take before its last conflict is returned.
    pub max_tries: usize,
}

impl SharedTurns {
    /// Pauses of up to 50 ms and 64 tries: a turn waits 25 ms on average (nothing beside a
    /// model's answer), long enough for a writer that lost to reload and append first on a
    /// local SQLite or PostgreSQL store, even among eight writers.
    pub fn new() -> SharedTurns {
        SharedTurns {
            pause: Duration::from_millis(50),
            max_tries: 64,
        }
    }

    /// The turns with pauses of up to `pause`.
    #[must_use]
    pub fn with_pause(mut self, pause: Duration) -> SharedTurns {
        self.pause = pause;
        self
    }

    /// The turns with at most `tries` tries each (at least one).
    #[must_use]
    pub fn with_max_tries(mut self, tries: usize) -> SharedTurns {
        self.max_tries = tries.max(1);
        self
    }

    /// The longest pause before try `lost + 1` of a turn whose `lost` tries lost to another
    /// writer: the whole `pause` before a first try, half of it after one loss, a quarter
    /// after two, and so on (never below a 64th): the writer that lost most goes first.
    pub fn longest_pause(&self, lost: usize) -> Duration {
        let halvings = u32::try_from(lost.min(6)).unwrap_or(6);
        self.pause / 2u32.pow(halvings)
    }
}

impl Default for SharedTurns {
    fn default() -> SharedTurns {
        SharedTurns::new()
    }
}

/// What [`Driver::send_shared`] did.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct SharedReply {
    /// This writer's reply; `None` when another writer answered the new messages first (they
    /// are stored, once, and the conversation no longer awaits a reply).
    pub reply: Option<Reply>,
    /// How many tries the turn took (1 when nothing conflicted).
    pub tries: usize,
    /// The conflicts met on the way, in order.
    pub conflicts: Vec<Conflict>,
}

/// A small random generator for the pauses: xorshift, seeded from the process's random
/// hasher keys, so that writers in different processes pause differently.
#[derive(Clone, Debug)]
pub(super) struct Jitter(u64);

impl Jitter {
    pub(super) fn new() -> Jitter {
        let seed = std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish();
        Jitter(seed | 1)
    }

    /// A duration drawn evenly from `[0, longest]`.
    fn draw(&mut self, longest: Duration) -> Duration {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        let nanos = u64::try_from(longest.as_nanos()).unwrap_or(u64::MAX);
        Duration::from_nanos(x.checked_rem(nanos.saturating_add(1)).unwrap_or(0))
    }
}

impl<S: Store> Driver<S> {
    /// [`Driver::send`] on a session that other writers share: retries a turn that lost to
    /// one of them as [`Conflict`]'s docs say (new messages that were not stored are sent
    /// again after a reload; once stored they are never sent again, and the turn ends when
    /// the conversation no longer awaits a reply), with a random pause before every try drawn
    /// by `turns` and slept with `sleep` (the caller's runtime: `tokio::time::sleep`, say).
    /// With every writer of the session sending this way, each new message is stored exactly
    /// once, and the longest waiting writer goes first.
    ///
    /// A turn compacts ahead of a request that fits the window at most twice: a compaction
    /// ahead that lost to another writer is not asked for again while the request fits the
    /// window (one more may come after the turn's reply lost and the conversation grew past the
    /// threshold meanwhile). A request that other writers' turns grew past the window cannot
    /// be sent as it is, so each try of such a request compacts first: one turn of eight
    /// writers at a window of 1,528 tokens compacted ahead three times, the extra ones ahead of
    /// requests of 1,544 and 1,569 (`tests/it/unstated_together.rs` holds the first kind to
    /// two a turn).
    ///
    /// # Errors
    /// What [`Driver::send`] returns when it is not a conflict; the last conflict when the
    /// turn took [`SharedTurns::max_tries`] tries; a reload's [`CompactError::Store`].
    pub async fn send_shared<F, Fut>(
        &mut self,
        new: Vec<Message>,
        stream: EventSink<'_>,
        turns: &SharedTurns,
        mut sleep: F,
    ) -> Result<SharedReply, CompactError>
    where
        F: FnMut(Duration) -> Fut + Send,
        Fut: Future<Output = ()> + Send,
    {
        let mut new = new;
        let mut conflicts = Vec::new();
        loop {
            let lost = conflicts.len();
            sleep(self.jitter.draw(turns.longest_pause(lost))).await;
            if lost > 0 {
                self.reload().await.map_err(CompactError::Store)?;
                if new.is_empty() && !self.awaits_reply() {
                    return Ok(SharedReply {
                        reply: None,
                        tries: lost,
                        conflicts,
                    });
                }
            }
            let error = match self.send(new.clone(), &mut *stream).await {
                Ok(reply) => {
                    return Ok(SharedReply {
                        reply: Some(reply),
                        tries: lost + 1,
                        conflicts,
                    });
                }
                Err(e) => e,
            };
            let Some(conflict) = error.conflict() else {
                return Err(error);
            };
            conflicts.push(conflict);
            if conflicts.len() >= turns.max_tries {
                return Err(error);
            }
            if conflict.prompt_stored() {
                new.clear();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pause_halves_with_each_loss_down_to_a_sixty_fourth() {
        let turns = SharedTurns::new().with_pause(Duration::from_millis(64));
        let pauses: Vec<u128> = (0..9).map(|l| turns.longest_pause(l).as_millis()).collect();
        assert_eq!(pauses, [64, 32, 16, 8, 4, 2, 1, 1, 1]);
    }

    #[test]
    fn draws_stay_within_the_longest_pause_and_vary() {
        let mut jitter = Jitter::new();
        let longest = Duration::from_millis(20);
        let draws: Vec<Duration> = (0..200).map(|_| jitter.draw(longest)).collect();
        assert!(draws.iter().all(|d| *d <= longest));
        let distinct: std::collections::BTreeSet<_> = draws.iter().collect();
        assert!(distinct.len() > 150, "{} distinct draws", distinct.len());
        assert_eq!(jitter.draw(Duration::ZERO), Duration::ZERO);
    }
}
