//! `script` (spec 000): JavaScript/TypeScript under the script runner (bun). The module's
//! `export default` is the value; stdout and stderr are captured. A throw, or a shell command
//! that fails without `.nothrow()`, fails the node. With a validator the value routes:
//! boolean → JavaScript truthiness; enum → `String(value)`, which must be a declared route;
//! confidence → a number, or an object with a numeric `score`, against the threshold.
//! Output (in `variables.<id>`): `{stdout, stderr, exitCode, value}` (plus `score`).

use serde_json::{Value, json};
use weir_core::ir::{ScriptSpec, Validator};
use weir_core::script::{ScriptCall, ScriptError};

use super::{Failure, NodeCtx, Outcome, Route};

pub async fn execute(ctx: &NodeCtx, spec: &ScriptSpec) -> Result<Outcome, Failure> {
    let call = ScriptCall {
        source: spec.source.clone(),
        // The attempt timeout is the script's; the runner kills the process tree at it.
        timeout: ctx.node().policy.timeout,
        state: Value::Object(ctx.public.as_ref().clone()),
    };
    let result = match ctx.services.scripts.run(call).await {
        Ok(r) => r,
        Err(ScriptError::Timeout(d)) => {
            let mut f = Failure::fatal(
                "timeout",
                format!("script timed out after {d:?}; its process tree was killed"),
            );
            f.retryable = true;
            return Err(f);
        }
        Err(ScriptError::Failed {
            exit_code,
            message,
            stdout,
            stderr,
        }) => {
            let mut f = Failure::fatal(
                "script",
                format!("script failed (exit code {exit_code}): {message}"),
            );
            f.retryable = true;
            f.request = Some(Box::new(json!({"stdout": stdout, "stderr": stderr}).into()));
            return Err(f);
        }
        Err(ScriptError::Runtime(m)) => return Err(Failure::fatal("script", m)),
    };
    let v = &result.value;
    let mut output = json!({
        "stdout": result.stdout,
        "stderr": result.stderr,
        "exitCode": result.exit_code,
        "value": v.json,
    });
    let route = match &spec.validator {
        None => Route::All,
        Some(Validator::Boolean) => Route::Key(v.truthy.to_string()),
        Some(Validator::Enum { routes }) => {
            if !routes.contains(&v.string) {
                return Err(Failure::fatal(
                    "script",
                    format!(
                        "the script returned {:?}, which is not one of the routes: {}",
                        v.string,
                        routes.join(", ")
                    ),
                ));
            }
            Route::Key(v.string.clone())
        }
        Some(Validator::Confidence { threshold }) => {
            let Some(score) = v.score else {
                return Err(Failure::fatal(
                    "script",
                    format!(
                        "the confidence validator needs a number or an object with a numeric `score`; the script returned {} ({})",
                        v.string, v.js_type
                    ),
                ));
            };
            output["score"] = json!(score);
            Route::Key((score >= *threshold).to_string())
        }
    };
    Ok(Outcome::new(output, route))
}
