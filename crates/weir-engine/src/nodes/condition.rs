//! `condition`: evaluates `expression` against public state and routes on `"true"` /
//! `"false"`. Output `{expression, result}`; writes nothing to state.

use serde_json::json;
use weir_core::ir::ConditionSpec;

use super::{Failure, NodeCtx, Outcome, Route};

pub fn execute(ctx: &NodeCtx, spec: &ConditionSpec) -> Result<Outcome, Failure> {
    let result = ctx.scope.eval_bool(&spec.expression).map_err(|e| {
        Failure::fatal(
            "expression",
            format!("`{}`: {}", spec.expression, e.message),
        )
    })?;
    Ok(Outcome::new(
        json!({"expression": spec.expression, "result": result}),
        Route::Key(result.to_string()),
    ))
}
