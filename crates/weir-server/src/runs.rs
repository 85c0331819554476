//! `/api/workflows/{id}/runs` and `/api/runs`: create (queued, idempotent), list, read,
//! decide, cancel and re-run. The server only changes runs; its workers drive them.

use std::sync::Arc;

use crate::{Path, Query};
use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use utoipa::{IntoParams, ToSchema};
use weir_core::record::{RunStatus, RunTrigger, StartKind};
use weir_core::store::{Cursor, RunFilter};
use weir_engine::{CancelOutcome, CreateOptions, Decision};

use crate::auth::Scope;
use crate::error::{ApiError, ApiResult};
use crate::{App, Body, authorize};

#[derive(Deserialize, ToSchema, Default)]
#[serde(deny_unknown_fields)]
pub struct CreateRun {
    /// The run input (checked against the workflow's input schema); absent or `null`: `{}`.
    #[schema(value_type = Option<Object>)]
    #[serde(default)]
    pub input: Option<Map<String, Value>>,
}

#[derive(Serialize, ToSchema)]
pub struct RunCreated {
    pub run_id: String,
    /// `queued`: a worker claims and drives it (for a repeated `Idempotency-Key`, the first
    /// run's status now).
    pub status: String,
    /// `false` when an `Idempotency-Key` repeated an earlier request: this is its run.
    pub created: bool,
    pub workflow_id: String,
    pub version: u32,
}

#[derive(Serialize, ToSchema)]
pub struct RunSummaryOut {
    pub run_id: String,
    pub workflow: String,
    pub status: String,
    pub started_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<String>,
    pub cost_usd: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workflow_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<u32>,
    /// Steps recorded so far.
    pub steps: u32,
    /// The code of the run's error, null unless it ended with one.
    pub error_code: Option<String>,
    /// What started the run: `{kind: cli|api|schedule|webhook|mcp|parent, name, tick,
    /// delivery, parent_run, node}`.
    #[schema(value_type = Object)]
    pub trigger: RunTrigger,
}

#[derive(Serialize, ToSchema)]
pub struct RunList {
    pub runs: Vec<RunSummaryOut>,
    /// Pass as `cursor` for the next page; absent on the last page.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    /// queued, running, paused, succeeded, failed, aborted or cancelled
    #[param(pattern = "^(queued|running|paused|succeeded|failed|aborted|cancelled)$")]
    pub status: Option<String>,
    /// A workflow's name, or a saved workflow's id.
    pub workflow: Option<String>,
    /// Runs created at or after this RFC 3339 time.
    pub since: Option<String>,
    /// Text in the run id or workflow name.
    pub q: Option<String>,
    /// Page size, 1 to 500 (default 50).
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<u32>,
    /// The `next_cursor` of the previous page.
    pub cursor: Option<String>,
    /// What started the runs: cli, api, schedule, webhook, mcp or parent, or one trigger
    /// as `KIND:NAME` (`schedule:nightly`).
    pub trigger: Option<String>,
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DecideBody {
    /// The gate's node id.
    pub gate: String,
    /// Approve: an object merged into the run's state (absent or `null`: nothing).
    #[schema(value_type = Option<Object>)]
    #[serde(default)]
    pub input: Option<Map<String, Value>>,
    /// Approve: a comment. Reject: the reason.
    #[serde(default)]
    pub comment: Option<String>,
}

#[derive(Serialize, ToSchema)]
pub struct Decided {
    pub run_id: String,
    pub gate: String,
    /// `queued` (approved; a worker continues it), `paused` (another gate waits) or `failed`
    /// (rejected).
    pub status: String,
}

#[derive(Serialize, ToSchema)]
pub struct Cancelled {
    pub run_id: String,
    /// `cancelled` (it was queued or paused) or `requested` (its driver stops it).
    pub outcome: String,
}

#[derive(Deserialize, ToSchema, Default)]
#[serde(deny_unknown_fields)]
pub struct RerunBody {
    /// Re-run from this node: the steps recorded before its first step are reused, not
    /// run again. Absent: the whole run again, with the same input.
    #[serde(default)]
    pub from: Option<String>,
    /// `pinned` (default): the version the run used; `latest`: the workflow's latest.
    #[schema(pattern = "^(pinned|latest)$")]
    #[serde(default)]
    pub version: Option<String>,
}

fn runs_id(id: &str) -> ApiError {
    ApiError::not_found(format!("no run with id {id}"))
}

#[utoipa::path(post, path = "/api/workflows/{id}/runs", tag = "runs",
    params(("id" = String, Path, description = "workflow id"),
           ("Idempotency-Key" = Option<String>, Header, min_length = 1, max_length = 255,
            pattern = "^[\\t\\x20-\\x7E]+$", description = "a repeated key returns the first run")),
    request_body(content = Option<CreateRun>, description = "absent: no input",
                 content_type = "application/json"),
    responses((status = 202, description = "queued; or, for a repeated Idempotency-Key, the run the first request made (`created: false`)", body = RunCreated),
              (status = 404, body = crate::openapi::ErrorBody),
              (status = 413, body = crate::openapi::ErrorBody),
              (status = 422, description = "the input does not fit the workflow", body = crate::openapi::ErrorBody)),
    security(("bearer" = ["run"])))]
