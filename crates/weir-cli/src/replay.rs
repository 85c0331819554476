//! `weir replay RUN_ID [--workflow FILE] [--json]`: drives a recorded run again, offline,
//! on its pinned workflow or a changed file, with every model call, tool call and script
//! answered from the record (`weir_engine::replay`), in a scratch in-memory store. Human
//! gates are decided as they were. Then step by step, matched by node and visit: the
//! prompts (a unified diff), the routes and the outputs that differ, the steps that ran in
//! only one of the two, and the calls the record could not answer. Exit 0 when nothing
//! differs, 1 otherwise.

use std::sync::Arc;

use anyhow::Result;
use serde::Serialize;
use serde_json::Value;
use weir_core::record::{Request, RunRecord, RunStatus, StepRecord};
use weir_dialects::Capabilities;
use weir_engine::replay::{NOT_RECORDED, Recording, ReplayModels, ReplayScripts, ReplayTools};
use weir_engine::{Decision, Engine, Quiet, Services, Source};

use crate::output::short;
use crate::wiring::{self, Env};
use crate::{Usage, exit};

/// Secrets in a replay: every name is declared and renders as a placeholder (tool params
/// are rendered, then answered from the record; the value never matters).
struct Placeholders;

impl weir_core::secrets::Secrets for Placeholders {
    fn secret(&self, _name: &str) -> Result<String, String> {
        Ok("[secret]".into())
    }
    fn is_declared(&self, _name: &str) -> bool {
        true
    }
    fn declared(&self) -> Vec<String> {
        Vec::new()
    }
}

/// One difference between the recorded run and its replay.
#[derive(Debug, Serialize)]
pub struct Difference {
    /// `prompt`, `route`, `output`, `status`, `only_recorded` (a step the replay did not
    /// run), `only_replayed` (a step the recording does not have) or `not_recorded` (a call
    /// the record could not answer).
    pub kind: &'static str,
    pub node_id: Option<String>,
    pub visit: Option<u32>,
    pub recorded: Value,
    pub replayed: Value,
    /// For a prompt: the unified diff, recorded → replayed.
    pub diff: Option<String>,
}

#[derive(Serialize)]
struct Report<'a> {
    run_id: &'a str,
    replay_run_id: &'a str,
    workflow: &'a str,
    /// The file replayed instead of the pinned workflow, when given.
    changed_workflow: Option<&'a str>,
    steps_compared: usize,
    identical: bool,
    differences: &'a [Difference],
}

