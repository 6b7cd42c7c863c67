//! The bound on one overflow's requests (issue 26): at most `2 + ceil(conversation / (window /
//! 2))` in all, 3 more when the provider did not state its limit true. The fold keeps within it
//! when it asks a summary again with more output, and when it weighs a try above its limit
//! against staying (`FoldState::stays_within_bound`).

/// The bound on the requests of one overflow: at most `2 + ceil(conversation / (window / 2))`
/// in all, 3 more when the provider stated no limit. Two of them are the conversation's (the
/// request rejected and its retry); the rest are the compaction's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RequestBound {
    /// The overflowed request: the provider's count when it stated one, else panto's estimate.
    conversation: u64,
    /// The window stated for the model (by the overflow, the configuration or the server).
    stated_window: Option<u64>,
}

impl RequestBound {
    /// The bound of an overflowed request of `conversation` tokens, with the window stated for
    /// the model, if any.
    pub(crate) fn new(conversation: u64, stated_window: Option<u64>) -> RequestBound {
        RequestBound {
            conversation,
            stated_window,
        }
    }

    /// The most requests the compaction may send. When no window was stated, it is taken at
    /// its largest possible, just under the smallest input rejected so far (`rejected_below`,
    /// else the overflowed request), which makes the bound the smallest it can be, so that it
    /// holds whatever the window turns out to be.
    pub(crate) fn compaction_requests(&self, rejected_below: Option<u64>) -> usize {
        let (window, unstated) = match self.stated_window {
            Some(window) => (window, 0),
            None => (
                rejected_below.map_or(self.conversation, |r| r.min(self.conversation)),
                3,
            ),
        };
        self.steps_within(window) + unstated
    }

    /// Whether `requests` compaction requests keep within the bound for a true window of
    /// `window` tokens that the provider did not state (found by refusals, or stated untrue):
    /// `ceil(conversation / (window / 2))` and the 3 more of such a window.
    pub(crate) fn allows(&self, requests: u64, window: u64) -> bool {
        requests <= self.steps_within(window).saturating_add(3) as u64
    }

    /// `ceil(conversation / (window / 2))`: the compaction requests the bound allows a window of
    /// `window` tokens the provider stated true.
    fn steps_within(&self, window: u64) -> usize {
        let half = (window / 2).max(1);
        usize::try_from(self.conversation.div_ceil(half)).unwrap_or(usize::MAX)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::RequestBound;

    #[test]
    fn the_1_982_token_case_allows_11_requests_from_1_962_tokens_and_12_below() {
        // The overflowed request of the sweep's case (5,881 tokens): 2 + 6 + 3 = 11 requests
        // in all from a window of 1,962 tokens (half of it 981: ceil(5,881 / 981) = 6), 12
        // under (ceil(5,881 / 980) = 7). Staying took 9 compaction requests, the refused try 10.
        let bound = RequestBound::new(5_881, None);
        assert!(bound.allows(9, 2_336));
        assert!(!bound.allows(10, 2_064));
        assert!(!bound.allows(10, 1_962));
        assert!(bound.allows(10, 1_961));
        assert!(!bound.allows(11, 1_961));
        // Stated nowhere, the bound is taken at the largest window possible.
        assert_eq!(bound.compaction_requests(Some(2_337)), 6 + 3);
        assert_eq!(
            RequestBound::new(5_881, Some(1_961)).compaction_requests(None),
            7
        );
    }

    proptest! {
        /// A larger window never allows more requests, and fewer requests are allowed
        /// wherever more are: what `FoldState::stays_within_bound` relies on when it checks
        /// staying at the largest window possible and a refused try just under the try.
        #[test]
        fn a_larger_window_never_allows_more(
            conversation in 1u64..200_000,
            window in 1u64..200_000,
            more in 0u64..10_000,
            requests in 0u64..500,
        ) {
            let bound = RequestBound::new(conversation, None);
            if bound.allows(requests, window + more) {
                prop_assert!(bound.allows(requests, window));
            }
            if bound.allows(requests + 1, window) {
                prop_assert!(bound.allows(requests, window));
            }
        }
    }
}
