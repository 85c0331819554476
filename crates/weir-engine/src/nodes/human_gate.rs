//! `human_gate`: parks the run for a human decision; its step waits with the rendered prompt.

use serde_json::json;
use weir_core::ir::GateSpec;

use super::{Failure, NodeCtx, Outcome, Route};

pub fn execute(ctx: &NodeCtx, spec: &GateSpec) -> Result<Outcome, Failure> {
    let prompt = super::render(ctx, &spec.prompt, "prompt")?;
    Ok(Outcome::new(
        json!({"prompt": prompt}),
        Route::Park {
            prompt,
            kind: weir_core::record::GateKind::Human,
            detail: None,
        },
    ))
}
