//! The OpenAPI document: every route with its scope, the error codes, the event stream and the tool body as the server reads them.

use axum::http::{Method, StatusCode};
use serde_json::{Value, json};

use crate::auth::{at, routes};
use crate::support::*;

/// The OpenAPI document the server serves.
pub async fn openapi(api: &Api) -> Value {
    api.as_("read", Method::GET, "/api/openapi.json", "")
        .await
        .body
}

/// The component a `{"$ref": "#/components/schemas/NAME"}` schema names (a panic when the
/// schema is not such a reference).
pub fn named<'d>(doc: &'d Value, schema: &Value) -> &'d Value {
    let name = schema["$ref"]
        .as_str()
        .and_then(|r| r.strip_prefix("#/components/schemas/"))
        .unwrap_or_else(|| panic!("not a named schema: {schema}"));
    &doc["components"]["schemas"][name]
}

/// The sorted `required` list of an object schema.
pub fn required(schema: &Value) -> Vec<&str> {
    let mut names: Vec<&str> = schema["required"]
        .as_array()
        .unwrap_or_else(|| panic!("no required list: {schema}"))
        .iter()
        .map(|r| r.as_str().unwrap())
        .collect();
    names.sort_unstable();
    names
}

#[tokio::test]
async fn the_openapi_document_covers_every_route() {
    let api = api().await;
    let doc = openapi(&api).await;
    assert!(
        doc["openapi"].as_str().unwrap().starts_with("3.1"),
        "{}",
        doc["openapi"]
    );
    let paths = doc["paths"].as_object().unwrap();
    for (method, path, scope) in routes() {
        let templ = path
            .replace("two-steps", "{id}")
            .replace(
                "/zzz",
                if path.starts_with("/api/tools") || path.contains("/triggers/") {
                    "/{name}"
                } else {
                    "/{id}"
                },
            )
            .replace("RUN", "{id}")
            .replace("versions/1", "versions/{v}");
        let op = &paths
            .get(&templ)
            .unwrap_or_else(|| panic!("{templ} is not in the document"))
            [method.as_str().to_lowercase()];
        assert!(op.is_object(), "{method} {templ} is not in the document");
        assert!(
            op["responses"].as_object().unwrap().len() >= 2,
            "{method} {templ}: errors listed"
        );
        for code in ["401", "403"] {
            assert!(
                op["responses"][code].is_object(),
                "{method} {templ}: {code} listed"
            );
        }
        assert_eq!(
            op["security"][0]["bearer"],
            json!([at(scope)]),
            "{method} {templ}: the document names the scope the route needs"
        );
    }
    assert!(paths.contains_key("/healthz"));
    assert!(
        paths["/healthz"]["get"]["responses"]["401"].is_null(),
        "healthz needs no token"
    );
}

#[tokio::test]
async fn error_codes_are_an_enum_the_document_lists() {
    let api = api().await;
    let doc = openapi(&api).await;
    let detail = named(
        &doc,
        &named(
            &doc,
            &doc["components"]["schemas"]["ErrorBody"]["properties"]["error"],
        )["properties"]["code"],
    )
    .clone();
    let mut codes: Vec<&str> = detail["enum"]
        .as_array()
        .unwrap_or_else(|| panic!("no enum: {detail}"))
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    codes.sort_unstable();
    assert_eq!(
        codes,
        [
            "body_too_large",
            "conflict",
            "forbidden",
            "internal",
            "invalid_request",
            "invalid_workflow",
            "not_found",
            "rate_limited",
            "unauthorized",
            "unavailable"
        ]
    );
    // Real answers carry listed codes with their statuses.
    let missing = api.as_("read", Method::GET, "/api/runs/nope", "").await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    assert_eq!(missing.body["error"]["code"], "not_found");
    let anonymous = api.call(Method::GET, "/api/runs", None, "", "").await;
    assert_eq!(anonymous.status, StatusCode::UNAUTHORIZED);
    assert_eq!(anonymous.body["error"]["code"], "unauthorized");
    let weak = api.as_("read", Method::POST, "/api/tokens", "{}").await;
    assert_eq!(weak.status, StatusCode::FORBIDDEN);
    assert_eq!(weak.body["error"]["code"], "forbidden");
}

