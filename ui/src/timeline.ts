// The run timeline: one row per step, inside it one per attempt and per model call, with
// the backoff before each retry taken from the event log (`attempt_failed`).

import type { Attempt, Call, RunRecord, Step, ToolCall } from "./api";

export interface CallRow {
  model: string;
  provider: string;
  status: string;
  tokensIn: number;
  tokensOut: number;
  costUsd: number;
  latencyMs: number;
  errorClass?: string;
  /** A reply that failed its schema and was repaired (structured output). */
  repair: boolean;
  /** An agent's turn: the tool calls this reply asked for, as they were made. */
  tools: ToolRow[];
  /** Made before the loop stopped and went on (charged to the earlier step). */
  carried: boolean;
}

export interface ToolRow {
  turn: number;
  name: string;
  tool: string;
  arguments: string;
  /** What the model read back: the result, or the error. */
  outcome: string;
  failed: boolean;
  latencyMs: number;
  /** `approved by ana`, `rejected by bo: …` for a tool that waited for a reviewer. */
  approval?: string;
}

function toolRow(t: ToolCall): ToolRow {
  const a = t.approval;
  return {
    turn: t.turn,
    name: t.name,
    tool: t.tool,
    arguments: JSON.stringify(t.arguments),
    outcome: t.error ?? (typeof t.result === "string" ? t.result : JSON.stringify(t.result ?? null)),
    failed: t.error !== undefined,
    latencyMs: t.duration_ms,
    approval: a ? `${a.approved ? "approved" : "rejected"} by ${a.by}${a.model_arguments !== undefined ? " (arguments edited)" : ""}` : undefined,
  };
}

/** Model calls, each with the tool calls of its turn (a turn is a reply that asked for tools). */
function callRows(a: Attempt): CallRow[] {
  const tools = (a.tool_calls ?? []).map(toolRow);
  let turn = 0;
  return (a.calls ?? []).map((c, i) => {
    const row = callRow(c, i);
    if (Array.isArray(c.tool_uses) && c.tool_uses.length > 0) {
      turn += 1;
      row.tools = tools.filter((t) => t.turn === turn);
    }
    return row;
  });
}

export interface AttemptRow {
  n: number;
  status: string;
  errorClass?: string;
  error?: string;
  durationMs: number;
  costUsd: number;
  /** The wait before the next attempt, when this one failed and was retried. */
  backoffMs?: number;
  calls: CallRow[];
  request?: Record<string, unknown>;
  response?: string;
}

export interface StepRow {
  seq: number;
  nodeId: string;
  nodeType: string;
  visit: number;
  status: string;
  route: string | null;
  durationMs: number | null;
  costUsd: number;
  tokensIn: number;
  tokensOut: number;
  error: string | null;
  attempts: AttemptRow[];
  step: Step;
}

function callRow(c: Call, i: number): CallRow {
  return {
    model: String(c.model ?? "?"),
    provider: String(c.provider ?? ""),
    status: String(c.status ?? ""),
    tokensIn: Number(c.input_tokens ?? 0),
    tokensOut: Number(c.output_tokens ?? 0),
    costUsd: Number(c.cost_usd ?? 0),
    latencyMs: Number(c.duration_ms ?? 0),
    errorClass: (c.error_class as string | undefined) ?? undefined,
    repair: i > 0 && Boolean(c.schema_errors ?? c.validation_errors),
    tools: [],
    carried: c.carried_over === true,
  };
}

export function timeline(run: RunRecord): StepRow[] {
  const backoff = new Map<string, number>();
  for (const e of run.events) {
    if (e.type === "attempt_failed") backoff.set(`${e.step}/${e.n}`, Number(e.backoff_ms ?? 0));
  }
  return [...run.steps]
    .sort((a, b) => a.seq - b.seq)
    .map((s) => ({
      seq: s.seq,
      nodeId: s.node_id,
      nodeType: s.node_type,
      visit: s.visit,
      status: s.status,
      route: s.route,
      durationMs: s.duration_ms,
      costUsd: s.cost_usd,
      tokensIn: s.tokens?.input ?? 0,
      tokensOut: s.tokens?.output ?? 0,
      error: s.error,
      step: s,
      attempts: s.attempts.map(
        (a: Attempt): AttemptRow => ({
          n: a.n,
          status: a.status,
          errorClass: a.error_class,
          error: a.error ?? undefined,
          durationMs: a.duration_ms,
          costUsd: a.cost_usd,
          backoffMs: backoff.get(`${s.seq}/${a.n}`),
          calls: callRows(a),
          request: a.request,
          response: a.response,
        }),
      ),
    }));
}

/** The latest status of each node (its last step), for colouring a graph. */
export function nodeStatus(run: RunRecord): Map<string, string> {
  const out = new Map<string, string>();
  for (const s of [...run.steps].sort((a, b) => a.seq - b.seq)) out.set(s.node_id, s.status);
  return out;
}

/** Whether a run can still change. */
export function live(status: string): boolean {
  return status === "queued" || status === "running" || status === "paused";
}

/** A pipeline step's pass: its nodes' outputs, which the gate pruned, and what it did. */
export interface PassView {
  pass: number;
  outputs: { node: number; text: string; pruned: boolean }[];
  survivors: number;
  action: string;
}

export function pipelinePass(step: Step): PassView | null {
  const o = step.output as Record<string, unknown> | null;
  if (!o || typeof o !== "object" || typeof o.pass !== "number" || !Array.isArray(o.outputs)) return null;
  return {
    pass: o.pass,
    outputs: (o.outputs as Record<string, unknown>[]).map((x) => ({
      node: Number(x.node),
      text: String(x.text ?? ""),
      pruned: Boolean(x.pruned),
    })),
    survivors: Number(o.survivors ?? 0),
    action: String(o.action ?? ""),
  };
}

/** A consensus node's votes and the decision they reached. */
export interface VotesView {
  votes: { agent: number; vote: string; reasoning: string }[];
  quorum: number;
  agents: number;
  decision: string;
  answer?: string;
}

export function consensusVotes(step: Step): VotesView | null {
  const o = step.output as Record<string, unknown> | null;
  if (!o || typeof o !== "object" || !Array.isArray(o.votes)) return null;
  return {
    votes: (o.votes as Record<string, unknown>[]).map((v) => ({
      agent: Number(v.agent),
      vote: String(v.result ?? v.answer ?? ""),
      reasoning: String(v.reasoning ?? ""),
    })),
    quorum: Number(o.quorum ?? 0),
    agents: Number(o.agent_count ?? (o.votes as unknown[]).length),
    decision: String(o.decision ?? ""),
    answer: o.answer === undefined ? undefined : String(o.answer),
  };
}

/** A piece of a reply being written, as the event stream sends it. */
export interface Delta {
  step: number;
  node_id: string;
  attempt: number;
  reply: number;
  /** Characters of the reply before this piece. */
  offset: number;
  text: string;
}

/** A step's reply so far: which reply of which attempt, and its text. */
export interface Writing {
  attempt: number;
  reply: number;
  text: string;
}

/** The replies being written with `d` added: a new reply (or attempt) starts its text over. */
export function grow(w: Record<number, Writing>, d: Delta): Record<number, Writing> {
  const cur = w[d.step];
  const same = cur && cur.attempt === d.attempt && cur.reply === d.reply;
  // Joined after the reply began: its start is not known here (the step will have it).
  const text = (same ? cur.text : d.offset > 0 ? "… " : "") + d.text;
  return { ...w, [d.step]: { attempt: d.attempt, reply: d.reply, text } };
}
