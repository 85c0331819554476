//! Schedules: the triggers that start runs of saved workflows at the ticks of a cron
//! expression, in every `weir serve` and `weir worker` process on a store.
//!
//! Each process checks every second, for the latest version of each saved workflow, which
//! ticks of its enabled, unpaused schedules are due, and creates their runs with the
//! idempotency key `schedule:{workflow}:{trigger}:{tick}`: whoever inserts first wins, so a
//! tick fires once however many processes see it, and a process that dies changes nothing
//! for the others. A process fires every tick that came while it was watching; when it
//! starts (or a trigger is resumed), only the most recent tick can fire (`catch_up:
//! latest`), or none that is not fresh (`catch_up: none`): downtime never makes a storm.
//! What is due is computed by [`due`], a pure function of the clock.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use serde::Serialize;
use weir_core::catalog::{TriggerState, WorkflowVersion};
use weir_core::ir::{CatchUp, Overlap, Schedule, Trigger, TriggerKind};
use weir_core::record::{RunStatus, RunTrigger, StartKind};
use weir_core::schedule::Cron;
use weir_core::store::RunFilter;
use weir_engine::CreateOptions;

use crate::{Runtime, StartError};

/// How old a tick may be and still count as on time for `catch_up: none` when a process
/// starts watching.
pub const FRESH: Duration = Duration::from_secs(5);

/// The most ticks one check fires for one trigger (a process that stalled for longer fires
/// the latest of them).
const BATCH: usize = 100;

/// How often each process looks for due ticks.
const EVERY: Duration = Duration::from_secs(1);

/// The ticks of `cron` due at `now`, in order. `after`: nothing at or before it fires (when
/// the trigger was saved, or resumed). `seen`: the last time this process looked, when it
/// has; every tick since then is due. Without it, only the latest tick at or before `now`
/// (for `catch_up: none`, only if it is at most [`FRESH`] old).
pub fn due(
    cron: &Cron,
    after: DateTime<Utc>,
    seen: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
    catch_up: CatchUp,
) -> Vec<DateTime<Utc>> {
    match seen {
        Some(seen) => {
            let mut ticks = std::collections::VecDeque::new();
            let mut at = seen.max(after);
            while let Some(next) = cron.next_after(at).filter(|t| *t <= now) {
                if ticks.len() == BATCH {
                    ticks.pop_front();
                }
                ticks.push_back(next);
                at = next;
            }
            ticks.into()
        }
        None => cron
            .last_at_or_before(now)
            .filter(|t| *t > after)
            .filter(|t| {
                catch_up == CatchUp::Latest || (now - *t).to_std().is_ok_and(|age| age <= FRESH)
            })
            .into_iter()
            .collect(),
    }
}

/// A tick as records and idempotency keys write it (`2026-12-08T09:00:00Z`).
pub fn tick_text(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// Where a webhook is served.
pub fn hook_path(workflow_id: &str, name: &str) -> String {
    format!("/hooks/{workflow_id}/{name}")
}

/// The idempotency key of a tick's run.
pub fn tick_key(workflow_id: &str, trigger: &str, tick: DateTime<Utc>) -> String {
    format!("schedule:{workflow_id}:{trigger}:{}", tick_text(tick))
}

fn parse_time(s: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(s)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

/// One trigger of a saved workflow as `weir triggers list` and the API show it.
#[derive(Debug, Clone, Serialize)]
pub struct TriggerView {
    /// The saved workflow.
    pub workflow_id: String,
    /// The version whose document declares it (the workflow's latest).
    pub version: u32,
    /// The trigger's name in the document.
    pub name: String,
    /// `schedule`.
    pub kind: String,
    /// `active`, `disabled` (`enabled: false` in the document) or `paused` (over the API
    /// or `weir triggers pause`).
    pub state: String,
    /// A schedule's cron expression.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cron: Option<String>,
    /// The zone the expression is read in.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timezone: Option<String>,
    /// What a tick does while the last run goes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub overlap: Option<Overlap>,
    /// What happens to ticks missed while nothing ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub catch_up: Option<CatchUp>,
    /// The next ticks (UTC), five of them; empty unless active.
    pub next: Vec<String>,
    /// The next ticks on the zone's wall clock.
    pub next_local: Vec<String>,
    /// A webhook's path on the server (`/hooks/{workflow}/{name}`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// A webhook's signature scheme.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
    /// The run this trigger started last.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_run: Option<LastRun>,
}

/// The last run a trigger started.
#[derive(Debug, Clone, Serialize)]
pub struct LastRun {
    /// The run.
    pub run_id: String,
    /// Its status now.
    pub status: RunStatus,
    /// When it was created.
    pub started_at: String,
    /// The tick it fired for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tick: Option<String>,
}

/// Why a trigger could not be fired, paused or shown.
#[derive(Debug)]
pub enum TriggerError {
    /// No such workflow, or no trigger of that name in its latest version.
    NotFound(String),
    /// The store is away, or the workflow does not compile.
    Start(StartError),
    /// The store refused.
    Store(weir_core::store::StoreError),
    /// The request makes no sense for this trigger (firing a webhook by hand).
    Invalid(String),
}

impl std::fmt::Display for TriggerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NotFound(m) | Self::Invalid(m) => f.write_str(m),
            Self::Start(e) => e.fmt(f),
            Self::Store(e) => e.fmt(f),
        }
    }
}

