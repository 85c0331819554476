//! What the CLI prints: live progress on stderr, summaries and tables on stdout, and exactly
//! one JSON object on stdout with `--json`.

use std::io::IsTerminal;

use anyhow::Result;
use weir_core::event::{EventKind, RunEvent};
use weir_core::record::{RunRecord, RunStatus, RunSummary, StepStatus};
use weir_engine::EventSink;

/// Live progress on stderr, from the run's event log as the store commits it: the run id
/// as soon as the run exists, a line per finished step, and each retry when it happens.
pub struct Progress {
    steps: bool,
    color: bool,
}

impl Progress {
    pub fn new(steps: bool) -> Self {
        Self {
            steps,
            color: std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none(),
        }
    }

    fn paint(&self, code: &str, s: &str) -> String {
        if self.color {
            format!("\x1b[{code}m{s}\x1b[0m")
        } else {
            s.to_string()
        }
    }

    fn event(&self, run_id: &str, e: &RunEvent) {
        match &e.kind {
            EventKind::RunCreated { .. } => eprintln!("run {run_id}"),
            EventKind::RunResumed {
                took_over_from: Some(from),
                ..
            } if self.steps => {
                eprintln!("  took over from {from}, whose lease expired");
            }
            EventKind::StepStarted {
                node_id, node_type, ..
            } if self.steps && std::io::stderr().is_terminal() => {
                eprintln!("  {} {} ({})", self.paint("2", "…"), node_id, node_type);
            }
            EventKind::AttemptFailed {
                node_id,
                error_class,
                backoff_ms,
                error,
                ..
            } if self.steps => {
                eprintln!(
                    "  {} {} {}, retry in {}: {}",
                    self.paint("33", "↻"),
                    node_id,
                    error_class,
                    fmt_wait(*backoff_ms),
                    error
                );
            }
            EventKind::StepFinished {
                node_id,
                node_type,
                status,
                route,
                error,
                duration_ms,
                cost_usd,
                attempts,
                ..
            } if self.steps => {
                let (mark, code) = match status {
                    StepStatus::Succeeded => ("✓", "32"),
                    StepStatus::Failed => ("✗", "31"),
                    StepStatus::Waiting => ("⏸", "33"),
                    StepStatus::Cancelled => ("⊘", "33"),
                    _ => ("·", "2"),
                };
                let mut line = format!(
                    "  {} {:<20} {:<10} {:<9} {:>8}  ${:.6}",
                    self.paint(code, mark),
                    node_id,
                    node_type,
                    status.as_str(),
                    fmt_ms(*duration_ms),
                    cost_usd
                );
                if let Some(r) = route {
                    line.push_str(&format!("  → {r}"));
                }
                if *attempts > 1 {
                    line.push_str(&format!("  ({attempts} attempts)"));
                }
                eprintln!("{line}");
                if let Some(e) = error {
                    eprintln!("      {}", self.paint("31", e));
                }
            }
            EventKind::CancelRequested { by } if self.steps => {
                eprintln!("  cancel requested by {by}");
            }
            _ => {}
        }
    }
}

impl EventSink for Progress {
    fn publish(&self, run_id: &str, events: &[RunEvent]) {
        for e in events {
            self.event(run_id, e);
        }
    }
}

/// A backoff: whole seconds as `1 s`, else like a duration.
fn fmt_wait(ms: u64) -> String {
    if ms >= 1000 && ms.is_multiple_of(1000) {
        format!("{} s", ms / 1000)
    } else {
        fmt_ms(ms)
    }
}

pub fn fmt_ms(ms: u64) -> String {
    if ms < 1000 {
        format!("{ms} ms")
    } else {
        format!("{:.1} s", ms as f64 / 1000.0)
    }
}

/// A run id as human output shows it: its first 8 characters, which every command taking a
/// run id accepts (a unique prefix; `--json` always has the whole id).
pub fn short(id: &str) -> &str {
    id.get(..8).unwrap_or(id)
}

/// Prints the outcome and returns the exit code for the run's status.
pub fn finish(record: &RunRecord, as_json: bool, db: &Hint) -> Result<u8> {
    if as_json {
        println!("{}", serde_json::to_string_pretty(record)?);
    } else {
        summary(record, db);
    }
    Ok(exit_code(record.status))
}

