//! `weir runs show ID [STEP]`: a run's record as a readable trace. On top, how the run ended
//! (and why); then per step, per attempt and per model call: model, provider, tokens, cost,
//! latency, error class, the prompt and the reply, validation errors and repairs; pipeline
//! passes with their pruned outputs, consensus votes, gate decisions. Long texts are folded
//! to one line unless `--full`; a STEP (its number or node id) is shown whole.

use std::fmt::Write as _;

use serde_json::Value;
use weir_core::record::{Attempt, Request, RunRecord, StepRecord, StepStatus};

use crate::output::{Hint, fmt_ms, short};

/// How much of a long text to print.
#[derive(Clone, Copy)]
pub struct Fold {
    pub full: bool,
}

/// Which steps a STEP argument names: `3` or `#3` is a step number, anything else a node id
/// (every visit of it). `Err` lists what the run has.
pub fn select<'r>(r: &'r RunRecord, step: &str) -> Result<Vec<&'r StepRecord>, String> {
    let want = step.strip_prefix('#').unwrap_or(step);
    let picked: Vec<&StepRecord> = match want.parse::<u32>() {
        Ok(n) => r.steps.iter().filter(|s| s.seq == n).collect(),
        Err(_) => r.steps.iter().filter(|s| &*s.node_id == want).collect(),
    };
    if picked.is_empty() {
        let mut nodes: Vec<&str> = Vec::new();
        for s in &r.steps {
            if !nodes.contains(&&*s.node_id) {
                nodes.push(&s.node_id);
            }
        }
        return Err(format!(
            "run {} has no step `{step}`: give a step number (1–{}) or one of its nodes: {}",
            short(&r.run_id),
            r.steps.len(),
            if nodes.is_empty() {
                "(no steps yet)".to_string()
            } else {
                nodes.join(", ")
            }
        ));
    }
    Ok(picked)
}

/// The whole trace as text.
pub fn render(r: &RunRecord, db: &Hint, only: Option<&[&StepRecord]>, fold: Fold) -> String {
    let mut out = String::new();
    crate::output::summary_into(&mut out, r, db);
    let _ = writeln!(
        out,
        "workflow {} ({}) · started {} · run id {}",
        r.workflow,
        r.dialect,
        r.started_at
            .get(..19)
            .unwrap_or(&r.started_at)
            .replace('T', " "),
        r.run_id
    );
    if weir_runtime::otel::enabled()
        && let Some(t) = weir_runtime::otel::trace_id(&r.run_id)
    {
        let _ = writeln!(
            out,
            "trace {t} (OpenTelemetry; exported once the run ended)"
        );
    }
    let decisions: Vec<&Value> = r
        .events
        .iter()
        .filter(|e| e["type"] == "gate_decided")
        .collect();
    match only {
        Some(steps) => {
            for s in steps {
                out.push('\n');
                step(&mut out, s, &decisions, Fold { full: true }, true);
            }
        }
        None => {
            for s in &r.steps {
                out.push('\n');
                step(&mut out, s, &decisions, fold, false);
            }
            let others: Vec<&Value> = r.events.iter().filter(|e| noteworthy(e)).collect();
            if !others.is_empty() {
                out.push_str("\nevents\n");
                for e in others {
                    let _ = writeln!(out, "  {}", event_line(e));
                }
            }
            if !fold.full && r.steps.iter().any(folds_something) {
                let _ = writeln!(
                    out,
                    "\n(long texts folded: --full shows them whole, `weir runs show {} STEP` one step)",
                    short(&r.run_id)
                );
            }
        }
    }
    out
}

/// Events the step lines do not already tell.
fn noteworthy(e: &Value) -> bool {
    !matches!(
        e["type"].as_str(),
        Some(
            "step_started"
                | "step_finished"
                | "run_created"
                | "run_started"
                | "attempt_failed"
                | "gate_decided"
                | "model_fallback"
                | "run_finished"
                | "run_paused"
        )
    )
}

fn event_line(e: &Value) -> String {
    let kind = e["type"].as_str().unwrap_or("event");
    let mut rest = serde_json::Map::new();
    if let Value::Object(m) = e {
        for (k, v) in m {
            if !matches!(k.as_str(), "type" | "seq" | "at" | "run_id") {
                rest.insert(k.clone(), v.clone());
            }
        }
    }
    let at = e["at"]
        .as_str()
        .and_then(|t| t.get(11..19))
        .unwrap_or_default();
    format!("{at} {kind} {}", Value::Object(rest))
        .trim_start()
        .to_string()
}

fn mark(s: StepStatus) -> &'static str {
    match s {
        StepStatus::Succeeded => "✓",
        StepStatus::Failed => "✗",
        StepStatus::Waiting => "⏸",
        StepStatus::Cancelled => "⊘",
        _ => "·",
    }
}