impl From<weir_core::store::StoreError> for TriggerError {
    fn from(e: weir_core::store::StoreError) -> Self {
        Self::Store(e)
    }
}

impl From<StartError> for TriggerError {
    fn from(e: StartError) -> Self {
        Self::Start(e)
    }
}

/// What one process remembers between checks: when it last looked at each schedule.
type Seen = HashMap<(String, String, String, String), DateTime<Utc>>;

impl Runtime {
    /// Checks for due ticks every second until `stop` turns true.
    pub fn start_schedules(
        self: &Arc<Self>,
        mut stop: tokio::sync::watch::Receiver<bool>,
    ) -> tokio::task::JoinHandle<()> {
        let rt = self.clone();
        tokio::spawn(async move {
            let mut seen = Seen::new();
            loop {
                if let Err(e) = rt.check_schedules(&mut seen, Utc::now()).await {
                    tracing::warn!("schedules: {e}");
                }
                tokio::select! {
                    () = tokio::time::sleep(EVERY) => {}
                    _ = stop.changed() => return,
                }
            }
        })
    }

    /// One check at `now`: fires the due ticks of every active schedule.
    async fn check_schedules(&self, seen: &mut Seen, now: DateTime<Utc>) -> Result<(), String> {
        let workflows = self.catalog.workflows().await.map_err(|e| e.to_string())?;
        let states = self.trigger_states(None).await.map_err(|e| e.to_string())?;
        let mut watching = Seen::new();
        for entry in workflows {
            let saved = entry.latest;
            // Most documents declare no triggers: they are not compiled for nothing.
            if !saved.source.contains("triggers") {
                continue;
            }
            let Ok(wf) = self.saved_workflow(&saved) else {
                continue;
            };
            for t in &wf.triggers {
                let TriggerKind::Schedule(s) = &t.kind else {
                    continue;
                };
                let state = states.get(&(saved.workflow_id.clone(), t.name.clone()));
                if !t.enabled || state.is_some_and(|s| s.paused) {
                    continue;
                }
                let Ok(cron) = Cron::parse(&s.cron, &s.timezone) else {
                    continue;
                };
                let key = (
                    saved.workflow_id.clone(),
                    t.name.clone(),
                    s.cron.clone(),
                    s.timezone.clone(),
                );
                let after = [
                    parse_time(&saved.created_at),
                    state.and_then(|s| parse_time(&s.updated_at)),
                ]
                .into_iter()
                .flatten()
                .max()
                .unwrap_or(now);
                let ticks = due(&cron, after, seen.get(&key).copied(), now, s.catch_up);
                let looked = self.fire_ticks(&saved, t, s, &ticks).await.unwrap_or(now);
                watching.insert(key, looked.min(now));
            }
        }
        // Schedules no longer active are forgotten: when one comes back, it catches up as
        // at a start.
        *seen = watching;
        Ok(())
    }

