//! What the CLI prints: live progress on stderr, summaries and tables on stdout, and exactly
//! one JSON object on stdout with `--json`.

use std::io::IsTerminal;

use anyhow::Result;
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use weir_core::event::EventKind;
use weir_core::record::{RunRecord, RunStatus, RunSummary, StepStatus};
use weir_engine::EventSink;

/// Live progress on stderr, from the run's event log as the store commits it: the run id
/// as soon as the run exists, a line per finished step, and each retry when it happens.
///
/// On a terminal (and not `TERM=dumb`) the running steps are a redrawn area below the
/// finished ones: one line per running step with its timer, and a footer with how many run,
/// the time since the run started and its cost so far. Piped, or with `TERM=dumb`, every
/// line is printed once, in order, without redrawing. `NO_COLOR` turns colours off.
pub struct Progress {
    steps: bool,
    color: bool,
    live: Option<Live>,
}

/// The redrawn area: a spinner line per running step and the footer.
struct Live {
    area: MultiProgress,
    footer: ProgressBar,
    state: std::sync::Mutex<LiveState>,
}

#[derive(Default)]
struct LiveState {
    /// Running steps by step number.
    running: std::collections::BTreeMap<u32, ProgressBar>,
    /// The reply a running step's model is writing, by step number: its last lines under
    /// the step's line.
    replies: std::collections::BTreeMap<u32, Writing>,
    cost_usd: f64,
    done: u32,
}

impl Progress {
    pub fn new(steps: bool) -> Self {
        let terminal = std::io::stderr().is_terminal();
        let dumb = std::env::var("TERM").is_ok_and(|t| t == "dumb");
        let live = (steps && terminal && !dumb).then(Live::new);
        Self {
            steps,
            color: terminal && !dumb && std::env::var_os("NO_COLOR").is_none(),
            live,
        }
    }

    fn paint(&self, code: &str, s: &str) -> String {
        if self.color {
            format!("\x1b[{code}m{s}\x1b[0m")
        } else {
            s.to_string()
        }
    }

    /// A line above the live area (or just on stderr).
    fn line(&self, text: &str) {
        match &self.live {
            Some(l) if !l.area.is_hidden() => {
                let _ = l.area.println(text);
            }
            _ => eprintln!("{text}"),
        }
    }

    #[expect(
        clippy::too_many_lines,
        reason = "one arm per event kind, each the line or two the terminal prints for it: a table read by the event's name"
    )]
    fn event(&self, run_id: &str, e: &EventKind) {
        match e {
            EventKind::RunCreated { .. } => self.line(&format!("run {run_id}")),
            EventKind::RunStarted { .. } | EventKind::RunResumed { .. } => {
                if let EventKind::RunResumed {
                    took_over_from: Some(from),
                    ..
                } = e
                    && self.steps
                {
                    self.line(&format!("  took over from {from}, whose lease expired"));
                }
                if let Some(l) = &self.live {
                    l.footer.reset_elapsed();
                    l.update_footer();
                }
            }
            EventKind::StepStarted {
                step,
                node_id,
                node_type,
                ..
            } if self.steps => {
                if let Some(l) = &self.live {
                    l.start(*step, &format!("{node_id} ({node_type})"));
                }
            }
            EventKind::AttemptFailed {
                node_id,
                error_class,
                backoff_ms,
                error,
                ..
            } if self.steps => {
                self.line(&format!(
                    "  {} {} {}, retry in {}: {}",
                    self.paint("33", "↻"),
                    node_id,
                    error_class,
                    fmt_wait(*backoff_ms),
                    error
                ));
            }
            EventKind::ModelFallback {
                node_id,
                model,
                error_class,
                next,
            } if self.steps => {
                self.line(&format!(
                    "  {} {node_id} {model} failed ({error_class}), fell back to {next}",
                    self.paint("33", "↪"),
                ));
            }
            EventKind::ModelFallbackBlocked {
                node_id,
                model,
                reason,
                ..
            } if self.steps => {
                self.line(&format!(
                    "  {} {} fallback `{model}` skipped: {reason}",
                    self.paint("33", "↷"),
                    node_id
                ));
            }
            EventKind::StepFinished {
                step,
                node_id,
                node_type,
                status,
                route,
                error,
                duration_ms,
                cost_usd,
                attempts,
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
                if let Some(e) = error {
                    line.push_str(&format!("\n      {}", self.paint("31", e)));
                }
                self.line(&line);
                if let Some(l) = &self.live {
                    l.finish(*step, *cost_usd);
                }
            }
            EventKind::CancelRequested { by } if self.steps => {
                self.line(&format!("  cancel requested by {by}"));
            }
            EventKind::RunFinished { .. }
            | EventKind::RunPaused { .. }
            | EventKind::RunReleased { .. } => {
                if let Some(l) = &self.live {
                    l.clear();
                }
            }
            _ => {}
        }
    }
}