pub async fn create(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Body,
) -> ApiResult<(StatusCode, Json<RunCreated>)> {
    authorize(&app, &headers, Scope::Run).await?;
    let req: CreateRun = body.json()?;
    let key = match headers.get("idempotency-key") {
        Some(v) => Some(
            v.to_str()
                .ok()
                .filter(|k| !k.is_empty() && k.len() <= 255)
                .ok_or_else(|| {
                    ApiError::invalid("Idempotency-Key must be 1 to 255 visible ASCII characters")
                })?
                .to_string(),
        ),
        None => None,
    };
    let saved = app.rt.catalog.workflow(&id).await?.latest;
    let mut created = start(
        &app,
        &saved,
        Value::Object(req.input.unwrap_or_default()),
        key,
        None,
    )
    .await?;
    if !created.created {
        // The first request's run, as it is now.
        let first = app.rt.store.load_run(&created.run_id).await?;
        created.status = first.status.as_str().into();
        if let Some(pin) = first.pin {
            created.workflow_id = pin.workflow_id;
            created.version = pin.version;
        }
    }
    Ok((StatusCode::ACCEPTED, Json(created)))
}

/// Creates a queued run of a saved version (reusing recorded steps for a re-run), started
/// over the API, and wakes a worker.
async fn start(
    app: &App,
    saved: &weir_core::catalog::WorkflowVersion,
    input: Value,
    key: Option<String>,
    reuse: Option<weir_engine::Reuse>,
) -> ApiResult<RunCreated> {
    let opts = CreateOptions {
        idempotency_key: key,
        claim: false,
        trigger: RunTrigger::of(StartKind::Api),
    };
    let created = app.rt.start_saved(saved, input, opts, reuse).await?;
    Ok(RunCreated {
        run_id: created.run_id,
        status: "queued".into(),
        created: created.created,
        workflow_id: saved.workflow_id.clone(),
        version: saved.version,
    })
}

#[utoipa::path(get, path = "/api/runs", tag = "runs", params(ListQuery),
    responses((status = 200, body = RunList), (status = 422, body = crate::openapi::ErrorBody)),
    security(("bearer" = ["read"])))]
pub async fn list(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Query(q): Query<ListQuery>,
) -> ApiResult<Json<RunList>> {
    authorize(&app, &headers, Scope::Read).await?;
    let status = q
        .status
        .as_deref()
        .map(|s| {
            RunStatus::parse(s).ok_or_else(|| {
                ApiError::invalid(format!(
                    "status `{s}` is none of queued, running, paused, succeeded, failed, aborted, cancelled"
                ))
            })
        })
        .transpose()?;
    let limit = q.limit.unwrap_or(50);
    if !(1..=500).contains(&limit) {
        return Err(ApiError::invalid("limit must be between 1 and 500"));
    }
    let after = q
        .cursor
        .as_deref()
        .map(|c| {
            Cursor::decode(c).ok_or_else(|| ApiError::invalid("cursor is not one this server gave"))
        })
        .transpose()?;
    let trigger = q
        .trigger
        .as_deref()
        .filter(|t| !t.is_empty())
        .map(RunTrigger::filter)
        .transpose()
        .map_err(ApiError::invalid)?;
    let runs = app
        .rt
        .store
        .list_runs(&RunFilter {
            limit: limit + 1,
            status,
            workflow: q.workflow.filter(|w| !w.is_empty()),
            since: q.since.filter(|s| !s.is_empty()),
            text: q.q.filter(|s| !s.is_empty()),
            after,
            trigger,
        })
        .await?;
    let more = runs.len() > limit as usize;
    let runs: Vec<_> = runs.into_iter().take(limit as usize).collect();
    let next_cursor = if more {
        runs.last().map(|r| {
            Cursor {
                started_at: r.started_at.clone(),
                run_id: r.run_id.clone(),
            }
            .encode()
        })
    } else {
        None
    };
    Ok(Json(RunList {
        runs: runs
            .into_iter()
            .map(|r| RunSummaryOut {
                run_id: r.run_id,
                workflow: r.workflow,
                status: r.status.as_str().into(),
                started_at: r.started_at,
                finished_at: r.finished_at,
                cost_usd: r.cost_usd,
                workflow_id: r.pin.as_ref().map(|p| p.workflow_id.clone()),
                version: r.pin.map(|p| p.version),
                steps: r.steps,
                error_code: r.error_code,
                trigger: r.trigger,
            })
            .collect(),
        next_cursor,
    }))
}

