//! Building a provider from configuration (in progress).

use std::sync::Arc;

use anyhow::{Result, bail};
use panto_provider::Provider;

use crate::config::{Config, ProviderKind};

/// The provider adapter for `kind`.
pub fn build(kind: ProviderKind, _config: &Config) -> Result<Arc<dyn Provider>> {
    bail!("provider {kind} is not wired yet")
}
