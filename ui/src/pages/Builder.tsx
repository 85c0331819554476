// The builder: a graph-dialect workflow edited on the canvas (drag, connect, delete, a
// palette of every node type, a form per node type, undo / redo), validated as you edit
// through POST /api/validate with errors pinned on their nodes and fields, the source view
// kept in step, saved as a new version. Every dialect is edited on the canvas (see
// dialects.ts); machine and pipeline documents, which have no positions, are laid out by ELK.

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
import { allows, type ModelsOut, type WorkflowOut } from "../api";
import { useSession } from "../App";
import { editorFor } from "../dialects";
import { History, asGraphDoc, pin, serialize, type Diagnostic, type GraphDoc, type Pinned } from "../doc";
import { dialectOf, layout, parseDocument, toGraph } from "../graph";

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
  // The model picker offers the models the workspace prices and allows.
  const [models, setModels] = useState<string[]>(["mock"]);
  useEffect(() => {
    api.request<ModelsOut>("GET", "/api/models").then((m) => setModels(m.known), () => {});
  }, [api]);

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
  const gdoc = useMemo(() => asGraphDoc(doc), [doc]);
  const ed = useMemo(() => editorFor(doc), [doc]);
  const items = useMemo(() => ed.nodes(doc), [ed, doc]);
  const drawn = useMemo(() => toGraph(doc), [doc]);
  const pinned = useMemo(() => pin(diags.filter((d) => d.severity === "error" || d.node_id), items, ed.fields), [diags, items, ed]);

  // Machine and pipeline documents have no positions: ELK lays them out again when their
  // wiring changes, and a node the user moved stays where it was put (in this view only).
  const shape = ed.positions ? "" : JSON.stringify([drawn.nodes.map((n) => n.id), drawn.edges.map((e) => e.id)]);
  const [laid, setLaid] = useState<Map<string, { x: number; y: number }>>(new Map());
  const [placed, setPlaced] = useState<Map<string, { x: number; y: number }>>(new Map());
  useEffect(() => {
    if (!shape) return;
    let stop = false;
    void layout({ nodes: drawn.nodes.map((n) => ({ ...n, position: undefined })), edges: drawn.edges }).then((p) => !stop && setLaid(p));
    return () => {
      stop = true;
    };
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [shape]);

  // A drawn node keeps its identity while nothing it shows changed (a drag or an edit of
  // another node), so a change to one node of hundreds re-renders that node only.
  const cache = useRef(new Map<string, { key: unknown[]; node: Node }>());
  const base: Node[] = useMemo(() => {
    const labels = new Map(drawn.nodes.map((n) => [n.id, n.label]));
    const next = new Map<string, { key: unknown[]; node: Node }>();
    const out = items.map((n, i) => {
      const errs = pinned.get(n.id)?.filter((p) => p.severity === "error") ?? [];
      const label = labels.get(n.id) ?? n.id;
      const own = ed.positions ? gdoc.nodes[i]?.position : (placed.get(n.id) ?? laid.get(n.id));
      const position = own ?? { x: 60 + i * 40, y: 60 + i * 30 };
      const isSelected = selected.nodes.includes(n.id);
      const size = measured.get(n.id);
      const key = [n.type, label, errs[0]?.message, errs.length, position.x, position.y, isSelected, size];
      const hit = cache.current.get(n.id);
      if (hit && hit.key.length === key.length && hit.key.every((k, j) => k === key[j])) {
        next.set(n.id, hit);
        return hit.node;
      }
      const node: Node = {
        id: n.id,
        position,
        data: { label: `${label}\n${n.type}${errs.length ? `\n⚠ ${errs[0].message}` : ""}` },
        className: `wf-node ${n.type} ${errs.length ? "invalid" : ""}`,
        selected: isSelected,
        sourcePosition: Position.Right,
        targetPosition: Position.Left,
        ariaLabel: `node ${n.id}`,
        measured: size,
      };
      next.set(n.id, { key, node });
      return node;
    });
    cache.current = next;
    return out;
  }, [items, drawn, pinned, ed, gdoc, placed, laid, selected, measured]);
  const nodes = useMemo(() => (dragging.size === 0 ? base : base.map((n) => (dragging.has(n.id) ? { ...n, position: dragging.get(n.id)! } : n))), [base, dragging]);
  const edgeCache = useRef(new Map<string, Edge>());
  const edges: Edge[] = useMemo(() => {
    const next = new Map<string, Edge>();
    const out = drawn.edges.map((e) => {
      const isSelected = selected.edges.includes(e.id);
      const hit = edgeCache.current.get(e.id);
      const edge =
        hit && hit.source === e.source && hit.target === e.target && hit.label === e.label && hit.selected === isSelected && hit.className === (e.back ? "back" : "")
          ? hit
          : { id: e.id, source: e.source, target: e.target, label: e.label, selected: isSelected, markerEnd: { type: MarkerType.ArrowClosed }, className: e.back ? "back" : "" };
      next.set(e.id, edge);
      return edge;
    });
    edgeCache.current = next;
    return out;
  }, [drawn, selected]);

  const onNodesChange = (changes: NodeChange[]) => {
    const picks = changes.filter((c) => c.type === "select");
    const drag = new Map(dragging);
    let sizes: Map<string, { width: number; height: number }> | null = null;
    for (const c of changes) {
      if (c.type === "dimensions" && c.dimensions) {
        sizes ??= new Map(measured);
        sizes.set(c.id, c.dimensions);
      }
      if (c.type === "position" && c.position) drag.set(c.id, c.position);
    }
    if (sizes) setMeasured(sizes);
    if (changes.some((c) => c.type === "position")) setDragging(drag);
    // Functional updates: xyflow reports an edge's and the nodes' selection changes in one
    // tick, and each must see the other's.
    if (picks.length)
      setSelected((sel) => {
        let nodes = sel.nodes;
        for (const c of picks) if (c.type === "select") nodes = c.selected ? [...nodes.filter((n) => n !== c.id), c.id] : nodes.filter((n) => n !== c.id);
        return { ...sel, nodes };
      });
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
  const one = selected.nodes.length === 1 ? items.find((n) => n.id === selected.nodes[0]) : undefined;
  const edge = !one && selected.edges.length === 1 ? drawn.edges.find((e) => e.id === selected.edges[0]) : undefined;
  const renamable = edge && ed.setSelector && (dialect === "graph" || (dialect === "machine" && edge.route !== undefined));
  return (
    <section className="builder">
      <h2>
        {String((doc as { name?: string })?.name ?? "Untitled")} <span className="muted">{id ?? "new"} · {dialect}</span>
      </h2>
      <div className="toolbar">
        {ed.palette.map((p) => (
            <button
              key={p.type}
              title={p.title}
              onClick={() => {
                const [d, nid] = ed.add(doc, p.type, { x: 40 + items.length * 220, y: 80 + (items.length % 2) * 60 });
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
        {(
          <div className="canvas edit" data-testid="builder-canvas">
            <ReactFlow
              // Fit the view again once ELK's first layout arrives (a machine or pipeline
              // document is drawn at placeholder positions until then).
              key={ed.positions ? "doc" : laid.size ? "laid" : "pending"}
              nodes={nodes}
              edges={edges}
              onNodesChange={onNodesChange}
              onEdgesChange={(cs) => {
                const picks = cs.filter((c) => c.type === "select");
                if (picks.length)
                  setSelected((sel) => {
                    let edges = sel.edges;
                    for (const c of picks) if (c.type === "select") edges = c.selected ? [...edges.filter((x) => x !== c.id), c.id] : edges.filter((x) => x !== c.id);
                    return { ...sel, edges };
                  });
              }}
              onNodeDragStop={(_, __, moved) => {
                const moves = new Map(moved.map((n) => [n.id, n.position]));
                if (ed.move) change(ed.move(doc, moves));
                else setPlaced(new Map([...placed, ...moves]));
                setDragging(new Map());
              }}
              onConnect={(c: Connection) => c.source && c.target && change(ed.connect(doc, c.source, c.target))}
              onDelete={({ nodes: ns, edges: es }) => {
                change(ed.remove(doc, ns.map((n) => n.id), es.map((e) => e.id)));
                setSelected({ nodes: [], edges: [] });
              }}
              deleteKeyCode={["Delete", "Backspace"]}
              fitView
              minZoom={0.1}
              onlyRenderVisibleElements={items.length > 200}
              proOptions={{ hideAttribution: true }}
            >
              <Background />
              <Controls />
            </ReactFlow>
          </div>
        )}
        <aside className="panel">
          {one ? (
            <>
              <NodeForm key={one.id} node={one} models={models} fields={ed.fields(one.type)} pinned={pinned.get(one.id) ?? []} onSet={(k, v) => change(ed.set(doc, one.id, k, v), `${one.id}.${k}`)} />
              {ed.reorder && (
                <div className="toolbar">
                  <button onClick={() => change(ed.reorder!(doc, one.id, -1))}>Move earlier</button>
                  <button onClick={() => change(ed.reorder!(doc, one.id, 1))}>Move later</button>
                </div>
              )}
            </>
          ) : edge ? (
            renamable ? (
              <SelectorField key={edge.id} edge={edge} onCommit={(sel) => change(ed.setSelector!(doc, edge.id, sel))} />
            ) : (
              <p className="muted">
                {edge.source} → {edge.target}
                {dialect === "pipeline" ? (edge.route ? ` (the gate's ${edge.route}: delete it to continue instead)` : " (the order of the steps: move a step to change it)") : " (next: delete it, or connect another node)"}
              </p>
            )
          ) : (
            <p className="muted">{HINT[dialect]}</p>
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

const HINT: Record<string, string> = {
  graph: "Select a node to edit it; drag from a node's right handle to another to connect them; Delete removes the selection.",
  machine:
    "Select a node to edit it; connecting sets a node's next, or fills the first route of its on: map not yet wired (true / false, approved / rejected, the enum's routes). Delete removes the selection. Machine documents have no positions: ELK lays them out.",
  pipeline:
    "Steps run in order. Connecting a step to another than its successor adds a gate that jumps there (edit its if: condition in the form); Delete removes a step or a jump.",
};

const JSON_FIELDS = ["params", "response_schema", "output", "validator", "fields", "if"];
const NUMBER_FIELDS = ["timeout_seconds", "retry_count", "temperature", "max_tokens", "max_iterations", "maxRetries", "agentCount", "quorum", "nodes"];
const LONG_FIELDS = ["system_prompt", "user_message", "prompt", "expression", "system", "systemPrompt", "script"];

function SelectorField({ edge, onCommit }: { edge: { source: string; target: string; label?: string }; onCommit: (sel: string) => void }) {
  const [v, setV] = useState(edge.label ?? "");
  const commit = () => v !== (edge.label ?? "") && onCommit(v);
  return (
    <label>
      Selector of {edge.source} → {edge.target}
      <input aria-label="edge selector" value={v} onChange={(e) => setV(e.target.value)} onBlur={commit} onKeyDown={(e) => e.key === "Enter" && commit()} />
    </label>
  );
}

function NodeForm({ node, models, fields, pinned, onSet }: { node: { id: string; type: string; config?: Record<string, unknown> }; models: string[]; fields: string[]; pinned: Pinned[]; onSet: (k: string, v: unknown) => void }) {
  const cfg = node.config ?? {};
  const errorOf = (k: string) => pinned.find((p) => p.field === k);
  const rest = pinned.filter((p) => !p.field || !fields.includes(p.field));
  return (
    <form className="node-form" onSubmit={(e) => e.preventDefault()} aria-label={`node ${node.id}`}>
      <h3>{node.id} <span className="muted">{node.type}</span></h3>
      {fields.map((k) => {
        const err = errorOf(k);
        const json = JSON_FIELDS.includes(k);
        const number = NUMBER_FIELDS.includes(k);
        const long = LONG_FIELDS.includes(k);
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
        {models.map((m) => (
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
