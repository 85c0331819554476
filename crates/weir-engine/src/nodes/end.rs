//! `end`: ends the run with a status (`succeeded`, `failed`, `aborted`); its rendered
//! `output`, when set, becomes the run's output.

use serde_json::json;
use weir_core::ir::EndSpec;

use super::{Failure, NodeCtx, Outcome, Route};

pub fn execute(ctx: &NodeCtx, spec: &EndSpec) -> Result<Outcome, Failure> {
    let output = match &spec.output {
        Some(t) => t
            .render_in(&ctx.scope)
            .map_err(|e| Failure::fatal("template", format!("output: {}", e.message)))?,
        None => json!(null),
    };
    Ok(Outcome::new(output, Route::End(spec.status)))
}
