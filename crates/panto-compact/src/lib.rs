//! Placeholder: panto-compact is filled by a later issue.
