//! `/api/workflows` and `/api/validate`: saved workflows of any dialect, JSON or YAML, every
//! PUT a new version, validation with the CLI's diagnostics.

use std::sync::Arc;

use crate::{Path, Query};
use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use serde::{Deserialize, Serialize};
use serde_json::json;
use utoipa::{IntoParams, ToSchema};
use weir_core::catalog::{NewVersion, WorkflowEntry, WorkflowVersion};
use weir_core::{Diagnostic, diag};

use crate::auth::Scope;
use crate::error::{ApiError, ApiResult};
use crate::{App, Body, authorize};

/// A saved workflow (its latest version).
#[derive(Serialize, ToSchema)]
pub struct WorkflowOut {
    pub id: String,
    pub name: String,
    /// `graph`, `machine` or `pipeline`.
    pub dialect: String,
    pub version: u32,
    /// `json` or `yaml`.
    pub format: String,
    pub created_at: String,
    pub updated_at: String,
    /// The document as it was saved.
    pub source: String,
    /// On a save that made them: the URLs (with their tokens) of the document's webhooks
    /// with the `token` scheme, shown this once; weir keeps only the tokens' hashes.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub hook_tokens: Vec<crate::hooks::HookToken>,
}

#[derive(Serialize, ToSchema)]
pub struct WorkflowList {
    pub workflows: Vec<WorkflowOut>,
}

/// One version of a workflow.
#[derive(Serialize, ToSchema)]
pub struct VersionOut {
    pub workflow_id: String,
    pub version: u32,
    pub name: String,
    pub dialect: String,
    pub format: String,
    pub created_at: String,
    pub source: String,
}

#[derive(Serialize, ToSchema)]
pub struct VersionList {
    pub versions: Vec<VersionOut>,
}

/// `weir validate --json` for one document.
#[derive(Serialize, ToSchema)]
pub struct Validation {
    pub valid: bool,
    /// Diagnostics: `{severity, code, message, node_id?, file?, line?, column?, hint?}`.
    #[schema(value_type = Vec<Object>)]
    pub errors: Vec<Diagnostic>,
    #[schema(value_type = Vec<Object>)]
    pub warnings: Vec<Diagnostic>,
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct CreateQuery {
    /// The new workflow's id (default: from its name, lower-case with dashes).
    pub id: Option<String>,
}

fn out(e: WorkflowEntry) -> WorkflowOut {
    WorkflowOut {
        id: e.latest.workflow_id,
        name: e.latest.name,
        dialect: e.latest.dialect,
        version: e.latest.version,
        format: e.latest.format,
        created_at: e.created_at,
        updated_at: e.latest.created_at,
        source: e.latest.source,
        hook_tokens: Vec::new(),
    }
}

fn version_out(v: WorkflowVersion) -> VersionOut {
    VersionOut {
        workflow_id: v.workflow_id,
        version: v.version,
        name: v.name,
        dialect: v.dialect,
        format: v.format,
        created_at: v.created_at,
        source: v.source,
    }
}

/// The path diagnostics name: the workflow's id and how it was written.
pub use weir_runtime::doc_path;

fn format_of(body: &Body, text: &str) -> &'static str {
    if body.content_type.contains("yaml") {
        "yaml"
    } else if body.content_type.contains("json") || text.trim_start().starts_with('{') {
        "json"
    } else {
        "yaml"
    }
}

/// A valid id: 1 to 64 of `a-z 0-9 - _ .`, starting with a letter or digit.
fn check_id(id: &str) -> ApiResult<()> {
    let ok = !id.is_empty()
        && id.len() <= 64
        && id.as_bytes()[0].is_ascii_alphanumeric()
        && id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-_.".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(ApiError::invalid(format!(
            "`{id}` is not a workflow id: use 1 to 64 lower-case letters, digits, `-`, `_` or `.`, starting with a letter or digit"
        )))
    }
}

fn slug(name: &str) -> String {
    let mut s = String::new();
    for c in name.chars() {
        if c.is_ascii_alphanumeric() {
            s.push(c.to_ascii_lowercase());
        } else if !s.ends_with('-') && !s.is_empty() {
            s.push('-');
        }
    }
    let s = s.trim_end_matches('-');
    if s.is_empty() {
        "workflow".into()
    } else {
        s.chars().take(64).collect()
    }
}

