//! `/api/workflows/{id}/triggers`: a saved workflow's triggers with their next fire times;
//! fire one now, pause and resume one. The runtime fires schedules; the server only shows
//! and changes them.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use serde::Serialize;
use utoipa::ToSchema;
use weir_runtime::triggers::{TriggerError, TriggerView};

use crate::auth::Scope;
use crate::error::{ApiError, ApiResult};
use crate::{App, Path, authorize};

/// One trigger of a saved workflow's latest version.
#[derive(Serialize, ToSchema)]
pub struct TriggerOut {
    pub workflow_id: String,
    /// The version whose document declares it (the workflow's latest).
    pub version: u32,
    pub name: String,
    /// `schedule` or `webhook`.
    pub kind: String,
    /// `active`, `disabled` (`enabled: false` in the document) or `paused`.
    pub state: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cron: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timezone: Option<String>,
    /// `skip`, `queue` or `allow`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub overlap: Option<weir_core::ir::Overlap>,
    /// `none` or `latest`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub catch_up: Option<weir_core::ir::CatchUp>,
    /// The next five fire times (UTC); empty unless active.
    pub next: Vec<String>,
    /// The same on the zone's wall clock.
    pub next_local: Vec<String>,
    /// A webhook's path on this server (`/hooks/{workflow}/{name}`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// A webhook's signature scheme: hmac-sha256, github, stripe, slack or token.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
    /// The run the trigger started last: `{run_id, status, started_at, tick}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub last_run: Option<weir_runtime::triggers::LastRun>,
}

impl From<TriggerView> for TriggerOut {
    fn from(v: TriggerView) -> Self {
        Self {
            workflow_id: v.workflow_id,
            version: v.version,
            name: v.name,
            kind: v.kind,
            state: v.state,
            cron: v.cron,
            timezone: v.timezone,
            overlap: v.overlap,
            catch_up: v.catch_up,
            next: v.next,
            next_local: v.next_local,
            path: v.path,
            signature: v.signature,
            last_run: v.last_run,
        }
    }
}

#[derive(Serialize, ToSchema)]
pub struct TriggerList {
    pub triggers: Vec<TriggerOut>,
}

#[derive(Serialize, ToSchema)]
pub struct Fired {
    pub run_id: String,
    /// `queued`: a worker claims and drives it.
    pub status: String,
}

impl From<TriggerError> for ApiError {
    fn from(e: TriggerError) -> Self {
        match e {
            TriggerError::NotFound(m) => Self::not_found(m),
            TriggerError::Invalid(m) => Self::invalid(m),
            TriggerError::Start(e) => e.into(),
            TriggerError::Store(e) => e.into(),
        }
    }
}

#[utoipa::path(get, path = "/api/workflows/{id}/triggers", tag = "triggers",
    params(("id" = String, Path, description = "workflow id")),
    responses((status = 200, body = TriggerList), (status = 404, body = crate::openapi::ErrorBody)),
    security(("bearer" = ["read"])))]
pub async fn list(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> ApiResult<Json<TriggerList>> {
    authorize(&app, &headers, Scope::Read).await?;
    let triggers = app.rt.triggers(Some(&id), None).await?;
    Ok(Json(TriggerList {
        triggers: triggers.into_iter().map(Into::into).collect(),
    }))
}

#[utoipa::path(post, path = "/api/workflows/{id}/triggers/{name}/fire", tag = "triggers",
    params(("id" = String, Path, description = "workflow id"),
           ("name" = String, Path, description = "trigger name")),
    responses((status = 202, description = "a run started as the trigger would, with its input", body = Fired),
              (status = 404, body = crate::openapi::ErrorBody)),
    security(("bearer" = ["run"])))]
pub async fn fire(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Path((id, name)): Path<(String, String)>,
) -> ApiResult<(StatusCode, Json<Fired>)> {
    authorize(&app, &headers, Scope::Run).await?;
    let created = app.rt.fire_trigger(&id, &name).await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(Fired {
            run_id: created.run_id,
            status: "queued".into(),
        }),
    ))
}

#[utoipa::path(post, path = "/api/workflows/{id}/triggers/{name}/pause", tag = "triggers",
    params(("id" = String, Path, description = "workflow id"),
           ("name" = String, Path, description = "trigger name")),
    responses((status = 200, description = "the trigger, paused until resumed (a new version keeps it paused)", body = TriggerOut),
              (status = 404, body = crate::openapi::ErrorBody)),
    security(("bearer" = ["run"])))]
pub async fn pause(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Path((id, name)): Path<(String, String)>,
) -> ApiResult<Json<TriggerOut>> {
    authorize(&app, &headers, Scope::Run).await?;
    Ok(Json(app.rt.pause_trigger(&id, &name, true).await?.into()))
}

#[utoipa::path(post, path = "/api/workflows/{id}/triggers/{name}/resume", tag = "triggers",
    params(("id" = String, Path, description = "workflow id"),
           ("name" = String, Path, description = "trigger name")),
    responses((status = 200, description = "the trigger, firing again from now on", body = TriggerOut),
              (status = 404, body = crate::openapi::ErrorBody)),
    security(("bearer" = ["run"])))]
pub async fn resume(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Path((id, name)): Path<(String, String)>,
) -> ApiResult<Json<TriggerOut>> {
    authorize(&app, &headers, Scope::Run).await?;
    Ok(Json(app.rt.pause_trigger(&id, &name, false).await?.into()))
}