    /// Fires `ticks` in order under the trigger's overlap rule; returns how far it looked
    /// (`None`: all of them; a held tick under `overlap: queue` stops just before it).
    async fn fire_ticks(
        &self,
        saved: &WorkflowVersion,
        t: &Trigger,
        s: &Schedule,
        ticks: &[DateTime<Utc>],
    ) -> Option<DateTime<Utc>> {
        let ticks = match s.overlap {
            // Ticks that came while the last run went collapse into the newest.
            Overlap::Queue => &ticks[ticks.len().saturating_sub(1)..],
            _ => ticks,
        };
        for &tick in ticks {
            let last = match self
                .last_run(&saved.workflow_id, &t.name, StartKind::Schedule)
                .await
            {
                Ok(last) => last,
                Err(e) => {
                    tracing::warn!("schedule {}/{}: {e}", saved.workflow_id, t.name);
                    return Some(tick - chrono::Duration::milliseconds(1));
                }
            };
            let text = tick_text(tick);
            if last
                .as_ref()
                .and_then(|l| l.tick.as_deref())
                .is_some_and(|l| *l >= *text)
            {
                continue; // fired already, by this process or another
            }
            let running = last.as_ref().is_some_and(|l| !l.status.is_terminal());
            match s.overlap {
                Overlap::Skip if running => continue,
                Overlap::Queue if running => {
                    return Some(tick - chrono::Duration::milliseconds(1));
                }
                _ => {}
            }
            let opts = CreateOptions {
                idempotency_key: Some(tick_key(&saved.workflow_id, &t.name, tick)),
                claim: false,
                trigger: RunTrigger::schedule(&t.name, &text),
            };
            match self.start_saved(saved, s.input.clone(), opts, None).await {
                Ok(c) if c.created => tracing::info!(
                    "schedule {}/{}: tick {text} started run {}",
                    saved.workflow_id,
                    t.name,
                    c.run_id
                ),
                Ok(_) => {}
                Err(e) => tracing::warn!(
                    "schedule {}/{}: tick {text} could not start a run: {e}",
                    saved.workflow_id,
                    t.name
                ),
            }
        }
        None
    }

    /// The run a trigger of `kind` started last.
    pub async fn last_run(
        &self,
        workflow_id: &str,
        name: &str,
        kind: StartKind,
    ) -> Result<Option<LastRun>, weir_core::store::StoreError> {
        let runs = self
            .store
            .list_runs(&RunFilter {
                limit: 1,
                workflow: Some(workflow_id.to_string()),
                trigger: Some((kind, Some(name.to_string()))),
                ..RunFilter::default()
            })
            .await?;
        Ok(runs.into_iter().next().map(|r| LastRun {
            run_id: r.run_id,
            status: r.status,
            started_at: r.started_at,
            tick: r.trigger.tick,
        }))
    }

    async fn trigger_states(
        &self,
        workflow_id: Option<&str>,
    ) -> Result<HashMap<(String, String), TriggerState>, weir_core::store::StoreError> {
        Ok(self
            .catalog
            .trigger_states(workflow_id)
            .await?
            .into_iter()
            .map(|s| ((s.workflow_id.clone(), s.name.clone()), s))
            .collect())
    }

    /// The triggers of every saved workflow's latest version (or of one), with their
    /// state, next ticks after `at` (default: now) and last run.
    pub async fn triggers(
        &self,
        workflow_id: Option<&str>,
        at: Option<DateTime<Utc>>,
    ) -> Result<Vec<TriggerView>, TriggerError> {
        let now = at.unwrap_or_else(Utc::now);
        let entries = match workflow_id {
            Some(id) => vec![self.catalog.workflow(id).await?],
            None => self.catalog.workflows().await?,
        };
        let states = self.trigger_states(workflow_id).await?;
        let mut out = Vec::new();
        for entry in entries {
            let saved = entry.latest;
            let wf = match self.saved_workflow(&saved) {
                Ok(wf) => wf,
                Err(e) if workflow_id.is_some() => return Err(e.into()),
                Err(_) => continue,
            };
            for t in &wf.triggers {
                let paused = states
                    .get(&(saved.workflow_id.clone(), t.name.clone()))
                    .is_some_and(|s| s.paused);
                out.push(self.view(&saved, t, paused, now).await?);
            }
        }
        Ok(out)
    }