/// The event stream's schema describes each event as Server-Sent Events frame it (in
/// OpenAPI 3.1 the `text/event-stream` schema is one event's): `scripts/api-fuzz` checks every
/// event of a real run's stream against it.
#[tokio::test]
async fn the_event_stream_is_documented_event_by_event() {
    let api = api().await;
    let doc = openapi(&api).await;
    let event = named(
        &doc,
        &doc["paths"]["/api/runs/{id}/events"]["get"]["responses"]["200"]["content"]["text/event-stream"]
            ["schema"],
    );
    // A `delta` (a piece of a reply being written) has no id: it is not in the log.
    assert_eq!(required(event), ["data", "event"], "{event}");
    assert_eq!(event["properties"]["id"]["pattern"], "^[0-9]+$", "{event}");
    assert_eq!(
        event["properties"]["data"]["contentMediaType"], "application/json",
        "{event}"
    );
}

/// The document describes `POST /api/tools`'s body as the server reads it: one form per
/// `kind`, each with its required fields and nothing else, so that a client (or a fuzzer)
/// that follows the document writes tools the server takes.
#[tokio::test]
async fn the_documented_tool_body_is_the_one_the_server_takes() {
    let api = api().await;
    let doc = openapi(&api).await;
    let body = named(
        &doc,
        &doc["paths"]["/api/tools"]["post"]["requestBody"]["content"]["application/json"]["schema"],
    );
    let forms = body["oneOf"]
        .as_array()
        .unwrap_or_else(|| panic!("one form per kind: {body}"));
    let mut kinds = Vec::new();
    for form in forms {
        let kind = form["properties"]["kind"]["enum"][0].as_str().unwrap();
        assert_eq!(form["additionalProperties"], false, "{kind}: {form}");
        assert_eq!(
            form["properties"]["name"]["pattern"], "^[A-Za-z0-9_-]{1,64}$",
            "{kind}: {form}"
        );
        kinds.push((kind.to_string(), required(form)));
    }
    kinds.sort();
    assert_eq!(
        kinds,
        [
            ("http".to_string(), vec!["kind", "name", "url"]),
            ("mcp".to_string(), vec!["kind", "name", "server", "tool"]),
        ]
    );
    // The smallest documented HTTP form is taken; a field the document does not list is not.
    let made = api
        .as_(
            "admin",
            Method::POST,
            "/api/tools",
            r#"{"kind": "http", "name": "ping", "url": "https://example.com/ping"}"#,
        )
        .await;
    assert_eq!(made.status, StatusCode::CREATED, "{}", made.text);
    assert_eq!(made.body["definition"]["kind"], "http");
    let extra = api
        .as_(
            "admin",
            Method::POST,
            "/api/tools",
            r#"{"kind": "http", "name": "pong", "url": "https://example.com", "timeout": 3}"#,
        )
        .await;
    assert_eq!(
        extra.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        extra.text
    );
    // Declared parameters are taken when they name every placeholder, refused otherwise.
    let declared = api
        .as_(
            "admin",
            Method::POST,
            "/api/tools",
            r#"{"kind": "http", "name": "lead", "url": "https://example.com/leads/{id}",
                "parameters": {"type": "object", "required": ["id"],
                               "properties": {"id": {"type": "string", "description": "The lead's id"}}}}"#,
        )
        .await;
    assert_eq!(declared.status, StatusCode::CREATED, "{}", declared.text);
    let missing = api
        .as_(
            "admin",
            Method::POST,
            "/api/tools",
            r#"{"kind": "http", "name": "lead2", "url": "https://example.com/leads/{id}",
                "parameters": {"type": "object", "properties": {}}}"#,
        )
        .await;
    assert_eq!(
        missing.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        missing.text
    );
    assert!(missing.text.contains("{id}"), "{}", missing.text);
}
