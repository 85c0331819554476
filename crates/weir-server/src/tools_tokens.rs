//! `/api/tools` (custom HTTP and MCP tools) and `/api/tokens` (API tokens).

use std::sync::Arc;

use crate::Path;
use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use utoipa::ToSchema;
use weir_core::catalog::ToolRow;
use weir_core::settings::CustomTool;

use crate::auth::{Scope, mint};
use crate::error::{ApiError, ApiResult};
use crate::{App, Body, authorize};

/// A custom tool, used in workflows as `tool_name: custom:<name>`.
#[derive(Serialize, ToSchema)]
pub struct ToolOut {
    pub name: String,
    /// `weir.toml` (read-only here) or `api`.
    pub source: String,
    /// The `[tools.NAME]` table as JSON: `{"kind": "http", "method", "url", "headers", "body",
    /// "response", "description"}` or `{"kind": "mcp", "server", "tool", "description"}`.
    #[schema(value_type = Object)]
    pub definition: Value,
}

#[derive(Serialize, ToSchema)]
pub struct ToolList {
    pub tools: Vec<ToolOut>,
}

/// A new custom tool as the handler reads it: its name, and the rest of the body, which is
/// checked against weir-core's `CustomTool` (the `[tools.NAME]` table of `weir.toml`). The
/// document describes the body with [`NewTool`].
#[derive(Deserialize)]
pub struct ToolBody {
    pub name: String,
    #[serde(flatten)]
    pub definition: Map<String, Value>,
}

/// A new custom tool, as the document describes `POST /api/tools`'s body: its name plus the
/// fields of a `[tools.NAME]` table of `weir.toml`, one form per `kind`, each with exactly
/// the fields weir-core's `CustomTool` takes (`null` where it takes one: not for `method`
/// or `headers`). Written out by hand: the derive gives an internally tagged enum's
/// forms neither `additionalProperties: false` nor optional fields that are not nullable.
/// The handler reads [`ToolBody`].
pub struct NewTool;

impl ToSchema for NewTool {}

#[expect(
    clippy::too_many_lines,
    reason = "schema is the JSON Schema of a custom tool's definition written out field by field, as the API documents it"
)]
impl utoipa::PartialSchema for NewTool {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{
            AdditionalProperties, ObjectBuilder, OneOfBuilder, Schema, SchemaType, Type,
        };
        let text = |about: &str| {
            ObjectBuilder::new()
                .schema_type(Type::String)
                .description(Some(about))
        };
        // An optional field that takes `null` as its absence (`Option` in `CustomTool`).
        let or_null = |about: &str| {
            ObjectBuilder::new()
                .schema_type(SchemaType::from_iter([Type::String, Type::Null]))
                .description(Some(about))
        };
        let what = || or_null("What the tool does, for the UI and agents.");
        let form = |kind: &str, about: &str| {
            ObjectBuilder::new()
                .schema_type(Type::Object)
                .description(Some(about))
                .property(
                    "kind",
                    ObjectBuilder::new()
                        .schema_type(Type::String)
                        .enum_values(Some([kind])),
                )
                .required("kind")
                .property(
                    "name",
                    text("Its name in workflows: `tool_name: custom:<name>`.")
                        .pattern(Some("^[A-Za-z0-9_-]{1,64}$")),
                )
                .required("name")
                .additional_properties(Some(AdditionalProperties::<Schema>::FreeForm(false)))
        };
        let http = form(
            "http",
            "An HTTP endpoint. `url`, header values and `body` are templates over the node's \
             params (`{lead_id}`) and secrets (`{secrets.CRM_TOKEN}`).",
        )
        .property("method", text("The HTTP method; default `GET`."))
        .property("url", text("The endpoint, a template."))
        .required("url")
        .property(
            "headers",
            ObjectBuilder::new()
                .schema_type(Type::Object)
                .description(Some("Header values are templates."))
                .additional_properties(Some(ObjectBuilder::new().schema_type(Type::String))),
        )
        .property(
            "body",
            ObjectBuilder::new()
                .schema_type(SchemaType::AnyValue)
                .description(Some(
                    "A string template, or an object whose string values are templates (sent as \
                 JSON); `null`: none. Any TOML value is taken, so `null` only as the whole \
                 body.",
                )),
        )
        .property(
            "response",
            or_null(
                "An expression over `{status, headers, body}` picking the tool's result; \
                 default: the whole response.",
            ),
        )
        .property("description", what())
        .property(
            "parameters",
            ObjectBuilder::new()
                .schema_type(SchemaType::from_iter([Type::Object, Type::Null]))
                .description(Some(
                    "The JSON Schema of its params (an object naming every placeholder), as an \
                     agent's model is told them; default: each placeholder, a string.",
                )),
        );
        let mcp = form(
            "mcp",
            "A tool on an MCP server of `weir.toml`; the node's params are its arguments.",
        )
        .property("server", text("The server's name in `[mcp.servers.NAME]`."))
        .required("server")
        .property("tool", text("The tool's name on that server."))
        .required("tool")
        .property("description", what());
        OneOfBuilder::new()
            .description(Some(
                "A new custom tool: its name plus the fields of a `[tools.NAME]` table of \
                 `weir.toml`, by `kind`.",
            ))
            .item(http)
            .item(mcp)
            .into()
    }
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TokenBody {
    /// 1 to 100 characters, not all of them white space.
    #[schema(min_length = 1, max_length = 100, pattern = "\\S")]
    pub name: String,
    pub scope: Scope,
}

