// The typed client of weir's HTTP API (docs/api.md; the shapes of /api/openapi.json).
// Every request carries the signed-in token; nothing here talks to any other host.

export type Scope = "read" | "run" | "approve" | "admin";
export const SCOPES: Scope[] = ["read", "run", "approve", "admin"];

export interface Session {
  token_id: string;
  name: string;
  scope: Scope;
}

export interface WorkflowOut {
  id: string;
  name: string;
  dialect: string;
  version: number;
  format: string;
  created_at: string;
  updated_at: string;
  source: string;
}

export interface TokenOut {
  id: string;
  name: string;
  scope: string;
  created_at: string;
  revoked_at?: string;
}

export interface ToolOut {
  name: string;
  source: string;
  definition: Record<string, unknown>;
}

export interface ModelsOut {
  allow?: string[];
  providers?: string[];
  named_providers: string[];
  known: string[];
}

export interface RunSummary {
  run_id: string;
  workflow: string;
  status: string;
  started_at: string;
  finished_at?: string;
  cost_usd: number;
  workflow_id?: string;
  version?: number;
}

export interface Call {
  model?: string;
  provider?: string;
  status?: string;
  input_tokens?: number;
  output_tokens?: number;
  cost_usd?: number;
  duration_ms?: number;
  error_class?: string;
  error?: string;
  reply?: string;
  [k: string]: unknown;
}

export interface Attempt {
  n: number;
  status: string;
  error: string | null;
  error_class?: string;
  duration_ms: number;
  request?: Record<string, unknown>;
  response?: string;
  calls?: Call[];
  tool_calls?: ToolCall[];
  cost_usd: number;
  backoff_ms?: number;
}

/** One tool call of an agent's tool-use loop. */
export interface ToolCall {
  turn: number;
  id: string;
  name: string;
  tool: string;
  arguments: unknown;
  result?: unknown;
  error?: string;
  duration_ms: number;
  approval?: { approved: boolean; by: string; at: string; comment?: string; model_arguments?: unknown };
}

/** A gate waiting for a decision: a human gate, an agent's tool call, a budget. */
export interface PendingGate {
  node_id: string;
  prompt: string;
  seq: number;
  kind?: "tool_call" | "budget";
  detail?: Record<string, unknown>;
}

export interface Step {
  seq: number;
  node_id: string;
  node_type: string;
  visit: number;
  status: string;
  route: string | null;
  input: unknown;
  output: unknown;
  error: string | null;
  cost_usd: number;
  tokens: { input: number; output: number };
  attempts: Attempt[];
  started_at: string;
  finished_at: string | null;
  duration_ms: number | null;
}

export interface RunEvent {
  seq: number;
  at: string;
  type: string;
  [k: string]: unknown;
}

export interface RunRecord {
  run_id: string;
  workflow: string;
  dialect: string;
  status: string;
  input: Record<string, unknown>;
  state: Record<string, unknown>;
  output: unknown;
  error: { code: string; message: string; node_id?: string | null } | null;
  pending_gate: PendingGate | null;
  cost_usd: number;
  events: RunEvent[];
  started_at: string;
  finished_at: string | null;
  duration_ms: number | null;
  steps: Step[];
}

/** An API error, with the server's message. */
export class ApiError extends Error {
  constructor(
    public status: number,
    public code: string,
    message: string,
  ) {
    super(message);
  }
}

export class Api {
  constructor(
    public token: string,
    private base = "",
  ) {}

