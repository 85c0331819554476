import { describe, expect, it } from "vitest";
import { SseParser, allows, type RunRecord } from "./api";
import { consensusVotes, grow, nodeStatus, pipelinePass, timeline } from "./timeline";

const run: RunRecord = {
  run_id: "r1",
  workflow: "w",
  dialect: "graph",
  status: "succeeded",
  input: {},
  state: {},
  output: null,
  error: null,
  pending_gate: null,
  cost_usd: 0.02,
  events: [
    { seq: 1, at: "t", type: "run_created" },
    { seq: 2, at: "t", type: "attempt_failed", step: 2, node_id: "draft", n: 1, error: "429", error_class: "rate_limit", backoff_ms: 1000 },
  ],
  started_at: "2026-12-01T00:00:00.000Z",
  finished_at: "2026-12-01T00:00:02.000Z",
  duration_ms: 2000,
  steps: [
    {
      seq: 2, node_id: "draft", node_type: "agent", visit: 1, status: "succeeded", route: null,
      input: null, output: {}, error: null, cost_usd: 0.02, tokens: { input: 10, output: 5 },
      attempts: [
        { n: 1, status: "failed", error: "rate limited", error_class: "rate_limit", duration_ms: 3, cost_usd: 0, calls: [{ model: "gpt-4o", provider: "openai", status: "failed", error_class: "rate_limit" }] },
        { n: 2, status: "succeeded", error: null, duration_ms: 40, cost_usd: 0.02, calls: [{ model: "gpt-4o", provider: "openai", status: "succeeded", input_tokens: 10, output_tokens: 5, cost_usd: 0.02, duration_ms: 38 }] },
      ],
      started_at: "t", finished_at: "t", duration_ms: 1043,
    },
    {
      seq: 1, node_id: "start", node_type: "tool", visit: 1, status: "succeeded", route: null,
      input: {}, output: {}, error: null, cost_usd: 0, tokens: { input: 0, output: 0 }, attempts: [],
      started_at: "t", finished_at: "t", duration_ms: 1,
    },
  ],
};

describe("timeline", () => {
  it("orders steps and nests attempts and calls, with the backoff from the log", () => {
    const rows = timeline(run);
    expect(rows.map((r) => r.nodeId)).toEqual(["start", "draft"]);
    const draft = rows[1];
    expect(draft.attempts).toHaveLength(2);
    expect(draft.attempts[0]).toMatchObject({ status: "failed", errorClass: "rate_limit", backoffMs: 1000 });
    expect(draft.attempts[1].backoffMs).toBeUndefined();
    expect(draft.attempts[1].calls[0]).toMatchObject({ model: "gpt-4o", tokensIn: 10, tokensOut: 5, latencyMs: 38 });
    expect(nodeStatus(run).get("draft")).toBe("succeeded");
  });
});

describe("an agent's tool calls", () => {
  it("sit under the model call of their turn, with what the model read back and any decision", () => {
    const agent: RunRecord = {
      ...run,
      steps: [
        {
          seq: 1, node_id: "advise", node_type: "agent", visit: 1, status: "succeeded", route: null,
          input: null, output: {}, error: null, cost_usd: 0.01, tokens: { input: 30, output: 9 },
          attempts: [{
            n: 1, status: "succeeded", error: null, duration_ms: 90, cost_usd: 0.01,
            calls: [
              { model: "mock", status: "succeeded", carried_over: true, tool_uses: [{ id: "c1", name: "weather", arguments: {} }] },
              { model: "mock", status: "succeeded", tool_uses: [{ id: "c2", name: "weather", arguments: {} }, { id: "c3", name: "delay", arguments: {} }] },
              { model: "mock", status: "succeeded" },
            ],
            tool_calls: [
              { turn: 1, id: "c1", name: "weather", tool: "custom:weather", arguments: { city: "Paris" }, result: { sky: "rain" }, duration_ms: 4 },
              { turn: 2, id: "c2", name: "weather", tool: "custom:weather", arguments: { city: "Oslo" }, result: "snow", duration_ms: 5,
                approval: { approved: true, by: "ana", at: "t", model_arguments: { city: "Rome" } } },
              { turn: 2, id: "c3", name: "delay", tool: "delay", arguments: { seconds: "x" }, error: "the arguments do not match", duration_ms: 0 },
            ],
          }],
          started_at: "t", finished_at: "t", duration_ms: 90,
        },
      ],
    };
    const calls = timeline(agent)[0].attempts[0].calls;
    expect(calls.map((c) => c.tools.length)).toEqual([1, 2, 0]);
    expect(calls[0].carried).toBe(true);
    expect(calls[0].tools[0]).toMatchObject({ name: "weather", arguments: '{"city":"Paris"}', outcome: '{"sky":"rain"}', failed: false });
    expect(calls[1].tools[0]).toMatchObject({ outcome: "snow", approval: "approved by ana (arguments edited)" });
    expect(calls[1].tools[1]).toMatchObject({ failed: true, outcome: "the arguments do not match" });
  });
});

