// The run list: filtered by status, workflow, time range and text; refreshed every two
// seconds while the page is open.

import { useEffect, useState } from "react";
import type { RunSummary } from "../api";
import { useSession } from "../App";
import { duration, money, since } from "../format";

const STATUSES = ["", "queued", "running", "paused", "succeeded", "failed", "aborted", "cancelled"];
const RANGES: [string, number][] = [["any time", 0], ["last hour", 3600], ["last day", 86400], ["last week", 604800]];

export function RunsPage() {
  const { api, go } = useSession();
  const [status, setStatus] = useState("");
  const [workflow, setWorkflow] = useState("");
  const [text, setText] = useState("");
  const [range, setRange] = useState(0);
  const [runs, setRuns] = useState<RunSummary[] | null>(null);
  const [error, setError] = useState<string | null>(null);

  useEffect(() => {
    let stop = false;
    const load = async () => {
      try {
        const since_ = range ? new Date(Date.now() - range * 1000).toISOString() : undefined;
        const r = await api.runs({ status, workflow, q: text, since: since_, limit: 100 });
        if (!stop) {
          setRuns(r.runs);
          setError(null);
        }
      } catch (e) {
        if (!stop) setError(String(e));
      }
    };
    void load();
    const t = setInterval(load, 2000);
    return () => {
      stop = true;
      clearInterval(t);
    };
  }, [api, status, workflow, text, range]);

  return (
    <section>
      <h2>Runs</h2>
      <div className="filters">
        <select aria-label="status" value={status} onChange={(e) => setStatus(e.target.value)}>
          {STATUSES.map((s) => (
            <option key={s} value={s}>{s || "every status"}</option>
          ))}
        </select>
        <input aria-label="workflow" placeholder="workflow (name or id)" value={workflow} onChange={(e) => setWorkflow(e.target.value)} />
        <select aria-label="time range" value={range} onChange={(e) => setRange(Number(e.target.value))}>
          {RANGES.map(([label, secs]) => (
            <option key={secs} value={secs}>{label}</option>
          ))}
        </select>
        <input aria-label="search" placeholder="search id or workflow" value={text} onChange={(e) => setText(e.target.value)} />
      </div>
      {error && <p className="error">{error}</p>}
      {runs && runs.length === 0 && <p className="muted">No runs match.</p>}
      {runs && runs.length > 0 && (
        <table className="runs">
          <thead>
            <tr><th>run</th><th>workflow</th><th>status</th><th>started</th><th>duration</th><th>cost</th></tr>
          </thead>
          <tbody>
            {runs.map((r) => (
              <tr key={r.run_id} onClick={() => go(`/runs/${r.run_id}`)} className="clickable">
                <td><a href={`/runs/${r.run_id}`} onClick={(e) => (e.preventDefault(), go(`/runs/${r.run_id}`))}>{r.run_id.slice(0, 8)}</a></td>
                <td>{r.workflow}{r.version ? <span className="muted"> v{r.version}</span> : null}</td>
                <td><span className={`status ${r.status}`}>{r.status}</span></td>
                <td title={r.started_at}>{since(r.started_at)}</td>
                <td>{r.finished_at ? duration(Date.parse(r.finished_at) - Date.parse(r.started_at)) : "—"}</td>
                <td>{money(r.cost_usd)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </section>
  );
}
