//! `tool`: a typed side effect. String params are rendered against state, the tool's result
//! object is written to state, and the step costs $0.

use serde_json::json;
use weir_core::ToolCall;
use weir_core::expr;
use weir_core::ir::ToolSpec;

use super::{Failure, NodeCtx, Outcome, Route};

/// Stable across retries (same visit) and `weir resume` (visits are committed with steps).
pub fn idempotency_key(run_id: &str, node_id: &str, visit: u32) -> String {
    let name = format!("{run_id}/{node_id}/{visit}");
    uuid::Uuid::new_v5(&uuid::Uuid::NAMESPACE_OID, name.as_bytes()).to_string()
}

pub async fn execute(ctx: &NodeCtx, spec: &ToolSpec) -> Result<Outcome, Failure> {
    let params = expr::render_value(&spec.params, ctx.state.as_ref())
        .map_err(|e| Failure::fatal("template", format!("params: {}", e.message)))?;
    let call = ToolCall {
        tool_name: spec.tool_name.clone(),
        params,
        idempotency_key: idempotency_key(&ctx.run_id, &ctx.node.id, ctx.visit),
        // A little past the attempt timeout, so the engine's own timeout decides.
        timeout: ctx.node.policy.timeout + std::time::Duration::from_secs(1),
    };
    match ctx.services.tools.call(call).await {
        Ok(result) => {
            let mut o = Outcome::new(result.clone(), Route::All);
            o.write = Some(result);
            o.request = Some(json!({"tool": spec.tool_name}));
            Ok(o)
        }
        Err(e) => Err(Failure {
            message: e.message,
            class: "tool".into(),
            retryable: e.retryable,
            retry_after: None,
            request: Some(Box::new(json!({"tool": spec.tool_name}))),
            spent: None,
        }),
    }
}
