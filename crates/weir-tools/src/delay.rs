//! `delay`: waits `seconds` (or `ms`) and outputs `{delayed_ms}`. Bounded by the node's
//! timeout like every attempt.

use std::time::Duration;

use serde_json::{Value, json};
use weir_core::{ToolCall, ToolError};

pub async fn call(call: &ToolCall) -> Result<Value, ToolError> {
    let p = &call.params;
    let ms = match (p.get("seconds"), p.get("ms")) {
        (Some(s), None) => s.as_f64().map(|s| s * 1000.0),
        (None, Some(m)) => m.as_f64(),
        (None, None) => return Err(ToolError::fatal("param `seconds` (or `ms`) is required")),
        _ => return Err(ToolError::fatal("give either `seconds` or `ms`, not both")),
    }
    .filter(|ms| ms.is_finite() && *ms >= 0.0 && *ms <= 86_400_000.0)
    .ok_or_else(|| ToolError::fatal("delay must be a number between 0 and 86400 seconds"))?;
    tokio::time::sleep(Duration::from_secs_f64(ms / 1000.0)).await;
    Ok(json!({"delayed_ms": ms.round() as u64}))
}