fn cost(c: f64) -> String {
    format!("${c:.6}")
}

fn step(out: &mut String, s: &StepRecord, decisions: &[&Value], fold: Fold, alone: bool) {
    let mut head = format!(
        "{} #{} {} · {} · {}",
        mark(s.status),
        s.seq,
        s.node_id,
        s.node_type,
        s.status.as_str()
    );
    if s.visit > 1 {
        let _ = write!(head, " · visit {}", s.visit);
    }
    if let Some(d) = s.duration_ms {
        let _ = write!(head, " · {}", fmt_ms(d));
    }
    if s.cost_usd > 0.0 || s.tokens.input + s.tokens.output > 0 {
        let _ = write!(
            head,
            " · {} · {} in / {} out",
            cost(s.cost_usd),
            s.tokens.input,
            s.tokens.output
        );
    }
    if let Some(r) = &s.route {
        let _ = write!(head, " · → {r}");
    }
    let _ = writeln!(out, "{head}");
    if alone {
        text(out, 2, "input", &compact(&s.input), fold);
    }
    let many = s.attempts.len() > 1;
    for a in &s.attempts {
        attempt(out, a, many, fold);
    }
    if let Some(e) = &s.error
        && s.attempts.iter().all(|a| a.error.as_deref() != Some(e))
    {
        whole(out, 2, "error", e);
    }
    special(out, s, decisions, fold);
    let worth_it = alone || (s.status == StepStatus::Succeeded && !has_special(s));
    if worth_it && !s.output.is_null() {
        text(out, 2, "output", &compact(&s.output), fold);
    }
}

fn attempt(out: &mut String, a: &Attempt, many: bool, fold: Fold) {
    let calls = &a.calls;
    // One attempt that ran nothing worth telling (an end node, a merge): no line.
    if !many && a.error.is_none() && calls.is_empty() && a.request.is_none() && a.response.is_none()
    {
        return;
    }
    // One attempt with one model call and no error: its call line says it all.
    if many || a.error.is_some() || calls.len() != 1 {
        let mut line = format!("  attempt {} · {}", a.n, a.status.as_str());
        if let Some(c) = &a.error_class {
            let _ = write!(line, " · {c}");
        }
        let _ = write!(line, " · {}", fmt_ms(a.duration_ms));
        if a.cost_usd > 0.0 {
            let _ = write!(line, " · {}", cost(a.cost_usd));
        }
        let _ = writeln!(out, "{line}");
    }
    let indent = if many || a.error.is_some() || calls.len() != 1 {
        4
    } else {
        2
    };
    let ask = match &a.request {
        Some(Request::Model(m)) => Some((m.system.as_deref(), m.user.as_str())),
        _ => None,
    };
    if let Some((system, user)) = ask {
        if let Some(sys) = system {
            text(out, indent, "system", sys, fold);
        }
        text(out, indent, "prompt", user, fold);
    } else if let Some(Request::Other(v)) = &a.request {
        request(out, indent, v, fold);
    }
    // An agent's tool-use loop: after each model turn that answered, the tool calls it asked.
    let mut turn = 0;
    for (i, c) in calls.iter().enumerate() {
        call(out, indent, c, i + 1 < calls.len(), fold);
        if c["status"].as_str() == Some("succeeded") {
            turn += 1;
            for t in a.tool_calls.iter().filter(|t| t.turn == turn) {
                tool_call(out, indent + 2, t, fold);
            }
        }
    }
    if let Some(e) = &a.error {
        whole(out, indent, "error", e);
    }
    if calls.is_empty()
        && let Some(reply) = &a.response
    {
        text(out, indent, "reply", reply, fold);
    }
}

/// One tool call of an agent's loop: `tool NAME ARGUMENTS · duration`, then what it gave
/// back, or its error.
fn tool_call(out: &mut String, indent: usize, t: &weir_core::record::ToolCallRecord, fold: Fold) {
    // A call that waited for a reviewer says who decided, and whether they changed it.
    let decided = t.approval.as_ref().map_or(String::new(), |a| {
        format!(
            " · {} by {}{}",
            if a["approved"] == false {
                "rejected"
            } else {
                "approved"
            },
            a["by"].as_str().unwrap_or("?"),
            if a.get("model_arguments").is_some() {
                " (arguments edited)"
            } else {
                ""
            }
        )
    });
    let _ = writeln!(
        out,
        "{:indent$}tool {} {} · {}{decided}",
        "",
        t.name,
        compact(&t.arguments),
        fmt_ms(t.duration_ms)
    );
    match (&t.result, &t.error) {
        (_, Some(e)) => whole(out, indent + 2, "error", e),
        (Some(r), None) => text(out, indent + 2, "result", &compact(r), fold),
        (None, None) => {}
    }
}

