//! `tool`: a typed side effect. String params are rendered against state (and
//! `{secrets.NAME}` against the workspace's secrets), the tool's result object is written to
//! state, and the step costs $0. The step's attempts record only the tool's name, never the
//! rendered params; secret values are redacted from the result and from errors by the
//! engine, with every other secret (`Redactor`, in the scheduler).

use serde_json::{Map, Value, json};
use weir_core::ToolCall;
use weir_core::ir::ToolSpec;
use weir_core::secrets;

use super::{Failure, NodeCtx, Outcome, Route};

/// Stable across retries (same visit) and `weir resume` (visits are committed with steps).
pub fn idempotency_key(run_id: &str, node_id: &str, visit: u32) -> String {
    let name = format!("{run_id}/{node_id}/{visit}");
    uuid::Uuid::new_v5(&uuid::Uuid::NAMESPACE_OID, name.as_bytes()).to_string()
}

/// Runs a tool node: its arguments templated, the call, the result written under its key.
pub async fn execute(ctx: &NodeCtx, spec: &ToolSpec) -> Result<Outcome, Failure> {
    let names = secrets::referenced(spec.params.source());
    let params = if names.is_empty() {
        spec.params.render_in(&ctx.scope)
    } else {
        let mut scope: Map<String, Value> = ctx.state.as_ref().clone();
        let mut values = Map::new();
        for name in names {
            let v = ctx
                .services
                .secrets
                .secret(&name)
                .map_err(|e| Failure::fatal("secret", e))?;
            values.insert(name, Value::String(v));
        }
        scope.insert("secrets".into(), Value::Object(values));
        spec.params.render_in(
            &weir_core::expr::Scope::new(std::sync::Arc::new(scope))
                .with_template_bytes(ctx.scope.template_bytes()),
        )
    }
    .map_err(|e| Failure::fatal("template", format!("params: {}", e.message)))?;
    // Refused before anything is sent: a request the tool would build from these params.
    if weir_core::json::len_within(&params, ctx.tool_request_bytes).is_none() {
        return Err(Failure::fatal(
            "too_big",
            format!(
                "the tool's params are larger than {}, the most a tool request may carry \
                 (`[limits] tool_request_bytes` in weir.toml); nothing was sent",
                weir_core::json::bytes(ctx.tool_request_bytes)
            ),
        ));
    }
    let call = ToolCall {
        tool_name: spec.tool_name.clone(),
        params,
        idempotency_key: idempotency_key(&ctx.run_id, &ctx.node().id, ctx.visit),
        // A little past the attempt timeout, so the engine's own timeout decides.
        timeout: ctx.tool_timeout(),
    };
    let request = json!({"tool": spec.tool_name, "idempotency_key": call.idempotency_key});
    match ctx.services.tools.call(call).await {
        Ok(result) => {
            let mut o = Outcome::new(result.clone(), Route::All);
            o.write = Some(result);
            o.request = Some(request.into());
            Ok(o)
        }
        Err(e) => Err(Failure {
            message: e.message,
            class: "tool".into(),
            retryable: e.retryable,
            retry_after: None,
            request: Some(Box::new(request.into())),
            spent: None,
        }),
    }
}
