//! Layered configuration: user file, project file, environment, flags; later wins.

use crate::support::{Sandbox, scrub};

#[test]
fn later_layers_win_and_each_value_names_its_source() {
    let sb = Sandbox::new();
    std::fs::write(
        sb.user_config.join("config.toml"),
        "provider = \"openai\"\nmodel = \"user-model\"\nkeep_tokens = 100\nretries = 5\n",
    )
    .unwrap();
    sb.write(
        ".panto/config.toml",
        "model = \"project-model\"\ncompaction_model = \"small\"\nkeep_tokens = 200\n",
    );
    // A project folder is found from a subdirectory too.
    std::fs::create_dir_all(sb.work().join("deep/er")).unwrap();
    let mut cmd = sb.command(&["config", "--keep-tokens", "300"]);
    cmd.current_dir(sb.work().join("deep/er"))
        .env("OPENAI_BASE_URL", "http://127.0.0.1:9/v1");
    let run = sb.run_with(cmd);
    run.expect_code(0);
    insta::assert_snapshot!(scrub(&run.stdout, &sb));
}

#[test]
fn defaults_when_nothing_is_configured() {
    let sb = Sandbox::new();
    let run = sb.run(&["config"]);
    run.expect_code(0);
    insta::assert_snapshot!(scrub(&run.stdout, &sb));
}

#[test]
fn the_request_deadline_has_a_flag_and_the_other_waits_have_keys() {
    let sb = Sandbox::new();
    sb.write(
        ".panto/config.toml",
        "timeout_secs = 30\nidle_timeout_secs = 7\nlock_timeout_secs = 2\n",
    );
    let run = sb.run(&["config", "--timeout-secs", "5"]);
    run.expect_code(0);
    let row = |key: &str| {
        run.stdout
            .lines()
            .find(|l| l.split_whitespace().next() == Some(key))
            .unwrap_or_else(|| panic!("no row {key}:\n{}", run.stdout))
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    };
    assert_eq!(
        row("timeout_secs"),
        "timeout_secs = 5 # flag --timeout-secs"
    );
    assert!(row("idle_timeout_secs").starts_with("idle_timeout_secs = 7 # project file"));
    assert!(row("lock_timeout_secs").starts_with("lock_timeout_secs = 2 # project file"));
}
