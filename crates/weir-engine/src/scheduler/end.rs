//! The end of a drive: what is still in flight recorded cancelled (or interrupted), and the
//! run's end (or its release, or its park at a gate) written once.

use std::sync::Arc;

use weir_core::event::EventKind;
use weir_core::ir::{EndStatus, NodeKind};
use weir_core::patch::Tracker;
use weir_core::record::{ErrorCode, RunError, RunStatus, StepRecord, StepStatus};
use weir_core::store::{RunUpdate, Stamp, StepCommit};

use super::{Ending, Run, finished_event};
use crate::{Error, RunOutcome, now};

impl Run<'_> {
    pub(super) async fn cancel_in_flight(&mut self) -> Result<(), Error> {
        if self.in_flight.is_empty() {
            return Ok(());
        }
        // What finished before is written first (the loop left nothing unwritten while steps
        // were in flight; this keeps it so).
        self.flush().await?;
        let interrupted = matches!(self.ending, Some(Ending::Interrupted));
        let reason = match &self.ending {
            Some(Ending::Failed(e)) => match &e.node_id {
                Some(n) => format!("cancelled: node `{n}` failed"),
                None => "cancelled: the run failed".into(),
            },
            Some(Ending::End(_)) => "cancelled: the run reached an end node".into(),
            Some(Ending::Cancelled) => "cancelled: the run was cancelled".into(),
            Some(Ending::Interrupted) => {
                "interrupted: the process driving the run was stopped; it runs again on resume"
                    .into()
            }
            None => "cancelled".into(),
        };
        let mut steps = Vec::with_capacity(self.in_flight.len());
        for (index, f) in std::mem::take(&mut self.in_flight).0 {
            let node_id = &self.wf.nodes[index].id;
            let mut step = *f.step;
            step.status = StepStatus::Cancelled;
            step.error = Some(reason.clone());
            step.finished_at = Some(Stamp::now());
            step.duration_ms = Some(f.started.elapsed().as_millis() as u64);
            // An interrupted step stays pending: it runs again when the run is resumed.
            if !interrupted
                && let Some(i) = self.snapshot.pending.iter().position(|p| **p == **node_id)
            {
                self.snapshot.pending.remove(i);
            }
            steps.push(step);
        }
        steps.sort_by_key(|s| s.seq);
        if let Some((first, rest)) = steps.split_first() {
            let events: Vec<EventKind> = steps.iter().map(finished_event).collect();
            let w = self
                .engine
                .services
                .store
                .commit_step(
                    &self.lease,
                    StepCommit {
                        step: first,
                        started: &rest.iter().collect::<Vec<_>>(),
                        snapshot: &self.snapshot,
                        patch: None,
                        covers_patches: self.stored.as_mut().is_some_and(Tracker::whole),
                        events,
                    },
                )
                .await?;
            self.written(w);
        }
        Ok(())
    }

    #[expect(
        clippy::too_many_lines,
        reason = "the end of a drive in order: final status, output, the last write, the events; every branch ends in the same one write"
    )]
    pub(super) async fn finalize(&mut self) -> Result<RunOutcome, Error> {
        let store = self.engine.services.store.clone();
        let (status, error) = match self.ending.take() {
            Some(Ending::Interrupted) => {
                // Released, not ended: the steps that finished are written on their own
                // first, as every step before them was.
                self.flush().await?;
                let w = store
                    .release(
                        &self.lease,
                        &self.snapshot,
                        vec![EventKind::RunReleased {
                            owner: self.lease.owner.clone(),
                            reason: "interrupted".into(),
                        }],
                    )
                    .await?;
                self.written(w);
                return Ok(RunOutcome {
                    run_id: self.lease.run_id.clone(),
                    status: RunStatus::Queued,
                    error: None,
                    output: weir_core::record::Output::clone(&self.snapshot.output),
                    cost_usd: self.snapshot.cost_usd,
                });
            }
            Some(Ending::Cancelled) => (
                RunStatus::Cancelled,
                Some(RunError {
                    code: ErrorCode::Cancelled,
                    message: "the run was cancelled".into(),
                    node_id: None,
                }),
            ),
            Some(Ending::Failed(e)) => (RunStatus::Failed, Some(e)),
            Some(Ending::End(EndStatus::Succeeded)) => (RunStatus::Succeeded, None),
            Some(Ending::End(EndStatus::Aborted)) => (RunStatus::Aborted, None),
            Some(Ending::End(EndStatus::Failed)) => (
                RunStatus::Failed,
                Some(RunError {
                    code: ErrorCode::EndFailed,
                    message: "the run reached an end node with status failed".into(),
                    node_id: self
                        .snapshot
                        .completed
                        .iter()
                        .rev()
                        .find(|n| {
                            matches!(self.wf.node(n).map(|n| &n.kind), Some(NodeKind::End(_)))
                        })
                        .map(ToString::to_string),
                }),
            ),
            None if !self.snapshot.gates.is_empty() => (RunStatus::Paused, None),
            None => (RunStatus::Succeeded, None),
        };
        if status.is_terminal() {
            self.snapshot.pending.clear();
            self.snapshot.gates.clear();
        }
        // The steps that finished last and are not written yet (nothing was in flight after
        // them) go in with the run's end, their events first.
        let mut events = std::mem::take(&mut self.events);
        let last = std::mem::take(&mut self.unsaved);
        self.started.clear();
        if status == RunStatus::Paused {
            events.extend(self.snapshot.gates.iter().map(|g| EventKind::RunPaused {
                node_id: g.node_id.clone(),
                prompt: g.prompt.clone(),
                kind: g.kind,
            }));
        } else {
            events.push(EventKind::RunFinished {
                status,
                error: error.clone(),
            });
        }
        let cost_usd = self.snapshot.cost_usd;
        let update = RunUpdate {
            status,
            error,
            finished_at: status.is_terminal().then(now),
            snapshot: std::mem::take(&mut self.snapshot),
        };
        let steps: Vec<&StepRecord> = last.iter().map(|s| &**s).collect();
        let w = store
            .finish_run(&self.lease, &steps, &update, events)
            .await?;
        // Before the output is taken below: the last step shares it.
        drop(steps);
        drop(last);
        self.written(w);
        // The last output is moved out of the snapshot when nothing else holds it (a store
        // that keeps records holds it in the last step's): no copy of it per run.
        let RunUpdate {
            error, snapshot, ..
        } = update;
        Ok(RunOutcome {
            run_id: self.lease.run_id.clone(),
            status,
            error,
            output: Arc::unwrap_or_clone(snapshot.output),
            cost_usd,
        })
    }

    /// What a drive's result becomes: a store failure that trying again cannot mend (a
    /// value too big for the database, a corrupt row) ends the run `failed` with
    /// `store_error` at once, in one more write that holds only the failure on top of the
    /// last commit, instead of leaving it `running` for drivers that would each fail the
    /// same way. A failure that may mend (the database busy or out of reach after the
    /// store's own retries) leaves the run as committed for the next driver, its message
    /// naming the run. Anything else is passed on.
    pub(crate) async fn after(
        &mut self,
        driven: Result<RunOutcome, Error>,
    ) -> Result<RunOutcome, Error> {
        let e = match driven {
            Err(Error::Store(e)) if !e.fault.transient() => e,
            Err(Error::Store(e)) => {
                return Err(Error::Store(
                    e.context(&format!("run {}", self.lease.run_id)),
                ));
            }
            other => return other,
        };
        let store = &self.engine.services.store;
        let committed = store.load_run(&self.lease.run_id).await?;
        let error = RunError {
            code: ErrorCode::StoreError,
            message: format!(
                "the store cannot write this run's next step ({}): {}; the run ended with what \
                 was committed before",
                e.fault.code(),
                e.message
            ),
            node_id: None,
        };
        let mut snapshot = committed.snapshot;
        snapshot.pending.clear();
        snapshot.gates.clear();
        let update = RunUpdate {
            status: RunStatus::Failed,
            error: Some(error.clone()),
            finished_at: Some(now()),
            snapshot,
        };
        // The steps that could not be written are recorded failed, without the values that
        // were too much for the store.
        let unwritten: Vec<StepRecord> = std::mem::take(&mut self.unsaved)
            .into_iter()
            .map(|s| StepRecord {
                status: StepStatus::Failed,
                input: serde_json::Value::Null,
                output: weir_core::record::no_output(),
                attempts: Vec::new(),
                error: Some(format!("not written: {}", e.message)),
                finished_at: Some(Stamp::now()),
                ..*s
            })
            .collect();
        let steps: Vec<&StepRecord> = unwritten.iter().collect();
        let events = vec![EventKind::RunFinished {
            status: RunStatus::Failed,
            error: Some(error.clone()),
        }];
        // The failure's own write: if the store refuses this one too, its error is the
        // drive's.
        let w = store
            .finish_run(&self.lease, &steps, &update, events)
            .await
            .map_err(|second| {
                tracing::error!(run_id = %self.lease.run_id, "{second} (after: {e})");
                Error::from(second)
            })?;
        self.written(w);
        Ok(RunOutcome {
            run_id: self.lease.run_id.clone(),
            status: RunStatus::Failed,
            error: Some(error),
            output: Arc::unwrap_or_clone(update.snapshot.output),
            cost_usd: update.snapshot.cost_usd,
        })
    }
}
