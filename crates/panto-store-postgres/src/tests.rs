//! Unit tests: the password never shows (not in `redact`, a parse error, `Debug` or the
//! location, wherever it sits in the URL and whatever it holds), the URL's TLS settings and
//! `options` are read, and the schema script holds every migration.

use proptest::prelude::*;

use crate::{MIGRATIONS, SslMode, StoreUrl, redact, schema_sql};

/// Every text of `url` a person could see: `redact`, and the parse's error or `Debug` and
/// location.
fn shown(url: &str) -> String {
    let parsed = match StoreUrl::parse_with(url, &|_| None) {
        Ok(u) => format!("{u:?} {}", u.redacted()),
        Err(e) => e,
    };
    format!("{} {parsed}", redact(url))
}

/// Every piece of `password` of 4 characters holding a letter (the URLs around it hold only
/// lower-case letters and digits, and the passwords only upper-case letters and symbols).
fn pieces(password: &str) -> Vec<String> {
    let chars: Vec<char> = password.chars().collect();
    chars
        .windows(4)
        .map(|w| w.iter().collect::<String>())
        .filter(|w| w.chars().any(|c| c.is_ascii_uppercase()))
        .collect()
}

fn assert_hidden(url: &str, password: &str) {
    let text = shown(url);
    for piece in pieces(password) {
        assert!(
            !text.contains(&piece),
            "{piece:?} of the password shows in {text}"
        );
    }
}

#[test]
fn a_password_in_the_query_or_with_unencoded_separators_never_shows() {
    for url in [
        "postgres://agent@db:5432/panto?password=QXZJ-KWQX",
        "postgres://agent@db:5432/panto?sslmode=require&password=QXZJ-KWQX&application_name=x",
        "postgres://agent:QXZJ/KWQX@db:5432/panto",
        "postgres://agent:QXZJ?KWQX@db:5432/panto",
        "postgres://agent:QX/ZJ?KW@QX@db:5432/panto",
        "postgres://agent:12/QXZJKWQX@db:5432/panto",
        "postgres://agent:QXZJ#KWQX@db:5432/panto",
        // What the property test below shrank to: a `?` in the user part's password hid where
        // the query starts, and with it the query's `password=`.
        "postgres://agent:?Q!==Z@db.internal:6543/panto?password=?Q!==Z",
    ] {
        assert_hidden(url, "QXZJ-KWQX/QXZJKWQX?QX/ZJ?KW@QX#?Q!==Z");
    }
    // A password the parser reads from the query is scrubbed from messages.
    let url =
        StoreUrl::parse_with("postgres://agent@db/panto?password=QXZJ-KWQX", &|_| None).unwrap();
    assert_eq!(url.redacted(), "postgres://agent@db:5432/panto");
    assert_eq!(url.scrub("said QXZJ-KWQX"), "said <redacted>");
    // The environment's password too.
    let env = |name: &str| (name == "PGPASSWORD").then(|| "QXZJ-ENV-KWQX".to_owned());
    let url = StoreUrl::parse_with("postgres://agent@db/panto", &env).unwrap();
    assert!(!format!("{url:?}").contains("QXZJ"));
    assert_eq!(url.scrub("QXZJ-ENV-KWQX!"), "<redacted>!");
}

proptest! {
    #[test]
    fn no_piece_of_any_password_shows_wherever_it_sits(
        password in "[QXZJKW/?@#&=:%!]{6,24}",
        place in 0usize..3,
    ) {
        let url = match place {
            0 => format!("postgres://agent:{password}@db.internal:6543/panto?application_name=x"),
            1 => format!("postgres://agent@db.internal:6543/panto?application_name=x&password={password}"),
            _ => format!("postgres://agent:{password}@db.internal:6543/panto?password={password}"),
        };
        assert_hidden(&url, &password);
    }
}

#[test]
fn the_url_gives_the_tls_settings_options_and_connect_timeout() {
    let none = |_: &str| None;
    let url = StoreUrl::parse_with(
        "postgres://u@h/db?sslmode=verify-full&sslrootcert=%2Fetc%2Fca.pem&sslcert=c.pem&sslkey=k.pem&connect_timeout=3&options=-c%20search_path%3Dagents%20--lock-timeout%3D5s",
        &none,
    )
    .unwrap();
    assert_eq!(url.ssl_mode(), SslMode::VerifyFull);
    assert_eq!(url.tls().root_cert.as_deref(), Some("/etc/ca.pem"));
    assert_eq!(
        url.connect_timeout(),
        Some(std::time::Duration::from_secs(3))
    );
    assert_eq!(
        url.settings(),
        &[
            ("search_path".to_owned(), "agents".to_owned()),
            ("lock_timeout".to_owned(), "5s".to_owned())
        ]
    );
    // tokio-postgres never sees what panto reads itself: no `options` at login.
    assert!(url.config().get_options().is_none());
    // The environment fills what the URL does not say.
    let env = |name: &str| match name {
        "PGSSLMODE" => Some("require".to_owned()),
        "PGCONNECT_TIMEOUT" => Some("7".to_owned()),
        _ => None,
    };
    let url = StoreUrl::parse_with("postgres://u@h/db", &env).unwrap();
    assert_eq!(url.ssl_mode(), SslMode::Require);
    assert_eq!(
        url.connect_timeout(),
        Some(std::time::Duration::from_secs(7))
    );
    let url = StoreUrl::parse_with("postgres://u@h/db?sslmode=disable", &env).unwrap();
    assert_eq!(url.ssl_mode(), SslMode::Disable);
    let error = StoreUrl::parse_with("postgres://u@h/db?options=search_path", &none).unwrap_err();
    assert!(error.contains("write -c NAME=VALUE"), "{error}");
}

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
