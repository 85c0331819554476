//! `/healthz` (no auth) and `/metrics` (Prometheus text, scope `read`).

use std::fmt::Write;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::extract::State;
use axum::http::{HeaderMap, header};
use axum::response::IntoResponse;
use weir_core::record::RunStatus;

use crate::auth::Scope;
use crate::error::ApiResult;
use crate::{App, authorize};
use weir_runtime::BUCKETS;

#[utoipa::path(get, path = "/healthz", tag = "meta",
    responses((status = 200, description = "the server is up and its store answers", body = String),
              (status = 503, description = "the store does not answer", body = String)))]
pub async fn healthz(State(app): State<Arc<App>>) -> impl IntoResponse {
    match app.rt.store.count_by_status().await {
        Ok(_) => (axum::http::StatusCode::OK, "ok\n"),
        Err(_) => (
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            "store unavailable\n",
        ),
    }
}

/// `weir_budget_stops_total`: calls a budget stopped, by what it did.
fn budget_stops(out: &mut String, m: &weir_runtime::Metrics) {
    let _ = writeln!(
        out,
        "# HELP weir_budget_stops_total Calls a budget stopped, by what it did: failed the run, or paused it for a raise."
    );
    let _ = writeln!(out, "# TYPE weir_budget_stops_total counter");
    for (what, n) in [("fail", &m.budget_failed), ("pause", &m.budget_paused)] {
        let _ = writeln!(
            out,
            "weir_budget_stops_total{{on_exceeded=\"{what}\"}} {}",
            n.load(Ordering::Relaxed)
        );
    }
}

#[utoipa::path(get, path = "/metrics", tag = "meta",
    responses((status = 200, description = "Prometheus text format", content_type = "text/plain", body = String)),
    security(("bearer" = ["read"])))]
pub async fn metrics(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
) -> ApiResult<impl IntoResponse> {
    authorize(&app, &headers, Scope::Read).await?;
    let counts = app.rt.store.count_by_status().await?;
    let mut out = String::new();
    let _ = writeln!(out, "# HELP weir_runs Runs in the store by status.");
    let _ = writeln!(out, "# TYPE weir_runs gauge");
    for status in [
        RunStatus::Queued,
        RunStatus::Running,
        RunStatus::Paused,
        RunStatus::Succeeded,
        RunStatus::Failed,
        RunStatus::Aborted,
        RunStatus::Cancelled,
    ] {
        let n = counts.iter().find(|(s, _)| *s == status).map_or(0, |c| c.1);
        let _ = writeln!(out, "weir_runs{{status=\"{}\"}} {n}", status.as_str());
    }
    let queued = counts
        .iter()
        .find(|(s, _)| *s == RunStatus::Queued)
        .map_or(0, |c| c.1);
    let _ = writeln!(out, "# HELP weir_queue_depth Runs waiting for a worker.");
    let _ = writeln!(out, "# TYPE weir_queue_depth gauge");
    let _ = writeln!(out, "weir_queue_depth {queued}");
    let m = &app.rt.metrics;
    let _ = writeln!(
        out,
        "# HELP weir_step_duration_seconds Step latency, steps driven by this server."
    );
    let _ = writeln!(out, "# TYPE weir_step_duration_seconds histogram");
    for (i, b) in BUCKETS.iter().enumerate() {
        let _ = writeln!(
            out,
            "weir_step_duration_seconds_bucket{{le=\"{b}\"}} {}",
            m.step_buckets[i].load(Ordering::Relaxed)
        );
    }
    let count = m.step_count.load(Ordering::Relaxed);
    let _ = writeln!(
        out,
        "weir_step_duration_seconds_bucket{{le=\"+Inf\"}} {count}"
    );
    let _ = writeln!(
        out,
        "weir_step_duration_seconds_sum {}",
        m.step_sum_ms.load(Ordering::Relaxed) as f64 / 1000.0
    );
    let _ = writeln!(out, "weir_step_duration_seconds_count {count}");
    let _ = writeln!(
        out,
        "# HELP weir_lease_takeovers_total Runs this server took over from a driver whose lease expired."
    );
    let _ = writeln!(out, "# TYPE weir_lease_takeovers_total counter");
    let _ = writeln!(
        out,
        "weir_lease_takeovers_total {}",
        m.takeovers.load(Ordering::Relaxed)
    );
    let _ = writeln!(
        out,
        "# HELP weir_runs_finished_total Runs this server finished, by status."
    );
    let _ = writeln!(out, "# TYPE weir_runs_finished_total counter");
    for (status, n) in m.runs_finished.lock().expect("metrics lock").iter() {
        let _ = writeln!(out, "weir_runs_finished_total{{status=\"{status}\"}} {n}");
    }
    budget_stops(&mut out, m);
    Ok(([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], out))
}