#[utoipa::path(get, path = "/api/runs/{id}", tag = "runs",
    params(("id" = String, Path, description = "run id")),
    responses((status = 200, description = "the run record (docs/cli.md), every step and attempt", body = Object),
              (status = 404, body = crate::openapi::ErrorBody)),
    security(("bearer" = ["read"])))]
pub async fn get_one(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> ApiResult<axum::response::Response> {
    authorize(&app, &headers, Scope::Read).await?;
    let json = |body: axum::body::Bytes| {
        (
            [(axum::http::header::CONTENT_TYPE, "application/json")],
            body,
        )
            .into_response()
    };
    if let Some(body) = app.records.get(&id) {
        return Ok(json(body));
    }
    let record = app.rt.store.get_record(&id).await?;
    let body = axum::body::Bytes::from(
        serde_json::to_vec(&record).map_err(|e| ApiError::internal(e.to_string()))?,
    );
    if record.status.is_terminal() {
        app.records.put(&id, body.clone());
    }
    Ok(json(body))
}

async fn decide(
    app: &App,
    headers: &HeaderMap,
    id: &str,
    body: &Body,
    approved: bool,
) -> ApiResult<Json<Decided>> {
    let caller = authorize(app, headers, Scope::Approve).await?;
    let req: DecideBody = body.json()?;
    let stored = app.rt.store.load_run(id).await?;
    let rt = app.rt.generation();
    let wf = rt
        .workflow(&stored.source_path, &stored.source_text)
        .map_err(|_| ApiError::internal(format!("the workflow of run {id} no longer compiles")))?;
    if let Some(input) = &req.input {
        let size = serde_json::to_vec(input).map_or(usize::MAX, |v| v.len());
        if size > rt.settings.limits.input_bytes {
            return Err(ApiError::invalid(format!(
                "the approval input is {size} bytes of JSON; the limit is {}",
                rt.settings.limits.input_bytes
            )));
        }
    }
    let decided = rt
        .engine
        .decide(
            wf,
            id,
            Some(&req.gate),
            Decision {
                approved,
                by: format!("token:{}", caller.name),
                input: if approved {
                    req.input.map(Value::Object)
                } else {
                    None
                },
                comment: req.comment,
            },
        )
        .await?;
    app.rt.hub.changed(id);
    if decided.status == RunStatus::Queued {
        app.rt.wake();
    } else if decided.status.is_terminal() && weir_runtime::otel::enabled() {
        // A rejection ends the run here, not in a worker: its trace goes from here.
        let rt = app.rt.clone();
        let run_id = decided.run_id.clone();
        tokio::spawn(async move { rt.export_trace(&run_id).await });
    }
    Ok(Json(Decided {
        run_id: decided.run_id,
        gate: decided.gate,
        status: decided.status.as_str().into(),
    }))
}

#[utoipa::path(post, path = "/api/runs/{id}/approve", tag = "runs",
    params(("id" = String, Path, description = "run id")),
    request_body(content = DecideBody, content_type = "application/json"),
    responses((status = 200, body = Decided),
              (status = 404, body = crate::openapi::ErrorBody),
              (status = 409, description = "not waiting at this gate, or already decided", body = crate::openapi::ErrorBody),
              (status = 413, body = crate::openapi::ErrorBody),
              (status = 422, body = crate::openapi::ErrorBody)),
    security(("bearer" = ["approve"])))]
