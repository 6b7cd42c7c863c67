//! The trust file: the projects whose file may set the keys that need trust.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use panto_compact::{LayerFile, read_layer_file};
use serde::Deserialize;

use super::file::parse_toml;
use super::{TRUST_FILE, create_private_dir, write_private};

/// The trust file: the projects whose `.panto/config.toml` may set the keys that need trust.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct TrustFile {
    /// The trusted projects, as absolute paths with every link resolved.
    #[serde(default)]
    trusted: Vec<PathBuf>,
}

impl TrustFile {
    /// Reads the trust file; an empty record when it does not exist.
    ///
    /// # Errors
    /// A file that cannot be read or parsed (naming its line).
    pub(crate) fn read(path: &Path) -> Result<TrustFile> {
        let text = read_layer_file(&LayerFile::new(path)).map_err(|e| {
            anyhow::anyhow!(
                "{}: cannot read the trust file: {}",
                path.display(),
                e.reason
            )
        })?;
        match text {
            Some(text) => parse_toml(path, &text),
            None => Ok(TrustFile::default()),
        }
    }

    /// Whether `project` is trusted: its real path (links resolved) is recorded.
    pub(crate) fn contains(&self, project: &Path) -> bool {
        match std::fs::canonicalize(project) {
            Ok(real) => self.trusted.contains(&real),
            Err(_) => false,
        }
    }

    /// Records `project` (a real path); false when it was already recorded.
    pub(crate) fn add(&mut self, project: PathBuf) -> bool {
        if self.trusted.contains(&project) {
            return false;
        }
        self.trusted.push(project);
        true
    }

    /// Removes `project`; false when it was not recorded.
    pub(crate) fn remove(&mut self, project: &Path) -> bool {
        let before = self.trusted.len();
        self.trusted.retain(|t| t != project);
        self.trusted.len() != before
    }

    /// The file's text.
    ///
    /// # Errors
    /// A recorded path that is not UTF-8 (TOML cannot hold it).
    pub(crate) fn render(&self) -> Result<String> {
        let mut out = String::from(
            "# Projects whose .panto/config.toml may choose where requests, and your API key, go\n\
             # (provider, base_url, max_response_mib). Written by `panto trust DIR`; `panto trust\n\
             # --revoke DIR` removes one. See docs/trust.md in the panto repository.\n\
             trusted = [\n",
        );
        for p in &self.trusted {
            let text = p
                .to_str()
                .with_context(|| format!("{}: the path is not UTF-8", p.display()))?;
            out.push_str(&format!("    {},\n", toml::Value::String(text.to_owned())));
        }
        out.push_str("]\n");
        Ok(out)
    }

    /// Writes the trust file: a new file (mode 0600, in a folder made 0700 when missing)
    /// renamed over the old one, so a crash leaves the old record or the new one, whole.
    ///
    /// # Errors
    /// When the folder or the file cannot be written.
    pub(crate) fn write(&self, path: &Path) -> Result<()> {
        let text = self.render()?;
        let dir = path.parent().unwrap_or(Path::new("."));
        create_private_dir(dir)?;
        let tmp = dir.join(format!(".{TRUST_FILE}.{}.tmp", std::process::id()));
        let written =
            write_private(&tmp, text.as_bytes()).and_then(|()| std::fs::rename(&tmp, path));
        if let Err(e) = written {
            let _ = std::fs::remove_file(&tmp);
            bail!("{}: cannot write the trust file: {e}", path.display());
        }
        Ok(())
    }
}