/// A token as listed: never its value.
#[derive(Serialize, ToSchema)]
pub struct TokenOut {
    pub id: String,
    pub name: String,
    pub scope: String,
    pub created_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revoked_at: Option<String>,
}

#[derive(Serialize, ToSchema)]
pub struct TokenList {
    pub tokens: Vec<TokenOut>,
}

/// A new token; `token` is shown this once.
#[derive(Serialize, ToSchema)]
pub struct TokenCreated {
    pub id: String,
    pub name: String,
    pub scope: String,
    pub created_at: String,
    /// The bearer token. It is not stored and cannot be shown again.
    pub token: String,
}

/// Header values may hold credentials written in literally: a listing shows a header's value
/// only when it takes its credential from a secret (`Bearer {secrets.CRM_TOKEN}`), else
/// `<hidden>`.
fn hide_headers(mut definition: Value) -> Value {
    if let Some(Value::Object(h)) = definition.get_mut("headers") {
        for v in h.values_mut() {
            if !v.as_str().is_some_and(|s| s.contains("{secrets.")) {
                *v = Value::String("<hidden>".into());
            }
        }
    }
    definition
}

fn check_name(name: &str) -> ApiResult<()> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(ApiError::invalid(format!(
            "`{name}` is not a tool name: use 1 to 64 letters, digits, `_` or `-`"
        )))
    }
}

#[utoipa::path(get, path = "/api/tools", tag = "tools",
    responses((status = 200, body = ToolList)),
    security(("bearer" = ["read"])))]
pub async fn list_tools(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
) -> ApiResult<Json<ToolList>> {
    authorize(&app, &headers, Scope::Read).await?;
    let mut tools: Vec<ToolOut> = app
        .rt
        .file_tools()
        .keys()
        .map(|name| ToolOut {
            name: name.clone(),
            source: "weir.toml".into(),
            // A file tool's headers may hold secrets' templates: only its kind is shown.
            definition: serde_json::json!({"kind": match app.rt.file_tools()[name] {
                CustomTool::Http { .. } => "http",
                CustomTool::Mcp { .. } => "mcp",
            }}),
        })
        .collect();
    for t in app.rt.catalog.tools().await? {
        if !app.rt.file_tools().contains_key(&t.name) {
            tools.push(ToolOut {
                name: t.name,
                source: "api".into(),
                definition: hide_headers(t.definition),
            });
        }
    }
    Ok(Json(ToolList { tools }))
}

#[utoipa::path(post, path = "/api/tools", tag = "tools",
    request_body(content = NewTool, content_type = "application/json"),
    responses((status = 201, body = ToolOut),
              (status = 409, description = "weir.toml defines a tool of this name", body = crate::openapi::ErrorBody),
              (status = 413, body = crate::openapi::ErrorBody),
              (status = 422, body = crate::openapi::ErrorBody)),
    security(("bearer" = ["admin"])))]
pub async fn create_tool(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<(StatusCode, Json<ToolOut>)> {
    authorize(&app, &headers, Scope::Admin).await?;
    let req: ToolBody = body.json()?;
    check_name(&req.name)?;
    if app.rt.file_tools().contains_key(&req.name) {
        return Err(ApiError::new(
            crate::ErrorCode::Conflict,
            format!(
                "weir.toml defines custom tool `{}`; it cannot be changed over the API",
                req.name
            ),
        ));
    }
    let definition = Value::Object(req.definition);
    serde_json::from_value::<CustomTool>(definition.clone())
        .map_err(|e| {
            ApiError::invalid(format!(
                "not a custom tool definition ({e}); give `kind` (`http` with `url`, or `mcp` with `server` and `tool`)"
            ))
        })?
        .check(&req.name)
        .map_err(ApiError::invalid)?;
    app.rt
        .catalog
        .put_tool(&ToolRow {
            name: req.name.clone(),
            definition: definition.clone(),
            created_at: weir_core::store::now_rfc3339(),
        })
        .await?;
    app.rt.reload_tools().await.map_err(ApiError::invalid)?;
    Ok((
        StatusCode::CREATED,
        Json(ToolOut {
            name: req.name,
            source: "api".into(),
            definition,
        }),
    ))
}

#[utoipa::path(delete, path = "/api/tools/{name}", tag = "tools",
    params(("name" = String, Path, description = "tool name")),
    responses((status = 204, description = "deleted"),
              (status = 404, body = crate::openapi::ErrorBody)),
    security(("bearer" = ["admin"])))]
