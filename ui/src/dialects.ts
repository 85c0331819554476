// One editor per dialect: the builder's gestures (add from the palette, connect, delete,
// set a field, rename a selector) as pure functions from a document to the next, whatever
// its dialect. A graph document keeps node positions; machine and pipeline documents have
// none (ELK lays them out), so moving their nodes changes the picture, not the document.

import * as graphDoc from "./doc";
import { dialectOf, toGraph, type GEdge } from "./graph";

type Obj = Record<string, unknown>;
const obj = (v: unknown): Obj => (v && typeof v === "object" && !Array.isArray(v) ? (v as Obj) : {});

/** A node as the side panel edits it: its id, its type and its editable fields. */
export interface EditNode {
  id: string;
  type: string;
  config: Obj;
}

export interface Editor {
  dialect: "graph" | "machine" | "pipeline";
  /** Every node type of the dialect, as the palette offers them. */
  palette: { type: string; title: string }[];
  /** Whether the document stores positions (a drag is an edit). */
  positions: boolean;
  nodes(doc: unknown): EditNode[];
  /** The fields the side panel's form offers for a node type. */
  fields(type: string): string[];
  add(doc: unknown, type: string, position: { x: number; y: number }): [unknown, string];
  connect(doc: unknown, source: string, target: string): unknown;
  /** Deletes nodes (and what points at them) and edges (by their ids in `toGraph`), as one change. */
  remove(doc: unknown, nodes: string[], edges: string[]): unknown;
  set(doc: unknown, id: string, key: string, value: unknown): unknown;
  /** Renames the selector of an edge (a graph's `condition_value`, a machine's route). */
  setSelector?(doc: unknown, edgeId: string, selector: string): unknown;
  /** Moves a step earlier (-1) or later (+1): order is a pipeline's wiring. */
  reorder?(doc: unknown, id: string, delta: number): unknown;
  move?(doc: unknown, moves: Map<string, { x: number; y: number }>): unknown;
}

export function editorFor(doc: unknown): Editor {
  switch (dialectOf(doc)) {
    case "machine":
      return MACHINE;
    case "pipeline":
      return PIPELINE;
    default:
      return GRAPH;
  }
}

function freshId(taken: Iterable<string>, base: string): string {
  const set = new Set(taken);
  let n = 1;
  while (set.has(`${base}${n}`)) n++;
  return `${base}${n}`;
}

const edgeOf = (doc: unknown, id: string): GEdge | undefined => toGraph(doc).edges.find((e) => e.id === id);
const put = (o: Obj, key: string, value: unknown): Obj => {
  const next = { ...o };
  if (value === undefined || value === "") delete next[key];
  else next[key] = value;
  return next;
};

const GRAPH: Editor = {
  dialect: "graph",
  palette: graphDoc.PALETTE.map((p) => ({ type: p.type, title: `add a ${p.type} node` })),
  positions: true,
  nodes: (doc) => graphDoc.asGraphDoc(doc).nodes.map((n) => ({ id: n.id, type: n.type, config: n.config ?? {} })),
  fields: graphDoc.FIELDS_OF,
  add: (doc, type, position) => graphDoc.addNode(graphDoc.asGraphDoc(doc), type, position),
  connect: (doc, s, t) => graphDoc.connect(graphDoc.asGraphDoc(doc), s, t),
  remove: (doc, ns, es) => graphDoc.remove(graphDoc.asGraphDoc(doc), ns, es),
  set: (doc, id, key, value) => graphDoc.setConfig(graphDoc.asGraphDoc(doc), id, key, value),
  setSelector: (doc, id, sel) => graphDoc.setSelector(graphDoc.asGraphDoc(doc), id, sel),
  move: (doc, moves) => graphDoc.moveNodes(graphDoc.asGraphDoc(doc), moves),
};

// ---- machine: `nodes` is a map of id → body; `next` or `on: {route: target}` wire it.