/// A reply being written: the lines under its step, which reply of which attempt it is, and
/// its text so far (the end of it).
struct Writing {
    bar: ProgressBar,
    key: (u32, u32),
    text: String,
}

/// How many lines of a reply being written are shown.
const REPLY_LINES: usize = 3;

/// The last `lines` lines of `text` as a terminal `width` wide shows them, each indented.
fn tail(text: &str, width: usize, lines: usize) -> String {
    let width = width.saturating_sub(6).max(20);
    let mut rows: Vec<String> = Vec::new();
    for line in text.split('\n') {
        let chars: Vec<char> = line.chars().filter(|c| !c.is_control()).collect();
        if chars.is_empty() {
            rows.push(String::new());
        }
        for row in chars.chunks(width) {
            rows.push(row.iter().collect());
        }
    }
    while rows.last().is_some_and(String::is_empty) {
        rows.pop();
    }
    let from = rows.len().saturating_sub(lines);
    rows[from..]
        .iter()
        .map(|r| format!("    {r}"))
        .collect::<Vec<_>>()
        .join("\n")
}

impl Live {
    /// A piece of the reply a running step's model is writing.
    fn delta(&self, d: &weir_core::event::Delta<'_>, color: bool) {
        let mut st = self.state();
        let Some(step) = st.running.get(&d.step).cloned() else {
            return;
        };
        let area = &self.area;
        let w = st.replies.entry(d.step).or_insert_with(|| {
            let bar = area.insert_after(&step, ProgressBar::new_spinner());
            let template = if color { "{msg:.dim}" } else { "{msg}" };
            bar.set_style(ProgressStyle::with_template(template).expect("a valid template"));
            Writing {
                bar,
                key: (d.attempt, d.reply),
                text: String::new(),
            }
        });
        if w.key != (d.attempt, d.reply) {
            w.key = (d.attempt, d.reply);
            w.text.clear();
        }
        w.text.push_str(d.text);
        // Only the end is shown: keep a few screens of it.
        if w.text.len() > 16_384 {
            let mut cut = w.text.len() - 8_192;
            while !w.text.is_char_boundary(cut) {
                cut += 1;
            }
            w.text.drain(..cut);
        }
        let width = console::Term::stderr().size().1 as usize;
        w.bar.set_message(tail(&w.text, width, REPLY_LINES));
    }

    fn new() -> Self {
        let area = MultiProgress::with_draw_target(ProgressDrawTarget::stderr_with_hz(10));
        let footer = area.add(ProgressBar::new_spinner());
        footer.set_style(
            ProgressStyle::with_template("  {msg} · {secs}")
                .expect("a valid template")
                .with_key("secs", secs),
        );
        footer.enable_steady_tick(std::time::Duration::from_millis(200));
        let live = Self {
            area,
            footer,
            state: Default::default(),
        };
        live.update_footer();
        live
    }

    fn state(&self) -> std::sync::MutexGuard<'_, LiveState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn start(&self, step: u32, what: &str) {
        let bar = self
            .area
            .insert_before(&self.footer, ProgressBar::new_spinner());
        bar.set_style(
            ProgressStyle::with_template("  {spinner} {msg} {secs}")
                .expect("a valid template")
                .with_key("secs", secs)
                .tick_chars("⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏ "),
        );
        bar.set_message(what.to_string());
        bar.enable_steady_tick(std::time::Duration::from_millis(100));
        self.state().running.insert(step, bar);
        self.update_footer();
    }

    fn finish(&self, step: u32, cost_usd: f64) {
        {
            let mut st = self.state();
            if let Some(bar) = st.running.remove(&step) {
                bar.finish_and_clear();
                self.area.remove(&bar);
            }
            if let Some(w) = st.replies.remove(&step) {
                w.bar.finish_and_clear();
                self.area.remove(&w.bar);
            }
            st.cost_usd += cost_usd;
            st.done += 1;
        }
        self.update_footer();
    }

    fn update_footer(&self) {
        let st = self.state();
        self.footer.set_message(format!(
            "{} running · {} done · ${:.6}",
            st.running.len(),
            st.done,
            st.cost_usd
        ));
    }

    /// The run stopped (ended, paused, released): the area goes, the printed lines stay.
    fn clear(&self) {
        let mut st = self.state();
        for (_, bar) in std::mem::take(&mut st.running) {
            bar.finish_and_clear();
        }
        for (_, w) in std::mem::take(&mut st.replies) {
            w.bar.finish_and_clear();
        }
        self.footer.finish_and_clear();
        let _ = self.area.clear();
    }
}

