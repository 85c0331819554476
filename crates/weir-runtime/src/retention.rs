//! Retention (DESIGN §8): ended runs older than `[retention] older_than` are deleted on a
//! schedule, so the database does not grow without bound. Paused, queued and running runs
//! are never touched (the store refuses to); whoever caches records hears of each deletion.

use std::sync::Arc;
use std::time::Duration;

use weir_core::record::RunStatus;
use weir_core::settings::{RetentionSettings, parse_age};

use crate::Runtime;

/// The time before which ended runs go, for an age.
pub fn cutoff(age: Duration) -> String {
    weir_core::store::format_millis(
        weir_core::store::now_ms() - i64::try_from(age.as_millis()).unwrap_or(i64::MAX),
    )
}

/// Ended statuses by name; anything else is an error naming the choices.
pub fn statuses(names: &[String]) -> Result<Vec<RunStatus>, String> {
    names
        .iter()
        .map(|n| match RunStatus::parse(n) {
            Some(s) if s.is_terminal() => Ok(s),
            _ => Err(format!(
                "`{n}` is not an ended status (succeeded, failed, aborted, cancelled); paused, queued and running runs are never pruned"
            )),
        })
        .collect()
}

/// Deletes what the policy says may go now; returns the deleted runs' ids.
pub async fn prune_once(rt: &Runtime, policy: &RetentionSettings) -> Result<Vec<String>, String> {
    let before = cutoff(parse_age(&policy.older_than)?);
    rt.store
        .prune(&before, &statuses(&policy.statuses)?)
        .await
        .map_err(|e| e.to_string())
}

/// Prunes every `[retention] every` until `stop` turns true (nothing without `[retention]`);
/// `forget` hears each deleted run's id.
pub fn schedule(
    rt: Arc<Runtime>,
    forget: impl Fn(&str) + Send + 'static,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> Option<tokio::task::JoinHandle<()>> {
    let policy = rt.retention()?.clone();
    let every = parse_age(&policy.every).unwrap_or(Duration::from_secs(3600));
    Some(tokio::spawn(async move {
        loop {
            match prune_once(&rt, &policy).await {
                Ok(ids) if ids.is_empty() => {}
                Ok(ids) => {
                    ids.iter().for_each(|id| forget(id));
                    tracing::info!(
                        "retention: pruned {} runs older than {}",
                        ids.len(),
                        policy.older_than
                    );
                }
                Err(e) => tracing::warn!("retention: {e}"),
            }
            tokio::select! {
                _ = tokio::time::sleep(every) => {}
                _ = stop.changed() => return,
            }
        }
    }))
}
