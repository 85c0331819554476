// One run: its status, live over SSE; the timeline (a row per step, inside it a row per
// attempt and per model call); a waiting gate's approve / reject form; cancel; re-run.

import { Fragment, useEffect, useMemo, useRef, useState } from "react";
import { allows, type RunRecord } from "../api";
import { useSession } from "../App";
import { duration, money, traceId } from "../format";
import { Canvas } from "../Canvas";
import { parseDocument, toGraph, type Graph } from "../graph";
import { consensusVotes, grow, live, nodeStatus, pipelinePass, timeline, type Delta, type StepRow, type Writing } from "../timeline";

export function RunPage({ id }: { id: string }) {
  const { api, session, go } = useSession();
  const [run, setRun] = useState<RunRecord | null>(null);
  const [error, setError] = useState<string | null>(null);
  // Replies being written, by step: the stream's `delta` events (not in the log).
  const [writing, setWriting] = useState<Record<number, Writing>>({});
  const last = useRef(0);

  useEffect(() => {
    let stop = false;
    // A re-run navigates to another run on this same page: its log starts from the beginning.
    last.current = 0;
    setRun(null);
    setWriting({});
    const ctl = new AbortController();
    let pending: ReturnType<typeof setTimeout> | null = null;
    // Loads can overlap (an event's reload and the stream's end) and answer out of order: a
    // record is shown only if no later-asked one has been, or a stale "running" could stay on
    // screen for a run that has since parked and sends no more events.
    let asked = 0;
    let shown = 0;
    const load = async () => {
      const ticket = ++asked;
      try {
        const r = await api.run(id);
        if (stop) return;
        if (ticket < shown) return r;
        shown = ticket;
        setRun(r);
        last.current = Math.max(last.current, ...r.events.map((e) => e.seq), 0);
        return r;
      } catch (e) {
        if (!stop) setError(String(e));
      }
    };
    // Each event reloads the record (coalesced): the log says when, the record what.
    const changed = () => {
      if (pending) return;
      pending = setTimeout(() => {
        pending = null;
        void load();
      }, 50);
    };
    (async () => {
      const r = await load();
      while (!stop && r && live(r.status)) {
        try {
          await api.follow(id, last.current, (e) => {
            if (e.type === "delta") {
              setWriting((w) => grow(w, e as unknown as Delta));
              return;
            }
            last.current = Math.max(last.current, e.seq);
            changed();
          }, ctl.signal);
        } catch {
          if (stop) return;
        }
        const now = await load();
        if (!now || !live(now.status)) break;
        await new Promise((res) => setTimeout(res, 1000));
      }
    })();
    return () => {
      stop = true;
      ctl.abort();
      if (pending) clearTimeout(pending);
    };
  }, [api, id]);

  const rows = useMemo(() => (run ? timeline(run) : []), [run]);
  const status = useMemo(() => (run ? nodeStatus(run) : undefined), [run]);
  const graph = usePinnedGraph(id);
  if (error) return <p className="error">{error}</p>;
  if (!run) return <p className="muted">Loading…</p>;
  const can = (s: "run" | "approve") => allows(session.scope, s);
  return (
    <section>
      <h2>
        {run.workflow} <span className={`status ${run.status}`}>{run.status}</span>
      </h2>
      <p className="muted">
        run <code>{run.run_id}</code> · started {new Date(run.started_at).toLocaleString()} ·{" "}
        {duration(run.duration_ms)} · {money(run.cost_usd)} ·{" "}
        <span title="OpenTelemetry trace id: the run's trace, exported when the server has OTEL_EXPORTER_OTLP_ENDPOINT set">
          trace <code>{traceId(run.run_id)}</code>
        </span>
      </p>
      {run.error && (
        <p className="error">
          <b>{run.error.code}</b>: {run.error.message}
        </p>
      )}
      <div className="actions">
        {live(run.status) && can("run") && (
          <button onClick={() => void api.cancel(run.run_id).catch((e) => setError(String(e)))}>Cancel</button>
        )}
        {!live(run.status) && can("run") && (
          <button onClick={async () => go(`/runs/${(await api.rerun(run.run_id)).run_id}`)}>Re-run</button>
        )}
      </div>
      {run.status === "paused" && run.pending_gate && (
        <Gate run={run} canDecide={can("approve")} onError={setError} />
      )}
      {graph && <Canvas graph={graph} status={status} />}
      <h3>Timeline</h3>
      <ol className="timeline">
        {rows.map((r) => (
          <StepItem key={r.seq} row={r} writing={r.status === "running" ? writing[r.seq]?.text : undefined} canRerun={can("run") && !live(run.status)} onRerun={async () => go(`/runs/${(await api.rerun(run.run_id, r.nodeId)).run_id}`)} />
        ))}
      </ol>
      {run.output !== null && run.output !== undefined && (
        <>
          <h3>Output</h3>
          <Json value={run.output} />
        </>
      )}
    </section>
  );
}

