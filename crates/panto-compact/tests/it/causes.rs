//! Error causes: every error that wraps another one hands it out through `source()`, so a
//! caller can walk from a failed compaction down to the provider's or the system's error.

use panto_compact::KnownWindows;
use std::error::Error;

use panto_compact::testing::{overflow, server_error};
use panto_compact::{AttemptFailure, CompactError, CompactRun, CompactionPrompt};
use panto_provider::ProviderError;

use crate::*;

/// The causes below `e`, nearest first.
fn causes<'a>(e: &'a (dyn Error + 'static)) -> Vec<&'a (dyn Error + 'static)> {
    let mut out = Vec::new();
    let mut next = e.source();
    while let Some(cause) = next {
        out.push(cause);
        next = cause.source();
    }
    out
}

/// The first cause below `e` that is a `T`.
fn cause_of<'a, T: Error + 'static>(e: &'a (dyn Error + 'static)) -> Option<&'a T> {
    causes(e).into_iter().find_map(|c| c.downcast_ref::<T>())
}

#[tokio::test]
async fn a_failed_compaction_leads_to_the_provider_error() {
    let (main, main_ref) = model("main", "big");
    main.push(Err(server_error()));
    let mut log = log_of(&rounds(0, 3));
    let err = compactor(main_ref, 300)
        .compact(
            &log.replay(),
            &mut log,
            CompactRun::manual(None),
            &mut KnownWindows::new(),
        )
        .await
        .unwrap_err();
    let chain = causes(&err);
    assert_eq!(chain.len(), 2, "{err:?}");
    assert!(chain[0].is::<AttemptFailure>());
    assert_eq!(cause_of::<ProviderError>(&err), Some(&server_error()));
}

#[tokio::test]
async fn when_both_models_fail_the_cause_is_the_last_failure() {
    let (cheap, cheap_ref) = model("cheap-provider", "cheap");
    let (main, main_ref) = model("main-provider", "big");
    cheap.push(Err(overflow(Some(140_000), Some(128_000))));
    let timeout = ProviderError::Timeout {
        message: "no answer in 600s".into(),
    };
    main.push(Err(timeout.clone()));
    let mut log = log_of(&rounds(0, 3));
    let err = compactor(main_ref, 300)
        .with_compaction_model(Some(cheap_ref))
        .compact(
            &log.replay(),
            &mut log,
            CompactRun::manual(None),
            &mut KnownWindows::new(),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, CompactError::BothModelsFailed { .. }));
    assert!(causes(&err)[0].is::<AttemptFailure>(), "{err:?}");
    assert_eq!(cause_of::<ProviderError>(&err), Some(&timeout));
}

#[test]
fn every_wrapping_variant_names_its_cause() {
    let failed = || CompactError::Compaction {
        model: "big".into(),
        cause: AttemptFailure::Provider(server_error()),
    };
    let overflowed = || overflow(Some(2_000), Some(1_600));
    let cases = [
        failed(),
        CompactError::OverflowCompactionFailed {
            overflow: overflowed(),
            compaction: Box::new(failed()),
        },
        CompactError::OverflowNoProgress {
            overflow: overflowed(),
            estimated_tokens: 2_100,
            overflowed_tokens: 2_000,
            limit: Some(1_600),
            by_clearing: false,
            newest_turn_alone: true,
            reply_room: 0,
        },
        CompactError::OverflowAfterCompaction {
            error: overflowed(),
            estimated_tokens: 1_700,
            by_clearing: false,
            reply_tokens: 4_096,
        },
        CompactError::FoldOverflow {
            step: 1,
            steps: 2,
            shrinks: 3,
            estimated_tokens: 1_700,
            limit: Some(1_600),
            error: overflowed(),
        },
    ];
    for err in &cases {
        assert!(
            cause_of::<ProviderError>(err).is_some(),
            "no provider error below {err:?}"
        );
    }
    // A recovery that failed leads through the compaction error to the provider's answer.
    let nested = &cases[1];
    assert!(causes(nested)[0].is::<CompactError>());
    assert_eq!(causes(nested).len(), 3);
    assert_eq!(cause_of::<ProviderError>(nested), Some(&server_error()));
}

#[test]
fn an_unreadable_prompt_leads_to_the_system_error() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("not-a-folder");
    std::fs::write(&file, "x").unwrap();
    // A path through a regular file fails in the operating system (not a directory).
    let err = CompactionPrompt::load(&[file.join("COMPACTION.md")]).unwrap_err();
    assert!(
        matches!(err, CompactError::PromptUnreadable { .. }),
        "{err:?}"
    );
    let io = cause_of::<std::io::Error>(&err).expect("the io error is the cause");
    assert!(err.to_string().ends_with(&io.to_string()), "{err}");
}

/// Issue 39 point 3: an overflow whose compaction kept turns beside the newest one (or other
/// writers' prompts after it) does not blame the newest turn alone.
#[test]
fn no_progress_blames_the_newest_turn_only_when_it_was_kept_alone() {
    let no_progress = |newest_turn_alone| CompactError::OverflowNoProgress {
        overflow: overflow(Some(2_000), Some(1_500)),
        estimated_tokens: 1_014,
        overflowed_tokens: 1_451,
        limit: Some(1_500),
        by_clearing: false,
        newest_turn_alone,
        reply_room: 0,
    };
    let alone = no_progress(true).to_string();
    assert!(alone.contains("the newest turn is too large"), "{alone}");
    let beside = no_progress(false).to_string();
    assert!(!beside.contains("newest turn is too large"), "{beside}");
    assert!(
        beside.contains("what the compaction kept verbatim"),
        "{beside}"
    );
}

/// A retry not sent because the room for its reply does not fit beside it, the request itself
/// within the limit (a reply budget half a small window): the message says it is that room,
/// neither the newest turn nor what was kept.
#[test]
fn no_progress_blames_the_reply_s_room_when_the_request_fits_without_it() {
    let no_progress = |estimated_tokens, reply_room| CompactError::OverflowNoProgress {
        overflow: overflow(Some(18_024), Some(5_521)),
        estimated_tokens,
        overflowed_tokens: 18_024,
        limit: Some(5_521),
        by_clearing: false,
        newest_turn_alone: true,
        reply_room,
    };
    let room = no_progress(4_235, 2_760);
    assert!(room.reply_room_overflows());
    assert_eq!(
        room.to_string(),
        "the room kept for the reply (2760 tokens) does not fit beside what the compaction \
         kept: after compaction the request is still about 4235 tokens (it was about 18024, \
         limit about 5521), so it was not sent again"
    );
    // After a clearing alone, it is what the clearing kept.
    let mut cleared = no_progress(4_235, 2_760);
    if let CompactError::OverflowNoProgress { by_clearing, .. } = &mut cleared {
        *by_clearing = true;
    }
    assert!(
        cleared
            .to_string()
            .starts_with("the room kept for the reply (2760 tokens) does not fit beside what the clearing kept: after clearing"),
        "{cleared}"
    );
    // Over the limit on its own, or within it with the room: the turn's message as before.
    for (estimated, reply) in [(5_600, 2_760), (4_235, 1_000), (4_235, 0)] {
        let err = no_progress(estimated, reply);
        assert!(!err.reply_room_overflows(), "{err}");
        assert!(err.to_string().starts_with("the newest turn"), "{err}");
    }
}
