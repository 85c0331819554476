// The builder: a graph-dialect workflow edited on the canvas (drag, connect, delete, a
// palette of every node type, a form per node type, undo / redo), validated as you edit
// through POST /api/validate with errors pinned on their nodes and fields, the source view
// kept in step, saved as a new version. Machine and pipeline documents are edited in their
// source, with the canvas laid out from it.

import {
  Background,
  Controls,
  MarkerType,
  Position,
  ReactFlow,
  type Connection,
  type Edge,
  type Node,
  type NodeChange,
} from "@xyflow/react";
import "@xyflow/react/dist/style.css";
import { useCallback, useEffect, useMemo, useRef, useState } from "react";
import { allows, type WorkflowOut } from "../api";
import { useSession } from "../App";
import { Canvas } from "../Canvas";
import {
  FIELDS_OF,
  History,
  PALETTE,
  addNode,
  asGraphDoc,
  connect,
  moveNodes,
  pin,
  remove,
  serialize,
  setConfig,
  setSelector,
  type Diagnostic,
  type GraphDoc,
  type Pinned,
} from "../doc";
import { dialectOf, parseDocument, toGraph } from "../graph";

const BLANK: GraphDoc = { name: "New workflow", nodes: [], edges: [] };

export function BuilderPage({ id }: { id: string | null }) {
  const { api, session, go } = useSession();
  const [format, setFormat] = useState("json");
  const history = useRef(new History<unknown>(BLANK));
  const [doc, setDoc] = useState<unknown>(BLANK);
  const [text, setText] = useState(serialize(BLANK, "json"));
  const [loaded, setLoaded] = useState(id === null);
  const [diags, setDiags] = useState<Diagnostic[]>([]);
  const [selected, setSelected] = useState<{ nodes: string[]; edges: string[] }>({ nodes: [], edges: [] });
  const [dragging, setDragging] = useState<Map<string, { x: number; y: number }>>(new Map());
  // The sizes the canvas measured (a controlled flow keeps them, or it hides its nodes).
  const [measured, setMeasured] = useState<Map<string, { width: number; height: number }>>(new Map());
  const [message, setMessage] = useState<string | null>(null);
  const [newId, setNewId] = useState("");

  useEffect(() => {
    if (id === null) return;
    api.request<WorkflowOut>("GET", `/api/workflows/${encodeURIComponent(id)}`).then(
      (wf) => {
        const d = parseDocument(wf.source, wf.format);
        history.current = new History<unknown>(d);
        setFormat(wf.format);
        setDoc(d);
        setText(wf.source);
        setLoaded(true);
      },
      (e) => setMessage(String(e)),
    );
  }, [api, id]);

  // Typing in one field is one undo step: its first keystroke pushes, the rest amend.
  const typing = useRef<string | null>(null);
  const change = useCallback(
    (next: unknown, field?: string) => {
      const d = field !== undefined && typing.current === field ? history.current.amend(next) : history.current.push(next);
      typing.current = field ?? null;
      setDoc(d);
      setText(serialize(d, format));
    },
    [format],
  );
  const undo = () => {
    const d = history.current.undo();
    setDoc(d);
    setText(serialize(d, format));
  };
  const redo = () => {
    const d = history.current.redo();
    setDoc(d);
    setText(serialize(d, format));
  };

  // Validate as you edit (debounced), on the server's own compiler.
  useEffect(() => {
    if (!loaded) return;
    const t = setTimeout(() => {
      api
        .document<{ errors: Diagnostic[]; warnings: Diagnostic[] }>("POST", "/api/validate", text, format)
        .then((v) => setDiags([...v.errors, ...v.warnings]), () => {});
    }, 350);
    return () => clearTimeout(t);
  }, [api, text, format, loaded]);

  useEffect(() => {
    const on = (e: KeyboardEvent) => {
      if (!(e.ctrlKey || e.metaKey) || (e.target as HTMLElement)?.closest?.("input, textarea")) return;
      if (e.key === "z" && !e.shiftKey) (e.preventDefault(), undo());
      if ((e.key === "z" && e.shiftKey) || e.key === "y") (e.preventDefault(), redo());
    };
    window.addEventListener("keydown", on);
    return () => window.removeEventListener("keydown", on);
  });

  const dialect = dialectOf(doc);
  const editable = dialect === "graph";
  const gdoc = useMemo(() => asGraphDoc(doc), [doc]);
  const pinned = useMemo(() => pin(diags.filter((d) => d.severity === "error" || d.node_id), gdoc), [diags, gdoc]);

  const nodes: Node[] = gdoc.nodes.map((n, i) => {
    const errs = pinned.get(n.id)?.filter((p) => p.severity === "error") ?? [];
    const label = String(n.config?.label ?? n.id);
    return {
      id: n.id,
      position: dragging.get(n.id) ?? n.position ?? { x: 60 + i * 40, y: 60 + i * 30 },
      data: { label: `${label}\n${n.type}${errs.length ? `\n⚠ ${errs[0].message}` : ""}` },
      className: `wf-node ${n.type} ${errs.length ? "invalid" : ""}`,
      selected: selected.nodes.includes(n.id),
      sourcePosition: Position.Right,
      targetPosition: Position.Left,
      ariaLabel: `node ${n.id}`,
      measured: measured.get(n.id),
    };
  });
  const edges: Edge[] = gdoc.edges.map((e) => ({
    id: e.id,
    source: e.source,
    target: e.target,
    label: e.condition_value ?? e.label,
    selected: selected.edges.includes(e.id),
    markerEnd: { type: MarkerType.ArrowClosed },
  }));

  const onNodesChange = (changes: NodeChange[]) => {
    let sel = selected;
    const drag = new Map(dragging);
    let sizes: Map<string, { width: number; height: number }> | null = null;
    for (const c of changes) {
      if (c.type === "dimensions" && c.dimensions) {
        sizes ??= new Map(measured);
        sizes.set(c.id, c.dimensions);
      }
      if (c.type === "position" && c.position) drag.set(c.id, c.position);
      if (c.type === "select") {
        const rest = sel.nodes.filter((n) => n !== c.id);
        sel = { ...sel, nodes: c.selected ? [...rest, c.id] : rest };
      }
    }
    if (sizes) setMeasured(sizes);
    if (changes.some((c) => c.type === "position")) setDragging(drag);
    if (sel !== selected) setSelected(sel);
  };

  const save = async () => {
    try {
      const saved = id
        ? await api.document<WorkflowOut>("PUT", `/api/workflows/${encodeURIComponent(id)}`, text, format)
        : await api.document<WorkflowOut>("POST", `/api/workflows${newId ? `?id=${encodeURIComponent(newId)}` : ""}`, text, format);
      setMessage(`saved as version ${saved.version}`);
      if (!id) go(`/workflows/${saved.id}/edit`);
    } catch (e) {
      setMessage(String(e));
    }
  };

  if (!loaded) return <p className="muted">{message ?? "Loading…"}</p>;
  const errors = diags.filter((d) => d.severity === "error");
  const one = selected.nodes.length === 1 ? gdoc.nodes.find((n) => n.id === selected.nodes[0]) : undefined;
  const edge = !one && selected.edges.length === 1 ? gdoc.edges.find((e) => e.id === selected.edges[0]) : undefined;
  return (
    <section className="builder">
      <h2>
        {String((doc as { name?: string })?.name ?? "Untitled")} <span className="muted">{id ?? "new"} · {dialect}</span>
      </h2>
      <div className="toolbar">
        {editable &&
          PALETTE.map((p) => (
            <button
              key={p.type}
              title={`add a ${p.type} node`}
              onClick={() => {
                const [d, nid] = addNode(gdoc, p.type, { x: 40 + gdoc.nodes.length * 220, y: 80 + (gdoc.nodes.length % 2) * 60 });
                change(d);
                setSelected({ nodes: [nid], edges: [] });
              }}
            >
              + {p.type}
            </button>
          ))}
        <button onClick={undo} disabled={!history.current.canUndo} title="Ctrl+Z">Undo</button>
        <button onClick={redo} disabled={!history.current.canRedo} title="Ctrl+Shift+Z">Redo</button>
        {!id && <input aria-label="workflow id" placeholder="id (optional)" value={newId} onChange={(e) => setNewId(e.target.value)} />}
        {allows(session.scope, "admin") && (
          <button className="approve" onClick={() => void save()}>{id ? "Save version" : "Create"}</button>
        )}
        <span className={errors.length ? "error" : "ok"} role="status">
          {errors.length ? `${errors.length} error${errors.length > 1 ? "s" : ""}` : "valid"}
        </span>
        {message && <span className="muted">{message}</span>}
      </div>
      <div className="builder-main">
        {editable ? (
          <div className="canvas edit" data-testid="builder-canvas">
            <ReactFlow
              nodes={nodes}
              edges={edges}
              onNodesChange={onNodesChange}
              onEdgesChange={(cs) => {
                let sel = selected;
                for (const c of cs)
                  if (c.type === "select") {
                    const rest = sel.edges.filter((x) => x !== c.id);
                    sel = { ...sel, edges: c.selected ? [...rest, c.id] : rest };
                  }
                if (sel !== selected) setSelected(sel);
              }}
              onNodeDragStop={(_, __, moved) => {
                change(moveNodes(gdoc, new Map(moved.map((n) => [n.id, n.position]))));
                setDragging(new Map());
              }}
              onConnect={(c: Connection) => c.source && c.target && change(connect(gdoc, c.source, c.target))}
              onDelete={({ nodes: ns, edges: es }) => {
                change(remove(gdoc, ns.map((n) => n.id), es.map((e) => e.id)));
                setSelected({ nodes: [], edges: [] });
              }}
              deleteKeyCode={["Delete", "Backspace"]}
              fitView
              minZoom={0.1}
              proOptions={{ hideAttribution: true }}
            >
              <Background />
              <Controls />
            </ReactFlow>
          </div>
        ) : (
          <Canvas graph={toGraph(doc)} />
        )}
        <aside className="panel">
          {one ? (
            <NodeForm key={one.id} node={one} pinned={pinned.get(one.id) ?? []} onSet={(k, v) => change(setConfig(gdoc, one.id, k, v), `${one.id}.${k}`)} />
          ) : edge ? (
            <label>
              Selector of {edge.source} → {edge.target}
              <input aria-label="edge selector" value={String(edge.condition_value ?? edge.label ?? "")} onChange={(e) => change(setSelector(gdoc, edge.id, e.target.value), `${edge.id}.selector`)} />
            </label>
          ) : (
            <p className="muted">{editable ? "Select a node to edit it; drag from a node's right handle to another to connect them; Delete removes the selection." : "This dialect is edited in its source below."}</p>
          )}
          {(pinned.get("") ?? []).map((p, i) => (
            <p key={i} className="error">{p.code}: {p.message}</p>
          ))}
        </aside>
      </div>
      <h3>Source ({format})</h3>
      <textarea
        aria-label="source"
        className="source"
        rows={18}
        value={text}
        onChange={(e) => {
          setText(e.target.value);
          try {
            const d = parseDocument(e.target.value, format);
            history.current.push(d);
            setDoc(d);
          } catch {
            // not a document yet: the validator says where
          }
        }}
      />
    </section>
  );
}