const MACHINE_NEW: Record<string, Obj> = {
  ai_agent: { model: "mock", prompt: "" },
  ai_judge: { model: "mock", prompt: "", validator: { kind: "boolean" }, on: {} },
  consensus: { model: "mock", prompt: "", agentCount: 3, validator: { kind: "boolean" }, on: {} },
  script: { runtime: "bun", script: "export default true;", validator: { kind: "boolean" }, on: {} },
  condition: { expression: "true", on: {} },
  human_gate: { prompt: "Approve to continue.", on: {} },
  end: { status: "succeeded" },
};

const MACHINE_FIELDS: Record<string, string[]> = {
  ai_agent: ["model", "system", "prompt", "temperature", "max_tokens", "maxRetries", "response_schema"],
  ai_judge: ["model", "system", "prompt", "temperature", "max_tokens", "maxRetries", "validator"],
  consensus: ["model", "system", "prompt", "temperature", "maxRetries", "validator", "agentCount", "quorum"],
  script: ["runtime", "script", "validator"],
  condition: ["expression"],
  human_gate: ["prompt"],
  end: ["status", "output"],
};

/** The routes a machine node's `on:` map must name, in the order connecting fills them. */
export function routesOf(body: Obj): string[] | null {
  const type = String(body.type ?? "");
  const v = obj(body.validator);
  if (type === "human_gate") return ["approved", "rejected"];
  if (type === "condition") return ["true", "false"];
  if (type === "ai_judge" || type === "consensus" || (type === "script" && body.validator)) {
    if (v.kind === "enum" && Array.isArray(v.routes)) return v.routes.map(String);
    return ["true", "false"];
  }
  return null; // follows `next`
}

const machineNodes = (doc: unknown): Obj => obj(obj(doc).nodes);
const withNodes = (doc: unknown, nodes: Obj): unknown => ({ ...obj(doc), nodes });

const MACHINE: Editor = {
  dialect: "machine",
  palette: Object.keys(MACHINE_NEW).map((type) => ({ type, title: `add a ${type} node` })),
  positions: false,
  nodes: (doc) =>
    Object.entries(machineNodes(doc)).map(([id, b]) => {
      const body = obj(b);
      return { id, type: String(body.type ?? "?"), config: body };
    }),
  fields: (type) => [...(MACHINE_FIELDS[type] ?? []), "label", "timeout_seconds", "retry_count"],
  add: (doc, type) => {
    const nodes = machineNodes(doc);
    const id = freshId(Object.keys(nodes), type === "human_gate" ? "gate" : type.replace("ai_", ""));
    return [withNodes(doc, { ...nodes, [id]: { type, ...structuredClone(MACHINE_NEW[type] ?? {}) } }), id];
  },
  connect: (doc, s, t) => {
    const nodes = machineNodes(doc);
    const body = obj(nodes[s]);
    if (s === t || !nodes[t] || body.type === "end") return doc;
    const routes = routesOf(body);
    if (!routes) return withNodes(doc, { ...nodes, [s]: { ...body, next: t } });
    const on = obj(body.on);
    const free = routes.find((r) => !(r in on));
    if (free === undefined) return doc;
    return withNodes(doc, { ...nodes, [s]: { ...body, on: { ...on, [free]: t } } });
  },
  remove: (doc, ns, es) => {
    const gone = new Set(ns);
    const cuts = es.map((e) => edgeOf(doc, e)).filter((e): e is GEdge => !!e);
    const out: Obj = {};
    for (const [id, b] of Object.entries(machineNodes(doc))) {
      if (gone.has(id)) continue;
      let body = { ...obj(b) };
      const mine = cuts.filter((c) => c.source === id);
      if (typeof body.next === "string" && (gone.has(body.next) || mine.some((c) => c.route === undefined))) delete body.next;
      if (body.on) {
        const on: Obj = {};
        for (const [route, target] of Object.entries(obj(body.on)))
          if (!gone.has(String(target)) && !mine.some((c) => c.route === route)) on[route] = target;
        body = { ...body, on };
      }
      out[id] = body;
    }
    let next = withNodes(doc, out) as Obj;
    if (typeof next.start === "string" && gone.has(next.start)) next = put(next, "start", undefined);
    return next;
  },
  set: (doc, id, key, value) => {
    const nodes = machineNodes(doc);
    return withNodes(doc, { ...nodes, [id]: put(obj(nodes[id]), key, value) });
  },
  setSelector: (doc, edgeId, sel) => {
    const e = edgeOf(doc, edgeId);
    if (!e || e.route === undefined || !sel) return doc;
    const nodes = machineNodes(doc);
    const body = obj(nodes[e.source]);
    const on: Obj = {};
    for (const [route, target] of Object.entries(obj(body.on))) on[route === e.route ? sel : route] = target;
    return withNodes(doc, { ...nodes, [e.source]: { ...body, on } });
  },
};