#[expect(
    clippy::too_many_lines,
    reason = "the replay command in order: load the recorded run, pick the workflow, drive it with the recorded answers, compare, print; each stage reads the last"
)]
pub async fn run(env: &Env, args: crate::cli::ReplayArgs) -> Result<u8> {
    let (run_id, workflow, as_json) = (args.run_id.as_str(), args.workflow.as_deref(), args.json);
    let store = wiring::store(env, wiring::Open::MustExist).await?;
    let run_id = wiring::resolve_run(env, store.as_ref(), run_id).await?;
    let recorded = store.get_record(&run_id).await?;
    let stored = store.load_run(&run_id).await?;
    if matches!(recorded.status, RunStatus::Queued | RunStatus::Running) {
        return Err(Usage(format!(
            "run {} is {}: replay a run once it has stopped (ended or paused)",
            short(&run_id),
            recorded.status.as_str()
        ))
        .into());
    }
    let (path, text) = match workflow {
        Some(f) => (f.to_string(), crate::validate::read(f)?),
        None => (stored.source_path.clone(), stored.source_text.clone()),
    };
    let recording = Recording::new(&recorded);
    let models = ReplayModels(recording.clone());
    let tools = ReplayTools(recording.clone());
    let wf = match weir_dialects::compile(
        &path,
        &text,
        &Capabilities {
            tools: &tools,
            models: &models,
            secrets: &Placeholders,
        },
    ) {
        Ok(v) => v.workflow,
        Err(diags) => {
            for d in &diags {
                eprint!("{}", d.render(Some(&text)));
            }
            return Err(Usage(format!("{path} does not compile; nothing was replayed")).into());
        }
    };
    let mut eng = Engine::new(
        Services {
            models: Arc::new(models),
            tools: Arc::new(tools),
            scripts: Arc::new(ReplayScripts(recording.clone())),
            store: Arc::new(weir_store::Memory::new()),
            secrets: Arc::new(Placeholders),
        },
        Arc::new(Quiet),
    );
    eng.replay = true;
    eng.limits.input_bytes = usize::MAX;
    let source = Source {
        path: path.clone(),
        text: text.into(),
        pin: None,
    };
    let outcome = eng.start(wf.clone(), source, stored.input.clone()).await?;
    // Gates decided in the recording are decided the same way, visit by visit.
    let outcome = through_gates(&eng, &wf, outcome, |gate, visit| {
        let decided = recorded
            .steps
            .iter()
            .find(|s| &*s.node_id == gate && s.visit == visit)
            .filter(|s| s.output.get("approved").is_some())?;
        let o = &decided.output;
        let approved = o["approved"] == true;
        Some(Decision {
            approved,
            by: o["by"].as_str().unwrap_or("replay").to_string(),
            input: o.get("input").cloned(),
            comment: o
                .get(if approved { "comment" } else { "reason" })
                .and_then(Value::as_str)
                .map(str::to_string),
        })
    })
    .await?;
    let replayed = eng.store().get_record(&outcome.run_id).await?;
    let differences = compare(&recorded, &replayed);
    let report = Report {
        run_id: &run_id,
        replay_run_id: &replayed.run_id,
        workflow: &recorded.workflow,
        changed_workflow: workflow,
        steps_compared: recorded.steps.len().max(replayed.steps.len()),
        identical: differences.is_empty(),
        differences: &differences,
    };
    if as_json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", render(&report, &recorded, &replayed));
    }
    Ok(if differences.is_empty() {
        0
    } else {
        exit::FAILED
    })
}

/// Drives a run on through its human gates: each gate it parks at (node id, visit) is
/// decided by `decide`, and the run driven again, until it ends, or parks at a gate `decide`
/// has no decision for (returned paused).
pub async fn through_gates(
    eng: &Engine,
    wf: &Arc<weir_core::Workflow>,
    mut outcome: weir_engine::RunOutcome,
    mut decide: impl FnMut(&str, u32) -> Option<Decision>,
) -> Result<weir_engine::RunOutcome> {
    while outcome.status == RunStatus::Paused {
        let record = eng.store().get_record(&outcome.run_id).await?;
        let Some(gate) = record.pending_gate.as_ref() else {
            break;
        };
        let visit = record
            .steps
            .iter()
            .find(|s| s.seq == gate.seq)
            .map_or(1, |s| s.visit);
        let Some(decision) = decide(&gate.node_id, visit) else {
            break;
        };
        let d = eng
            .decide(wf.clone(), &outcome.run_id, Some(&gate.node_id), decision)
            .await?;
        if d.status != RunStatus::Queued {
            break;
        }
        let lease = eng.claim(&outcome.run_id).await?;
        outcome = eng.drive(wf.clone(), lease).await?;
    }
    Ok(outcome)
}

