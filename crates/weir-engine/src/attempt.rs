//! The attempt policy (spec 002 "Retries, timeouts, and backoff"): each attempt runs under
//! the node's timeout; on error the engine sleeps 1 s, 2 s, 4 s … (capped at 30 s, or the
//! provider's `retry-after` when it sent one) and tries again, up to `retry_count` extra
//! times. Every attempt is recorded, with what its model calls cost.

use std::time::{Duration, Instant};

use weir_core::event::EventKind;
use weir_core::ir::AttemptPolicy;
use weir_core::record::{Attempt, StepStatus};

use crate::nodes::{self, Failure, NodeCtx, Outcome, Spent};

/// Longest `retry-after` the engine honours.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

pub struct Attempts {
    pub result: Result<Box<Outcome>, Failure>,
    pub attempts: Vec<Attempt>,
    /// Everything every attempt spent.
    pub spent: Spent,
}

/// An attempt's deadline: `timeout` after its start, or (a timeout too long to add) thirty
/// years on, as `tokio::time::timeout` does.
fn deadline(started: Instant, timeout: Duration) -> tokio::time::Instant {
    let started = tokio::time::Instant::from_std(started);
    started
        .checked_add(timeout)
        .unwrap_or_else(|| started + Duration::from_secs(86_400 * 365 * 30))
}

#[expect(
    clippy::too_many_lines,
    reason = "an attempt's whole life in order: deadline, call, classification, retry or fallback, recording; each step reads the last one's locals"
)]
pub async fn run(ctx: &NodeCtx) -> Attempts {
    let policy = ctx.node().policy;
    // Room for the one attempt most steps make, taken with the future rather than grown at
    // its first push.
    let mut attempts = Vec::with_capacity(1);
    let mut total = Spent::default();
    let mut n = 1;
    loop {
        // The first attempt starts when the step was launched: the clock was read then.
        let mut started = if n == 1 { ctx.launched } else { Instant::now() };
        ctx.attempt.store(n, std::sync::atomic::Ordering::Relaxed);
        ctx.replies.store(0, std::sync::atomic::Ordering::Relaxed);
        // The rare awaits (a lease to renew, a replay) are boxed: a future is as large as
        // all its awaits together, and the common one is moved at every launch.
        if let Some(lease) = &ctx.lease
            && !lease.fresh(started)
        {
            Box::pin(lease.still_held(ctx.services.store.as_ref())).await;
            started = Instant::now();
        }
        // A spent budget stops a node that calls models before it starts.
        if ctx.limits.is_some()
            && matches!(
                ctx.node().kind,
                weir_core::ir::NodeKind::Agent(_)
                    | weir_core::ir::NodeKind::Judge(_)
                    | weir_core::ir::NodeKind::Consensus(_)
                    | weir_core::ir::NodeKind::Step(_)
            )
            && let Some(e) = ctx.over_budget(&total, crate::budget::Next::Start)
        {
            let result = nodes::budget_stop(e, None, Spent::default()).map(Box::new);
            return Attempts {
                result,
                attempts,
                spent: total,
            };
        }
        // The attempt, and the retry's wait when it failed, in a block of their own: the
        // attempt's result is gone before the wait's await (a future keeps room for every
        // value alive across an await, and this one is moved at every launch).
        let wait = {
            // Replaying, the attempt runs with its call site set; a live drive pays nothing.
            let timed = if ctx.replay {
                let site = crate::replay::CallSite {
                    node_id: ctx.node().id.clone(),
                    visit: ctx.visit,
                    attempt: n,
                };
                Box::pin(tokio::time::timeout_at(
                    deadline(started, policy.timeout),
                    crate::replay::at(site, nodes::execute(ctx)),
                ))
                .await
            } else {
                tokio::time::timeout_at(deadline(started, policy.timeout), nodes::execute(ctx))
                    .await
            };
            let result = match timed {
                Ok(r) => r,
                Err(_) => Err(Failure {
                    message: format!("attempt timed out after {}", humanize(policy.timeout)),
                    class: "timeout".into(),
                    retryable: true,
                    retry_after: None,
                    request: None,
                    spent: None,
                }),
            };
            let duration_ms = started.elapsed().as_millis() as u64;
            match result {
                Ok(mut outcome) => {
                    merge(&mut total, &outcome.spent);
                    // The request, reply and calls belong to the attempt record: moved, not copied.
                    // A loop parked at a tool call waits with its step.
                    let status = if matches!(outcome.route, nodes::Route::Park { kind, .. } if !kind.is_human())
                    {
                        StepStatus::Waiting
                    } else {
                        StepStatus::Succeeded
                    };
                    attempts.push(Attempt {
                        n,
                        status,
                        error: None,
                        error_class: None,
                        duration_ms,
                        request: outcome.request.take(),
                        response: outcome.response.take(),
                        calls: std::mem::take(&mut outcome.spent.calls),
                        tool_calls: std::mem::take(&mut outcome.spent.tool_calls),
                        cost_usd: outcome.spent.cost_usd,
                    });
                    return Attempts {
                        result: Ok(outcome),
                        attempts,
                        spent: total,
                    };
                }
                Err(f) => {
                    let spent = f.spent.as_deref().cloned().unwrap_or_default();
                    merge(&mut total, &spent);
                    attempts.push(Attempt {
                        n,
                        status: StepStatus::Failed,
                        error: Some(f.message.clone()),
                        error_class: Some(f.class.clone()),
                        duration_ms,
                        request: f.request.as_deref().cloned(),
                        response: None,
                        calls: spent.calls,
                        tool_calls: spent.tool_calls,
                        cost_usd: spent.cost_usd,
                    });
                    if !f.retryable || n > policy.retry_count {
                        return Attempts {
                            result: Err(f),
                            attempts,
                            spent: total,
                        };
                    }
                    let wait = f
                        .retry_after
                        .map_or_else(|| AttemptPolicy::backoff(n + 1), |r| r.min(MAX_RETRY_AFTER));
                    // The log shows the retry now, not when the step ends.
                    ctx.progress.send(EventKind::AttemptFailed {
                        step: ctx.seq,
                        node_id: ctx.node().id.clone(),
                        n,
                        error: f.message.clone(),
                        error_class: f.class.clone(),
                        backoff_ms: wait.as_millis() as u64,
                    });
                    wait
                }
            }
        };
        if !ctx.replay {
            Box::pin(tokio::time::sleep(wait)).await;
        }
        n += 1;
    }
}

fn merge(total: &mut Spent, s: &Spent) {
    total.cost_usd += s.cost_usd;
    total.model_calls += s.model_calls;
    total.tools_made += s.tools_made;
    total.tokens.input += s.tokens.input;
    total.tokens.output += s.tokens.output;
    total.events.extend(s.events.iter().cloned());
    for m in &s.unpriced {
        if !total.unpriced.contains(m) {
            total.unpriced.push(m.clone());
        }
    }
}

fn humanize(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s.fract() == 0.0 {
        format!("{s:.0}s")
    } else {
        format!("{s}s")
    }
}
