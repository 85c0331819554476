//! Claims: one named run (`weir resume`, `weir approve`'s drive), or a batch of the oldest
//! runnable runs (workers), with `FOR UPDATE SKIP LOCKED` so no claim waits on another.

use sqlx::{PgConnection, Row};
use weir_core::store::{Claim, Lease, StoreError, Written, now_ms};

use super::sql::db_now;
use super::store::{Postgres, in_tx, not_found};
use super::write::insert_events;
use crate::rules::{self, ClaimRow};
use crate::{Body, backend, json};

impl Postgres {
    pub(super) async fn claim_named(
        &self,
        run_id: &str,
        claim: &Claim,
    ) -> Result<(Lease, Written), StoreError> {
        let out = in_tx(&self.pool, async |tx: &mut PgConnection| {
            let r = sqlx::query(concat!(
                "SELECT r.status, r.epoch, r.owner, CASE WHEN q.leased THEN q.visible_at END AS lease, ",
                db_now!(),
                " AS now FROM runs r LEFT JOIN queue q ON q.run_id = r.id WHERE r.id = $1 FOR UPDATE OF r"
            ))
            .bind(run_id)
            .fetch_optional(&mut *tx)
            .await
            .map_err(backend)?
            .ok_or_else(|| not_found(run_id))?;
            let row = ClaimRow {
                id: run_id.to_string(),
                status: crate::cols::status(&r, "status"),
                epoch: r.get::<i64, _>("epoch") as u64,
                owner: r.get("owner"),
                lease_expires_at: r.get("lease"),
            };
            if let Some(refusal) = rules::claim_refusal(&row.view(), r.get("now")) {
                return Err(refusal);
            }
            self.faults.hit("claim", 0)?;
            let out = self.claim_one(&mut *tx, &row, claim).await?.ok_or_else(|| {
                StoreError::Conflict(format!("run {run_id} was claimed by someone else"))
            })?;
            Ok(out)
        })
        .await?;
        self.notes.run(run_id);
        Ok(out)
    }