pub async fn approve(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Body,
) -> ApiResult<Json<Decided>> {
    decide(&app, &headers, &id, &body, true).await
}

#[utoipa::path(post, path = "/api/runs/{id}/reject", tag = "runs",
    params(("id" = String, Path, description = "run id")),
    request_body(content = DecideBody, content_type = "application/json"),
    responses((status = 200, body = Decided),
              (status = 404, body = crate::openapi::ErrorBody),
              (status = 409, description = "not waiting at this gate, or already decided", body = crate::openapi::ErrorBody),
              (status = 413, body = crate::openapi::ErrorBody),
              (status = 422, body = crate::openapi::ErrorBody)),
    security(("bearer" = ["approve"])))]
pub async fn reject(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Body,
) -> ApiResult<Json<Decided>> {
    decide(&app, &headers, &id, &body, false).await
}

#[utoipa::path(post, path = "/api/runs/{id}/cancel", tag = "runs",
    params(("id" = String, Path, description = "run id")),
    responses((status = 202, body = Cancelled),
              (status = 404, body = crate::openapi::ErrorBody),
              (status = 409, description = "the run has ended", body = crate::openapi::ErrorBody)),
    security(("bearer" = ["run"])))]
pub async fn cancel(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> ApiResult<(StatusCode, Json<Cancelled>)> {
    let caller = authorize(&app, &headers, Scope::Run).await?;
    let out = app
        .rt
        .generation()
        .engine
        .cancel(&id, &format!("token:{}", caller.name))
        .await?;
    app.rt.hub.changed(&id);
    Ok((
        StatusCode::ACCEPTED,
        Json(Cancelled {
            run_id: id,
            outcome: match out {
                CancelOutcome::Cancelled => "cancelled",
                CancelOutcome::Requested => "requested",
            }
            .into(),
        }),
    ))
}

#[utoipa::path(post, path = "/api/runs/{id}/rerun", tag = "runs",
    params(("id" = String, Path, description = "run id")),
    request_body(content = Option<RerunBody>, description = "absent: the whole run again, pinned",
                 content_type = "application/json"),
    responses((status = 202, description = "the new run, queued", body = RunCreated),
              (status = 404, body = crate::openapi::ErrorBody),
              (status = 413, body = crate::openapi::ErrorBody),
              (status = 422, description = "`from` names no step of the run, or the version is unknown", body = crate::openapi::ErrorBody)),
    security(("bearer" = ["run"])))]
pub async fn rerun(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Body,
) -> ApiResult<(StatusCode, Json<RunCreated>)> {
    authorize(&app, &headers, Scope::Run).await?;
    let req: RerunBody = body.json()?;
    let stored = app.rt.store.load_run(&id).await.map_err(|e| match e {
        weir_core::store::StoreError::NotFound(_) => runs_id(&id),
        other => other.into(),
    })?;
    let pin = stored.pin.clone().ok_or_else(|| {
        ApiError::invalid(format!(
            "run {id} was not created from a saved workflow (it came from `weir run FILE`); run the file again instead"
        ))
    })?;
    let saved = match req.version.as_deref().unwrap_or("pinned") {
        "pinned" => {
            app.rt
                .catalog
                .version(&pin.workflow_id, pin.version)
                .await?
        }
        "latest" => app.rt.catalog.workflow(&pin.workflow_id).await?.latest,
        other => {
            return Err(ApiError::invalid(format!(
                "version must be `pinned` or `latest`, not `{other}`"
            )));
        }
    };
    let reuse = match &req.from {
        None => Vec::new(),
        Some(from) => {
            let record = app.rt.store.get_record(&id).await?;
            let first = record
                .steps
                .iter()
                .find(|s| *s.node_id == **from)
                .ok_or_else(|| {
                    ApiError::invalid(format!(
                        "run {id} has no step of node `{from}` to re-run from"
                    ))
                })?
                .seq;
            record.steps.into_iter().filter(|s| s.seq < first).collect()
        }
    };
    let reuse = weir_engine::Reuse {
        from_run: id.clone(),
        steps: reuse,
    };
    let created = start(&app, &saved, stored.input, None, Some(reuse)).await?;
    Ok((StatusCode::ACCEPTED, Json(created)))
}
