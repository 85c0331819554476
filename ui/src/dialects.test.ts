import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { editorFor, routesOf } from "./dialects";
import { parseDocument, toGraph } from "./graph";

const load = (p: string) => parseDocument(readFileSync(join(__dirname, "../../examples", p), "utf8"), "yaml");
type Obj = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

describe("editing a machine document on the canvas", () => {
  it("palette, next and on: routes, rename a route, delete with what points at it", () => {
    let d: unknown = { name: "M", nodes: {} };
    const ed = editorFor({ nodes: {} });
    expect(ed.dialect).toBe("machine");
    expect(ed.palette.map((p) => p.type)).toEqual(["ai_agent", "ai_judge", "consensus", "script", "condition", "human_gate", "end"]);
    let a: string, j: string, ok: string, no: string;
    [d, a] = ed.add(d, "ai_agent", { x: 0, y: 0 });
    [d, j] = ed.add(d, "ai_judge", { x: 0, y: 0 });
    [d, ok] = ed.add(d, "end", { x: 0, y: 0 });
    [d, no] = ed.add(d, "end", { x: 0, y: 0 });
    expect([a, j, ok, no]).toEqual(["agent1", "judge1", "end1", "end2"]);
    d = ed.connect(d, a, j);
    d = ed.connect(d, j, ok);
    d = ed.connect(d, j, no);
    expect(ed.connect(d, j, a)).toBe(d); // both routes of a boolean judge are wired
    expect(ed.connect(d, ok, a)).toBe(d); // an end has no way out
    const nodes = (d as Obj).nodes;
    expect(nodes.agent1.next).toBe("judge1");
    expect(nodes.judge1.on).toEqual({ true: "end1", false: "end2" });
    expect(toGraph(d).edges.map((e) => e.label ?? "next")).toEqual(["next", "true", "false"]);

    const falseEdge = toGraph(d).edges.find((e) => e.label === "false")!;
    d = ed.setSelector!(d, falseEdge.id, "maybe");
    expect((d as Obj).nodes.judge1.on).toEqual({ true: "end1", maybe: "end2" });

    d = ed.set(d, j, "validator", { kind: "enum", routes: ["low", "high"] });
    expect(routesOf((d as Obj).nodes.judge1)).toEqual(["low", "high"]);

    const cut = ed.remove(d, [ok], [toGraph(d).edges[0].id]) as Obj;
    expect(Object.keys(cut.nodes)).toEqual(["agent1", "judge1", "end2"]);
    expect(cut.nodes.agent1.next).toBeUndefined();
    expect(cut.nodes.judge1.on).toEqual({ maybe: "end2" });
  });

  it("an example's nodes and fields reach the form, and deleting the start node clears `start`", () => {
    const doc = load("machine/quality-loop.yaml");
    const ed = editorFor(doc);
    const judge = ed.nodes(doc).find((n) => n.id === "quality-check")!;
    expect(judge.type).toBe("ai_judge");
    expect(judge.config.validator).toEqual({ kind: "confidence", threshold: 50 });
    expect(ed.fields("ai_judge")).toContain("validator");
    const withStart = { ...(doc as Obj), start: "draft" };
    expect((ed.remove(withStart, ["draft"], []) as Obj).start).toBeUndefined();
  });
});

describe("editing a pipeline document on the canvas", () => {
  it("steps in order, a connection that is not the successor adds a jump, deleting it continues", () => {
    const ed = editorFor({ steps: [] });
    expect(ed.dialect).toBe("pipeline");
    let d: unknown = { name: "P", model: "mock", steps: [] };
    let a: string, b: string, c: string;
    [d, a] = ed.add(d, "step", { x: 0, y: 0 });
    [d, b] = ed.add(d, "parallel", { x: 0, y: 0 });
    [d, c] = ed.add(d, "step", { x: 0, y: 0 });
    expect(ed.nodes(d).map((n) => n.type)).toEqual(["step", "parallel", "step"]);
    expect(ed.connect(d, a, b)).toBe(d); // already its successor
    d = ed.connect(d, c, a);
    expect((d as Obj).steps[2].if).toEqual({ expression: "true", then: { jump: { stepId: a } }, else: "continue" });
    const back = toGraph(d).edges.find((e) => e.back)!;
    expect([back.source, back.target, back.route]).toEqual([c, a, "then"]);
    d = ed.remove(d, [], [back.id]);
    expect((d as Obj).steps[2].if.then).toBe("continue");
    d = ed.reorder!(d, c, -1);
    expect(ed.nodes(d).map((n) => n.id)).toEqual([a, c, b]);
    expect(ed.reorder!(d, a, -1)).toBe(d);
  });

  it("deleting a step turns the jumps to it into continue", () => {
    const doc = load("pipeline/reflexion.yaml");
    const ed = editorFor(doc);
    const next = ed.remove(doc, ["draft"], []) as Obj;
    expect(next.steps.map((s: Obj) => s.id)).toEqual(["critique", "publish"]);
    expect(next.steps[0].if.else).toBe("continue");
  });
});
