//! `weir runs list|show|prune`: reading recorded runs, and retention by hand.

use anyhow::Result;
use weir_core::record::RunStatus;
use weir_core::store::RunFilter;

use crate::cli::{ListArgs, PruneArgs, ShowArgs};
use crate::run::hint;
use crate::wiring::Env;
use crate::{Usage, output, trace, wiring};

impl ListArgs {
    fn filter(&self) -> Result<RunFilter> {
        let status = self
            .status
            .clone()
            .map(|s| {
                RunStatus::parse(&s).ok_or_else(|| {
                    Usage(format!(
                        "--status {s}: the statuses are queued, running, paused, succeeded, failed, aborted and cancelled"
                    ))
                })
            })
            .transpose()?;
        let since = self
            .since
            .clone()
            .map(|s| {
                if chrono::DateTime::parse_from_rfc3339(&s).is_ok() {
                    return Ok(s);
                }
                weir_core::settings::parse_age(&s)
                    .map(weir_runtime::retention::cutoff)
                    .map_err(|e| Usage(format!("--since {e}, or an RFC 3339 time")))
            })
            .transpose()?;
        let trigger = self
            .trigger
            .as_deref()
            .map(weir_core::record::RunTrigger::filter)
            .transpose()
            .map_err(|e| Usage(format!("--trigger: {e}")))?;
        Ok(RunFilter {
            limit: self.limit.max(1),
            status,
            workflow: self.workflow.clone(),
            since,
            trigger,
            ..RunFilter::default()
        })
    }
}

pub async fn list(env: &Env, args: ListArgs) -> Result<u8> {
    let filter = args.filter()?;
    let as_json = args.json;
    let services = match wiring::services(env, wiring::Open::MustExist, None).await {
        Ok(s) => s,
        // Nothing has run here yet: an empty list, and no database created for it.
        Err(e) if e.downcast_ref::<wiring::NoDatabase>().is_some() => {
            if as_json {
                println!("[]");
            } else {
                println!("no runs yet ({e})");
            }
            return Ok(0);
        }
        Err(e) => return Err(e),
    };
    let runs = services.store.list_runs(&filter).await?;
    if as_json {
        println!("{}", serde_json::to_string_pretty(&runs)?);
    } else {
        output::runs_table(&runs, runs.len() == filter.limit as usize);
    }
    Ok(0)
}

/// `weir runs show ID [STEP] [--full]`: the run as a readable trace (or its record with
/// `--json`; with a STEP, that step's records).
/// Exits like `run` would for the run's status (0 while it is still queued or running).
pub async fn show(env: &Env, args: ShowArgs) -> Result<u8> {
    let (step, full, as_json) = (args.step.as_deref(), args.full, args.json);
    let services = wiring::services(env, wiring::Open::MustExist, None).await?;
    let run_id = &wiring::resolve_run(env, services.store.as_ref(), &args.run_id).await?;
    let record = services.store.get_record(run_id).await?;
    let only = match step {
        Some(s) => Some(trace::select(&record, s).map_err(Usage)?),
        None => None,
    };
    if as_json {
        match &only {
            Some(steps) => println!("{}", serde_json::to_string_pretty(steps)?),
            None => println!("{}", serde_json::to_string_pretty(&record)?),
        }
    } else {
        let fold = trace::Fold { full };
        print!(
            "{}",
            trace::render(&record, &hint(env), only.as_deref(), fold)
        );
    }
    Ok(match record.status {
        RunStatus::Queued | RunStatus::Running => 0,
        s => output::exit_code(s),
    })
}

/// `weir runs prune --older-than AGE [--status S]...`: retention by hand.
pub async fn prune(env: &Env, args: PruneArgs) -> Result<u8> {
    let as_json = args.json;
    let age = weir_core::settings::parse_age(&args.older_than)
        .map_err(|e| Usage(format!("--older-than {e}")))?;
    let statuses = weir_runtime::retention::statuses(&args.status).map_err(Usage)?;
    let store = wiring::store(env, wiring::Open::MustExist).await?;
    let before = weir_runtime::retention::cutoff(age);
    let pruned = store.prune(&before, &statuses).await?;
    if as_json {
        println!(
            "{}",
            serde_json::json!({"pruned": pruned.len(), "before": before, "run_ids": pruned})
        );
    } else {
        println!(
            "pruned {} run{} that ended before {before}",
            pruned.len(),
            if pruned.len() == 1 { "" } else { "s" }
        );
    }
    Ok(0)
}