/// Every difference, in the recorded run's step order, then the replay's extra steps.
#[expect(
    clippy::too_many_lines,
    reason = "one comparison per field of a step a replay can change (route, output, status, error, calls), in the order a reader checks them"
)]
pub fn compare(recorded: &RunRecord, replayed: &RunRecord) -> Vec<Difference> {
    let mut out = Vec::new();
    let find = |r: &'_ RunRecord, node: &str, visit: u32| -> Option<StepRecord> {
        r.steps
            .iter()
            .find(|s| &*s.node_id == node && s.visit == visit)
            .cloned()
    };
    for rec in &recorded.steps {
        let at = |kind, recorded: Value, replayed: Value, diff| Difference {
            kind,
            node_id: Some(String::from(&*rec.node_id)),
            visit: Some(rec.visit),
            recorded,
            replayed,
            diff,
        };
        let Some(rep) = find(replayed, &rec.node_id, rec.visit) else {
            out.push(at(
                "only_recorded",
                Value::from(rec.status.as_str()),
                Value::Null,
                None,
            ));
            continue;
        };
        // A call the record could not answer says so in the replayed attempt's error.
        if let Some(e) = rep
            .attempts
            .iter()
            .filter_map(|a| a.error.as_deref())
            .chain(rep.error.as_deref())
            .find(|e| e.contains(NOT_RECORDED))
        {
            out.push(at("not_recorded", Value::Null, Value::from(e), None));
            continue;
        }
        for (label, was, now) in prompts(rec)
            .into_iter()
            .zip(prompts(&rep))
            .filter_map(|((label, was), (_, now))| (was != now).then_some((label, was, now)))
        {
            let (a, b) = (format!("{was}\n"), format!("{now}\n"));
            let diff = similar::TextDiff::from_lines(&a, &b)
                .unified_diff()
                .context_radius(2)
                .header(&format!("recorded {label}"), &format!("replayed {label}"))
                .to_string();
            out.push(at("prompt", Value::from(was), Value::from(now), Some(diff)));
        }
        if rec.route != rep.route {
            out.push(at(
                "route",
                Value::from(rec.route.clone()),
                Value::from(rep.route.clone()),
                None,
            ));
        }
        let (was, now) = (comparable(rec), comparable(&rep));
        if was != now {
            out.push(at("output", was, now, None));
        }
    }
    for rep in &replayed.steps {
        if find(recorded, &rep.node_id, rep.visit).is_none() {
            // A step the recording never ran asks for calls it cannot answer: say that.
            let unanswered = rep.error.as_deref().filter(|e| e.contains(NOT_RECORDED));
            out.push(Difference {
                kind: if unanswered.is_some() {
                    "not_recorded"
                } else {
                    "only_replayed"
                },
                node_id: Some(String::from(&*rep.node_id)),
                visit: Some(rep.visit),
                recorded: Value::Null,
                replayed: unanswered.map_or_else(|| Value::from(rep.status.as_str()), Value::from),
                diff: None,
            });
        }
    }
    if recorded.status != replayed.status {
        out.push(Difference {
            kind: "status",
            node_id: None,
            visit: None,
            recorded: Value::from(recorded.status.as_str()),
            replayed: Value::from(replayed.status.as_str()),
            diff: None,
        });
    }
    out
}

/// What a step's first attempt asked, as text: a model call's system prompt and prompt, a
/// pipeline step's node prompts, a consensus question; labelled.
fn prompts(s: &StepRecord) -> Vec<(String, String)> {
    let Some(a) = s.attempts.first() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    match &a.request {
        Some(Request::Model(m)) => {
            out.push(("system prompt".into(), m.system.clone().unwrap_or_default()));
            out.push(("prompt".into(), m.user.clone()));
        }
        Some(Request::Other(v)) => {
            if v.get("user").is_some() || v.get("system").is_some() {
                out.push((
                    "system prompt".into(),
                    v["system"].as_str().unwrap_or_default().to_string(),
                ));
            }
            if let Some(u) = v["user"].as_str() {
                out.push(("prompt".into(), u.to_string()));
            }
            if let Some(nodes) = v["nodes"].as_array() {
                for (i, n) in nodes.iter().enumerate() {
                    let text = n
                        .as_str()
                        .map(str::to_string)
                        .or_else(|| n["user"].as_str().map(str::to_string))
                        .unwrap_or_else(|| n.to_string());
                    out.push((format!("prompt [{}]", i + 1), text));
                }
            }
        }
        None => {}
    }
    out
}

