//! Placeholder: panto-providers is filled by a later issue.