fn report(diags: Vec<Diagnostic>) -> Validation {
    let (errors, warnings): (Vec<_>, Vec<_>) = diags.into_iter().partition(Diagnostic::is_error);
    Validation {
        valid: errors.is_empty(),
        errors,
        warnings,
    }
}

fn invalid_workflow(diags: Vec<Diagnostic>) -> ApiError {
    let (errors, _) = diag::count(&diags);
    let first = diags
        .iter()
        .find(|d| d.is_error())
        .map_or_else(String::new, |d| {
            let at = match (d.line, d.column) {
                (Some(l), Some(c)) => format!(" (line {l}, column {c})"),
                _ => String::new(),
            };
            format!(": {}{at}", d.message)
        });
    let v = report(diags);
    ApiError::new(
        crate::ErrorCode::InvalidWorkflow,
        format!("the workflow has {errors} error(s){first}"),
    )
    .details(json!({"errors": v.errors, "warnings": v.warnings}))
}

/// Compiles and saves a document as a new version of `id` (or of the id its name gives).
async fn save(
    app: &App,
    id: Option<String>,
    body: &Body,
    create_only: bool,
) -> ApiResult<WorkflowVersion> {
    let text = body.text()?;
    let format = format_of(body, text);
    let provisional = id.clone().unwrap_or_else(|| "workflow".into());
    let rt = app.rt.generation();
    let validated = rt
        .compile(&doc_path(&provisional, format), text)
        .map_err(invalid_workflow)?;
    let wf = &validated.workflow;
    let id = id.unwrap_or_else(|| slug(&wf.name));
    check_id(&id)?;
    Ok(app
        .rt
        .catalog
        .put_workflow(&NewVersion {
            workflow_id: id,
            name: wf.name.clone(),
            dialect: wf.dialect.as_str().into(),
            format: format.into(),
            source: text.to_string(),
            created_at: weir_core::store::now_rfc3339(),
            create_only,
        })
        .await?)
}

#[utoipa::path(get, path = "/api/workflows", tag = "workflows",
    responses((status = 200, body = WorkflowList)),
    security(("bearer" = ["read"])))]
pub async fn list(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
) -> ApiResult<Json<WorkflowList>> {
    authorize(&app, &headers, Scope::Read).await?;
    let workflows = app
        .rt
        .catalog
        .workflows()
        .await?
        .into_iter()
        .map(out)
        .collect();
    Ok(Json(WorkflowList { workflows }))
}

#[utoipa::path(post, path = "/api/workflows", tag = "workflows", params(CreateQuery),
    request_body(description = "A workflow document of any dialect, JSON or YAML",
                 content((Object = "application/json"), (String = "application/yaml"))),
    responses((status = 201, body = WorkflowOut),
              (status = 409, description = "a workflow with this id exists", body = crate::openapi::ErrorBody),
              (status = 413, body = crate::openapi::ErrorBody),
              (status = 422, description = "invalid document, with diagnostics", body = crate::openapi::ErrorBody)),
    security(("bearer" = ["admin"])))]
pub async fn create(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Query(q): Query<CreateQuery>,
    body: Body,
) -> ApiResult<(StatusCode, Json<WorkflowOut>)> {
    authorize(&app, &headers, Scope::Admin).await?;
    if let Some(id) = &q.id {
        check_id(id)?;
    }
    let saved = save(&app, q.id, &body, true).await?;
    let entry = app.rt.catalog.workflow(&saved.workflow_id).await?;
    let mut made = out(entry);
    made.hook_tokens = crate::hooks::mint_tokens(&app, &saved.workflow_id).await?;
    Ok((StatusCode::CREATED, Json(made)))
}

#[utoipa::path(get, path = "/api/workflows/{id}", tag = "workflows",
    params(("id" = String, Path, description = "workflow id")),
    responses((status = 200, body = WorkflowOut), (status = 404, body = crate::openapi::ErrorBody)),
    security(("bearer" = ["read"])))]
