import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { History, addNode, asGraphDoc, connect, moveNodes, pin, remove, serialize, setConfig, setSelector } from "./doc";
import { parseDocument, toGraph } from "./graph";

const examples = join(__dirname, "../../examples");

describe("editing a graph document", () => {
  it("palette, connect, move, configure and delete, each a new document", () => {
    let d = asGraphDoc({ name: "New", nodes: [], edges: [] });
    let a: string, c: string, b: string;
    [d, a] = addNode(d, "agent", { x: 0, y: 0 });
    [d, c] = addNode(d, "condition", { x: 200, y: 0 });
    [d, b] = addNode(d, "end", { x: 400, y: 0 });
    expect([a, c, b]).toEqual(["agent1", "condition1", "end1"]);
    d = connect(d, a, c);
    d = connect(d, c, b);
    d = connect(d, c, a);
    expect(d.edges.map((e) => e.condition_value)).toEqual([undefined, "true", "false"]);
    expect(connect(d, a, c)).toBe(d); // no duplicate edge
    d = setSelector(d, d.edges[2].id, "true");
    expect(d.edges[2].condition_value).toBe("true");
    d = moveNodes(d, new Map([[a, { x: 10.4, y: 20.6 }]]));
    expect(d.nodes[0].position).toEqual({ x: 10, y: 21 });
    d = setConfig(d, a, "user_message", "hello {who}");
    d = setConfig(d, a, "model", undefined);
    expect(d.nodes[0].config).toEqual({ user_message: "hello {who}" });
    const cut = remove(d, [c], []);
    expect(cut.nodes.map((n) => n.id)).toEqual([a, b]);
    expect(cut.edges).toEqual([]);
  });

  it("undo and redo walk the documents back and forth, capped", () => {
    const h = new History(0, 3);
    for (const n of [1, 2, 3, 4]) h.push(n);
    expect(h.undo()).toBe(3);
    expect(h.undo()).toBe(2);
    expect(h.undo()).toBe(1);
    expect(h.undo()).toBe(1); // capped at 3 steps back
    expect(h.redo()).toBe(2);
    h.push(9);
    expect(h.canRedo).toBe(false);
    h.push(10);
    h.amend(11);
    h.amend(12);
    expect(h.undo()).toBe(9); // the amended keystrokes were one step
  });

  it("a document survives the round trip through the editor's serialisation in JSON and YAML", () => {
    for (const [path, format] of [["graph/support-triage.json", "json"], ["graph/approval.yaml", "yaml"], ["machine/deploy-gate.yaml", "yaml"], ["pipeline/reflexion.yaml", "yaml"]]) {
      const doc = parseDocument(readFileSync(join(examples, path), "utf8"), format);
      const again = parseDocument(serialize(doc, format), format);
      expect(again, path).toEqual(doc);
      expect(toGraph(again)).toEqual(toGraph(doc));
    }
  });

  it("diagnostics are pinned on their node and, when they say, their field", () => {
    const d = asGraphDoc({ nodes: [{ id: "a", type: "agent", config: { user_message: "x" } }, { id: "t", type: "tool", config: { tool_name: "nope" } }], edges: [] });
    const pinned = pin(
      [
        { severity: "error", code: "E008", message: "missing required config `model`", node_id: "a" },
        { severity: "error", code: "E005", message: "unknown tool `nope`", node_id: "t" },
        { severity: "error", code: "E012", message: "no entry node" },
      ],
      d.nodes,
    );
    expect(pinned.get("a")![0].field).toBe("model");
    expect(pinned.get("t")![0].field).toBe("tool_name");
    expect(pinned.get("")![0].field).toBeUndefined();
  });
});