    async fn view(
        &self,
        saved: &WorkflowVersion,
        t: &Trigger,
        paused: bool,
        now: DateTime<Utc>,
    ) -> Result<TriggerView, TriggerError> {
        let state = match (t.enabled, paused) {
            (false, _) => "disabled",
            (true, true) => "paused",
            (true, false) => "active",
        };
        let mut view = TriggerView {
            workflow_id: saved.workflow_id.clone(),
            version: saved.version,
            name: t.name.clone(),
            kind: "schedule".into(),
            state: state.into(),
            cron: None,
            timezone: None,
            overlap: None,
            catch_up: None,
            next: Vec::new(),
            next_local: Vec::new(),
            path: None,
            signature: None,
            last_run: None,
        };
        match &t.kind {
            TriggerKind::Schedule(s) => {
                if let Ok(cron) = Cron::parse(&s.cron, &s.timezone)
                    && state == "active"
                {
                    let ticks = cron.upcoming(now, 5);
                    view.next = ticks.iter().map(|t| tick_text(*t)).collect();
                    view.next_local = ticks.iter().map(|t| cron.local(*t)).collect();
                }
                view.cron = Some(s.cron.clone());
                view.timezone = Some(s.timezone.clone());
                view.overlap = Some(s.overlap);
                view.catch_up = Some(s.catch_up);
                view.last_run = self
                    .last_run(&saved.workflow_id, &t.name, StartKind::Schedule)
                    .await?;
            }
            TriggerKind::Webhook(h) => {
                view.kind = "webhook".into();
                view.path = Some(hook_path(&saved.workflow_id, &t.name));
                view.signature = Some(h.signature.as_str().into());
                view.last_run = self
                    .last_run(&saved.workflow_id, &t.name, StartKind::Webhook)
                    .await?;
            }
        }
        Ok(view)
    }

    /// The trigger `name` of a saved workflow's latest version.
    async fn find_trigger(
        &self,
        workflow_id: &str,
        name: &str,
    ) -> Result<(WorkflowVersion, Trigger), TriggerError> {
        let saved = self.catalog.workflow(workflow_id).await?.latest;
        let wf = self.saved_workflow(&saved)?;
        let t = wf
            .triggers
            .iter()
            .find(|t| t.name == name)
            .cloned()
            .ok_or_else(|| {
                let names: Vec<&str> = wf.triggers.iter().map(|t| t.name.as_str()).collect();
                TriggerError::NotFound(if names.is_empty() {
                    format!("workflow {workflow_id} declares no triggers")
                } else {
                    format!(
                        "workflow {workflow_id} has no trigger named {name} (its triggers: {})",
                        names.join(", ")
                    )
                })
            })?;
        Ok((saved, t))
    }

    /// Fires a trigger now, whatever its state and overlap rule: a run with the trigger's
    /// input, recorded as started by it at this moment.
    pub async fn fire_trigger(
        &self,
        workflow_id: &str,
        name: &str,
    ) -> Result<weir_engine::CreatedRun, TriggerError> {
        let (saved, t) = self.find_trigger(workflow_id, name).await?;
        let TriggerKind::Schedule(s) = &t.kind else {
            return Err(TriggerError::Invalid(format!(
                "{name} is a webhook: it fires when a delivery comes to {}",
                hook_path(workflow_id, name)
            )));
        };
        let opts = CreateOptions {
            idempotency_key: None,
            claim: false,
            trigger: RunTrigger::schedule(&t.name, &tick_text(Utc::now())),
        };
        Ok(self
            .start_saved(&saved, s.input.clone(), opts, None)
            .await?)
    }

    /// Pauses or resumes a trigger; kept across the workflow's versions. A resumed
    /// schedule fires from the moment it is resumed (ticks missed while paused never do).
    pub async fn pause_trigger(
        &self,
        workflow_id: &str,
        name: &str,
        paused: bool,
    ) -> Result<TriggerView, TriggerError> {
        let (saved, t) = self.find_trigger(workflow_id, name).await?;
        self.catalog
            .pause_trigger(workflow_id, name, paused, &weir_engine::now())
            .await?;
        self.view(&saved, &t, paused, Utc::now()).await
    }

