//! `weir serve`, `weir worker` and `weir tokens`.

use std::time::Duration;

use anyhow::{Context, Result};
use weir_runtime::{Options, Runtime};
use weir_server::App;
use weir_server::auth::Scope;

use crate::wiring::{self, Env, Open};

pub struct ServeArgs {
    pub listen: String,
    pub workers: usize,
    pub runs_per_worker: usize,
    pub max_body: usize,
    pub grace: Duration,
}

/// Resolves on SIGTERM or Ctrl-C.
async fn stop_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = async {
            match term.as_mut() {
                Some(t) => { t.recv().await; }
                None => std::future::pending::<()>().await,
            }
        } => {}
    }
    eprintln!(
        "weir: stopping: no new runs are claimed; in-flight steps get the grace period, then runs are released"
    );
}

pub async fn serve(env: &Env, args: ServeArgs) -> Result<u8> {
    let options = Options {
        workers: args.workers,
        runs_per_worker: args.runs_per_worker,
        max_body: args.max_body,
        grace: args.grace,
        ..Options::default()
    };
    let app = App::new(wiring::serving(env).await?, options)
        .await
        .map_err(crate::Usage)?;
    let first_token = weir_server::first_start(&app)
        .await
        .map_err(anyhow::Error::msg)?;
    let listener = tokio::net::TcpListener::bind(&args.listen)
        .await
        .map_err(|e| crate::Usage(format!("cannot listen on {}: {e}", args.listen)))?;
    let addr = listener.local_addr()?;
    println!(
        "weir serve: listening on http://{addr} with {} worker{} (store {})",
        args.workers,
        if args.workers == 1 { "" } else { "s" },
        wiring::redact_url(&env.db)
    );
    if args.workers == 0 {
        println!(
            "weir serve: --workers 0: runs are queued here and driven by `weir worker` processes"
        );
    }
    if let Some(token) = first_token {
        println!("weir serve: created an admin token; it is shown this once:");
        println!("  {token}");
        println!("  open http://{addr}/?token={token}");
        println!("  or: curl -H 'Authorization: Bearer {token}' http://{addr}/api/workflows");
    }
    weir_server::serve(app, listener, stop_signal())
        .await
        .context("serving")?;
    Ok(0)
}

pub async fn worker(
    env: &Env,
    concurrency: usize,
    name: Option<String>,
    grace: Duration,
) -> Result<u8> {
    let options = Options {
        workers: 1,
        runs_per_worker: concurrency,
        grace,
        owner: name.unwrap_or_else(weir_engine::process_owner),
        ..Options::default()
    };
    let rt = Runtime::new(wiring::serving(env).await?, options)
        .await
        .map_err(crate::Usage)?;
    println!(
        "weir worker {}: driving up to {concurrency} run{} at once from {}",
        rt.options.owner,
        if concurrency == 1 { "" } else { "s" },
        wiring::redact_url(&env.db)
    );
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let workers = rt.start_workers(stop_rx);
    stop_signal().await;
    let _ = stop_tx.send(true);
    rt.drain(workers).await;
    Ok(0)
}

pub async fn tokens_create(env: &Env, name: &str, scope: &str, as_json: bool) -> Result<u8> {
    let scope = Scope::parse(scope)
        .ok_or_else(|| crate::Usage(format!("--scope {scope}: use read, run, approve or admin")))?;
    let store = wiring::store(env, Open::CreateIfMissing).await?;
    let (row, token) =
        weir_server::auth::mint(name, scope).map_err(|e| anyhow::anyhow!(e.message))?;
    weir_core::catalog::Catalog::create_token(store.as_ref(), &row).await?;
    if as_json {
        println!(
            "{}",
            serde_json::json!({"id": row.id, "name": row.name, "scope": row.scope,
                               "created_at": row.created_at, "token": token})
        );
    } else {
        println!("{token}");
        eprintln!(
            "token {} ({}, scope {}) created; it is shown this once. Revoke: weir tokens revoke {}",
            row.id, row.name, row.scope, row.id
        );
    }
    Ok(0)
}

pub async fn tokens_list(env: &Env, as_json: bool) -> Result<u8> {
    let store = wiring::store(env, Open::MustExist).await?;
    let tokens = weir_core::catalog::Catalog::tokens(store.as_ref()).await?;
    if as_json {
        println!("{}", serde_json::to_string_pretty(&tokens)?);
        return Ok(0);
    }
    if tokens.is_empty() {
        println!("no tokens (weir tokens create --scope run --name ci makes one)");
    }
    for t in tokens {
        println!(
            "{}  {:<8} {:<24} {}{}",
            t.id,
            t.scope,
            t.name,
            t.created_at,
            t.revoked_at
                .map(|r| format!("  revoked {r}"))
                .unwrap_or_default()
        );
    }
    Ok(0)
}

pub async fn tokens_revoke(env: &Env, id: &str) -> Result<u8> {
    let store = wiring::store(env, Open::MustExist).await?;
    weir_core::catalog::Catalog::revoke_token(store.as_ref(), id, &weir_core::store::now_rfc3339())
        .await?;
    println!("token {id} revoked");
    Ok(0)
}
