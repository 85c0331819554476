//! Retention (DESIGN §8): ended runs older than `[retention] older_than` are deleted on a
//! schedule, so the database does not grow without bound. Paused, queued and running runs
//! are never touched (the store refuses to), and deleted runs leave the record cache.

use std::sync::Arc;
use std::time::Duration;

use weir_core::record::RunStatus;
use weir_core::settings::{RetentionSettings, parse_age};

use crate::App;

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

/// Deletes what the policy says may go now; returns how many runs were deleted.
pub async fn prune_once(app: &App, policy: &RetentionSettings) -> Result<usize, String> {
    let before = cutoff(parse_age(&policy.older_than)?);
    let ids = app
        .store
        .prune(&before, &statuses(&policy.statuses)?)
        .await
        .map_err(|e| e.to_string())?;
    for id in &ids {
        app.records.forget(id);
    }
    Ok(ids.len())
}

/// Prunes every `[retention] every` until `stop` turns true (nothing without `[retention]`).
pub fn schedule(
    app: Arc<App>,
    policy: Option<RetentionSettings>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> Option<tokio::task::JoinHandle<()>> {
    let policy = policy?;
    let every = parse_age(&policy.every).unwrap_or(Duration::from_secs(3600));
    Some(tokio::spawn(async move {
        loop {
            match prune_once(&app, &policy).await {
                Ok(0) => {}
                Ok(n) => tracing::info!(
                    "retention: pruned {n} runs older than {}",
                    policy.older_than
                ),
                Err(e) => tracing::warn!("retention: {e}"),
            }
            tokio::select! {
                _ = tokio::time::sleep(every) => {}
                _ = stop.changed() => return,
            }
        }
    }))
}
