//! Where configuration lives: the user and project folders found from the environment and
//! working directory.

use std::path::{Path, PathBuf};

use anyhow::Result;

use super::{TRUST_FILE, Trust, TrustFile};

/// The directories that configuration is read from.
#[derive(Debug, Clone)]
pub(crate) struct Locations {
    /// `<config dir>/panto`, if a config dir exists on this platform.
    pub user_dir: Option<PathBuf>,
    /// The nearest `.panto` folder from the working directory up, if any.
    pub project_dir: Option<PathBuf>,
    /// Whether `user_dir` is `$PANTO_CONFIG_DIR` (else the platform's folder).
    pub user_dir_from_env: bool,
    /// The folder the project was looked for from (the working directory).
    pub start: PathBuf,
}

/// One place `panto config` says it looked for a configuration file, found or not.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Searched {
    /// Which layer: `user file` or `project file`.
    pub layer: &'static str,
    /// The file, when there is a folder to look in.
    pub path: Option<PathBuf>,
    /// Whether it exists and was read.
    pub found: bool,
    /// Why this path (the variable that set it, or where the project was looked for).
    pub why: String,
}

impl Locations {
    /// The project: the folder that holds the `.panto` folder.
    pub(crate) fn project_root(&self) -> Option<&Path> {
        self.project_dir.as_deref().and_then(Path::parent)
    }

    /// The trust file, `<user dir>/trusted.toml`.
    pub(crate) fn trust_file(&self) -> Option<PathBuf> {
        self.user_dir.as_ref().map(|d| d.join(TRUST_FILE))
    }

    /// Whether the project is trusted, from the trust file.
    ///
    /// # Errors
    /// A trust file that cannot be read or parsed.
    pub(crate) fn trust(&self) -> Result<Trust> {
        let Some(root) = self.project_root() else {
            return Ok(Trust::NoProject);
        };
        let trusted = match self.trust_file() {
            Some(file) => TrustFile::read(&file)?.contains(root),
            None => false,
        };
        let root = root.to_path_buf();
        Ok(if trusted {
            Trust::Trusted(root)
        } else {
            Trust::Untrusted(root)
        })
    }
}

impl Locations {
    /// Finds the user and project folders from the environment and working directory.
    pub(crate) fn discover(cwd: &Path) -> Locations {
        let (user_dir, user_dir_from_env) = match std::env::var_os("PANTO_CONFIG_DIR") {
            Some(dir) if !dir.is_empty() => (Some(PathBuf::from(dir)), true),
            _ => (
                directories::BaseDirs::new().map(|b| b.config_dir().join("panto")),
                false,
            ),
        };
        let project_dir = cwd
            .ancestors()
            .map(|dir| dir.join(".panto"))
            .find(|dir| dir.is_dir());
        Locations {
            user_dir,
            project_dir,
            user_dir_from_env,
            start: cwd.to_path_buf(),
        }
    }
}