pub async fn delete_tool(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> ApiResult<StatusCode> {
    authorize(&app, &headers, Scope::Admin).await?;
    app.rt.catalog.delete_tool(&name).await?;
    app.rt.reload_tools().await.map_err(ApiError::internal)?;
    Ok(StatusCode::NO_CONTENT)
}

/// The workspace's model policy from `weir.toml` (read-only over the API).
#[derive(Serialize, ToSchema)]
pub struct ModelsOut {
    /// Globs of the model names allowed; absent: every model.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allow: Option<Vec<String>>,
    /// The providers allowed; absent: every provider.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub providers: Option<Vec<String>>,
    /// Named OpenAI-compatible providers (their names; addresses and keys stay in weir.toml).
    pub named_providers: Vec<String>,
    /// The model names weir knows a price for (built in, and `[pricing]` in weir.toml) that
    /// the allowlist admits: the builder's model picker offers them.
    pub known: Vec<String>,
}

#[utoipa::path(get, path = "/api/models", tag = "tools",
    responses((status = 200, body = ModelsOut)),
    security(("bearer" = ["read"])))]
pub async fn models(State(app): State<Arc<App>>, headers: HeaderMap) -> ApiResult<Json<ModelsOut>> {
    authorize(&app, &headers, Scope::Read).await?;
    let s = &app.rt.generation().settings;
    Ok(Json(ModelsOut {
        allow: s.models.allow.clone(),
        providers: s.providers.allow.clone(),
        named_providers: s.providers.named.keys().cloned().collect(),
        known: app
            .rt
            .known_models()
            .into_iter()
            .chain(s.pricing.keys().cloned())
            .filter(|m| s.model_allowed(m))
            .fold(Vec::new(), |mut v, m| {
                if !v.contains(&m) {
                    v.push(m);
                }
                v
            }),
    }))
}

/// The caller's own token: what the web UI shows and which actions it offers.
#[derive(Serialize, ToSchema)]
pub struct SessionOut {
    pub token_id: String,
    pub name: String,
    /// `read`, `run`, `approve` or `admin`.
    pub scope: String,
}

#[utoipa::path(get, path = "/api/session", tag = "tokens",
    responses((status = 200, body = SessionOut)),
    security(("bearer" = ["read"])))]
pub async fn session(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
) -> ApiResult<Json<SessionOut>> {
    let caller = authorize(&app, &headers, Scope::Read).await?;
    Ok(Json(SessionOut {
        token_id: caller.token_id,
        name: caller.name,
        scope: caller.scope.as_str().to_string(),
    }))
}

#[utoipa::path(get, path = "/api/tokens", tag = "tokens",
    responses((status = 200, body = TokenList)),
    security(("bearer" = ["admin"])))]
pub async fn list_tokens(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
) -> ApiResult<Json<TokenList>> {
    authorize(&app, &headers, Scope::Admin).await?;
    let tokens = app
        .rt
        .catalog
        .tokens()
        .await?
        .into_iter()
        .map(|t| TokenOut {
            id: t.id,
            name: t.name,
            scope: t.scope,
            created_at: t.created_at,
            revoked_at: t.revoked_at,
        })
        .collect();
    Ok(Json(TokenList { tokens }))
}

#[utoipa::path(post, path = "/api/tokens", tag = "tokens",
    request_body(content = TokenBody, content_type = "application/json"),
    responses((status = 201, body = TokenCreated), (status = 413, body = crate::openapi::ErrorBody),
              (status = 422, body = crate::openapi::ErrorBody)),
    security(("bearer" = ["admin"])))]
pub async fn create_token(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<(StatusCode, Json<TokenCreated>)> {
    authorize(&app, &headers, Scope::Admin).await?;
    let req: TokenBody = body.json()?;
    if req.name.trim().is_empty() || req.name.chars().count() > 100 {
        return Err(ApiError::invalid("name must be 1 to 100 characters"));
    }
    let (row, token) = mint(&req.name, req.scope)?;
    app.rt.catalog.create_token(&row).await?;
    Ok((
        StatusCode::CREATED,
        Json(TokenCreated {
            id: row.id,
            name: row.name,
            scope: row.scope,
            created_at: row.created_at,
            token,
        }),
    ))
}

#[utoipa::path(delete, path = "/api/tokens/{id}", tag = "tokens",
    params(("id" = String, Path, description = "token id")),
    responses((status = 204, description = "revoked"), (status = 404, body = crate::openapi::ErrorBody)),
    security(("bearer" = ["admin"])))]
pub async fn revoke_token(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    authorize(&app, &headers, Scope::Admin).await?;
    app.rt
        .catalog
        .revoke_token(&id, &weir_core::store::now_rfc3339())
        .await?;
    app.tokens.forget(&id);
    Ok(StatusCode::NO_CONTENT)
}
