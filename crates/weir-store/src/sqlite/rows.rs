//! Rows: events and steps as the SQLite store writes them, and the
//! fenced writes of a drive handed to the writer thread.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Mutex;

use weir_core::record::StepRecord;
use weir_core::store::{StoreError, Written};

use super::drive::{self, EndRow, FencedWrite, StepRow};
use super::{Sqlite, running};
use crate::json;
use crate::rules::{DriveWrite, End};

pub(super) fn step_row(s: &StepRecord) -> Result<StepRow, StoreError> {
    Ok(StepRow {
        seq: i64::from(s.seq),
        node_id: s.node_id.clone(),
        node_type: s.node_type.clone(),
        visit: i64::from(s.visit),
        status: s.status.as_str(),
        route: s.route.clone(),
        input: json(&s.input)?,
        output: json(&s.output)?,
        error: s.error.clone(),
        cost_usd: s.cost_usd,
        tokens_in: s.tokens.input as i64,
        tokens_out: s.tokens.output as i64,
        started_at: s.started_at.to_string(),
        finished_at: s.finished_at.as_ref().map(ToString::to_string),
        duration_ms: s.duration_ms.map(|d| d as i64),
        attempts: crate::attempts::to_json(&s.attempts, crate::attempts::output_text(&s.output))?,
    })
}

/// What a write's steps change in the run's `running` column: the steps it writes whole
/// leave it, the ones that only started join it. `None` without steps.
fn running_change(steps: &[&StepRecord]) -> Result<Option<(String, String)>, StoreError> {
    if steps.is_empty() {
        return Ok(None);
    }
    let (mut done, mut add) = (String::new(), String::new());
    for s in steps {
        if running::is_start(s) {
            running::push_line(&mut add, s)?;
        } else {
            if !done.is_empty() {
                done.push(',');
            }
            let _ = write!(done, "{}", s.seq);
        }
    }
    Ok(Some((done, add)))
}

impl Sqlite {
    /// Serializes one write of a drive and runs it on the writer thread.
    pub(super) async fn fenced(&self, w: DriveWrite<'_>) -> Result<Written, StoreError> {
        let at = weir_core::store::Stamp::now();
        let (patch, clear) = crate::rules::snapshot_write(
            w.snapshot.is_some(),
            w.patch,
            w.clear,
            !w.events.is_empty(),
        );
        let ends = w.end.is_some();
        let write = FencedWrite {
            run_id: w.lease.run_id.clone(),
            seen: self.keys.known(&w.lease.run_id),
            epoch: w.lease.epoch as i64,
            owner: w.lease.owner.clone(),
            write: w.write,
            visible: w.visible,
            snapshot: match patch {
                Some(_) => None,
                None => w.snapshot.map(json).transpose()?,
            },
            patch: patch.map(json).transpose()?,
            cost_usd: w.snapshot.map(|s| s.cost_usd),
            clear,
            steps: w
                .steps
                .iter()
                .filter(|s| !running::is_start(s))
                .map(|s| step_row(s))
                .collect::<Result<_, _>>()?,
            running: running_change(&w.steps)?,
            event_count: w.events.len() as i64,
            events: crate::event_batch(&at, &w.events)?,
            end: match w.end {
                Some(End::Finish(u)) => Some(EndRow::Finish {
                    status: u.status.as_str(),
                    error: u.error.as_ref().map(json).transpose()?,
                    finished_at: u.finished_at.clone(),
                }),
                Some(End::Release) => Some(EndRow::Release),
                None => None,
            },
        };
        // Shared with the writer, which lets go of it before it answers: the rows are
        // freed here, on the drive's thread, not on the writer's (the group commit's
        // bottleneck under many concurrent runs).
        let write = std::sync::Arc::new(write);
        // A failed write rolled back: trying it again while the file is locked by another
        // process or the disk is full is safe.
        let done = crate::retry::retrying(w.write, || {
            let shared = write.clone();
            async {
                Ok(self
                    .writer
                    .grouped(!write.visible, move |c| drive::fenced(c, &shared))
                    .await?)
            }
        })
        .await??;
        drop(write);
        self.keys.learnt(&w.lease.run_id, done.seen, ends);
        Ok(Written {
            events: w.events,
            cancel_requested: done.cancel_requested,
        })
    }
}

/// The integer keys of the runs this process is driving, learnt from their first write, so
/// a drive's later writes find the run's row by its primary key instead of the text index
/// on `id` (the fence checks the id as well). Forgotten when the drive ends; bounded for
/// drives that stop without ending (a lost lease): at [`Keys::MAX`] entries it starts over.
#[derive(Default)]
pub struct Keys(Mutex<HashMap<String, drive::Seen>>);

impl Keys {
    const MAX: usize = 65_536;

    pub fn known(&self, run_id: &str) -> Option<drive::Seen> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(run_id)
            .copied()
    }

    /// A write of the drive of `run_id` left its row as `seen`; `ended`: the drive is over.
    pub fn learnt(&self, run_id: &str, seen: drive::Seen, ended: bool) {
        let mut keys = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if ended {
            keys.remove(run_id);
        } else if let Some(k) = keys.get_mut(run_id) {
            *k = seen;
        } else {
            if keys.len() >= Self::MAX {
                keys.clear();
            }
            keys.insert(run_id.to_string(), seen);
        }
    }
}
