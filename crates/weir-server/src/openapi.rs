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
    /// Stable, for clients to branch on.
    pub code: crate::ErrorCode,
    pub message: String,
    /// More about the error (diagnostics, problems) or null.
    #[schema(value_type = Object, nullable)]
    pub details: serde_json::Value,
}

/// The bearer scheme, and on every operation that needs a token the two answers any of them
/// gives: 401 (no valid token) and 403 (the token lacks the scope its `security` names).
struct Bearer;

impl Modify for Bearer {
    fn modify(&self, api: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::{RefOr, ResponseBuilder, content::ContentBuilder};
        let components = api.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
        let error = |what: &str| {
            RefOr::T(
                ResponseBuilder::new()
                    .description(what)
                    .content(
                        "application/json",
                        ContentBuilder::new()
                            .schema(Some(utoipa::openapi::Ref::from_schema_name("ErrorBody")))
                            .build(),
                    )
                    .build(),
            )
        };
        for item in api.paths.paths.values_mut() {
            for op in [
                &mut item.get,
                &mut item.post,
                &mut item.put,
                &mut item.delete,
            ]
            .into_iter()
            .flatten()
            {
                if op.security.as_ref().is_some_and(|s| !s.is_empty()) {
                    let r = &mut op.responses.responses;
                    r.insert("401".into(), error("no valid token"));
                    r.insert("403".into(), error("the token lacks this route's scope"));
                }
            }
        }
    }
}

#[derive(OpenApi)]
#[openapi(
    info(title = "weir", description = "The weir HTTP API: workflows, runs, approvals, events, tools, tokens."),
    paths(
        crate::meta::healthz, crate::meta::metrics, document,
        crate::workflows::list, crate::workflows::create, crate::workflows::get_one,
        crate::workflows::put, crate::workflows::delete, crate::workflows::versions,
        crate::workflows::version, crate::workflows::validate_saved, crate::workflows::validate_unsaved,
        crate::runs::create, crate::runs::list, crate::runs::get_one, crate::runs::approve,
        crate::runs::reject, crate::runs::cancel, crate::runs::rerun, crate::sse::events,
        crate::tools_tokens::list_tools, crate::tools_tokens::create_tool, crate::tools_tokens::delete_tool,
        crate::tools_tokens::list_tokens, crate::tools_tokens::create_token, crate::tools_tokens::revoke_token,
        crate::tools_tokens::session, crate::tools_tokens::models,
        crate::triggers::list, crate::triggers::fire, crate::triggers::pause, crate::triggers::resume,
        crate::hooks::deliver,
    ),
    components(schemas(ErrorBody, ErrorDetail)),
    modifiers(&Bearer)
)]
pub struct Api;

#[utoipa::path(get, path = "/api/openapi.json", tag = "meta",
    responses((status = 200, description = "this document", body = Object)),
    security(("bearer" = ["read"])))]
pub async fn document(
    axum::extract::State(app): axum::extract::State<std::sync::Arc<crate::App>>,
    headers: axum::http::HeaderMap,
) -> crate::ApiResult<Json<utoipa::openapi::OpenApi>> {
    crate::authorize(&app, &headers, crate::auth::Scope::Read).await?;
    Ok(Json(Api::openapi()))
}
