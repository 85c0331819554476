//! The examples a new server starts with (DESIGN §10): the spec's Data Enrichment Pipeline
//! and a workflow of each dialect, runnable at once on the offline `mock` model. They are
//! added only to a store that never had a workflow, so deleting them sticks.

use weir_core::catalog::NewVersion;

use crate::App;

/// `(id, format, source)`.
const EXAMPLES: &[(&str, &str, &str)] = &[
    (
        "data-enrichment-pipeline",
        "json",
        include_str!("../../../examples/graph/enrichment.json"),
    ),
    (
        "support-triage",
        "json",
        include_str!("../../../examples/graph/support-triage.json"),
    ),
    (
        "approval",
        "yaml",
        include_str!("../../../examples/graph/approval.yaml"),
    ),
    (
        "quality-loop",
        "yaml",
        include_str!("../../../examples/machine/quality-loop.yaml"),
    ),
    (
        "early-exit",
        "yaml",
        include_str!("../../../examples/pipeline/early-exit.yaml"),
    ),
];

pub async fn seed(app: &App) -> Result<(), String> {
    if app
        .rt
        .catalog
        .any_workflow_ever()
        .await
        .map_err(|e| e.to_string())?
    {
        return Ok(());
    }
    let rt = app.rt.generation();
    for (id, format, source) in EXAMPLES {
        let wf = rt
            .compile(&crate::workflows::doc_path(id, format), source)
            .map_err(|d| {
                format!(
                    "example {id} does not compile: {:?}",
                    d.first().map(|d| &d.message)
                )
            })?
            .workflow;
        app.rt
            .catalog
            .put_workflow(&NewVersion {
                workflow_id: id.to_string(),
                name: wf.name.clone(),
                dialect: wf.dialect.as_str().into(),
                format: format.to_string(),
                source: source.to_string(),
                created_at: weir_core::store::now_rfc3339(),
                create_only: true,
            })
            .await
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}