/// A non-model request: a tool call, a pipeline step's nodes, a consensus round, a script's
/// output streams.
fn request(out: &mut String, indent: usize, v: &Value, fold: Fold) {
    if let Some(tool) = v["tool"].as_str() {
        let _ = writeln!(out, "{:indent$}tool {tool}", "");
        return;
    }
    for (k, label) in [("stdout", "stdout"), ("stderr", "stderr")] {
        if let Some(t) = v[k].as_str()
            && !t.trim().is_empty()
        {
            text(out, indent, label, t, fold);
        }
    }
    if let Some(user) = v["user"].as_str() {
        if let Some(sys) = v["system"].as_str() {
            text(out, indent, "system", sys, fold);
        }
        if let Some(n) = v["agents"].as_u64() {
            let _ = writeln!(out, "{:indent$}asked {n} agents", "");
        }
        text(out, indent, "prompt", user, fold);
    }
    if let Some(nodes) = v["nodes"].as_array() {
        if let Some(sys) = v["system"].as_str() {
            text(out, indent, "system", sys, fold);
        }
        for (i, n) in nodes.iter().enumerate() {
            let prompt = n
                .as_str()
                .map(str::to_string)
                .or_else(|| n["user"].as_str().map(str::to_string))
                .unwrap_or_else(|| compact(n));
            text(out, indent, &format!("prompt [{}]", i + 1), &prompt, fold);
        }
    }
}

/// One model reached: `model via provider · tokens · cost · latency`, its error class, the
/// validation errors of a reply that did not match (a repair follows), and the reply.
fn call(out: &mut String, indent: usize, c: &Value, more: bool, fold: Fold) {
    let model = c["model"].as_str().unwrap_or("?");
    let provider = c["provider"].as_str().unwrap_or("?");
    let mut line = format!("{:indent$}model {model} via {provider}", "");
    let _ = write!(
        line,
        " · {} in / {} out",
        c["input_tokens"].as_u64().unwrap_or(0),
        c["output_tokens"].as_u64().unwrap_or(0)
    );
    match c["cost_usd"].as_f64() {
        Some(x) => {
            let _ = write!(line, " · {}", cost(x));
        }
        None => line.push_str(" · unpriced"),
    }
    let _ = write!(
        line,
        " · {}",
        fmt_ms(c["duration_ms"].as_u64().unwrap_or(0))
    );
    if c["carried_over"] == true {
        line.push_str(" · before the loop stopped (charged there)");
    }
    let failed = c["status"].as_str().is_some_and(|s| s != "succeeded");
    if failed {
        let _ = write!(
            line,
            " · {} {}",
            c["status"].as_str().unwrap_or("failed"),
            c["error_class"].as_str().unwrap_or("")
        );
        line = line.trim_end().to_string();
    }
    let _ = writeln!(out, "{line}");
    let inner = indent + 2;
    if let Some(e) = c["error"].as_str() {
        whole(out, inner, "error", e);
    }
    // A turn that only asked for tool calls has no text: its calls follow.
    if let Some(reply) = c["reply"].as_str()
        && !(reply.is_empty() && c["tool_uses"].as_array().is_some_and(|u| !u.is_empty()))
    {
        text(out, inner, "reply", reply, fold);
    }
    if let Some(errs) = c["validation_errors"].as_array() {
        let _ = writeln!(
            out,
            "{:inner$}reply did not validate{}:",
            "",
            if more { ", repair asked" } else { "" }
        );
        for e in errs {
            let e = e.as_str().map_or_else(|| compact(e), str::to_string);
            let _ = writeln!(out, "{:w$}- {e}", "", w = inner + 2);
        }
    } else if failed && more {
        let _ = writeln!(out, "{:inner$}next model tried (fallback)", "");
    }
}

fn has_special(s: &StepRecord) -> bool {
    let o = &*s.output;
    o.get("outputs").is_some_and(Value::is_array)
        || o.get("votes").is_some_and(Value::is_array)
        || s.node_type == "human_gate"
}

