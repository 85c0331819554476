//! `GET /api/runs/{id}/events`: the run's event log as server-sent events, read from the
//! store (the log is the truth; wake-ups only say when to read it again).
//!
//! Each event is `id: <seq>`, `event: <type>`, `data: <the event as JSON>`. `Last-Event-ID`
//! (or `?after=`) resumes after that sequence number, so a reconnecting client gets exactly
//! what it missed. A comment line every 15 s keeps proxies from closing a quiet stream; the
//! stream ends after the run's final event, and a client that connects after the run ended
//! gets the whole log and the end.
//!
//! While a model writes a reply, `event: delta` frames carry its pieces as they arrive
//! (`{"type": "delta", "step", "node_id", "attempt", "reply", "text"}`, without an `id:`):
//! they are not in the log, so a client that reconnects gets the committed step instead.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use crate::{Path, Query};
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::Stream;
use serde::Deserialize;
use tokio::sync::broadcast;
use utoipa::IntoParams;
use weir_core::event::RunEvent;

use crate::auth::Scope;
use crate::error::{ApiError, ApiResult};
use crate::{App, authorize};

/// How often a stream re-reads the log without a wake-up (another process drives the run).
const POLL: Duration = Duration::from_secs(1);

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct EventsQuery {
    /// Start after this sequence number (like `Last-Event-ID`, for clients that cannot set it).
    pub after: Option<u64>,
}

struct Follow {
    app: Arc<App>,
    run_id: String,
    after: u64,
    wake: broadcast::Receiver<Arc<str>>,
    /// Pieces of replies being written, of every run this process drives.
    deltas: broadcast::Receiver<(Arc<str>, Arc<str>)>,
    closing: tokio::sync::watch::Receiver<bool>,
    queue: std::collections::VecDeque<RunEvent>,
    ended: bool,
}

/// What the stream sends next.
enum Item {
    /// An event of the log.
    Event(RunEvent),
    /// A piece of a reply being written, as JSON.
    Delta(Arc<str>),
}

impl Follow {
    /// The next event (or piece of a reply), reading the log again when nothing is queued;
    /// `None` after the end.
    async fn next(&mut self) -> Option<Item> {
        loop {
            if let Some(e) = self.queue.pop_front() {
                self.after = e.seq;
                if e.kind.is_final() {
                    self.ended = true;
                }
                return Some(Item::Event(e));
            }
            if self.ended || *self.closing.borrow() {
                return None;
            }
            match self
                .app
                .rt
                .store
                .events_after(&self.run_id, self.after)
                .await
            {
                Ok(events) if !events.is_empty() => {
                    self.queue.extend(events);
                    continue;
                }
                Ok(_) => {
                    // Nothing after `after`: a run that has ended (a client resuming after its
                    // final event) or was deleted by retention has nothing more to send.
                    // (The status changes in the transaction that writes the final event, so
                    // the log is read once more: the run may have ended since the read above.)
                    match self.app.rt.store.load_run(&self.run_id).await {
                        Ok(run) if run.status.is_terminal() => {
                            match self
                                .app
                                .rt
                                .store
                                .events_after(&self.run_id, self.after)
                                .await
                            {
                                Ok(rest) if !rest.is_empty() => {
                                    self.queue.extend(rest);
                                    continue;
                                }
                                _ => return None,
                            }
                        }
                        Err(weir_core::store::StoreError::NotFound(_)) => return None,
                        _ => {}
                    }
                }
                Err(e) => {
                    tracing::warn!("events of run {}: {e}", self.run_id);
                }
            }
            let deadline = tokio::time::sleep(POLL);
            tokio::pin!(deadline);
            loop {
                tokio::select! {
                    _ = &mut deadline => break,
                    _ = self.closing.changed() => return None,
                    got = self.wake.recv() => match got {
                        Ok(id) if *id == *self.run_id => break,
                        Ok(_) => {}
                        // Missed wake-ups: read the log to be sure.
                        Err(broadcast::error::RecvError::Lagged(_)) => break,
                        Err(broadcast::error::RecvError::Closed) => break,
                    },
                    got = self.deltas.recv() => match got {
                        Ok((id, delta)) if *id == *self.run_id => return Some(Item::Delta(delta)),
                        // Pieces missed are in the step once it commits.
                        Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                        Err(broadcast::error::RecvError::Closed) => break,
                    },
                }
            }
        }
    }
}

/// One event of the stream as Server-Sent Events frame it: in OpenAPI 3.1 the schema of a
/// `text/event-stream` response describes each event. For the document only.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
pub struct StreamEvent {
    /// The event's sequence number in the run's log: `Last-Event-ID` (or `?after=`) resumes
    /// after it. Absent on a `delta`, which is not in the log.
    #[schema(pattern = "^[0-9]+$")]
    id: Option<String>,
    /// The event's type: `run_created`, `step_started`, `step_finished`, …, or `delta` (a
    /// piece of a reply being written).
    event: String,
    /// The event as JSON, `{"seq", "at", "type", …}`: one of the run record's `events`; for
    /// a `delta`, `{"type": "delta", "step", "node_id", "attempt", "reply", "text"}`.
    #[schema(content_media_type = "application/json")]
    data: String,
}

#[utoipa::path(get, path = "/api/runs/{id}/events", tag = "runs",
    params(("id" = String, Path, description = "run id"),
           ("Last-Event-ID" = Option<u64>, Header, nullable = false, description = "resume after this event's sequence number"),
           EventsQuery),
    responses((status = 200, description = "text/event-stream of the run's events (`id:` is the sequence number)",
               content_type = "text/event-stream", body = StreamEvent),
              (status = 404, body = crate::openapi::ErrorBody),
              (status = 422, body = crate::openapi::ErrorBody)),
    security(("bearer" = ["read"])))]
pub async fn events(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Query(q): Query<EventsQuery>,
) -> ApiResult<Sse<impl Stream<Item = Result<Event, Infallible>>>> {
    authorize(&app, &headers, Scope::Read).await?;
    let after = match headers.get("last-event-id") {
        Some(v) => v
            .to_str()
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .ok_or_else(|| ApiError::invalid("Last-Event-ID must be an event sequence number"))?,
        None => q.after.unwrap_or(0),
    };
    // Sequence numbers are 64-bit signed in every store (and in the document).
    if after > i64::MAX as u64 {
        return Err(ApiError::invalid(
            "an event sequence number is at most 9223372036854775807",
        ));
    }
    // Subscribe before the first read, so no wake-up falls between the two.
    let wake = app.rt.hub.subscribe();
    let deltas = app.rt.hub.subscribe_deltas();
    app.rt.store.load_run(&id).await?;
    let closing = app.closing.subscribe();
    let follow = Follow {
        closing,
        app,
        run_id: id,
        after,
        wake,
        deltas,
        queue: Default::default(),
        ended: false,
    };
    let stream = futures_util::stream::unfold(follow, |mut f| async move {
        let event = match f.next().await? {
            Item::Event(e) => {
                let data = serde_json::to_string(&e).unwrap_or_else(|_| "{}".into());
                Event::default()
                    .id(e.seq.to_string())
                    .event(e.kind.name())
                    .data(data)
            }
            Item::Delta(json) => Event::default().event("delta").data(&*json),
        };
        Some((Ok(event), f))
    });
    Ok(Sse::new(stream).keep_alive(
        KeepAlive::new()
            .interval(Duration::from_secs(15))
            .text("heartbeat"),
    ))
}
