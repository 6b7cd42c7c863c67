//! Placeholder: panto-session is filled by a later issue.
