//! `weir run`, `approve`, `reject`, `resume` and `cancel`: each is a lifecycle call (create,
//! decide, claim, cancel), then a drive when there is a run to drive.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use serde_json::Value;
use weir_core::Workflow;
use weir_core::record::RunStatus;
use weir_engine::{CancelOutcome, Decision, Engine, Lease, RunOutcome, Services, Source};

use crate::cli::{ApproveArgs, RejectArgs, RunArgs};
use crate::output::{self, Hint, Progress};
use crate::wiring::Env;
use crate::{Usage, exit, validate, wiring};

fn parse_input(raw: Option<&str>, limit: usize) -> Result<Value> {
    let Some(raw) = raw else {
        return Ok(Value::Object(Default::default()));
    };
    let text = match raw.strip_prefix('@') {
        Some(path) => {
            let size = std::fs::metadata(path)
                .map_err(|e| Usage(format!("--input {raw}: {e}")))?
                .len();
            if size > limit as u64 {
                return Err(too_big(size as usize, limit));
            }
            std::fs::read_to_string(path).map_err(|e| Usage(format!("--input {raw}: {e}")))?
        }
        None => raw.to_string(),
    };
    if text.len() > limit {
        return Err(too_big(text.len(), limit));
    }
    let v: Value = weir_core::json::from_str(&text)
        .map_err(|e| Usage(format!("--input is not valid JSON: {e}")))?;
    if !v.is_object() {
        return Err(Usage("--input must be a JSON object".into()).into());
    }
    Ok(v)
}

fn too_big(size: usize, limit: usize) -> anyhow::Error {
    Usage(format!(
        "--input is {size} bytes; the limit is {limit} ([limits] input_bytes in weir.toml)"
    ))
    .into()
}

/// An engine printing progress (unless `--json`), stopped by Ctrl-C: the first one
/// interrupts the drive (in-flight steps recorded cancelled, the run released), a second one
/// exits at once.
fn engine(env: &Env, services: Services, as_json: bool) -> Engine {
    let mut eng = Engine::new(services, Arc::new(Progress::new(!as_json)));
    eng.lease = wiring::lease_timing(&env.settings);
    eng.limits = env.settings.limits.clone();
    let notify = Arc::new(tokio::sync::Notify::new());
    eng.interrupt = Some(notify.clone());
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            eprintln!("interrupted: stopping the run's steps (Ctrl-C again to quit at once)");
            notify.notify_one();
            if tokio::signal::ctrl_c().await.is_ok() {
                std::process::exit(130);
            }
        }
    });
    eng
}

/// Drives a claimed run, stops what the tools started (MCP servers) either way, and prints
/// the outcome.
async fn drive(
    env: &Env,
    eng: &Engine,
    wf: Arc<Workflow>,
    lease: Lease,
    as_json: bool,
) -> Result<u8> {
    let r = eng.drive(wf, lease).await;
    report(env, eng, r, as_json).await
}

async fn report(
    env: &Env,
    eng: &Engine,
    r: Result<RunOutcome, weir_engine::Error>,
    as_json: bool,
) -> Result<u8> {
    eng.shutdown_tools().await;
    let outcome = r?;
    if outcome.status == RunStatus::Queued {
        let id = output::short(&outcome.run_id);
        let db = hint(env);
        eprintln!("run {id} interrupted; its in-flight steps were recorded cancelled");
        eprintln!("  continue it: weir resume {id}{}", db.0);
        eprintln!("  end it:      weir cancel {id}{}", db.1);
        return Ok(exit::INTERRUPTED);
    }
    let record = eng.store().get_record(&outcome.run_id).await?;
    // An ended run's trace goes to the OTLP endpoint when one is configured.
    weir_runtime::otel::export(&record).await;
    output::finish(&record, as_json, &hint(env))
}

pub fn hint(env: &Env) -> Hint {
    Hint(env.hint(), env.db_hint())
}

pub async fn run(env: &Env, args: RunArgs) -> Result<u8> {
    let (file, input, as_json) = (args.file.as_str(), args.input.as_deref(), args.json);
    let text = validate::read(file)?;
    let input = parse_input(input, env.settings.limits.input_bytes)?;
    let wf = match validate::compile(env, file, &text) {
        Ok(v) => {
            for d in &v.warnings {
                eprint!("{}", d.render(Some(&text)));
            }
            v.workflow
        }
        Err(diags) => {
            for d in &diags {
                eprint!("{}", d.render(Some(&text)));
            }
            eprintln!("{file}: invalid workflow, not run");
            if as_json {
                let (errors, warnings): (Vec<_>, Vec<_>) = diags.iter().partition(|d| d.is_error());
                let body = serde_json::json!({"error": {
                    "code": "invalid_workflow",
                    "message": format!("{file}: invalid workflow, not run"),
                    "errors": errors,
                    "warnings": warnings,
                }});
                println!("{body}");
            }
            return Ok(exit::INVALID);
        }
    };
    let services = wiring::services(env, wiring::Open::CreateIfMissing, Some(file)).await?;
    let eng = engine(env, services, as_json);
    let source = Source {
        path: file.to_string(),
        text: text.into(),
        pin: None,
    };
    let r = eng.start(wf, source, input).await;
    report(env, &eng, r, as_json).await
}

/// Compiles the exact workflow version a stored run pins.
fn stored_workflow(env: &Env, run: &weir_core::store::StoredRun) -> Result<Arc<Workflow>> {
    match validate::compile(env, &run.source_path, &run.source_text) {
        Ok(v) => Ok(v.workflow),
        Err(diags) => {
            for d in &diags {
                eprint!("{}", d.render(Some(&run.source_text)));
            }
            Err(Usage(format!(
                "the workflow stored with run {} ({}) no longer compiles with these settings",
                run.run_id, run.source_path
            ))
            .into())
        }
    }
}