pub fn exit_code(status: RunStatus) -> u8 {
    match status {
        RunStatus::Succeeded => 0,
        RunStatus::Paused => 3,
        RunStatus::Aborted => 4,
        RunStatus::Queued | RunStatus::Running | RunStatus::Failed | RunStatus::Cancelled => 1,
    }
}

/// The flags a printed command needs (`Env::hint`: ` --db PATH`, ` --model NAME`), so it
/// can be pasted as it is.
pub struct Hint(pub String);

fn summary(r: &RunRecord, db: &Hint) {
    let mut out = String::new();
    summary_into(&mut out, r, db);
    print!("{out}");
}

/// How the run ended and why: status, time, steps and cost; the error; the gate it waits at
/// with the commands that decide it; the output.
pub fn summary_into(out: &mut String, r: &RunRecord, db: &Hint) {
    use std::fmt::Write as _;
    let took = r.duration_ms.map(fmt_ms).unwrap_or_default();
    let _ = writeln!(
        out,
        "run {} {} {}· {} step{} · ${:.6}",
        short(&r.run_id),
        r.status.as_str(),
        if took.is_empty() {
            String::new()
        } else {
            format!("in {took} ")
        },
        r.steps.len(),
        if r.steps.len() == 1 { "" } else { "s" },
        r.cost_usd
    );
    if let Some(e) = &r.error {
        let _ = writeln!(out, "error [{}]: {}", e.code, e.message);
    }
    if let Some(g) = &r.pending_gate {
        let _ = writeln!(out, "paused at human gate `{}`: {}", g.node_id, g.prompt);
        let id = short(&r.run_id);
        let _ = writeln!(out, "  approve: weir approve {id}{} [--input JSON]", db.0);
        let _ = writeln!(out, "  reject:  weir reject {id}{} --reason TEXT", db.0);
    }
    if r.status == RunStatus::Succeeded && !r.output.is_null() {
        let text = match &r.output {
            serde_json::Value::String(s) => s.clone(),
            other => serde_json::to_string(other).unwrap_or_default(),
        };
        let cut: String = text.chars().take(500).collect();
        let _ = writeln!(
            out,
            "output: {cut}{}",
            if text.chars().count() > 500 {
                "…"
            } else {
                ""
            }
        );
    }
}

/// `text` in at most `width` characters: cut with "…" when longer.
fn fit(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        text.to_string()
    } else {
        let mut cut: String = text.chars().take(width.saturating_sub(1)).collect();
        cut.push('…');
        cut
    }
}

/// A run's duration from its start and end times, or how long it has been going.
fn run_duration(started: &str, finished: Option<&str>) -> String {
    let at = |t: &str| chrono::DateTime::parse_from_rfc3339(t).ok();
    let end = match finished {
        Some(f) => at(f),
        None => Some(chrono::Utc::now().fixed_offset()),
    };
    match (at(started), end) {
        (Some(s), Some(e)) => fmt_ms((e - s).num_milliseconds().max(0) as u64),
        _ => "-".into(),
    }
}

pub fn runs_table(runs: &[RunSummary], maybe_more: bool) {
    if runs.is_empty() {
        println!("no runs yet");
        return;
    }
    println!(
        "{:<8}  {:<24}  {:<9}  {:<19}  {:>8}  {:>5}  {:>10}  ERROR",
        "RUN", "WORKFLOW", "STATUS", "STARTED", "DURATION", "STEPS", "COST"
    );
    for r in runs {
        let started = r
            .started_at
            .get(..19)
            .unwrap_or(&r.started_at)
            .replace('T', " ");
        let took = if r.status.is_terminal() || r.finished_at.is_some() {
            run_duration(&r.started_at, r.finished_at.as_deref())
        } else {
            format!("{}…", run_duration(&r.started_at, None))
        };
        println!(
            "{:<8}  {:<24}  {:<9}  {:<19}  {:>8}  {:>5}  {:>10}  {}",
            short(&r.run_id),
            fit(&r.workflow, 24),
            r.status.as_str(),
            started,
            took,
            r.steps,
            format!("${:.6}", r.cost_usd),
            r.error_code.as_deref().unwrap_or("")
        );
    }
    if maybe_more {
        println!("(the newest {}; --limit N shows more)", runs.len());
    }
}
