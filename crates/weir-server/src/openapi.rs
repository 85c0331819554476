//! The OpenAPI 3.1 document, generated from the handlers' annotations.

use axum::Json;
use serde::Serialize;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi, ToSchema};

/// Every error: `{"error": {"code", "message", "details"}}`.
#[derive(Serialize, ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Serialize, ToSchema)]
pub struct ErrorDetail {
    /// Stable: unauthorized, forbidden, not_found, conflict, invalid_request,
    /// invalid_workflow, body_too_large, internal.
    pub code: String,
    pub message: String,
    /// More about the error (diagnostics, problems) or null.
    #[schema(value_type = Object, nullable)]
    pub details: serde_json::Value,
}

struct Bearer;

impl Modify for Bearer {
    fn modify(&self, api: &mut utoipa::openapi::OpenApi) {
        let components = api.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

#[derive(OpenApi)]
#[openapi(
    info(title = "weir", description = "The weir HTTP API (DESIGN §10): workflows, runs, approvals, events, tools, tokens."),
    paths(
        crate::meta::healthz, crate::meta::metrics, document,
        crate::workflows::list, crate::workflows::create, crate::workflows::get_one,
        crate::workflows::put, crate::workflows::delete, crate::workflows::versions,
        crate::workflows::version, crate::workflows::validate_saved, crate::workflows::validate_unsaved,
        crate::runs::create, crate::runs::list, crate::runs::get_one, crate::runs::approve,
        crate::runs::reject, crate::runs::cancel, crate::runs::rerun, crate::sse::events,
        crate::tools_tokens::list_tools, crate::tools_tokens::create_tool, crate::tools_tokens::delete_tool,
        crate::tools_tokens::list_tokens, crate::tools_tokens::create_token, crate::tools_tokens::revoke_token,
    ),
    components(schemas(ErrorBody, ErrorDetail)),
    modifiers(&Bearer)
)]
pub struct Api;

#[utoipa::path(get, path = "/api/openapi.json", tag = "meta",
    responses((status = 200, description = "this document", body = Object),
              (status = 401, body = ErrorBody), (status = 403, body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn document(
    axum::extract::State(app): axum::extract::State<std::sync::Arc<crate::App>>,
    headers: axum::http::HeaderMap,
) -> crate::ApiResult<Json<utoipa::openapi::OpenApi>> {
    crate::authorize(&app, &headers, crate::auth::Scope::Read).await?;
    Ok(Json(Api::openapi()))
}
