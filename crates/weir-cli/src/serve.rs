//! `weir serve` (the runtime and the HTTP API) and `weir worker` (the runtime alone).

use anyhow::{Context, Result};
use weir_runtime::{Options, Runtime};
use weir_server::App;

use crate::cli::{ServeArgs, WorkerArgs, seconds};
use crate::wiring::{self, Env};

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
        runs_per_worker: args.runs_per_worker.max(1),
        grace: seconds(args.grace),
        ..Options::default()
    };
    let app = App::new(wiring::serving(env).await?, options, args.max_body)
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

pub async fn worker(env: &Env, args: WorkerArgs) -> Result<u8> {
    let concurrency = args.concurrency.max(1);
    let options = Options {
        workers: 1,
        runs_per_worker: concurrency,
        grace: seconds(args.grace),
        owner: args.name.unwrap_or_else(weir_engine::process_owner),
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
    let workers = rt.start_workers(stop_rx.clone());
    let schedules = rt.start_schedules(stop_rx);
    stop_signal().await;
    let _ = stop_tx.send(true);
    let _ = schedules.await;
    rt.drain(workers).await;
    Ok(0)
}