function NodeForm({ node, pinned, onSet }: { node: { id: string; type: string; config?: Record<string, unknown> }; pinned: Pinned[]; onSet: (k: string, v: unknown) => void }) {
  const cfg = node.config ?? {};
  const errorOf = (k: string) => pinned.find((p) => p.field === k);
  const rest = pinned.filter((p) => !p.field || !FIELDS_OF(node.type).includes(p.field));
  return (
    <form className="node-form" onSubmit={(e) => e.preventDefault()} aria-label={`node ${node.id}`}>
      <h3>{node.id} <span className="muted">{node.type}</span></h3>
      {FIELDS_OF(node.type).map((k) => {
        const err = errorOf(k);
        const json = k === "params" || k === "response_schema" || k === "output";
        const number = ["timeout_seconds", "retry_count", "temperature", "max_tokens", "max_iterations"].includes(k);
        const long = ["system_prompt", "user_message", "prompt", "expression"].includes(k);
        const value = cfg[k];
        return (
          <label key={k} className={err ? "invalid" : ""}>
            {k}
            {json ? (
              <JsonField value={value} onValid={(v) => onSet(k, v)} label={k} />
            ) : long ? (
              <textarea aria-label={k} rows={3} value={String(value ?? "")} onChange={(e) => onSet(k, e.target.value)} />
            ) : (
              <input
                aria-label={k}
                list={k === "model" ? "models" : undefined}
                type={number ? "number" : "text"}
                value={value === undefined ? "" : String(value)}
                onChange={(e) => onSet(k, number && e.target.value !== "" ? Number(e.target.value) : e.target.value)}
              />
            )}
            {err && <span className="error">{err.message}{err.hint ? ` (${err.hint})` : ""}</span>}
          </label>
        );
      })}
      <datalist id="models">
        {["mock", "claude-haiku-4-5", "claude-sonnet-4-5", "gpt-4o", "gpt-4o-mini"].map((m) => (
          <option key={m} value={m} />
        ))}
      </datalist>
      {rest.map((p, i) => (
        <p key={i} className="error">{p.code}: {p.message}</p>
      ))}
    </form>
  );
}

function JsonField({ value, onValid, label }: { value: unknown; onValid: (v: unknown) => void; label: string }) {
  const [text, setText] = useState(value === undefined ? "" : JSON.stringify(value, null, 2));
  const [bad, setBad] = useState(false);
  return (
    <>
      <textarea
        aria-label={label}
        rows={4}
        value={text}
        onChange={(e) => {
          setText(e.target.value);
          if (e.target.value.trim() === "") return (setBad(false), onValid(undefined));
          try {
            onValid(JSON.parse(e.target.value));
            setBad(false);
          } catch {
            setBad(true);
          }
        }}
      />
      {bad && <span className="error">not JSON yet</span>}
    </>
  );
}