    #[expect(
        clippy::too_many_lines,
        reason = "one statement's claim of a batch and the events of each claimed run, built from the rows it returns; the SQL is most of the length"
    )]
    pub(super) async fn claim_batch(
        &self,
        claim: &Claim,
        limit: u32,
    ) -> Result<Vec<(Lease, Written)>, StoreError> {
        let now = now_ms();
        let expires_at = now + claim.ttl.as_millis() as i64;
        let out = in_tx(&self.pool, async |tx: &mut PgConnection| {
            // Expired leases first (runs under way whose driver died: their successors should not
            // wait behind a backlog), then queued runs oldest first. Queue rows first, then their
            // runs, both skipping what others hold: a claim never waits on a lock, so it cannot
            // deadlock with a drive's write (runs, then queue).
            let rows = sqlx::query(concat!(
                "WITH now AS (SELECT ",
                db_now!(),
                " AS ms), expired AS (
                    SELECT run_id, 0 AS pri, visible_at, n FROM queue
                    WHERE leased AND visible_at <= (SELECT ms FROM now) + $1
                    ORDER BY visible_at LIMIT $2 FOR UPDATE SKIP LOCKED
                ), ready AS (
                    SELECT run_id, 1 AS pri, visible_at, n FROM queue
                    WHERE NOT leased AND visible_at <= (SELECT ms FROM now) + $1
                    ORDER BY visible_at, n LIMIT ($2 - (SELECT COUNT(*) FROM expired))
                    FOR UPDATE SKIP LOCKED
                ), picked AS (
                    SELECT * FROM expired UNION ALL SELECT * FROM ready
                ), old AS (
                    SELECT r.id, r.status, r.epoch, r.owner, p.pri, p.visible_at, p.n
                    FROM runs r JOIN picked p ON r.id = p.run_id
                    WHERE r.status IN ('queued', 'running') FOR UPDATE OF r SKIP LOCKED
                ), upd AS (
                    UPDATE runs r SET status = 'running', epoch = r.epoch + 1, owner = $3,
                                      event_seq = r.event_seq + 1
                    FROM old WHERE r.id = old.id
                    RETURNING r.id, r.epoch, r.event_seq, r.cancel_requested
                ), uq AS (
                    UPDATE queue q SET visible_at = (SELECT ms FROM now) + $4, leased = TRUE,
                                       epoch = upd.epoch
                    FROM upd WHERE q.run_id = upd.id
                )
                SELECT upd.id, upd.epoch, upd.event_seq, upd.cancel_requested, old.status,
                       old.owner, old.epoch AS old_epoch
                FROM upd JOIN old ON old.id = upd.id ORDER BY old.pri, old.visible_at, old.n"
            ))
            .bind(0_i64)
            .bind(i64::from(limit))
            .bind(claim.owner.as_str())
            .bind(claim.ttl.as_millis() as i64)
            .fetch_all(&mut *tx)
            .await
            .map_err(backend)?;
            if rows.is_empty() {
                return Ok(Vec::new());
            }
            self.faults.hit("claim", 1)?;
            let at = weir_core::store::Stamp::now();
            let mut out = Vec::with_capacity(rows.len());
            let (mut ids, mut seqs, mut bodies_) = (Vec::new(), Vec::new(), Vec::new());
            for r in &rows {
                let id: String = r.get("id");
                let was = ClaimRow {
                    id: id.clone(),
                    status: crate::cols::status(r, "status"),
                    epoch: r.get::<i64, _>("old_epoch") as u64,
                    owner: r.get("owner"),
                    lease_expires_at: None,
                };
                let epoch = r.get::<i64, _>("epoch") as u64;
                let kind = rules::claim_event(&was.view(), &claim.owner, epoch);
                let seq: i64 = r.get("event_seq");
                ids.push(id.clone());
                seqs.push(seq);
                bodies_.push(json(&Body {
                    at: &at,
                    kind: &kind,
                })?);
                out.push((
                    Lease {
                        run_id: id,
                        owner: claim.owner.clone(),
                        epoch,
                        expires_at,
                    },
                    Written {
                        events: vec![kind],
                        cancel_requested: r.get("cancel_requested"),
                    },
                ));
            }
            sqlx::query(
                "INSERT INTO run_events (run_id, seq, body)
                 SELECT * FROM unnest($1::text[], $2::int8[], $3::text[])",
            )
            .bind(ids)
            .bind(seqs)
            .bind(bodies_)
            .execute(&mut *tx)
            .await
            .map_err(backend)?;
            self.faults.hit("claim", 2)?;
            Ok(out)
        })
        .await?;
        for (l, _) in &out {
            self.notes.run(&l.run_id);
        }
        Ok(out)
    }

    /// Claims one run already checked claimable and locked, inside the caller's transaction.
    pub(super) async fn claim_one(
        &self,
        tx: &mut PgConnection,
        row: &ClaimRow,
        claim: &Claim,
    ) -> Result<Option<(Lease, Written)>, StoreError> {
        let epoch = row.epoch + 1;
        let kind = rules::claim_event(&row.view(), &claim.owner, epoch);
        let expires_at = now_ms() + claim.ttl.as_millis() as i64;
        let Some(r) = sqlx::query(
            "UPDATE runs SET status = 'running', epoch = $2, owner = $3, event_seq = event_seq + 1
             WHERE id = $1 AND epoch = $4 RETURNING event_seq, cancel_requested",
        )
        .bind(row.id.as_str())
        .bind(epoch as i64)
        .bind(claim.owner.as_str())
        .bind(row.epoch as i64)
        .fetch_optional(&mut *tx)
        .await
        .map_err(backend)?
        else {
            return Ok(None);
        };
        self.faults.hit("claim", 1)?;
        sqlx::query(concat!(
            "INSERT INTO queue (run_id, visible_at, leased, epoch) VALUES ($1, ",
            db_now!(),
            " + $2, TRUE, $3)
             ON CONFLICT (run_id) DO UPDATE SET visible_at = EXCLUDED.visible_at, leased = TRUE,
                                                epoch = EXCLUDED.epoch"
        ))
        .bind(row.id.as_str())
        .bind(claim.ttl.as_millis() as i64)
        .bind(epoch as i64)
        .execute(&mut *tx)
        .await
        .map_err(backend)?;
        self.faults.hit("claim", 2)?;
        let at = weir_core::store::Stamp::now();
        let seq: i64 = r.get(0);
        insert_events(tx, &row.id, seq, &at, std::slice::from_ref(&kind)).await?;
        Ok(Some((
            Lease {
                run_id: row.id.clone(),
                owner: claim.owner.clone(),
                epoch,
                expires_at,
            },
            Written {
                events: vec![kind],
                cancel_requested: r.get(1),
            },
        )))
    }
}
