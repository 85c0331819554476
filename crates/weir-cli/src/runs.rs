//! `weir run`, `approve`, `reject`, `resume` and `runs list|show`.

use std::sync::Arc;

use anyhow::{Context, Result};
use serde_json::Value;
use weir_core::RunStore;
use weir_core::record::RunStatus;
use weir_engine::{Decision, Engine, Source};

use crate::output::{self, Progress};
use crate::wiring::Env;
use crate::{Usage, validate, wiring};

fn parse_input(raw: Option<&str>) -> Result<Value> {
    let Some(raw) = raw else {
        return Ok(Value::Object(Default::default()));
    };
    let text = match raw.strip_prefix('@') {
        Some(path) => {
            std::fs::read_to_string(path).map_err(|e| Usage(format!("--input {raw}: {e}")))?
        }
        None => raw.to_string(),
    };
    let v: Value = serde_json::from_str(&text)
        .map_err(|e| Usage(format!("--input is not valid JSON: {e}")))?;
    if !v.is_object() {
        return Err(Usage("--input must be a JSON object".into()).into());
    }
    Ok(v)
}

fn engine(services: weir_engine::Services, as_json: bool) -> Engine {
    Engine::new(services, Arc::new(Progress::new(!as_json)))
}

/// Runs an engine call, stops what the tools started (MCP servers) either way, and reads
/// back the run's record to print.
async fn finish<F>(
    services: &weir_engine::Services,
    f: F,
) -> Result<weir_core::RunRecord, weir_engine::Error>
where
    F: std::future::Future<Output = Result<weir_engine::RunOutcome, weir_engine::Error>>,
{
    let r = f.await;
    services.tools.shutdown().await;
    let outcome = r?;
    Ok(services.store.get_record(&outcome.run_id).await?)
}

pub async fn run(env: &Env, file: &str, input: Option<&str>, as_json: bool) -> Result<u8> {
    let text = validate::read(file)?;
    let input = parse_input(input)?;
    let (wf, diags) = validate::check(env, file, &text);
    for d in &diags {
        eprint!("{}", d.render(Some(&text)));
    }
    let Some(wf) = wf else {
        eprintln!("{file}: invalid workflow, not run");
        return Ok(crate::exit::INVALID);
    };
    let services = wiring::services(env).await?;
    let eng = engine(services.clone(), as_json);
    let source = Source {
        path: file.to_string(),
        text,
    };
    let record = finish(&services, eng.start(Arc::new(wf), source, input))
        .await
        .map_err(state_is_usage)?;
    output::finish(&record, as_json)
}

/// Reloads the exact workflow version a stored run started with.
async fn stored_workflow(store: &dyn RunStore, run_id: &str) -> Result<weir_core::Workflow> {
    let stored = store.load_run(run_id).await.map_err(|e| match e {
        weir_core::store::StoreError::NotFound(_) => {
            anyhow::Error::new(Usage(format!("no run with id {run_id}")))
        }
        other => other.into(),
    })?;
    let loaded = weir_dialects::load(&stored.source_path, &stored.source_text);
    loaded
        .valid()
        .with_context(|| format!("the workflow stored with run {run_id} no longer loads"))
}

pub async fn decide(
    env: &Env,
    run_id: &str,
    approved: bool,
    input: Option<&str>,
    comment: Option<String>,
    by: Option<String>,
    as_json: bool,
) -> Result<u8> {
    let input = input.map(|i| parse_input(Some(i))).transpose()?;
    let services = wiring::services(env).await?;
    let wf = stored_workflow(services.store.as_ref(), run_id).await?;
    let by = by
        .or_else(|| std::env::var("USER").ok())
        .unwrap_or_else(|| "cli".into());
    let eng = engine(services.clone(), as_json);
    let decision = Decision {
        approved,
        by,
        input,
        comment,
    };
    let record = finish(&services, eng.decide(Arc::new(wf), run_id, decision))
        .await
        .map_err(state_is_usage)?;
    output::finish(&record, as_json)
}

pub async fn resume(env: &Env, run_id: &str, as_json: bool) -> Result<u8> {
    let services = wiring::services(env).await?;
    let wf = stored_workflow(services.store.as_ref(), run_id).await?;
    let eng = engine(services.clone(), as_json);
    let record = finish(&services, eng.resume(Arc::new(wf), run_id))
        .await
        .map_err(state_is_usage)?;
    output::finish(&record, as_json)
}

fn state_is_usage(e: weir_engine::Error) -> anyhow::Error {
    match e {
        weir_engine::Error::State(m) => Usage(m).into(),
        other => other.into(),
    }
}

pub async fn list(env: &Env, limit: u32, as_json: bool) -> Result<u8> {
    let services = wiring::services(env).await?;
    let runs = services.store.list_runs(limit).await?;
    if as_json {
        println!("{}", serde_json::to_string_pretty(&runs)?);
    } else {
        output::runs_table(&runs);
    }
    Ok(0)
}

pub async fn show(env: &Env, run_id: &str, as_json: bool) -> Result<u8> {
    let services = wiring::services(env).await?;
    let record = services
        .store
        .get_record(run_id)
        .await
        .map_err(|e| match e {
            weir_core::store::StoreError::NotFound(_) => {
                anyhow::Error::new(Usage(format!("no run with id {run_id}")))
            }
            other => other.into(),
        })?;
    if as_json {
        println!("{}", serde_json::to_string_pretty(&record)?);
    } else {
        output::show(&record);
    }
    Ok(match record.status {
        RunStatus::Succeeded | RunStatus::Running | RunStatus::Queued => 0,
        _ => 0,
    })
}
