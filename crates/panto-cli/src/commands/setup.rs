//! The setup views and actions: `panto config`, `panto window`, `panto trust`.

use std::io::Write;
use std::path::Path;

use anyhow::Result;
use panto_compact::CompactionPrompt;

use crate::config::{Config, Flags, Locations, Needs, Trust, TrustFile, needs};
use crate::screen::{Spinner, say};
use crate::ui::{count, for_stdout};
use crate::{bad_input, providers};

use super::failure::failure;
use super::user_config_file;
use super::views::window_line;

// ---------------------------------------------------------------------------------------------
// config

pub(crate) fn show_config(config: &Config) -> Result<()> {
    let mut out = std::io::stdout().lock();
    let mut line = |text: String| writeln!(out, "{}", for_stdout(&text));
    for (key, value, source) in config.rows() {
        line(format!("{key:<29} = {value:<30} # {source}"))?;
    }
    let model = config.model.value.as_deref().unwrap_or("");
    let (known, records) = providers::known_windows(config, model);
    let (value, note) = match known.window() {
        Some(w) => (
            w.tokens.to_string(),
            format!(
                "{}{}",
                providers::window_origin(config, w, &records),
                if w.source == panto_compact::WindowSource::Configured {
                    String::new()
                } else {
                    format!(
                        "; kept in {}; `panto window --forget` forgets it",
                        crate::windows::path()
                            .map_or_else(|| "the data folder".to_owned(), |p| p.display().to_string())
                    )
                }
            ),
        ),
        None => (
            "unknown".to_owned(),
            "none configured, learned or discovered for this model; `panto window` asks a local server".to_owned(),
        ),
    };
    line(format!("{:<29} = {value:<30} # {note}", "window"))?;
    let kind = config.provider.value;
    let key = kind
        .env_vars()
        .map(|(var, _)| (var, std::env::var_os(var).map(|v| !v.is_empty())));
    let (state, note) = key_state(key);
    line(format!("{:<29} = {state:<30} # {note}", "api_key"))?;
    let prompt =
        CompactionPrompt::load_layers(&config.prompt_layers).map_err(|e| failure(e, config))?;
    let prompt_source = prompt
        .source()
        .map_or_else(|| "built-in".to_owned(), |p| p.display().to_string());
    line(format!("{:<29} = {prompt_source}", "compaction_prompt"))?;
    let (state, note) = match &config.trust {
        Trust::NoProject => (
            "no project",
            "no .panto folder above the working directory".to_owned(),
        ),
        Trust::Trusted(root) => ("trusted", format!("project {}", root.display())),
        Trust::Untrusted(root) => (
            "untrusted",
            format!(
                "project {}: its file cannot set {}; `panto trust {}` allows it",
                root.display(),
                trust_keys().join(", "),
                root.display()
            ),
        ),
    };
    line(format!("{:<29} = {state:<30} # {note}", "trust"))?;
    for i in &config.ignored {
        line(format!(
            "# ignored: {} = {} from {} (the project is not trusted)",
            i.key,
            i.value,
            i.file.display()
        ))?;
    }
    line("# configuration files, in the order they apply (later wins; then the environment, then flags):".to_owned())?;
    for searched in &config.searched {
        let state = match (&searched.path, searched.found) {
            (Some(path), true) => format!("{}: read", path.display()),
            (Some(path), false) => format!("{}: not found", path.display()),
            (None, _) => "none".to_owned(),
        };
        line(format!(
            "#   {:<12} {state} ({})",
            searched.layer, searched.why
        ))?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// window

/// `panto window [--forget [--all]]`: the window known for the configured model, where it
/// came from and when requests are compacted ahead (asking the server when nothing is known);
/// or forgets the learned and discovered windows kept for it (or for every model).
pub(crate) async fn show_window(config: &Config, forget: bool, all: bool) -> Result<()> {
    let model = config.model.value.clone().unwrap_or_default();
    let mut out = std::io::stdout().lock();
    if forget {
        let Some(path) = crate::windows::path() else {
            return Err(bad_input(
                "there is no data folder on this system; set PANTO_DATA_DIR",
            ));
        };
        let mut file = crate::windows::WindowFile::read(&path).map_err(bad_input)?;
        let key = crate::windows::Key::of(config, &model);
        let forgotten = file.forget((!all).then_some(&key));
        if forgotten > 0 {
            file.write(&path)?;
        }
        let whose = if all {
            "every model".to_owned()
        } else {
            format!(
                "{} on {}",
                if model.is_empty() {
                    "(no model)"
                } else {
                    &model
                },
                config.provider.value
            )
        };
        let line = format!(
            "forgot {} of {whose} (in {})",
            count(forgotten, "window"),
            path.display()
        );
        writeln!(out, "{}", for_stdout(&line))?;
        return Ok(());
    }
    // A window belongs to a model: without one there is nothing to show (the offline
    // summarizer has no window at all).
    if model.is_empty() {
        return Err(bad_input(format!(
            "no model configured, so no window to show: pass --provider NAME --model NAME, or write `model = \"NAME\"` in {}",
            user_config_file(config)
        )));
    }
    let asked = providers::kept_windows(config, &model)
        .iter()
        .any(|r| r.source == panto_compact::WindowSource::Discovered.as_str());
    if providers::told_nothing(providers::known_window(config, &model))
        && !asked
        && providers::own_server(config)
    {
        drop(out);
        let spinner = Spinner::start("asking the server for its window");
        let found = providers::discover(config, &model).await;
        drop(spinner);
        if let Err(e) = found {
            say(&format!(
                "panto: note: the server could not be asked for its window: {e:#}"
            ));
        }
        out = std::io::stdout().lock();
    }
    let (known, records) = providers::known_windows(config, &model);
    let window = known.window();
    let heading = match window {
        Some(w) => format!("{model}: a window of {} tokens", w.tokens),
        None => format!("{model}: the window is unknown"),
    };
    writeln!(out, "{}", for_stdout(&heading))?;
    writeln!(
        out,
        "{}",
        for_stdout(&window_line(config, window, &records, 0))
    )?;
    for r in &records {
        let what = match r.window() {
            Some(w) => format!("{} tokens, {}", w.tokens, w.source),
            None => "nothing".to_owned(),
        };
        let line = format!("  kept: {what} ({})", r.detail);
        writeln!(out, "{}", for_stdout(&line))?;
    }
    Ok(())
}

/// What `panto config` says of the chosen provider's key: whether its variable is set, never
/// its value. `key` is the variable and whether it holds something (`None`: unset), or `None`
/// for the offline summarizer, which needs no key.
pub(crate) fn key_state(key: Option<(&str, Option<bool>)>) -> (&'static str, String) {
    match key {
        None => (
            "not needed",
            "the offline summarizer sends nothing".to_owned(),
        ),
        Some((var, Some(true))) => ("set", format!("in {var} (the value is never shown)")),
        Some((var, Some(false))) => (
            "empty",
            format!("{var} is set but empty; a local server needs no key, any other does"),
        ),
        Some((var, None)) => (
            "not set",
            format!("{var} is not set; a local server needs no key, any other does"),
        ),
    }
}

/// The keys a project file may set only when the project is trusted.
fn trust_keys() -> Vec<&'static str> {
    crate::config::KEYS
        .iter()
        .filter(|(k, _)| matches!(needs(k), Needs::Trust(_)))
        .map(|(k, _)| *k)
        .collect()
}

// ---------------------------------------------------------------------------------------------
// trust

/// `panto trust [DIR] [--revoke]`: records (or removes) the project holding DIR in the trust
/// file, then shows what the project's file now decides.
pub(crate) fn trust(cwd: &Path, dir: Option<&Path>, revoke: bool) -> Result<()> {
    let start = dir.map_or_else(|| cwd.to_path_buf(), |d| cwd.join(d));
    let start = std::fs::canonicalize(&start)
        .map_err(|e| bad_input(format!("{}: {e}", start.display())))?;
    let locations = Locations::discover(&start);
    let Some(root) = locations.project_root() else {
        return Err(bad_input(format!(
            "{}: no .panto folder here or above, so there is no project to trust",
            start.display()
        )));
    };
    let root =
        std::fs::canonicalize(root).map_err(|e| bad_input(format!("{}: {e}", root.display())))?;
    let file = locations.trust_file().ok_or_else(|| {
        bad_input("there is no user configuration folder on this system; set PANTO_CONFIG_DIR")
    })?;
    // A trust file that cannot be read is never overwritten: its records would be lost.
    let mut record = TrustFile::read(&file).map_err(bad_input)?;
    let (changed, state, verb) = if revoke {
        (record.remove(&root), "not trusted", "cannot")
    } else {
        (record.add(root.clone()), "trusted", "may")
    };
    if changed {
        record.write(&file)?;
    }
    let mut out = std::io::stdout().lock();
    let line = format!(
        "{} is {state}: its .panto/config.toml {verb} set {} (recorded in {})",
        root.display(),
        trust_keys().join(", "),
        file.display()
    );
    writeln!(out, "{}", for_stdout(&line))?;
    if revoke {
        return Ok(());
    }
    // What the project now decides, so the user sees where requests and the key will go.
    let config = Config::load(&locations, &Flags::default()).map_err(bad_input)?;
    for (key, value, source) in config.rows() {
        if matches!(source, crate::config::Source::ProjectFile(_))
            && matches!(needs(key), Needs::Trust(_))
        {
            writeln!(out, "{}", for_stdout(&format!("  it sets {key} = {value}")))?;
        }
    }
    Ok(())
}