/// `weir approve`.
pub async fn approve(env: &Env, a: ApproveArgs) -> Result<u8> {
    let input = a.input.as_deref();
    decide(
        env,
        &a.run_id,
        a.gate.as_deref(),
        true,
        input,
        a.comment,
        a.by,
        a.json,
    )
    .await
}

/// `weir reject`.
pub async fn reject(env: &Env, r: RejectArgs) -> Result<u8> {
    decide(
        env,
        &r.run_id,
        r.gate.as_deref(),
        false,
        None,
        r.reason,
        r.by,
        r.json,
    )
    .await
}

#[allow(clippy::too_many_arguments)]
async fn decide(
    env: &Env,
    run_id: &str,
    gate: Option<&str>,
    approved: bool,
    input: Option<&str>,
    comment: Option<String>,
    by: Option<String>,
    as_json: bool,
) -> Result<u8> {
    let input = input
        .map(|i| parse_input(Some(i), env.settings.limits.input_bytes))
        .transpose()?;
    let store = wiring::store(env, wiring::Open::MustExist).await?;
    let run_id = &wiring::resolve_run(env, store.as_ref(), run_id).await?;
    let stored = store.load_run(run_id).await?;
    // A rejection says why; asked for on a terminal, else required as --reason.
    let comment = match comment {
        None if !approved && stored.status == RunStatus::Paused => Some(ask_reason(run_id)?),
        c => c,
    };
    let services = wiring::services_on(env, store, Some(&stored.source_path))?;
    let eng = engine(env, services, as_json);
    let wf = stored_workflow(env, &stored)?;
    let by = by
        .or_else(|| std::env::var("USER").ok())
        .unwrap_or_else(|| "cli".into());
    let decided = eng
        .decide(
            wf.clone(),
            run_id,
            gate,
            Decision {
                approved,
                by,
                input,
                comment,
            },
        )
        .await?;
    if decided.status != RunStatus::Queued {
        // Rejected, or approved with another gate still waiting: nothing to drive.
        return report(env, &eng, Ok(outcome_of(&eng, run_id).await?), as_json).await;
    }
    let lease = eng.claim(run_id).await?;
    drive(env, &eng, wf, lease, as_json).await
}

/// The reason for a rejection, read from the terminal; without one, a usage error.
fn ask_reason(run_id: &str) -> Result<String> {
    use std::io::{BufRead, IsTerminal, Write};
    let needed = || {
        Usage(format!(
            "a rejection needs a reason: weir reject {} --reason TEXT",
            output::short(run_id)
        ))
    };
    if !std::io::stdin().is_terminal() || !std::io::stderr().is_terminal() {
        return Err(needed().into());
    }
    eprint!("reason for rejecting: ");
    let _ = std::io::stderr().flush();
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line)?;
    let reason = line.trim();
    if reason.is_empty() {
        return Err(needed().into());
    }
    Ok(reason.to_string())
}

async fn outcome_of(eng: &Engine, run_id: &str) -> Result<RunOutcome> {
    let r = eng.store().get_record(run_id).await?;
    Ok(RunOutcome {
        run_id: r.run_id,
        status: r.status,
        error: r.error,
        output: r.output.into(),
        cost_usd: r.cost_usd,
    })
}

pub async fn resume(env: &Env, run_id: &str, as_json: bool) -> Result<u8> {
    let store = wiring::store(env, wiring::Open::MustExist).await?;
    let run_id = &wiring::resolve_run(env, store.as_ref(), run_id).await?;
    let stored = store.load_run(run_id).await?;
    let services = wiring::services_on(env, store, Some(&stored.source_path))?;
    let eng = engine(env, services, as_json);
    let wf = stored_workflow(env, &stored)?;
    let lease = eng.claim(run_id).await?;
    drive(env, &eng, wf, lease, as_json).await
}

pub async fn cancel(env: &Env, run_id: &str, by: Option<String>) -> Result<u8> {
    let services = wiring::services(env, wiring::Open::MustExist, None).await?;
    let run_id = &wiring::resolve_run(env, services.store.as_ref(), run_id).await?;
    let eng = Engine::new(services, Arc::new(Progress::new(false)));
    let id = output::short(run_id);
    let by = by
        .or_else(|| std::env::var("USER").ok())
        .unwrap_or_else(|| "cli".into());
    match eng.cancel(run_id, &by).await? {
        CancelOutcome::Cancelled => {
            println!("run {id} cancelled");
            Ok(0)
        }
        CancelOutcome::Requested => {
            let owner = eng.store().load_run(run_id).await?.owner;
            eprintln!(
                "run {id} is being driven by {}; asked it to stop",
                owner.as_deref().unwrap_or("another process")
            );
            // The driver sees the request at its next heartbeat or commit.
            let timing = wiring::lease_timing(&env.settings);
            let deadline = tokio::time::Instant::now() + timing.ttl + Duration::from_secs(5);
            while tokio::time::Instant::now() < deadline {
                let s = eng.store().load_run(run_id).await?.status;
                if s.is_terminal() {
                    println!("run {id} {}", s.as_str());
                    return Ok(0);
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            println!(
                "run {id}: cancel requested; its driver has not stopped yet (see `weir runs show {id}{}`)",
                hint(env).0
            );
            Ok(0)
        }
    }
}