describe("SSE", () => {
  it("parses events split across chunks and skips heartbeats", () => {
    const p = new SseParser();
    expect(p.push(": heartbeat\n\nid: 1\nevent: run_created\ndata: {\"seq\":1,\"at\":\"t\",")).toEqual([]);
    const got = p.push("\"type\":\"run_created\"}\n\nid: 2\ndata: {\"seq\":2,\"at\":\"t\",\"type\":\"run_started\"}\n\n");
    expect(got.map((e) => [e.seq, e.type])).toEqual([[1, "run_created"], [2, "run_started"]]);
  });
});

describe("scopes", () => {
  it("orders read < run < approve < admin", () => {
    expect(allows("approve", "run")).toBe(true);
    expect(allows("read", "approve")).toBe(false);
    expect(allows("admin", "admin")).toBe(true);
  });
});

describe("pipeline passes and consensus votes", () => {
  const base = { seq: 1, node_id: "x", node_type: "step", visit: 2, status: "succeeded", route: null, input: null, error: null, cost_usd: 0, tokens: { input: 0, output: 0 }, attempts: [], started_at: "t", finished_at: "t", duration_ms: 1 };
  it("reads a pass with its pruned outputs", () => {
    const p = pipelinePass({ ...base, output: { pass: 2, outputs: [{ node: 1, text: "a", pruned: true }, { node: 2, text: "b", pruned: false }], survivors: 1, action: "jump:draft", visible: ["b"] } });
    expect(p).toEqual({ pass: 2, outputs: [{ node: 1, text: "a", pruned: true }, { node: 2, text: "b", pruned: false }], survivors: 1, action: "jump:draft" });
    expect(pipelinePass({ ...base, output: { text: "agent" } })).toBeNull();
  });
  it("reads boolean and answer votes", () => {
    const b = consensusVotes({ ...base, node_type: "consensus", output: { votes: [{ result: true, reasoning: "ok", agent: 1 }, { result: false, reasoning: "no", agent: 2 }], quorum: 2, agent_count: 2, approvals: 1, decision: "rejected" } });
    expect(b).toMatchObject({ quorum: 2, agents: 2, decision: "rejected", votes: [{ agent: 1, vote: "true" }, { agent: 2, vote: "false", reasoning: "no" }] });
    const a = consensusVotes({ ...base, node_type: "consensus", output: { votes: [{ answer: "db", reasoning: "r", agent: 1 }], quorum: 1, agent_count: 1, answer: "db", decision: "decided" } });
    expect(a?.answer).toBe("db");
  });
});

describe("a reply being written", () => {
  it("grows piece by piece and starts over on a new reply or attempt", () => {
    const d = (attempt: number, reply: number, text: string, offset = 0) => ({ step: 3, node_id: "a", attempt, reply, offset, text });
    let w = grow({}, d(1, 1, "Hel"));
    w = grow(w, d(1, 1, "lo", 3));
    expect(w[3].text).toBe("Hello");
    w = grow(w, d(1, 2, "Next"));
    expect(w[3].text).toBe("Next");
    w = grow(w, d(2, 1, "Again"));
    expect(w[3]).toEqual({ attempt: 2, reply: 1, text: "Again" });
    // A view that joins after the reply began says it missed the start.
    expect(grow({}, d(1, 1, "middle", 40))[3].text).toBe("… middle");
  });

  it("comes from delta frames without an id", () => {
    const p = new SseParser();
    const [e] = p.push('event: delta\ndata: {"type":"delta","step":1,"node_id":"a","attempt":1,"reply":1,"text":"hi"}\n\n');
    expect(e.type).toBe("delta");
    expect(e.seq).toBeUndefined();
  });
});
