// Saved workflows: the list, and a run started from one with an input form.

import { useEffect, useState } from "react";
import { allows, type WorkflowOut } from "../api";
import { useSession } from "../App";
import { since } from "../format";
import { parseDocument } from "../graph";
import { inputFields, inputValue, type InputField } from "../inputForm";

export function WorkflowsPage() {
  const { api, session, go } = useSession();
  const [list, setList] = useState<WorkflowOut[] | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [starting, setStarting] = useState<string | null>(null);
  const [input, setInput] = useState("{}");
  const [raw, setRaw] = useState<Record<string, string>>({});

  const reload = () => api.workflows().then(setList, (e) => setError(String(e)));
  useEffect(() => void reload(), [api]);

  /** Imports a workflow file of any dialect (JSON or YAML) as a new saved workflow. */
  const importFile = async (file: File) => {
    try {
      const text = await file.text();
      const format = text.trimStart().startsWith("{") ? "json" : "yaml";
      const id = file.name.replace(/\.(json|ya?ml)$/i, "").toLowerCase().replace(/[^a-z0-9_-]+/g, "-");
      const saved = await api.document<WorkflowOut>("POST", `/api/workflows?id=${encodeURIComponent(id)}`, text, format);
      go(`/workflows/${saved.id}`);
    } catch (e) {
      setError(String(e));
    }
  };

  const start = async (id: string, fields: InputField[] | null) => {
    try {
      let parsed: Record<string, unknown>;
      if (fields) {
        const { value, errors } = inputValue(fields, raw);
        if (errors.length) return setError(errors.join("; "));
        parsed = value;
      } else {
        parsed = JSON.parse(input);
      }
      const r = await api.start(id, parsed);
      go(`/runs/${r.run_id}`);
    } catch (e) {
      setError(String(e));
    }
  };

  return (
    <section>
      <h2>Workflows</h2>
      {allows(session.scope, "admin") && (
        <div className="actions">
          <button onClick={() => go("/workflows/new")}>New workflow</button>
          <label className="file">
            Import a file
            <input type="file" aria-label="import a workflow file" accept=".json,.yaml,.yml" onChange={(e) => e.target.files?.[0] && void importFile(e.target.files[0])} />
          </label>
        </div>
      )}
      {error && <p className="error" role="alert">{error}</p>}
      {list && list.length === 0 && <p className="muted">No saved workflows yet.</p>}
      <ul className="workflows">
        {list?.map((w) => (
          <li key={w.id}>
            <div className="row">
              <a href={`/workflows/${w.id}`} onClick={(e) => (e.preventDefault(), go(`/workflows/${w.id}`))}><b>{w.name}</b></a> <code>{w.id}</code>
              <span className="muted">{w.dialect} · v{w.version} · updated {since(w.updated_at)}</span>
              {allows(session.scope, "run") && (
                <button onClick={() => (setStarting(starting === w.id ? null : w.id), setInput("{}"), setRaw({}))}>Run…</button>
              )}
              {allows(session.scope, "admin") && (
                <button
                  className="link"
                  onClick={async () => {
                    if (!window.confirm(`Delete ${w.id}? Its runs keep the version they pinned.`)) return;
                    try {
                      await api.request("DELETE", `/api/workflows/${encodeURIComponent(w.id)}`);
                      await reload();
                    } catch (e) {
                      setError(String(e));
                    }
                  }}
                >
                  Delete {w.id}
                </button>
              )}
            </div>
            {starting === w.id && (() => {
              const fields = schemaFields(w);
              return (
                <form className="start" onSubmit={(e) => (e.preventDefault(), void start(w.id, fields))}>
                  {fields ? (
                    fields.map((f) => (
                      <label key={f.name}>
                        {f.name}{f.required ? " *" : ""} <span className="muted">{f.kind}{f.description ? ` · ${f.description}` : ""}</span>
                        {f.choices || f.kind === "boolean" ? (
                          <select aria-label={f.name} value={raw[f.name] ?? ""} onChange={(e) => setRaw({ ...raw, [f.name]: e.target.value })}>
                            <option value="" />
                            {(f.choices ?? ["true", "false"]).map((c) => <option key={c}>{c}</option>)}
                          </select>
                        ) : (
                          <input aria-label={f.name} value={raw[f.name] ?? ""} onChange={(e) => setRaw({ ...raw, [f.name]: e.target.value })} />
                        )}
                      </label>
                    ))
                  ) : (
                    <label>
                      Input (JSON)
                      <textarea aria-label="run input" rows={4} value={input} onChange={(e) => setInput(e.target.value)} />
                    </label>
                  )}
                  <button type="submit">Start run</button>
                </form>
              );
            })()}
          </li>
        ))}
      </ul>
    </section>
  );
}

/** The input form's fields, when the workflow declares an input schema (any dialect's top-level `input`). */
function schemaFields(w: WorkflowOut): InputField[] | null {
  try {
    const doc = parseDocument(w.source, w.format) as { input?: unknown };
    return inputFields(doc?.input);
  } catch {
    return null;
  }
}
