// Editing a graph-dialect document as data: every canvas gesture is a pure function from one
// document to the next (so undo/redo is a stack of documents), and the source view is the
// document serialised in its own format.

import { stringify as toYaml } from "yaml";

export interface GraphDoc {
  name?: string;
  nodes: DocNode[];
  edges: DocEdge[];
  [k: string]: unknown;
}

export interface DocNode {
  id: string;
  type: string;
  position?: { x: number; y: number };
  config?: Record<string, unknown>;
  [k: string]: unknown;
}

export interface DocEdge {
  id: string;
  source: string;
  target: string;
  condition_value?: string;
  label?: string;
  [k: string]: unknown;
}

/** The node types of the graph dialect, with the config a new node starts with. */
export const PALETTE: { type: string; config: Record<string, unknown> }[] = [
  { type: "agent", config: { model: "mock", user_message: "" } },
  { type: "tool", config: { tool_name: "http_request", params: {} } },
  { type: "condition", config: { expression: "True" } },
  { type: "loop", config: { expression: "True", max_iterations: 3 } },
  { type: "human_gate", config: { prompt: "Approve to continue." } },
  { type: "merge", config: {} },
  { type: "end", config: { status: "succeeded" } },
];

export function asGraphDoc(doc: unknown): GraphDoc {
  const d = (doc && typeof doc === "object" ? doc : {}) as GraphDoc;
  return { ...d, nodes: Array.isArray(d.nodes) ? d.nodes : [], edges: Array.isArray(d.edges) ? d.edges : [] };
}

function freshId(taken: Set<string>, base: string): string {
  let n = 1;
  while (taken.has(`${base}${n}`)) n++;
  return `${base}${n}`;
}

export function addNode(doc: GraphDoc, type: string, position: { x: number; y: number }): [GraphDoc, string] {
  const spec = PALETTE.find((p) => p.type === type) ?? { type, config: {} };
  const id = freshId(new Set(doc.nodes.map((n) => n.id)), type === "human_gate" ? "gate" : type);
  const node: DocNode = { id, type, position: { x: Math.round(position.x), y: Math.round(position.y) }, config: structuredClone(spec.config) };
  return [{ ...doc, nodes: [...doc.nodes, node] }, id];
}

/** Moves nodes (a drag of a selection is one change). */
export function moveNodes(doc: GraphDoc, moves: Map<string, { x: number; y: number }>): GraphDoc {
  return {
    ...doc,
    nodes: doc.nodes.map((n) => {
      const p = moves.get(n.id);
      return p ? { ...n, position: { x: Math.round(p.x), y: Math.round(p.y) } } : n;
    }),
  };
}

/** An edge from `source` to `target`; after a condition or loop it gets the selector not yet
 * used (`true`, then `false`). */
export function connect(doc: GraphDoc, source: string, target: string): GraphDoc {
  if (source === target || doc.edges.some((e) => e.source === source && e.target === target)) return doc;
  const id = freshId(new Set(doc.edges.map((e) => e.id)), "e");
  const from = doc.nodes.find((n) => n.id === source);
  const edge: DocEdge = { id, source, target };
  if (from && (from.type === "condition" || from.type === "loop")) {
    const used = new Set(doc.edges.filter((e) => e.source === source).map((e) => String(e.condition_value ?? e.label)));
    edge.condition_value = used.has("true") ? "false" : "true";
  }
  return { ...doc, edges: [...doc.edges, edge] };
}

/** Deletes nodes (with every edge touching them) and edges, as one change. */
export function remove(doc: GraphDoc, nodes: string[], edges: string[]): GraphDoc {
  const gone = new Set(nodes);
  const cut = new Set(edges);
  return {
    ...doc,
    nodes: doc.nodes.filter((n) => !gone.has(n.id)),
    edges: doc.edges.filter((e) => !cut.has(e.id) && !gone.has(e.source) && !gone.has(e.target)),
  };
}

