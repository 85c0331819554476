// A workflow document of any dialect as a graph to draw: nodes (with the `position` a graph
// document gives them) and edges with their selectors; ELK lays out what has no position
// (machine and pipeline documents).

import { parse as parseYaml } from "yaml";

export interface GNode {
  id: string;
  type: string;
  label: string;
  position?: { x: number; y: number };
  /** The machine's `start`, a graph's entry nodes. */
  entry?: boolean;
}

export interface GEdge {
  id: string;
  source: string;
  target: string;
  /** The selector: `true` / `false`, `approved` / `rejected`, a route, `else`, … */
  label?: string;
  /** A jump back (pipeline) or a loop's return edge. */
  back?: boolean;
  /** Which key of the document wires it: a machine's `on:` route, a pipeline gate's
   * `then` / `else`; none for a machine's `next` and a pipeline's order. */
  route?: string;
}

export interface Graph {
  nodes: GNode[];
  edges: GEdge[];
}

type Obj = Record<string, unknown>;
const obj = (v: unknown): Obj => (v && typeof v === "object" && !Array.isArray(v) ? (v as Obj) : {});
const str = (v: unknown): string | undefined => (typeof v === "string" ? v : undefined);

/** Parses a saved document (`json` or `yaml`). */
export function parseDocument(source: string, format: string): unknown {
  return format === "json" ? JSON.parse(source) : parseYaml(source);
}

/** Which dialect a document is (as weir detects it). */
export function dialectOf(doc: unknown): "graph" | "machine" | "pipeline" {
  const d = obj(doc);
  if (d.dialect === "machine" || d.dialect === "pipeline" || d.dialect === "graph") return d.dialect;
  if (Array.isArray(d.steps)) return "pipeline";
  if (d.nodes && !Array.isArray(d.nodes)) return "machine";
  return "graph";
}

export function toGraph(doc: unknown): Graph {
  const d = obj(doc);
  switch (dialectOf(doc)) {
    case "machine":
      return machine(d);
    case "pipeline":
      return pipeline(d);
    default:
      return graph(d);
  }
}

function graph(d: Obj): Graph {
  const nodes = (Array.isArray(d.nodes) ? d.nodes : []).map((n): GNode => {
    const o = obj(n);
    const p = obj(o.position);
    return {
      id: String(o.id),
      type: String(o.type ?? "agent"),
      label: str(obj(o.config).label) ?? str(o.label) ?? String(o.id),
      position: typeof p.x === "number" && typeof p.y === "number" ? { x: p.x, y: p.y } : undefined,
    };
  });
  const edges = (Array.isArray(d.edges) ? d.edges : []).map((e, i): GEdge => {
    const o = obj(e);
    const sel = o.condition_value ?? o.label;
    return {
      id: str(o.id) ?? `e${i}`,
      source: String(o.source),
      target: String(o.target),
      label: sel === undefined || sel === null ? undefined : String(sel),
    };
  });
  const targets = new Set(edges.map((e) => e.target));
  for (const n of nodes) n.entry = !targets.has(n.id);
  return { nodes, edges };
}

function machine(d: Obj): Graph {
  const map = obj(d.nodes);
  const ids = Object.keys(map);
  const start = str(d.start) ?? ids[0];
  const nodes: GNode[] = ids.map((id) => {
    const n = obj(map[id]);
    return { id, type: String(n.type ?? "?"), label: str(n.label) ?? id, entry: id === start };
  });
  const edges: GEdge[] = [];
  for (const id of ids) {
    const n = obj(map[id]);
    const next = str(n.next);
    if (next) edges.push({ id: `${id}->${next}`, source: id, target: next });
    for (const [route, target] of Object.entries(obj(n.on))) {
      if (typeof target === "string") edges.push({ id: `${id}-${route}->${target}`, source: id, target, label: route, route });
    }
  }
  return { nodes, edges };
}

function pipeline(d: Obj): Graph {
  const steps = (Array.isArray(d.steps) ? d.steps : []).map(obj);
  const nodes: GNode[] = steps.map((s, i) => ({
    id: String(s.id),
    type: "step",
    label: str(s.label) ?? String(s.id),
    entry: i === 0,
  }));
  const index = new Map(nodes.map((n, i) => [n.id, i]));
  const edges: GEdge[] = [];
  steps.forEach((s, i) => {
    const id = String(s.id);
    const next = nodes[i + 1]?.id;
    const gate = obj(s.if);
    const branch = (which: "then" | "else") => {
      const b = gate[which];
      const jump = str(obj(obj(b).jump).stepId);
      if (jump) {
        edges.push({ id: `${id}-${which}->${jump}`, source: id, target: jump, label: which, back: (index.get(jump) ?? i + 1) <= i, route: which });
      } else if (b === "continue" && next) {
        edges.push({ id: `${id}-${which}->${next}`, source: id, target: next, label: which, route: which });
      }
    };
    if (s.if) {
      branch("then");
      branch("else");
    } else if (next) {
      edges.push({ id: `${id}->${next}`, source: id, target: next });
    }
  });
  return { nodes, edges };
}

/** Positions for every node: a graph document's own, else ELK's layered layout. */
export async function layout(g: Graph): Promise<Map<string, { x: number; y: number }>> {
  const out = new Map<string, { x: number; y: number }>();
  if (g.nodes.length > 0 && g.nodes.every((n) => n.position)) {
    for (const n of g.nodes) out.set(n.id, n.position!);
    return out;
  }
  const ids = new Set(g.nodes.map((n) => n.id));
  // ELK is large: loaded the first time a document without positions is drawn.
  const { default: ELK } = await import("elkjs/lib/elk.bundled.js");
  const laid = await new ELK().layout({
    id: "root",
    layoutOptions: {
      "elk.algorithm": "layered",
      "elk.direction": "RIGHT",
      "elk.spacing.nodeNode": "40",
      "elk.layered.spacing.nodeNodeBetweenLayers": "70",
    },
    children: g.nodes.map((n) => ({ id: n.id, width: 170, height: 56 })),
    edges: g.edges
      .filter((e) => ids.has(e.source) && ids.has(e.target))
      .map((e) => ({ id: e.id, sources: [e.source], targets: [e.target] })),
  });
  for (const c of laid.children ?? []) out.set(c.id, { x: c.x ?? 0, y: c.y ?? 0 });
  return out;
}