    /// An enabled, unpaused trigger `name` of a saved workflow's latest version, with
    /// that version and what is stored of it (a webhook's token hash): what a webhook
    /// delivery starts.
    pub async fn active_trigger(
        &self,
        workflow_id: &str,
        name: &str,
    ) -> Result<(WorkflowVersion, Trigger, Option<TriggerState>), TriggerError> {
        let (saved, t) = self.find_trigger(workflow_id, name).await?;
        let state = self
            .trigger_states(Some(workflow_id))
            .await?
            .remove(&(workflow_id.to_string(), name.to_string()));
        let paused = state.as_ref().is_some_and(|s| s.paused);
        if !t.enabled || paused {
            return Err(TriggerError::NotFound(format!(
                "trigger {name} of workflow {workflow_id} is {}",
                if paused { "paused" } else { "disabled" }
            )));
        }
        Ok((saved, t, state))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn utc(y: i32, mo: u32, d: u32, h: u32, mi: u32, s: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(y, mo, d, h, mi, s).unwrap()
    }

    #[test]
    fn a_watching_process_fires_every_tick_since_it_last_looked() {
        let cron = Cron::parse("* * * * * *", "UTC").unwrap();
        let t0 = utc(2026, 12, 8, 9, 0, 0);
        let ticks = due(
            &cron,
            t0,
            Some(t0),
            t0 + chrono::Duration::milliseconds(3500),
            CatchUp::None,
        );
        assert_eq!(
            ticks,
            vec![
                t0 + chrono::Duration::seconds(1),
                t0 + chrono::Duration::seconds(2),
                t0 + chrono::Duration::seconds(3)
            ]
        );
    }

    #[test]
    fn after_downtime_only_the_latest_tick_fires_and_none_if_catch_up_is_none() {
        let cron = Cron::parse("*/5 * * * *", "UTC").unwrap();
        let saved = utc(2026, 12, 1, 0, 0, 0);
        let now = utc(2026, 12, 8, 9, 7, 30);
        assert_eq!(
            due(&cron, saved, None, now, CatchUp::Latest),
            vec![utc(2026, 12, 8, 9, 5, 0)]
        );
        assert!(due(&cron, saved, None, now, CatchUp::None).is_empty());
        // On time: fresh enough even for `none`.
        let now = utc(2026, 12, 8, 9, 5, 2);
        assert_eq!(
            due(&cron, saved, None, now, CatchUp::None),
            vec![utc(2026, 12, 8, 9, 5, 0)]
        );
    }

    #[test]
    fn nothing_fires_for_a_tick_before_the_trigger_was_saved_or_resumed() {
        let cron = Cron::parse("0 9 * * *", "UTC").unwrap();
        let now = utc(2026, 12, 8, 10, 0, 0);
        assert!(
            due(
                &cron,
                utc(2026, 12, 8, 9, 30, 0),
                None,
                now,
                CatchUp::Latest
            )
            .is_empty()
        );
    }

    #[test]
    fn a_spring_forward_gap_fires_its_tick_once_after_the_gap() {
        // Europe/Paris, 2027-03-28: 02:00 local becomes 03:00 (01:00 UTC).
        let cron = Cron::parse("30 2 * * *", "Europe/Paris").unwrap();
        let seen = utc(2027, 3, 27, 12, 0, 0);
        let now = utc(2027, 3, 28, 12, 0, 0);
        let ticks = due(&cron, seen, Some(seen), now, CatchUp::Latest);
        assert_eq!(ticks, vec![utc(2027, 3, 28, 1, 0, 0)], "03:00 local, once");
        assert_eq!(cron.local(ticks[0]), "2027-03-28T03:00:00+02:00");
    }

    #[test]
    fn an_autumn_repeat_fires_its_tick_once() {
        // Europe/Paris, 2027-10-31: 03:00 local goes back to 02:00 (01:00 UTC).
        let cron = Cron::parse("30 2 * * *", "Europe/Paris").unwrap();
        let seen = utc(2027, 10, 30, 12, 0, 0);
        let now = utc(2027, 10, 31, 12, 0, 0);
        let ticks = due(&cron, seen, Some(seen), now, CatchUp::Latest);
        assert_eq!(
            ticks,
            vec![utc(2027, 10, 31, 0, 30, 0)],
            "the first 02:30 only"
        );
        // Every wall-clock time fires once, for intervals too: the repeated hour's second
        // pass fires nothing (02:00 to 02:45 local once, then 03:00).
        let cron = Cron::parse("*/15 * * * *", "Europe/Paris").unwrap();
        let (from, to) = (utc(2027, 10, 30, 23, 59, 0), utc(2027, 10, 31, 2, 0, 0));
        let got = due(&cron, from, Some(from), to, CatchUp::Latest);
        let local: Vec<String> = got.iter().map(|t| cron.local(*t)).collect();
        assert_eq!(
            local,
            [
                "2027-10-31T02:00:00+02:00",
                "2027-10-31T02:15:00+02:00",
                "2027-10-31T02:30:00+02:00",
                "2027-10-31T02:45:00+02:00",
                "2027-10-31T03:00:00+01:00",
            ]
        );
    }

    #[test]
    fn a_stalled_process_fires_at_most_a_batch() {
        let cron = Cron::parse("* * * * * *", "UTC").unwrap();
        let t0 = utc(2026, 12, 8, 9, 0, 0);
        let ticks = due(
            &cron,
            t0,
            Some(t0),
            t0 + chrono::Duration::hours(1),
            CatchUp::Latest,
        );
        assert_eq!(ticks.len(), BATCH);
        assert_eq!(ticks.last(), Some(&(t0 + chrono::Duration::hours(1))));
    }
}
