//! Custom tools registered in weir.toml (`tool_name: custom:<name>`). An HTTP tool renders its
//! `url`, header values and `body` as templates over the node's params and `{secrets.NAME}`,
//! calls the endpoint like `http_request`, and maps the reply with its `response` expression
//! (over `{status, headers, body}`). An MCP tool calls its server's tool with the node's params
//! as arguments. Secret values are redacted from the result and from errors.

use serde_json::{Map, Value, json};
use weir_core::expr;
use weir_core::secrets;
use weir_core::settings::CustomTool;
use weir_core::{ToolCall, ToolError};

use crate::{Registry, http_request};

#[expect(
    clippy::too_many_lines,
    reason = "a custom tool call in order: template the request, send it under the tool's network rules, classify the failure, read the response"
)]
pub async fn call(
    reg: &Registry,
    name: &str,
    tool: &CustomTool,
    call: &ToolCall,
) -> Result<Value, ToolError> {
    match tool {
        CustomTool::Mcp { server, tool, .. } => {
            let args = match &call.params {
                Value::Object(m) => m.clone(),
                Value::Null => Map::new(),
                other => {
                    return Err(ToolError::fatal(format!(
                        "custom:{name} params must be a map, found {other}"
                    )));
                }
            };
            reg.mcp.call_tool(server, tool, args, call.timeout).await
        }
        CustomTool::Http {
            method,
            url,
            headers,
            body,
            response,
            ..
        } => {
            // The templates see the node's params and the secrets they reference.
            let mut template_texts = vec![url.clone()];
            template_texts.extend(headers.values().cloned());
            let body_json = body.as_ref().map(toml_to_json);
            if let Some(b) = &body_json {
                template_texts.push(b.to_string());
            }
            let mut names = Vec::new();
            for t in &template_texts {
                secrets::scan(t, &mut names);
            }
            let mut used = Vec::new();
            let mut scope = match &call.params {
                Value::Object(m) => m.clone(),
                _ => Map::new(),
            };
            let mut values = Map::new();
            for n in names {
                let v = reg.settings.secret(&n).map_err(ToolError::fatal)?;
                used.push(v.clone());
                values.insert(n, Value::String(v));
            }
            scope.insert("secrets".into(), Value::Object(values));
            let render = |v: &Value| {
                expr::render_value(v, &scope).map_err(|e| {
                    ToolError::fatal(format!(
                        "custom:{name}: {} (the template reads the node's params)",
                        secrets::redact_str(&e.message, &used)
                    ))
                })
            };
            let mut params = json!({"method": method, "url": render(&json!(url))?});
            let mut hs = Map::new();
            for (k, v) in headers {
                hs.insert(k.clone(), render(&json!(v))?);
            }
            params["headers"] = Value::Object(hs);
            if let Some(b) = &body_json {
                params["body"] = render(b)?;
            }
            let inner = ToolCall {
                tool_name: format!("custom:{name}"),
                params,
                idempotency_key: call.idempotency_key.clone(),
                timeout: call.timeout,
            };
            let mut result = match http_request::call(&reg.net, &inner).await {
                Ok(r) => r,
                Err(mut e) => {
                    e.message = secrets::redact_str(&e.message, &used);
                    return Err(e);
                }
            };
            if let Some(expr_src) = response {
                result = expr::eval_value(expr_src, &result).map_err(|e| {
                    ToolError::fatal(format!(
                        "custom:{name} response mapping `{expr_src}`: {}",
                        e.message
                    ))
                })?;
            }
            secrets::redact(&mut result, &used);
            Ok(result)
        }
    }
}

fn toml_to_json(v: &toml::Value) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}
