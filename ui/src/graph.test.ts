import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { dialectOf, layout, parseDocument, toGraph } from "./graph";

const examples = join(__dirname, "../../examples");
const load = (path: string) =>
  parseDocument(readFileSync(join(examples, path), "utf8"), path.endsWith(".json") ? "json" : "yaml");

describe("documents as graphs", () => {
  it("a graph document keeps its positions and edge selectors", async () => {
    const doc = load("graph/support-triage.json");
    expect(dialectOf(doc)).toBe("graph");
    const g = toGraph(doc);
    expect(g.nodes.find((n) => n.id === "classify")).toMatchObject({ type: "agent", label: "Classify", entry: true, position: { x: 0, y: 150 } });
    expect(g.edges.find((e) => e.id === "e6")).toMatchObject({ source: "refine", target: "improve", label: "true" });
    const pos = await layout(g);
    expect(pos.get("classify")).toEqual({ x: 0, y: 150 });
  });

  it("a machine document: next and on: routes, laid out by ELK", async () => {
    const doc = load("machine/deploy-gate.yaml");
    expect(dialectOf(doc)).toBe("machine");
    const g = toGraph(doc);
    expect(g.nodes[0]).toMatchObject({ id: "build", type: "script", entry: true });
    expect(g.edges).toContainEqual({ id: "build->test", source: "build", target: "test" });
    expect(g.edges.some((e) => e.source === "test" && e.label === "true" && e.target === "gate")).toBe(true);
    const pos = await layout(g);
    expect(pos.size).toBe(g.nodes.length);
    expect(pos.get("test")!.x).toBeGreaterThan(pos.get("build")!.x);
  });

  it("a pipeline document: steps in order, gates with their jumps back", async () => {
    const doc = load("pipeline/reflexion.yaml");
    expect(dialectOf(doc)).toBe("pipeline");
    const g = toGraph(doc);
    expect(g.nodes.map((n) => n.id)).toEqual(["draft", "critique", "publish"]);
    expect(g.edges).toContainEqual(expect.objectContaining({ source: "critique", target: "draft", label: "else", back: true }));
    expect(g.edges).toContainEqual(expect.objectContaining({ source: "draft", target: "critique" }));
    expect((await layout(g)).size).toBe(3);
    expect(g.edges).toContainEqual(expect.objectContaining({ source: "critique", target: "publish", label: "then" }));
  });

  it("every example of every dialect becomes a graph whose edges join its nodes", () => {
    for (const dir of ["graph", "machine", "pipeline"]) {
      for (const f of ["answer-review", dir === "graph" ? "approval" : dir === "machine" ? "quality-loop" : "early-exit"]) {
        const ext = dir === "graph" && f === "answer-review" ? ".json" : ".yaml";
        const g = toGraph(load(`${dir}/${f}${ext}`));
        const ids = new Set(g.nodes.map((n) => n.id));
        expect(g.nodes.length).toBeGreaterThan(0);
        for (const e of g.edges) {
          expect(ids.has(e.source), `${dir}/${f}: ${e.source}`).toBe(true);
          expect(ids.has(e.target), `${dir}/${f}: ${e.target}`).toBe(true);
        }
      }
    }
  });
});
