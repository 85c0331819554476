//! Fresh Postgres databases for test suites: each [`TestDb`] is a database of its own on the
//! server of `$WEIR_TEST_DATABASE_URL` (default `postgres://postgres@127.0.0.1:5432/postgres`),
//! created on demand and dropped with the value.

use std::sync::atomic::{AtomicU32, Ordering};

use sqlx::{Connection, PgConnection};

/// The server test suites use.
pub fn admin_url() -> String {
    std::env::var("WEIR_TEST_DATABASE_URL")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "postgres://postgres@127.0.0.1:5432/postgres".into())
}

/// A database made for one test, dropped (with its connections) when this is dropped.
pub struct TestDb {
    /// The test database's URL.
    pub url: String,
    name: String,
    admin: String,
}

fn with_db(url: &str, db: &str) -> String {
    // Replace the path of the URL (the database) and keep any query.
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let host_end = base[scheme_end..]
        .find('/')
        .map_or(base.len(), |i| scheme_end + i);
    let mut out = format!("{}/{db}", &base[..host_end]);
    if let Some(q) = query {
        out.push('?');
        out.push_str(q);
    }
    out
}

impl TestDb {
    /// A fresh database, or `None` (said loudly on stderr) when no Postgres server answers;
    /// with `WEIR_REQUIRE_POSTGRES=1` a missing server is a panic instead, so CI cannot skip.
    pub async fn create() -> Option<Self> {
        Self::create_on(&admin_url()).await
    }

    /// Like [`create`](Self::create), on the server of `admin` (a URL of any database there).
    pub async fn create_on(admin: &str) -> Option<Self> {
        static N: AtomicU32 = AtomicU32::new(0);
        let admin = admin.to_string();
        let mut conn = match PgConnection::connect(&admin).await {
            Ok(c) => c,
            Err(e) => {
                if std::env::var("WEIR_REQUIRE_POSTGRES").is_ok_and(|v| v == "1") {
                    panic!("WEIR_REQUIRE_POSTGRES=1 but Postgres at {admin} does not answer: {e}");
                }
                eprintln!(
                    "\n*** SKIPPED: no Postgres at {admin} ({e}); set WEIR_TEST_DATABASE_URL to run the Postgres suite ***\n"
                );
                return None;
            }
        };
        let name = format!(
            "weir_test_{}_{}_{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed),
            chrono::Utc::now().timestamp_millis() % 100_000
        );
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&mut conn)
            .await
            .unwrap_or_else(|e| panic!("cannot create the test database {name}: {e}"));
        let _ = conn.close().await;
        Some(Self {
            url: with_db(&admin, &name),
            name,
            admin,
        })
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let (admin, name) = (self.admin.clone(), self.name.clone());
        // Dropped from inside a runtime, where blocking on another is not allowed: a thread
        // of its own does it.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime to drop the test database");
            rt.block_on(async {
                if let Ok(mut c) = PgConnection::connect(&admin).await {
                    let _ = sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
                        "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
                    )))
                    .execute(&mut c)
                    .await;
                }
            });
        })
        .join();
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn database_names_replace_the_path_only() {
        assert_eq!(
            super::with_db("postgres://u@h:5432/postgres?sslmode=disable", "x"),
            "postgres://u@h:5432/x?sslmode=disable"
        );
        assert_eq!(super::with_db("postgres://u@h", "x"), "postgres://u@h/x");
    }
}