function Gate({ run, canDecide, onError }: { run: RunRecord; canDecide: boolean; onError: (e: string) => void }) {
  const gate = run.pending_gate!;
  if (gate.kind === "tool_call") return <ToolGate run={run} canDecide={canDecide} onError={onError} />;
  if (gate.kind === "budget") {
    const limit = String(gate.detail?.limit ?? "usd");
    const raise = JSON.stringify({ raise: { [limit]: limit === "usd" ? 1.0 : 10 } });
    return (
      <HumanGate
        run={run}
        canDecide={canDecide}
        onError={onError}
        title={`Budget reached at ${gate.node_id}`}
        initial={raise}
        inputLabel="Raise (how much to add to the budget; approve to go on)"
      />
    );
  }
  return <HumanGate run={run} canDecide={canDecide} onError={onError} />;
}

/** An agent's tool call waiting for a reviewer: the tool, its arguments (editable), and the
 * decision; a rejection's reason is what the model reads. */
function ToolGate({ run, canDecide, onError }: { run: RunRecord; canDecide: boolean; onError: (e: string) => void }) {
  const { api } = useSession();
  const gate = run.pending_gate!;
  const d = gate.detail ?? {};
  const proposed = JSON.stringify(d.arguments ?? {}, null, 2);
  const [args, setArgs] = useState(proposed);
  const [comment, setComment] = useState("");
  const [busy, setBusy] = useState(false);
  const parsed = jsonObject(args);
  const edited = parsed !== null && JSON.stringify(parsed) !== JSON.stringify(d.arguments ?? {});
  const decide = async (approve: boolean) => {
    setBusy(true);
    try {
      if (approve) await api.approve(run.run_id, gate.node_id, edited ? { arguments: parsed } : {}, comment || undefined);
      else await api.reject(run.run_id, gate.node_id, comment);
    } catch (e) {
      onError(String(e));
    } finally {
      setBusy(false);
    }
  };
  return (
    <div className="gate" role="region" aria-label="waiting gate">
      <h3>Agent {gate.node_id} wants to call {String(d.name ?? "a tool")}</h3>
      <p className="muted">{d.tool && d.tool !== d.name ? `${String(d.tool)} · asked` : "Asked"} in turn {String(d.turn ?? "?")}. Nothing is called until you decide.</p>
      {canDecide ? (
        <>
          <label>
            Arguments {edited && <span className="muted">(edited: the tool gets yours)</span>}
            <textarea aria-label="tool arguments" value={args} onChange={(e) => setArgs(e.target.value)} rows={Math.min(12, proposed.split("\n").length + 1)} />
          </label>
          {parsed === null && <p className="error">The arguments must be a JSON object.</p>}
          <label>
            Comment (to reject: the reason, which the model reads as the tool's result)
            <input aria-label="comment" value={comment} onChange={(e) => setComment(e.target.value)} />
          </label>
          <div className="actions">
            <button className="approve" disabled={busy || parsed === null} onClick={() => void decide(true)}>Approve call</button>
            <button className="reject" disabled={busy || !comment.trim()} onClick={() => void decide(false)}>Reject call</button>
          </div>
        </>
      ) : (
        <>
          <pre>{proposed}</pre>
          <p className="muted">Your token cannot decide gates (it needs the approve scope).</p>
        </>
      )}
    </div>
  );
}

function HumanGate({ run, canDecide, onError, title, initial, inputLabel }: {
  run: RunRecord;
  canDecide: boolean;
  onError: (e: string) => void;
  title?: string;
  initial?: string;
  inputLabel?: string;
}) {
  const { api } = useSession();
  const gate = run.pending_gate!;
  const [input, setInput] = useState(initial ?? "{}");
  const [comment, setComment] = useState("");
  const [busy, setBusy] = useState(false);
  const parsed = jsonObject(input);
  const decide = async (approve: boolean) => {
    setBusy(true);
    try {
      if (approve) await api.approve(run.run_id, gate.node_id, parsed ?? {}, comment || undefined);
      else await api.reject(run.run_id, gate.node_id, comment);
    } catch (e) {
      onError(String(e));
    } finally {
      setBusy(false);
    }
  };
  return (
    <div className="gate" role="region" aria-label="waiting gate">
      <h3>{title ?? `Waiting at ${gate.node_id}`}</h3>
      <p className="prompt">{gate.prompt}</p>
      {canDecide ? (
        <>
          <label>
            {inputLabel ?? "Input (a JSON object merged into the run's state)"}
            <textarea aria-label="approval input" value={input} onChange={(e) => setInput(e.target.value)} rows={4} />
          </label>
          {parsed === null && <p className="error">The input must be a JSON object.</p>}
          <label>
            Comment (the reason, to reject)
            <input aria-label="comment" value={comment} onChange={(e) => setComment(e.target.value)} />
          </label>
          <div className="actions">
            <button className="approve" disabled={busy || parsed === null} onClick={() => void decide(true)}>Approve</button>
            <button className="reject" disabled={busy || !comment.trim()} onClick={() => void decide(false)}>Reject</button>
          </div>
        </>
      ) : (
        <p className="muted">Your token cannot decide gates (it needs the approve scope).</p>
      )}
    </div>
  );
}

function StepItem({ row, writing, canRerun, onRerun }: { row: StepRow; writing?: string; canRerun: boolean; onRerun: () => void }) {
  const [open, setOpen] = useState(false);
  const pass = pipelinePass(row.step);
  const votes = consensusVotes(row.step);
  return (
    <li className={`step ${row.status}`}>
      <button className="row" aria-expanded={open} onClick={() => setOpen(!open)}>
        <span className="seq">{row.seq}</span>
        <span className="node">{row.nodeId}</span>
        <span className="muted">{row.nodeType}{row.visit > 1 ? ` ×${row.visit}` : ""}{pass ? ` · pass ${pass.pass}` : ""}</span>
        <span className={`status ${row.status}`}>{row.status}</span>
        {row.route && <span className="route">→ {row.route}</span>}
        <span>{duration(row.durationMs)}</span>
        <span>{row.tokensIn || row.tokensOut ? `${row.tokensIn} / ${row.tokensOut} tok` : ""}</span>
        <span>{money(row.costUsd)}</span>
      </button>
      {row.error && <p className="error">{row.error}</p>}
      {writing && (
        <div className="writing" aria-label="reply being written" aria-live="polite">
          <p>
            {writing}
            <span className="caret" aria-hidden="true" />
          </p>
        </div>
      )}
      {open && (
        <div className="detail">
          {pass && (
            <table className="outputs" aria-label="pipeline outputs">
              <thead>
                <tr><th>node</th><th>output (pass {pass.pass})</th><th>gate</th></tr>
              </thead>
              <tbody>
                {pass.outputs.map((o) => (
                  <tr key={o.node} className={o.pruned ? "pruned" : ""}>
                    <td>#{o.node}</td>
                    <td><Folded text={o.text} /></td>
                    <td>{o.pruned ? "pruned" : "kept"}</td>
                  </tr>
                ))}
                <tr><td /><td colSpan={2} className="muted">{pass.survivors} kept · {pass.action}</td></tr>
              </tbody>
            </table>
          )}
          {votes && (
            <table className="votes" aria-label="consensus votes">
              <thead>
                <tr><th>agent</th><th>vote</th><th>reasoning</th></tr>
              </thead>
              <tbody>
                {votes.votes.map((v) => (
                  <tr key={v.agent}><td>#{v.agent}</td><td><b>{v.vote}</b></td><td>{v.reasoning}</td></tr>
                ))}
                <tr><td /><td colSpan={2} className="muted">quorum {votes.quorum} of {votes.agents} · {votes.decision}{votes.answer !== undefined ? `: ${votes.answer}` : ""}</td></tr>
              </tbody>
            </table>
          )}
          {row.attempts.length > 0 && (
            <table className="attempts">
              <thead>
                <tr><th>attempt</th><th>status</th><th>error class</th><th>latency</th><th>cost</th><th>backoff</th></tr>
              </thead>
              <tbody>
                {row.attempts.map((a) => (
                  <Fragment key={a.n}>
                    <tr className={`attempt ${a.status}`}>
                      <td>#{a.n}</td>
                      <td><span className={`status ${a.status}`}>{a.status}</span></td>
                      <td>{a.errorClass ?? ""}</td>
                      <td>{duration(a.durationMs)}</td>
                      <td>{money(a.costUsd)}</td>
                      <td>{a.backoffMs !== undefined ? duration(a.backoffMs) : ""}</td>
                    </tr>
                    {a.calls.map((c, i) => (
                      <Fragment key={`a${a.n}c${i}`}>
                        <tr className={`call${c.carried ? " carried" : ""}`}>
                          <td />
                          <td colSpan={2}>{c.repair ? "repair: " : ""}{c.model}{c.provider ? ` (${c.provider})` : ""} {c.status}{c.carried ? " · before the loop went on" : ""}</td>
                          <td>{duration(c.latencyMs)}</td>
                          <td>{c.carried ? "" : money(c.costUsd)}</td>
                          <td>{c.tokensIn} / {c.tokensOut} tok{c.errorClass ? ` · ${c.errorClass}` : ""}</td>
                        </tr>
                        {c.tools.map((t, j) => (
                          <tr key={`a${a.n}c${i}t${j}`} className={`tool-call${t.failed ? " failed" : ""}`} aria-label={`tool call ${t.name}`}>
                            <td />
                            <td colSpan={2}>
                              <span className="muted">turn {t.turn} ·</span> <b>{t.name}</b> <code>{t.arguments}</code>
                              {t.approval && <span className="muted"> · {t.approval}</span>}
                            </td>
                            <td>{duration(t.latencyMs)}</td>
                            <td colSpan={2} className={t.failed ? "error" : ""}><Clip text={t.outcome} /></td>
                          </tr>
                        ))}
                      </Fragment>
                    ))}
                    {a.error && (
                      <tr key={`a${a.n}e`}><td /><td colSpan={5} className="error">{a.error}</td></tr>
                    )}
                  </Fragment>
                ))}
              </tbody>
            </table>
          )}
          {row.attempts.map((a) =>
            a.request || a.response ? (
              <div key={`io${a.n}`}>
                {a.request && (<><h4>Attempt {a.n}: request</h4><Json value={a.request} /></>)}
                {a.response && (<><h4>Attempt {a.n}: reply</h4><Folded text={a.response} /></>)}
              </div>
            ) : null,
          )}
          <h4>Input</h4>
          <Json value={row.step.input} />
          <h4>Output</h4>
          <Json value={row.step.output} />
          {canRerun && <button onClick={onRerun}>Re-run from {row.nodeId}</button>}
        </div>
      )}
    </li>
  );
}

/** The JSON object `text` holds, or null (not JSON, or not an object). */
function jsonObject(text: string): Record<string, unknown> | null {
  try {
    const v = JSON.parse(text);
    return v && typeof v === "object" && !Array.isArray(v) ? v : null;
  } catch {
    return null;
  }
}

/** One line of a long value, the whole of it on hover. */
function Clip({ text }: { text: string }) {
  const short = text.length > 120 ? `${text.slice(0, 120)}…` : text;
  return <span title={text}>{short}</span>;
}

function Json({ value }: { value: unknown }) {
  return <Folded text={JSON.stringify(value, null, 2) ?? "null"} />;
}

/** Long text folded to its first lines, copyable. */
function Folded({ text }: { text: string }) {
  const [all, setAll] = useState(false);
  const lines = text.split("\n");
  const long = lines.length > 12 || text.length > 1500;
  const shown = all || !long ? text : lines.slice(0, 12).join("\n").slice(0, 1500) + "\n…";
  return (
    <div className="folded">
      <pre>{shown}</pre>
      <div className="actions">
        {long && <button className="link" onClick={() => setAll(!all)}>{all ? "fold" : "show all"}</button>}
        <button className="link" onClick={() => void navigator.clipboard?.writeText(text)}>copy</button>
      </div>
    </div>
  );
}

/** The graph of the workflow version a run pins (runs of saved workflows). */
function usePinnedGraph(runId: string): Graph | null {
  const { api } = useSession();
  const [graph, setGraph] = useState<Graph | null>(null);
  useEffect(() => {
    let stop = false;
    (async () => {
      const found = await api.runs({ q: runId, limit: 5 });
      const s = found.runs.find((r) => r.run_id === runId);
      if (!s?.workflow_id || !s.version) return;
      const v = await api.request<{ source: string; format: string }>(
        "GET",
        `/api/workflows/${encodeURIComponent(s.workflow_id)}/versions/${s.version}`,
      );
      if (!stop) setGraph(toGraph(parseDocument(v.source, v.format)));
    })().catch(() => {});
    return () => {
      stop = true;
    };
  }, [api, runId]);
  return graph;
}
