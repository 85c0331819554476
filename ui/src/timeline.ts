// The run timeline: one row per step, inside it one per attempt and per model call, with
// the backoff before each retry taken from the event log (`attempt_failed`).

import type { Attempt, Call, RunRecord, Step } from "./api";

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
          calls: (a.calls ?? []).map(callRow),
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