/// A step's output without what differs by construction between two runs: a gate's
/// decision time.
fn comparable(s: &StepRecord) -> Value {
    let mut v = Value::clone(&s.output);
    if s.node_type == "human_gate"
        && let Value::Object(m) = &mut v
    {
        m.remove("at");
    }
    v
}

fn render(r: &Report, recorded: &RunRecord, replayed: &RunRecord) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "replay of run {} ({}, {}) on {}",
        short(r.run_id),
        r.workflow,
        recorded.status.as_str(),
        r.changed_workflow
            .map_or("its recorded workflow".to_string(), ToString::to_string)
    );
    let differs = |s: &StepRecord| {
        r.differences
            .iter()
            .any(|d| d.node_id.as_deref() == Some(&s.node_id) && d.visit == Some(s.visit))
    };
    for s in &recorded.steps {
        let mark = if differs(s) { "✗" } else { "✓" };
        let _ = writeln!(out, "  {mark} {} (visit {})", s.node_id, s.visit);
        for d in r
            .differences
            .iter()
            .filter(|d| d.node_id.as_deref() == Some(&s.node_id) && d.visit == Some(s.visit))
        {
            write_difference(&mut out, d);
        }
    }
    let in_recording = |d: &Difference| {
        recorded
            .steps
            .iter()
            .any(|s| d.node_id.as_deref() == Some(&s.node_id) && d.visit == Some(s.visit))
    };
    for d in r
        .differences
        .iter()
        .filter(|d| d.node_id.is_some() && !in_recording(d))
    {
        let _ = writeln!(
            out,
            "  ✗ {} (visit {})",
            d.node_id.as_deref().unwrap_or("?"),
            d.visit.unwrap_or(0)
        );
        write_difference(&mut out, d);
    }
    for d in r.differences.iter().filter(|d| d.kind == "status") {
        write_difference(&mut out, d);
    }
    let n = r.differences.len();
    let _ = writeln!(
        out,
        "{}: {} step{} compared, {} difference{}; the replay {} (in memory, not stored)",
        if n == 0 { "identical" } else { "different" },
        r.steps_compared,
        if r.steps_compared == 1 { "" } else { "s" },
        n,
        if n == 1 { "" } else { "s" },
        replayed.status.as_str()
    );
    out
}

fn write_difference(out: &mut String, d: &Difference) {
    use std::fmt::Write as _;
    let show = |v: &Value| match v {
        Value::String(s) => s.clone(),
        Value::Null => "(none)".into(),
        other => other.to_string(),
    };
    match d.kind {
        "prompt" => {
            let _ = writeln!(out, "      prompt changed:");
            for l in d.diff.as_deref().unwrap_or_default().lines() {
                let _ = writeln!(out, "        {l}");
            }
        }
        "route" => {
            let _ = writeln!(
                out,
                "      route changed: recorded {}, replayed {}",
                show(&d.recorded),
                show(&d.replayed)
            );
        }
        "output" => {
            let _ = writeln!(out, "      output changed:");
            let _ = writeln!(out, "        recorded: {}", show(&d.recorded));
            let _ = writeln!(out, "        replayed: {}", show(&d.replayed));
        }
        "only_recorded" => {
            let _ = writeln!(
                out,
                "      ran in the recording ({}), not in the replay",
                show(&d.recorded)
            );
        }
        "only_replayed" => {
            let _ = writeln!(
                out,
                "      ran in the replay ({}), not in the recording",
                show(&d.replayed)
            );
        }
        "not_recorded" => {
            let _ = writeln!(out, "      {}", show(&d.replayed));
        }
        "status" => {
            let _ = writeln!(
                out,
                "  ✗ the run ended {} in the recording, {} in the replay",
                show(&d.recorded),
                show(&d.replayed)
            );
        }
        _ => {}
    }
}