pub async fn get_one(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> ApiResult<Json<WorkflowOut>> {
    authorize(&app, &headers, Scope::Read).await?;
    Ok(Json(out(app.rt.catalog.workflow(&id).await?)))
}

#[utoipa::path(put, path = "/api/workflows/{id}", tag = "workflows",
    params(("id" = String, Path, description = "workflow id")),
    request_body(description = "A workflow document of any dialect, JSON or YAML",
                 content((Object = "application/json"), (String = "application/yaml"))),
    responses((status = 200, description = "saved as a new version", body = WorkflowOut),
              (status = 413, body = crate::openapi::ErrorBody),
              (status = 422, body = crate::openapi::ErrorBody)),
    security(("bearer" = ["admin"])))]
pub async fn put(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Body,
) -> ApiResult<Json<WorkflowOut>> {
    authorize(&app, &headers, Scope::Admin).await?;
    check_id(&id)?;
    save(&app, Some(id.clone()), &body, false).await?;
    let mut saved = out(app.rt.catalog.workflow(&id).await?);
    saved.hook_tokens = crate::hooks::mint_tokens(&app, &id).await?;
    Ok(Json(saved))
}

#[utoipa::path(delete, path = "/api/workflows/{id}", tag = "workflows",
    params(("id" = String, Path, description = "workflow id")),
    responses((status = 204, description = "deleted; runs keep the versions they pinned"),
              (status = 404, body = crate::openapi::ErrorBody)),
    security(("bearer" = ["admin"])))]
pub async fn delete(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    authorize(&app, &headers, Scope::Admin).await?;
    app.rt.catalog.delete_workflow(&id).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(get, path = "/api/workflows/{id}/versions", tag = "workflows",
    params(("id" = String, Path, description = "workflow id")),
    responses((status = 200, body = VersionList), (status = 404, body = crate::openapi::ErrorBody)),
    security(("bearer" = ["read"])))]
pub async fn versions(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> ApiResult<Json<VersionList>> {
    authorize(&app, &headers, Scope::Read).await?;
    let versions = app
        .rt
        .catalog
        .versions(&id)
        .await?
        .into_iter()
        .map(version_out)
        .collect();
    Ok(Json(VersionList { versions }))
}

#[utoipa::path(get, path = "/api/workflows/{id}/versions/{v}", tag = "workflows",
    params(("id" = String, Path, description = "workflow id"), ("v" = u32, Path, description = "version")),
    responses((status = 200, body = VersionOut), (status = 404, body = crate::openapi::ErrorBody)),
    security(("bearer" = ["read"])))]
pub async fn version(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Path((id, v)): Path<(String, String)>,
) -> ApiResult<Json<VersionOut>> {
    authorize(&app, &headers, Scope::Read).await?;
    let v: u32 = v
        .parse()
        .map_err(|_| ApiError::not_found(format!("workflow {id} has no version {v}")))?;
    Ok(Json(version_out(app.rt.catalog.version(&id, v).await?)))
}

#[utoipa::path(post, path = "/api/workflows/{id}/validate", tag = "workflows",
    params(("id" = String, Path, description = "workflow id")),
    responses((status = 200, body = Validation), (status = 404, body = crate::openapi::ErrorBody)),
    security(("bearer" = ["read"])))]
pub async fn validate_saved(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> ApiResult<Json<Validation>> {
    authorize(&app, &headers, Scope::Read).await?;
    let wf = app.rt.catalog.workflow(&id).await?.latest;
    let diags = app
        .rt
        .generation()
        .compile(&doc_path(&id, &wf.format), &wf.source)
        .map_or_else(|d| d, |v| v.warnings);
    Ok(Json(report(diags)))
}

#[utoipa::path(post, path = "/api/validate", tag = "workflows",
    request_body(description = "A workflow document of any dialect, JSON or YAML",
                 content((Object = "application/json"), (String = "application/yaml"))),
    responses((status = 200, description = "the diagnostics (a document with errors is still a 200)", body = Validation),
              (status = 413, body = crate::openapi::ErrorBody),
              (status = 422, description = "the body is not UTF-8 text", body = crate::openapi::ErrorBody)),
    security(("bearer" = ["read"])))]
pub async fn validate_unsaved(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Json<Validation>> {
    authorize(&app, &headers, Scope::Read).await?;
    let text = body.text()?;
    let format = format_of(&body, text);
    let diags = app
        .rt
        .generation()
        .compile(&doc_path("workflow", format), text)
        .map_or_else(|d| d, |v| v.warnings);
    Ok(Json(report(diags)))
}
