// One saved workflow: its graph (drawn from the document of any dialect) and its source.

import { useEffect, useMemo, useState } from "react";
import type { WorkflowOut } from "../api";
import { useSession } from "../App";
import { Canvas } from "../Canvas";
import { parseDocument, toGraph } from "../graph";

export function WorkflowPage({ id }: { id: string }) {
  const { api, go } = useSession();
  const [wf, setWf] = useState<WorkflowOut | null>(null);
  const [error, setError] = useState<string | null>(null);
  useEffect(() => {
    api.request<WorkflowOut>("GET", `/api/workflows/${encodeURIComponent(id)}`).then(setWf, (e) => setError(String(e)));
  }, [api, id]);
  const graph = useMemo(() => {
    if (!wf) return null;
    try {
      return toGraph(parseDocument(wf.source, wf.format));
    } catch (e) {
      setError(`cannot read the document: ${e}`);
      return null;
    }
  }, [wf]);
  if (error) return <p className="error">{error}</p>;
  if (!wf || !graph) return <p className="muted">Loading…</p>;
  return (
    <section>
      <h2>
        {wf.name} <span className="muted">v{wf.version} · {wf.dialect}</span>
      </h2>
      <div className="actions">
        <button onClick={() => go(`/workflows/${wf.id}/edit`)}>Edit</button>
      </div>
      <Canvas graph={graph} />
      <h3>Source ({wf.format})</h3>
      <pre className="source">{wf.source}</pre>
    </section>
  );
}
