//! The changes to a run from outside a drive: creation, claims, decisions, cancels.

use async_trait::async_trait;
use sqlx::{PgConnection, Row};
use weir_core::event::EventKind;
use weir_core::record::{RunStatus, StepRecord};
use weir_core::store::{
    CancelOutcome, Claim, Created, GateDecision, Lease, Lifecycle, NewRun, StoreError, WakeFn,
    Written, now_ms,
};

use crate::rules::{self};
use crate::{backend, json};

use super::write::{StepArrays, bodies, insert_events, upsert_sql};

use super::notify;
use super::sql::{db_now, patches};
use super::store::{Postgres, in_tx, lost_source, not_found, snapshot_written};

#[expect(
    clippy::too_many_lines,
    reason = "create_run (an idempotent insert, optionally claimed, with its source and events) and request_cancel (rules::cancel_plan turned into its statements) are each one transaction whose statements read in order"
)]
#[async_trait]
impl Lifecycle for Postgres {
    fn watch(&self, on: WakeFn) -> bool {
        notify::listen(self.pool.clone(), on);
        true
    }

    async fn create_run(&self, run: NewRun) -> Result<Created, StoreError> {
        let now = now_ms();
        let at = weir_core::store::Stamp::now();
        let mut kinds = vec![EventKind::RunCreated {
            workflow: run.workflow.clone(),
        }];
        let lease = run.claim.as_ref().map(|c| Lease {
            run_id: run.run_id.clone(),
            owner: c.owner.clone(),
            epoch: 1,
            expires_at: now + c.ttl.as_millis() as i64,
        });
        if let Some(l) = &lease {
            kinds.push(EventKind::RunStarted {
                owner: l.owner.clone(),
                epoch: 1,
            });
        }
        let (trigger_kind, trigger_json) = crate::cols::trigger_cols(&run.trigger);
        let (input, snapshot, bodies) = (
            json(&run.input)?,
            json(&run.snapshot)?,
            bodies(&at, &kinds)?,
        );
        // The run names its workflow's source by key (migration 3): the text's row is
        // inserted, or found by its hash. A retention that deletes the text between the two
        // (no other run named it) makes the foreign key, or the key found, fail; the
        // statement, which changed nothing then, is run again and inserts the text anew.
        let mut tries = 0;
        let row = loop {
            tries += 1;
            let got = sqlx::query(concat!(
                "WITH ins AS (
                    INSERT INTO sources (hash, text) VALUES (sha256(convert_to($6, 'UTF8')), $6)
                    ON CONFLICT (hash) DO NOTHING RETURNING key
                ), s AS (
                    SELECT key FROM ins
                    UNION ALL
                    SELECT key FROM sources WHERE hash = sha256(convert_to($6, 'UTF8'))
                    LIMIT 1
                ), r AS (
                    INSERT INTO runs (id, workflow, dialect, status, source_path, source_key,
                                      input, snapshot, started_at, idempotency_key, workflow_id,
                                      workflow_version, epoch, owner, event_seq, trigger_kind,
                                      trigger_json)
                    VALUES ($1, $2, $3, $4, $5, (SELECT key FROM s), $7, $8, $9, $10, $11, $12,
                            $13, $14, $15, $19, $20)
                    ON CONFLICT DO NOTHING RETURNING id
                ), q AS (
                    INSERT INTO queue (run_id, visible_at, leased, epoch)
                    SELECT id, ",
                db_now!(),
                " + $16, $17, $13 FROM r
                ), e AS (
                    INSERT INTO run_events (run_id, seq, body)
                    SELECT r.id, x.k, x.body FROM r, unnest($18::text[]) WITH ORDINALITY AS x(body, k)
                )
                SELECT id FROM r"
            ))
            .bind(run.run_id.as_str())
            .bind(run.workflow.as_str())
            .bind(run.dialect.as_str())
            .bind(if lease.is_some() { "running" } else { "queued" })
            .bind(run.source_path.as_str())
            .bind(&*run.source_text)
            .bind(input.as_str())
            .bind(snapshot.as_str())
            .bind(run.created_at.as_str())
            .bind(run.idempotency_key.as_deref())
            .bind(run.pin.as_ref().map(|p| p.workflow_id.as_str()))
            .bind(run.pin.as_ref().map(|p| i64::from(p.version)))
            .bind(i64::from(lease.is_some()))
            .bind(lease.as_ref().map(|l| l.owner.as_str()))
            .bind(kinds.len() as i64)
            .bind(run.claim.as_ref().map_or(0, |c| c.ttl.as_millis() as i64))
            .bind(lease.is_some())
            .bind(&bodies)
            .bind(trigger_kind)
            .bind(trigger_json.as_str())
            .fetch_optional(&self.pool)
            .await;
            match got {
                Err(e) if tries < 5 && lost_source(&e) => continue,
                got => break got.map_err(backend)?,
            }
        };
        if row.is_none() {
            if let Some(key) = &run.idempotency_key
                && let Some(r) = sqlx::query("SELECT id FROM runs WHERE idempotency_key = $1")
                    .bind(key.as_str())
                    .fetch_optional(&self.pool)
                    .await
                    .map_err(backend)?
            {
                return Ok(Created {
                    run_id: r.get(0),
                    created: false,
                    lease: None,
                    events: Vec::new(),
                });
            }
            return Err(StoreError::Conflict(format!(
                "run {} already exists",
                run.run_id
            )));
        }
        if lease.is_none() {
            self.notes.work();
        }
        self.notes.run(&run.run_id);
        Ok(Created {
            run_id: run.run_id.clone(),
            created: true,
            lease,
            events: kinds,
        })
    }

    async fn claim_run(&self, run_id: &str, claim: &Claim) -> Result<(Lease, Written), StoreError> {
        self.claim_named(run_id, claim).await
    }

    async fn claim_next(
        &self,
        claim: &Claim,
        limit: u32,
    ) -> Result<Vec<(Lease, Written)>, StoreError> {
        self.claim_batch(claim, limit).await
    }

    async fn decide(&self, d: &GateDecision) -> Result<Written, StoreError> {
        in_tx(&self.pool, async |tx: &mut PgConnection| {
            let n = d.events.len() as i64;
            let row = sqlx::query(
                "UPDATE runs SET epoch = epoch + 1, status = $1, error = $2, finished_at = $3,
                                 snapshot = $4, cost_usd = $5, event_seq = event_seq + $6
                 WHERE id = $7 AND status = 'paused' AND epoch = $8
                 RETURNING event_seq, epoch",
            )
            .bind(d.status.as_str())
            .bind(d.error.as_ref().map(json).transpose()?)
            .bind(d.finished_at.as_deref())
            .bind(json(&d.snapshot)?)
            .bind(d.snapshot.cost_usd)
            .bind(n)
            .bind(d.run_id.as_str())
            .bind(d.expect_epoch as i64)
            .fetch_optional(&mut *tx)
            .await
            .map_err(backend)?;
            if row.is_some() {
                snapshot_written(&mut *tx, &d.run_id).await?;
            }
            let Some(row) = row else {
                let cur = sqlx::query("SELECT status, epoch FROM runs WHERE id = $1")
                    .bind(d.run_id.as_str())
                    .fetch_optional(&mut *tx)
                    .await
                    .map_err(backend)?
                    .ok_or_else(|| not_found(&d.run_id))?;
                return Err(rules::decision_conflict(
                    &d.run_id,
                    crate::cols::status(&cur, "status"),
                    cur.get::<i64, _>("epoch") as u64,
                    d.expect_epoch,
                ));
            };
            self.faults.hit("decide", 1)?;
            let (last, epoch): (i64, i64) = (row.get(0), row.get(1));
            let mut steps: Vec<&StepRecord> = vec![&d.step];
            steps.extend(d.also.iter());
            StepArrays::of(&steps)?
                .bind(sqlx::query(upsert_sql()).bind(d.run_id.as_str()))
                .execute(&mut *tx)
                .await
                .map_err(backend)?;
            self.faults.hit("decide", 2)?;
            let at = weir_core::store::Stamp::now();
            insert_events(&mut *tx, &d.run_id, last - n + 1, &at, &d.events).await?;
            self.faults.hit("decide", 3)?;
            if d.status == RunStatus::Queued {
                sqlx::query(concat!(
                    "INSERT INTO queue (run_id, visible_at, leased, epoch) VALUES ($1, ",
                    db_now!(),
                    " + $2, FALSE, $3)
                     ON CONFLICT (run_id) DO UPDATE SET visible_at = EXCLUDED.visible_at,
                                                        leased = FALSE, epoch = EXCLUDED.epoch"
                ))
                .bind(d.run_id.as_str())
                .bind(0_i64)
                .bind(epoch)
                .execute(&mut *tx)
                .await
                .map_err(backend)?;
                self.faults.hit("decide", 4)?;
            }
            Ok(())
        })
        .await?;
        if d.status == RunStatus::Queued {
            self.notes.work();
        }
        self.notes.run(&d.run_id);
        Ok(Written {
            events: d.events.clone(),
            cancel_requested: false,
        })
    }

    async fn request_cancel(
        &self,
        run_id: &str,
        by: &str,
    ) -> Result<(CancelOutcome, Written), StoreError> {
        let out = in_tx(&self.pool, async |tx: &mut PgConnection| {
            let row = sqlx::query(concat!(
                "SELECT r.status, CASE WHEN q.leased THEN q.visible_at END AS lease,
                            r.cancel_requested, r.snapshot, ",
                db_now!(),
                " AS now, ",
                patches!(),
                "
                     FROM runs r LEFT JOIN queue q ON q.run_id = r.id WHERE r.id = $1
                     FOR UPDATE OF r"
            ))
            .bind(run_id)
            .fetch_optional(&mut *tx)
            .await
            .map_err(backend)?
            .ok_or_else(|| not_found(run_id))?;
            let plan = rules::cancel_plan(
                run_id,
                crate::cols::status(&row, "status"),
                row.get("lease"),
                row.get::<bool, _>("cancel_requested"),
                by,
                row.get("now"),
            )?;
            let now = match plan {
                rules::CancelPlan::Request(events) => {
                    if !events.is_empty() {
                        let seq: i64 = sqlx::query(
                            "UPDATE runs SET cancel_requested = TRUE, event_seq = event_seq + 1
                             WHERE id = $1 RETURNING event_seq",
                        )
                        .bind(run_id)
                        .fetch_one(&mut *tx)
                        .await
                        .map_err(backend)?
                        .get(0);
                        let at = weir_core::store::Stamp::now();
                        insert_events(&mut *tx, run_id, seq, &at, &events).await?;
                    }
                    return Ok((
                        CancelOutcome::Requested,
                        Written {
                            events,
                            cancel_requested: true,
                        },
                    ));
                }
                rules::CancelPlan::Now(now) => now,
            };
            let mut snapshot = crate::cols::snapshot(&row)?;
            now.snapshot(&mut snapshot);
            let last: i64 = sqlx::query(
                "UPDATE runs SET status = 'cancelled', error = $1, finished_at = $2, snapshot = $3,
                                 event_seq = event_seq + 2
                 WHERE id = $4 RETURNING event_seq",
            )
            .bind(json(&now.error)?)
            .bind(now.at.to_string())
            .bind(json(&snapshot)?)
            .bind(run_id)
            .fetch_one(&mut *tx)
            .await
            .map_err(backend)?
            .get(0);
            for (sql, bind) in [
                (
                    "UPDATE steps SET status = 'cancelled', error = $2, finished_at = $3
                     WHERE run_id = $1 AND status IN ('running', 'waiting')",
                    true,
                ),
                ("DELETE FROM queue WHERE run_id = $1", false),
            ] {
                let mut q = sqlx::query(sql).bind(run_id);
                if bind {
                    q = q.bind(now.step_error.as_str()).bind(now.at.to_string());
                }
                q.execute(&mut *tx).await.map_err(backend)?;
            }
            snapshot_written(&mut *tx, run_id).await?;
            insert_events(&mut *tx, run_id, last - 1, &now.at, &now.events).await?;
            Ok((
                CancelOutcome::Cancelled,
                Written {
                    events: now.events,
                    cancel_requested: true,
                },
            ))
        })
        .await?;
        self.notes.run(run_id);
        Ok(out)
    }
}
