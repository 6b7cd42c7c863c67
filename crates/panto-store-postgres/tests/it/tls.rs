//! TLS against the test server started with a throwaway CA (`.ci/postgres`): every `sslmode`,
//! `sslrootcert`, a name the certificate does not hold, a CA that did not sign it, and the
//! client certificate of role `panto_cert`, which may log in only with it.

use std::path::PathBuf;

use panto_store::{Store, StoreError};
use panto_store_postgres::{PostgresStore, SslMode, StoreUrl, testing};

use crate::runtime;

/// The port of the TLS server and the folder of its certificates.
fn server(test: &str) -> Option<(u16, PathBuf)> {
    let url = testing::variable(testing::TLS_ENV, test)?;
    let certs = testing::variable(testing::CERTS_ENV, test)?;
    let port = StoreUrl::parse(&url).unwrap();
    let port = port.redacted().rsplit(':').next().unwrap();
    let port = port.split('/').next().unwrap().parse().unwrap();
    Some((port, PathBuf::from(certs)))
}

/// Whether the connection a store at `url` would make is encrypted, asked of the server.
async fn encrypted(url: &str) -> bool {
    let client = testing::client(url).await;
    client
        .query_one(
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
        )
        .await
        .unwrap()
        .get(0)
}

async fn error_of(url: &str) -> String {
    let error = PostgresStore::connect(url).await.unwrap_err();
    assert!(
        matches!(
            error,
            StoreError::Invalid { .. } | StoreError::Unavailable { .. }
        ),
        "{error:?}"
    );
    error.to_string()
}

#[test]
fn every_sslmode_does_what_libpq_does() {
    let Some((port, certs)) = server("every_sslmode_does_what_libpq_does") else {
        return;
    };
    let ca = certs.join("ca.crt").display().to_string();
    let base = format!("postgres://panto@localhost:{port}/panto");
    runtime().block_on(async {
        for (mode, tls) in [
            ("disable", false),
            ("allow", true),
            ("prefer", true),
            ("require", true),
        ] {
            let url = format!("{base}?sslmode={mode}");
            assert_eq!(
                StoreUrl::parse(&url).unwrap().ssl_mode(),
                match mode {
                    "disable" => SslMode::Disable,
                    "require" => SslMode::Require,
                    _ => SslMode::Prefer,
                }
            );
            assert_eq!(encrypted(&url).await, tls, "sslmode={mode}");
            PostgresStore::connect(&url).await.unwrap();
        }
        for mode in ["verify-ca", "verify-full", "require"] {
            let url = format!("{base}?sslmode={mode}&sslrootcert={ca}");
            assert!(encrypted(&url).await, "sslmode={mode}");
            let store = testing::fresh(&url).await.unwrap();
            store.list().await.unwrap();
        }
        // The certificate names localhost and 127.0.0.1, not this host: verify-full refuses
        // it, verify-ca (which checks the CA only) takes it.
        let other =
            format!("postgres://panto@db.invalid:{port}/panto?hostaddr=127.0.0.1&sslrootcert={ca}");
        let refused = error_of(&format!("{other}&sslmode=verify-full")).await;
        assert!(refused.contains("cannot connect"), "{refused}");
        assert!(refused.to_lowercase().contains("certificate"), "{refused}");
        PostgresStore::connect(&format!("{other}&sslmode=verify-ca"))
            .await
            .unwrap();
        // A CA that did not sign the server's certificate.
        let wrong = certs.join("client.crt").display().to_string();
        for mode in ["require", "verify-ca", "verify-full"] {
            let refused = error_of(&format!("{base}?sslmode={mode}&sslrootcert={wrong}")).await;
            assert!(
                refused.to_lowercase().contains("certificate"),
                "{mode}: {refused}"
            );
        }
    });
}

#[test]
fn verifying_without_a_ca_or_with_a_bad_mode_is_refused_naming_the_setting() {
    let Some((port, _)) =
        server("verifying_without_a_ca_or_with_a_bad_mode_is_refused_naming_the_setting")
    else {
        return;
    };
    runtime().block_on(async {
        let base = format!("postgres://panto@localhost:{port}/panto");
        for mode in ["verify-ca", "verify-full"] {
            let error = PostgresStore::connect(&format!("{base}?sslmode={mode}"))
                .await
                .unwrap_err();
            assert!(matches!(error, StoreError::Invalid { .. }), "{error:?}");
            let text = error.to_string();
            assert!(text.contains(&format!("sslmode={mode}")), "{text}");
            assert!(text.contains("sslrootcert"), "{text}");
        }
        let text = error_of(&format!("{base}?sslmode=sometimes")).await;
        assert!(
            text.contains("sslmode=sometimes is not a TLS mode"),
            "{text}"
        );
        let text = error_of(&format!(
            "{base}?sslmode=require&sslrootcert=/nonexistent/ca.crt"
        ))
        .await;
        assert!(text.contains("sslrootcert /nonexistent/ca.crt"), "{text}");
    });
}

#[test]
fn a_client_certificate_logs_in_the_role_that_needs_one() {
    let Some((port, certs)) = server("a_client_certificate_logs_in_the_role_that_needs_one") else {
        return;
    };
    let file = |name: &str| certs.join(name).display().to_string();
    let base = format!(
        "postgres://panto_cert@localhost:{port}/panto?sslmode=verify-full&sslrootcert={}",
        file("ca.crt")
    );
    runtime().block_on(async {
        let with = format!(
            "{base}&sslcert={}&sslkey={}",
            file("client.crt"),
            file("client.key")
        );
        let store = testing::fresh(&with).await.unwrap();
        store.list().await.unwrap();
        let without = error_of(&base).await;
        assert!(without.contains("certificate"), "{without}");
        // A key others may read is refused before anything is sent, as libpq refuses it.
        let dir = std::env::temp_dir().join(format!("panto-key-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let open_key = dir.join("client.key");
        std::fs::copy(file("client.key"), &open_key).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&open_key, std::fs::Permissions::from_mode(0o644)).unwrap();
        }
        let text = error_of(&format!(
            "{base}&sslcert={}&sslkey={}",
            file("client.crt"),
            open_key.display()
        ))
        .await;
        assert!(text.contains("may be read by others"), "{text}");
        std::fs::remove_dir_all(&dir).unwrap();
    });
}