  async request<T>(method: string, path: string, body?: unknown): Promise<T> {
    const headers: Record<string, string> = { Authorization: `Bearer ${this.token}` };
    if (body !== undefined) headers["Content-Type"] = "application/json";
    const resp = await fetch(this.base + path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await resp.text();
    const json = text ? JSON.parse(text) : null;
    if (!resp.ok) {
      const e = json?.error ?? {};
      throw new ApiError(resp.status, e.code ?? "error", e.message ?? `${resp.status}`);
    }
    return json as T;
  }

  /** Sends a workflow document as it is written (JSON or YAML). */
  async document<T>(method: string, path: string, text: string, format: string): Promise<T> {
    const resp = await fetch(this.base + path, {
      method,
      headers: {
        Authorization: `Bearer ${this.token}`,
        "Content-Type": format === "json" ? "application/json" : "application/yaml",
      },
      body: text,
    });
    const json = await resp.json().catch(() => null);
    if (!resp.ok) {
      const e = json?.error ?? {};
      throw new ApiError(resp.status, e.code ?? "error", e.message ?? `${resp.status}`);
    }
    return json as T;
  }

  session = () => this.request<Session>("GET", "/api/session");
  workflows = () =>
    this.request<{ workflows: WorkflowOut[] }>("GET", "/api/workflows").then((r) => r.workflows);
  runs = (q: { status?: string; workflow?: string; q?: string; since?: string; limit?: number }) => {
    const p = new URLSearchParams();
    for (const [k, v] of Object.entries(q)) if (v !== undefined && v !== "") p.set(k, String(v));
    return this.request<{ runs: RunSummary[]; next_cursor?: string }>("GET", `/api/runs?${p}`);
  };
  run = (id: string) => this.request<RunRecord>("GET", `/api/runs/${encodeURIComponent(id)}`);
  start = (workflow: string, input: Record<string, unknown>) =>
    this.request<{ run_id: string }>("POST", `/api/workflows/${encodeURIComponent(workflow)}/runs`, {
      input,
    });
  approve = (id: string, gate: string, input: Record<string, unknown>, comment?: string) =>
    this.request("POST", `/api/runs/${encodeURIComponent(id)}/approve`, { gate, input, comment });
  reject = (id: string, gate: string, comment: string) =>
    this.request("POST", `/api/runs/${encodeURIComponent(id)}/reject`, { gate, comment });
  cancel = (id: string) => this.request("POST", `/api/runs/${encodeURIComponent(id)}/cancel`, {});
  rerun = (id: string, from?: string) =>
    this.request<{ run_id: string }>("POST", `/api/runs/${encodeURIComponent(id)}/rerun`, from ? { from } : {});

  /** Follows a run's event stream (SSE over fetch, so the token goes in a header), calling
   * `on` for each event, from after `last`; resolves when the stream ends. */
  async follow(id: string, last: number, on: (e: RunEvent) => void, signal: AbortSignal) {
    const headers: Record<string, string> = { Authorization: `Bearer ${this.token}` };
    if (last > 0) headers["Last-Event-ID"] = String(last);
    const resp = await fetch(`${this.base}/api/runs/${encodeURIComponent(id)}/events`, {
      headers,
      signal,
    });
    if (!resp.ok || !resp.body) throw new ApiError(resp.status, "stream", "cannot follow the run");
    const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
    const parser = new SseParser();
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      for (const e of parser.push(value)) on(e);
    }
  }
}

/** Whether `have` allows what `need` does (scopes are ordered read < run < approve < admin). */
export function allows(have: Scope, need: Scope): boolean {
  return SCOPES.indexOf(have) >= SCOPES.indexOf(need);
}

/** Server-sent events from text chunks: `id:` is the event's sequence number, `data:` its
 * JSON; comments (heartbeats) and partial lines are handled. */
export class SseParser {
  private buf = "";
  private id: number | null = null;
  private data: string[] = [];

  push(chunk: string): RunEvent[] {
    this.buf += chunk;
    const out: RunEvent[] = [];
    let i: number;
    while ((i = this.buf.indexOf("\n")) >= 0) {
      const line = this.buf.slice(0, i).replace(/\r$/, "");
      this.buf = this.buf.slice(i + 1);
      if (line === "") {
        if (this.data.length > 0) {
          const e = JSON.parse(this.data.join("\n")) as RunEvent;
          if (this.id !== null && e.seq === undefined) e.seq = this.id;
          out.push(e);
        }
        this.id = null;
        this.data = [];
      } else if (line.startsWith(":")) {
        // a heartbeat comment
      } else if (line.startsWith("id:")) {
        this.id = Number(line.slice(3).trim());
      } else if (line.startsWith("data:")) {
        this.data.push(line.slice(5).replace(/^ /, ""));
      }
    }
    return out;
  }
}