/// What a step's output says beyond its attempts: a pipeline pass, consensus votes, a gate.
#[expect(
    clippy::too_many_lines,
    reason = "one block per kind of step output a trace shows specially (a pipeline pass, consensus votes, a gate's decision)"
)]
fn special(out: &mut String, s: &StepRecord, decisions: &[&Value], fold: Fold) {
    let o = &*s.output;
    if let Some(outputs) = o.get("outputs").and_then(Value::as_array) {
        let pruned = outputs.iter().filter(|x| x["pruned"] == true).count();
        let mut line = format!(
            "  pass {} · {} output{}, {} pruned",
            o["pass"].as_u64().unwrap_or(1),
            outputs.len(),
            if outputs.len() == 1 { "" } else { "s" },
            pruned
        );
        if let Some(a) = o["action"].as_str() {
            let _ = write!(line, " · {a}");
        }
        let _ = writeln!(out, "{line}");
        for x in outputs {
            let label = format!(
                "[{}]{}",
                x["node"].as_u64().unwrap_or(0),
                if x["pruned"] == true { " pruned" } else { "" }
            );
            let t = x["text"]
                .as_str()
                .map_or_else(|| compact(&x["text"]), str::to_string);
            text(out, 4, &label, &t, fold);
        }
    }
    if let Some(votes) = o.get("votes").and_then(Value::as_array) {
        let _ = writeln!(
            out,
            "  consensus · {} vote{} · quorum {} of {} · {}",
            votes.len(),
            if votes.len() == 1 { "" } else { "s" },
            o["quorum"].as_u64().unwrap_or(0),
            o["agent_count"].as_u64().unwrap_or(votes.len() as u64),
            o["decision"].as_str().unwrap_or("?")
        );
        for (i, v) in votes.iter().enumerate() {
            let t = match v.get("answer") {
                Some(Value::String(a)) => a.clone(),
                Some(a) => compact(a),
                None => v.as_str().map_or_else(|| compact(v), str::to_string),
            };
            text(out, 4, &format!("vote {}", i + 1), &t, fold);
        }
        if let Some(a) = o.get("answer") {
            text(
                out,
                4,
                "answer",
                &a.as_str().map_or_else(|| compact(a), str::to_string),
                fold,
            );
        }
    }
    if s.node_type == "human_gate" {
        if let Some(p) = o["prompt"].as_str() {
            text(out, 2, "prompt", p, fold);
        }
        let decided: Vec<&&Value> = decisions
            .iter()
            .filter(|d| d["node_id"] == *s.node_id)
            .collect();
        if s.status == StepStatus::Waiting && decided.is_empty() {
            let _ = writeln!(out, "  waiting for a decision");
        }
        for d in decided {
            let mut line = format!(
                "  {} by {}",
                if d["approved"] == true {
                    "approved"
                } else {
                    "rejected"
                },
                d["by"].as_str().unwrap_or("?")
            );
            if let Some(t) = d["at"].as_str() {
                let _ = write!(line, " at {}", t.get(..19).unwrap_or(t).replace('T', " "));
            }
            let _ = writeln!(out, "{line}");
            if let Some(c) = d["comment"].as_str() {
                text(out, 4, "comment", c, fold);
            }
        }
    }
}

fn compact(v: &Value) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

/// Longest line printed for a folded text.
const FOLD_WIDTH: usize = 100;

fn folds(t: &str) -> bool {
    t.lines().count() > 1 || t.chars().count() > FOLD_WIDTH
}

fn folds_something(s: &StepRecord) -> bool {
    s.attempts.iter().any(|a| {
        a.calls
            .iter()
            .any(|c| c["reply"].as_str().is_some_and(folds))
            || match &a.request {
                Some(Request::Model(m)) => folds(&m.user) || m.system.as_deref().is_some_and(folds),
                _ => false,
            }
    }) || folds(&compact(&s.output))
}

/// `label: text`, never folded (errors: what went wrong is read whole).
fn whole(out: &mut String, indent: usize, label: &str, t: &str) {
    let mut lines = t.lines();
    let _ = writeln!(out, "{:indent$}{label}: {}", "", lines.next().unwrap_or(""));
    for l in lines {
        let _ = writeln!(out, "{:w$}{l}", "", w = indent + 2);
    }
}

/// `label: text`, folded to one line of at most [`FOLD_WIDTH`] characters with how much was
/// left out, or whole and indented under its label.
fn text(out: &mut String, indent: usize, label: &str, t: &str, fold: Fold) {
    let lines = t.lines().count().max(1);
    let chars = t.chars().count();
    if !folds(t) {
        let _ = writeln!(out, "{:indent$}{label}: {t}", "");
        return;
    }
    if fold.full {
        let _ = writeln!(out, "{:indent$}{label}:", "");
        for l in t.lines() {
            let _ = writeln!(out, "{:w$}{l}", "", w = indent + 2);
        }
        return;
    }
    let joined: String = t
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ↵ ");
    let mut cut: String = joined.chars().take(FOLD_WIDTH).collect();
    if joined.chars().count() > FOLD_WIDTH {
        cut.push('…');
    }
    let size = if lines > 1 {
        format!("{lines} lines, {chars} chars")
    } else {
        format!("{chars} chars")
    };
    let _ = writeln!(out, "{:indent$}{label}: {cut} ({size})", "");
}