/** Sets (or, with `undefined`, removes) one config key of a node. */
export function setConfig(doc: GraphDoc, id: string, key: string, value: unknown): GraphDoc {
  return {
    ...doc,
    nodes: doc.nodes.map((n) => {
      if (n.id !== id) return n;
      const config = { ...(n.config ?? {}) };
      if (value === undefined || value === "") delete config[key];
      else config[key] = value;
      return { ...n, config };
    }),
  };
}

export function setSelector(doc: GraphDoc, edgeId: string, selector: string): GraphDoc {
  return {
    ...doc,
    edges: doc.edges.map((e) => {
      if (e.id !== edgeId) return e;
      const next = { ...e };
      delete next.label;
      if (selector) next.condition_value = selector;
      else delete next.condition_value;
      return next;
    }),
  };
}

export function serialize(doc: unknown, format: string): string {
  return format === "json" ? JSON.stringify(doc, null, 2) + "\n" : toYaml(doc);
}

/** Undo and redo over documents; history capped. */
export class History<T> {
  private past: T[] = [];
  private future: T[] = [];
  constructor(
    public current: T,
    private cap = 100,
  ) {}
  push(next: T): T {
    if (next === this.current) return this.current;
    this.past.push(this.current);
    if (this.past.length > this.cap) this.past.shift();
    this.future = [];
    this.current = next;
    return next;
  }
  /** Replaces the current document without a new undo step (the keystrokes of one field
   * after its first are one change). */
  amend(next: T): T {
    this.current = next;
    this.future = [];
    return next;
  }
  undo(): T {
    const prev = this.past.pop();
    if (prev !== undefined) {
      this.future.push(this.current);
      this.current = prev;
    }
    return this.current;
  }
  redo(): T {
    const next = this.future.pop();
    if (next !== undefined) {
      this.past.push(this.current);
      this.current = next;
    }
    return this.current;
  }
  get canUndo() {
    return this.past.length > 0;
  }
  get canRedo() {
    return this.future.length > 0;
  }
}

export interface Diagnostic {
  severity: string;
  code: string;
  message: string;
  node_id?: string;
  line?: number;
  column?: number;
  hint?: string;
}

export interface Pinned {
  code: string;
  message: string;
  hint?: string;
  /** The config key the diagnostic is about, when it says (a `quoted` key, or by its code). */
  field?: string;
  severity: string;
}

const BY_CODE: Record<string, string> = { E005: "tool_name" };

/** Diagnostics by node, each with the field it concerns when it can be told. */
export function pin(
  diags: Diagnostic[],
  nodes: { id: string; type: string; config?: Record<string, unknown> }[],
  fields: (type: string) => string[] = FIELDS_OF,
): Map<string, Pinned[]> {
  const out = new Map<string, Pinned[]>();
  for (const d of diags) {
    const key = d.node_id ?? "";
    const node = nodes.find((n) => n.id === d.node_id);
    const quoted = [...d.message.matchAll(/`([a-zA-Z_]+)`/g)].map((m) => m[1]);
    const known = new Set([...Object.keys(node?.config ?? {}), ...fields(node?.type ?? "")]);
    const field = quoted.find((q) => known.has(q)) ?? BY_CODE[d.code];
    const list = out.get(key) ?? [];
    list.push({ code: d.code, message: d.message, hint: d.hint, field, severity: d.severity });
    out.set(key, list);
  }
  return out;
}

/** The config keys the side panel's form offers for a node type. */
export function FIELDS_OF(type: string): string[] {
  const common = ["label", "timeout_seconds", "retry_count"];
  switch (type) {
    case "agent":
      return ["model", "system_prompt", "user_message", "output_key", "temperature", "max_tokens", "response_schema", ...common];
    case "tool":
      return ["tool_name", "params", "output_key", ...common];
    case "condition":
      return ["expression", ...common];
    case "loop":
      return ["expression", "max_iterations", ...common];
    case "human_gate":
      return ["prompt", ...common];
    case "end":
      return ["status", "output", ...common];
    default:
      return common;
  }
}
