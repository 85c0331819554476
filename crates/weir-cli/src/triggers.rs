//! `weir triggers list|fire|pause|resume`: the schedules of the workflows saved in the store.

use std::sync::Arc;

use anyhow::Result;
use weir_core::store::StoreError;
use weir_runtime::triggers::{TriggerError, TriggerView};
use weir_runtime::{Options, Runtime, StartError};

use crate::Usage;
use crate::cli::TriggersCommand;
use crate::wiring::{self, Env};

/// A runtime that drives nothing: it reads the catalog and creates runs for the workers of
/// `weir serve` and `weir worker` to drive.
async fn runtime(env: &Env) -> Result<Arc<Runtime>> {
    let options = Options {
        workers: 0,
        ..Options::default()
    };
    Ok(Runtime::new(wiring::serving(env).await?, options)
        .await
        .map_err(Usage)?)
}

fn error(e: TriggerError) -> anyhow::Error {
    match e {
        TriggerError::NotFound(m) => StoreError::NotFound(m).into(),
        TriggerError::Invalid(m) => Usage(m).into(),
        TriggerError::Store(e) => e.into(),
        TriggerError::Start(StartError::Compile(m)) => Usage(m).into(),
        TriggerError::Start(StartError::Engine(e)) => e.into(),
    }
}

pub async fn run(env: &Env, command: TriggersCommand) -> Result<u8> {
    match command {
        TriggersCommand::List { workflow, at, json } => {
            let now = at
                .map(|at| {
                    chrono::DateTime::parse_from_rfc3339(&at)
                        .map(|t| t.with_timezone(&chrono::Utc))
                        .map_err(|e| Usage(format!("--at {at}: not an RFC 3339 time ({e})")))
                })
                .transpose()?;
            let rt = runtime(env).await?;
            let list = rt.triggers(workflow.as_deref(), now).await.map_err(error)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&list)?);
            } else {
                table(&list);
            }
            Ok(0)
        }
        TriggersCommand::Fire {
            workflow,
            name,
            json,
        } => {
            let rt = runtime(env).await?;
            let created = rt.fire_trigger(&workflow, &name).await.map_err(error)?;
            if json {
                println!("{}", serde_json::json!({"run_id": created.run_id}));
            } else {
                println!("{}", created.run_id);
                eprintln!(
                    "trigger {name} of {workflow} started run {} (queued for `weir serve` or `weir worker`)",
                    created.run_id
                );
            }
            Ok(0)
        }
        TriggersCommand::Pause { workflow, name } => pause(env, &workflow, &name, true).await,
        TriggersCommand::Resume { workflow, name } => pause(env, &workflow, &name, false).await,
    }
}

async fn pause(env: &Env, workflow: &str, name: &str, paused: bool) -> Result<u8> {
    let rt = runtime(env).await?;
    let view = rt
        .pause_trigger(workflow, name, paused)
        .await
        .map_err(error)?;
    match view.next_local.first() {
        Some(next) => println!("{workflow}/{name}: {}; next fire {next}", view.state),
        None => println!("{workflow}/{name}: {}", view.state),
    }
    Ok(0)
}

fn table(list: &[TriggerView]) {
    if list.is_empty() {
        println!("no triggers (a saved workflow declares them under `triggers:`)");
        return;
    }
    let id = list
        .iter()
        .map(|t| t.workflow_id.len())
        .max()
        .unwrap_or(8)
        .max(8);
    let name = list.iter().map(|t| t.name.len()).max().unwrap_or(7).max(7);
    let when = list
        .iter()
        .map(|t| schedule(t).chars().count())
        .max()
        .unwrap_or(8)
        .max(8);
    println!(
        "{:<id$}  {:<name$}  {:<8}  {:<when$}  {:<25}  LAST RUN",
        "WORKFLOW", "TRIGGER", "STATE", "SCHEDULE", "NEXT"
    );
    for t in list {
        let last = t.last_run.as_ref().map_or_else(
            || "—".to_string(),
            |r| {
                format!(
                    "{} {}",
                    &r.run_id[..8.min(r.run_id.len())],
                    r.status.as_str()
                )
            },
        );
        println!(
            "{:<id$}  {:<name$}  {:<8}  {:<when$}  {:<25}  {last}",
            t.workflow_id,
            t.name,
            t.state,
            schedule(t),
            t.next_local.first().map_or("—", String::as_str),
        );
    }
}

fn schedule(t: &TriggerView) -> String {
    match (&t.cron, &t.timezone, &t.path) {
        (Some(cron), Some(zone), _) => format!("{cron} ({zone})"),
        (_, _, Some(path)) => format!(
            "POST {path} ({})",
            t.signature.as_deref().unwrap_or("webhook")
        ),
        _ => t.kind.clone(),
    }
}