/// A live timer in tenths of a second (`3.4 s`), minutes past a minute (`2m 05s`).
fn secs(state: &indicatif::ProgressState, w: &mut dyn std::fmt::Write) {
    let t = state.elapsed();
    let _ = if t.as_secs() >= 60 {
        write!(w, "{}m {:02}s", t.as_secs() / 60, t.as_secs() % 60)
    } else {
        write!(w, "{:.1} s", t.as_secs_f64())
    };
}

impl Drop for Live {
    fn drop(&mut self) {
        self.clear();
    }
}

impl EventSink for Progress {
    fn publish(&self, run_id: &str, events: &[EventKind]) {
        for e in events {
            self.event(run_id, e);
        }
    }

    /// Replies are shown as they are written on a terminal only.
    fn streams(&self) -> bool {
        self.live.is_some()
    }

    fn delta(&self, _run_id: &str, delta: &weir_core::event::Delta<'_>) {
        if let Some(l) = &self.live {
            l.delta(delta, self.color);
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

/// The flags a printed command needs, so it can be pasted as it is: for one that drives the
/// run (`Env::hint`: ` --db PATH`, ` --model NAME`), and for one that does not
/// (`Env::db_hint`: ` --db PATH`).
pub struct Hint(pub String, pub String);

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
        gate_hint(out, g, short(&r.run_id), db);
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

/// What a paused run waits for, and the commands that decide it.
fn gate_hint(out: &mut String, g: &weir_core::record::PendingGate, id: &str, db: &Hint) {
    use std::fmt::Write as _;
    match g.kind {
        weir_core::record::GateKind::ToolCall => {
            let _ = writeln!(
                out,
                "paused: agent `{}` waits for approval of a tool call\n  {}",
                g.node_id,
                g.prompt.replace('\n', "\n  ")
            );
            let _ = writeln!(
                out,
                "  approve: weir approve {id}{} [--input '{{\"arguments\": {{…}}}}']",
                db.0
            );
            let _ = writeln!(
                out,
                "  reject:  weir reject {id}{} --reason TEXT   (the model reads the reason)",
                db.1
            );
        }
        weir_core::record::GateKind::Budget => {
            let _ = writeln!(out, "paused at `{}` by a budget: {}", g.node_id, g.prompt);
            let what = g
                .detail
                .as_ref()
                .and_then(|d| d["limit"].as_str())
                .unwrap_or("usd");
            let _ = writeln!(
                out,
                "  raise:  weir approve {id}{} --input '{{\"raise\": {{\"{what}\": {}}}}}'",
                db.0,
                if what == "usd" { "1.0" } else { "10" }
            );
            let _ = writeln!(
                out,
                "  stop:   weir reject {id}{} --reason TEXT   (the run fails)",
                db.1
            );
        }
        weir_core::record::GateKind::Human => {
            let _ = writeln!(out, "paused at human gate `{}`: {}", g.node_id, g.prompt);
            let _ = writeln!(out, "  approve: weir approve {id}{} [--input JSON]", db.0);
            let _ = writeln!(out, "  reject:  weir reject {id}{} --reason TEXT", db.1);
        }
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
    let label = |r: &RunSummary| match &r.trigger.name {
        Some(name) => format!("{}:{name}", r.trigger.kind.as_str()),
        None => r.trigger.kind.as_str().to_string(),
    };
    let tw = runs
        .iter()
        .map(|r| label(r).chars().count())
        .max()
        .unwrap_or(7)
        .clamp(7, 28);
    println!(
        "{:<8}  {:<24}  {:<9}  {:<19}  {:<tw$}  {:>8}  {:>5}  {:>10}  ERROR",
        "RUN", "WORKFLOW", "STATUS", "STARTED", "TRIGGER", "DURATION", "STEPS", "COST"
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
            "{:<8}  {:<24}  {:<9}  {:<19}  {:<tw$}  {:>8}  {:>5}  {:>10}  {}",
            short(&r.run_id),
            fit(&r.workflow, 24),
            r.status.as_str(),
            started,
            fit(&label(r), tw),
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
