//! Unit tests: the password never shows, and the schema script holds every migration.

use crate::{MIGRATIONS, StoreUrl, redact, schema_sql};

#[test]
fn a_url_password_is_never_shown() {
    let url =
        StoreUrl::parse("postgres://agent:s3cr%40t-pass@db.internal:6543/panto?application_name=x")
            .unwrap();
    assert_eq!(url.redacted(), "postgres://agent@db.internal:6543/panto");
    let debug = format!("{url:?}");
    assert!(!debug.contains("s3cr"), "{debug}");
    assert_eq!(
        url.scrub("login failed with s3cr@t-pass and s3cr%40t-pass"),
        "login failed with <redacted> and <redacted>"
    );
    // A URL the parser refuses is reported without its password.
    let error = StoreUrl::parse("postgres://agent:hunter2-long@db:notaport/panto").unwrap_err();
    assert!(!error.contains("hunter2"), "{error}");
    assert!(error.contains("agent:<redacted>@db"), "{error}");
    assert_eq!(
        redact("postgresql://u:p%40ss@h/db?x=1"),
        "postgresql://u:<redacted>@h/db?x=1"
    );
    assert_eq!(redact("postgres://u@h/db"), "postgres://u@h/db");
}

#[test]
fn the_schema_script_creates_and_records_every_migration() {
    let sql = schema_sql();
    assert!(sql.starts_with("BEGIN;\nCREATE TABLE panto_schema_migrations"));
    for (version, migration) in MIGRATIONS {
        assert!(sql.contains(migration));
        assert!(sql.contains(&format!(
            "INSERT INTO panto_schema_migrations (version) VALUES ({version});"
        )));
    }
    assert!(sql.ends_with("COMMIT;\n"));
}