// ---- pipeline: `steps` run in order; a gate's `then` / `else` continues, aborts or jumps.

const steps = (doc: unknown): Obj[] => (Array.isArray(obj(doc).steps) ? (obj(doc).steps as unknown[]).map(obj) : []);
const withSteps = (doc: unknown, s: Obj[]): unknown => ({ ...obj(doc), steps: s });
const jumpOf = (branch: unknown): string | undefined => {
  const j = obj(obj(branch).jump).stepId;
  return typeof j === "string" ? j : undefined;
};

const PIPELINE: Editor = {
  dialect: "pipeline",
  palette: [
    { type: "step", title: "add a step (one model call)" },
    { type: "parallel", title: "add a step of parallel calls (nodes: 3)" },
  ],
  positions: false,
  nodes: (doc) => steps(doc).map((s) => ({ id: String(s.id), type: typeof s.nodes === "number" && s.nodes > 1 ? "parallel" : "step", config: s })),
  fields: () => ["label", "model", "systemPrompt", "fields", "nodes", "if", "temperature", "max_tokens", "timeout_seconds", "retry_count"],
  add: (doc, type) => {
    const s = steps(doc);
    const id = freshId(
      s.map((x) => String(x.id)),
      "step",
    );
    const step: Obj = { id, fields: [{ name: "Input", type: "text", from: "input.question" }], systemPrompt: "" };
    if (type === "parallel") step.nodes = 3;
    return [withSteps(doc, [...s, step]), id];
  },
  connect: (doc, source, target) => {
    const s = steps(doc);
    const i = s.findIndex((x) => x.id === source);
    const j = s.findIndex((x) => x.id === target);
    if (i < 0 || j < 0 || i === j) return doc;
    const gate = obj(s[i].if);
    if (!s[i].if && j === i + 1) return doc; // already its successor
    const jump = { jump: { stepId: target } };
    let next: Obj;
    if (!s[i].if) next = { expression: "true", then: jump, else: "continue" };
    else if (jumpOf(gate.then) === target || jumpOf(gate.else) === target) return doc;
    else if (!jumpOf(gate.then)) next = { ...gate, then: jump };
    else if (!jumpOf(gate.else)) next = { ...gate, else: jump };
    else return doc;
    return withSteps(
      doc,
      s.map((x, k) => (k === i ? { ...x, if: next } : x)),
    );
  },
  remove: (doc, ns, es) => {
    const gone = new Set(ns);
    const cuts = es.map((e) => edgeOf(doc, e)).filter((e): e is GEdge => !!e && !!e.route);
    return withSteps(
      doc,
      steps(doc)
        .filter((x) => !gone.has(String(x.id)))
        .map((x) => {
          if (!x.if) return x;
          const gate = { ...obj(x.if) };
          for (const b of ["then", "else"] as const) {
            const j = jumpOf(gate[b]);
            if ((j && gone.has(j)) || cuts.some((c) => c.source === x.id && c.route === b)) gate[b] = "continue";
          }
          return { ...x, if: gate };
        }),
    );
  },
  set: (doc, id, key, value) =>
    withSteps(
      doc,
      steps(doc).map((x) => (x.id === id ? put(x, key, value) : x)),
    ),
  reorder: (doc, id, delta) => {
    const s = [...steps(doc)];
    const i = s.findIndex((x) => x.id === id);
    const j = i + delta;
    if (i < 0 || j < 0 || j >= s.length) return doc;
    [s[i], s[j]] = [s[j], s[i]];
    return withSteps(doc, s);
  },
};
