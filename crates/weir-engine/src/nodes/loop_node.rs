//! `loop`: a condition with memory and a hard cap. The scheduler keeps the visit counter under
//! the internal `__loop_<id>` key; the loop continues while `expression` is true and the
//! counter is within `max_iterations`. Output `{expression, iteration, continue}`.

use serde_json::json;
use weir_core::ir::LoopSpec;

use super::{Failure, NodeCtx, Outcome, Route};

pub fn execute(ctx: &NodeCtx, spec: &LoopSpec) -> Result<Outcome, Failure> {
    let holds = ctx.scope.eval_bool(&spec.expression).map_err(|e| {
        Failure::fatal(
            "expression",
            format!("`{}`: {}", spec.expression, e.message),
        )
    })?;
    let cont = holds && ctx.loop_count <= spec.max_iterations;
    Ok(Outcome::new(
        json!({"expression": spec.expression, "iteration": ctx.loop_count, "continue": cont}),
        Route::Key(cont.to_string()),
    ))
}
