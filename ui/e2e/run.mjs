// End to end in real Chromium (Debian's `chromium`, driven by playwright-core) against a
// real `weir serve` on a fresh store: sign in from the address `weir serve` prints, the runs
// list, a run parked at a gate approved with an input and another rejected with a reason,
// the timeline's attempts, a `read` token that sees no approve button (and that the API
// refuses anyway), the approval page on a phone-sized screen. Screenshots of every page go
// to ui/e2e/artifacts/ (not committed).
//
//   node ui/e2e/run.mjs path/to/weir
import { spawn } from "node:child_process";
import { mkdtempSync, mkdirSync, readFileSync, readdirSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";
import Ajv2020 from "ajv/dist/2020.js";

const weir = process.argv[2] && (await import("node:path")).resolve(process.argv[2]);
if (!weir) throw new Error("usage: node ui/e2e/run.mjs WEIR_BINARY");
const here = dirname(fileURLToPath(import.meta.url));
const shots = join(here, "artifacts");
mkdirSync(shots, { recursive: true });
const dir = mkdtempSync(join(tmpdir(), "weir-ui-"));
const chromiumPath = process.env.WEIR_CHROMIUM ?? "/usr/bin/chromium";

function fail(msg) {
  throw new Error(msg);
}

async function startServer() {
  const child = spawn(weir, ["serve", "--listen", "127.0.0.1:0", "--workers", "2"], {
    env: {
      PATH: process.env.PATH,
      HOME: dir,
      WEIR_DB: join(dir, "weir.db"),
      // The mock model fails the first call of a "flaky" prompt (a retried attempt), and
      // answers the reflexion example as its own script does.
      WEIR_MOCK: JSON.stringify([
        { match: "flaky", error: "rate_limit", message: "slow down", times: 1 },
        // An agent that asks for a tool call its reviewer must approve.
        { match: "Wait a moment", times: 1, tool_calls: [{ name: "delay", arguments: { seconds: 5 } }] },
        { match: "delayed_ms", reply: "Waited as asked." },
        // A long reply written word by word over four seconds: the run page shows it grow.
        { match: "Tell a long story", reply: Array.from({ length: 60 }, (_, i) => `word${i + 1}`).join(" ") + ".", delay_ms: 4000 },
        ...JSON.parse(readFileSync(join(here, "../../examples/pipeline/reflexion.mock.json"), "utf8")),
      ]),
    },
    cwd: dir,
    stdio: ["ignore", "pipe", "inherit"],
  });
  let out = "";
  const ready = await new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new Error(`weir serve did not start: ${out}`)), 60000);
    child.stdout.on("data", (d) => {
      out += d;
      const url = out.match(/listening on (http:\/\/\S+)/)?.[1];
      const token = out.match(/\b(weir_[0-9a-f]+_[0-9a-f]+)\b/)?.[1];
      if (url && token) {
        clearTimeout(t);
        resolve({ url, token });
      }
    });
  });
  return { child, ...ready };
}

const server = await startServer();
const { url, token } = server;
const api = async (method, path, body, as = token) => {
  const r = await fetch(url + path, {
    method,
    headers: { Authorization: `Bearer ${as}`, "Content-Type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: r.status, json: await r.json().catch(() => null) };
};
const waitStatus = async (run, want) => {
  for (let i = 0; i < 300; i++) {
    const r = await api("GET", `/api/runs/${run}`);
    if (r.json?.status === want) return r.json;
    await new Promise((res) => setTimeout(res, 100));
  }
  fail(`run ${run} never became ${want}`);
};
const startRun = async (input) => (await api("POST", "/api/workflows/approval/runs", { input })).json.run_id;

const browser = await chromium.launch({
  executablePath: chromiumPath,
  args: ["--no-sandbox", "--disable-dev-shm-usage"],
}).catch((e) => {
  // Without a browser the server would keep this process alive: stop it, then fail.
  server.child.kill("SIGTERM");
  throw e;
});
const outside = [];
const answers = [];
let current = null; // the page a failed check's screenshot is taken of
let failures = 0;
// WEIR_UI_ONLY=text runs only the checks whose names contain it (while working on one).
const only = process.env.WEIR_UI_ONLY;
async function step(name, f) {
  if (only && !name.includes(only) && !name.startsWith("sign in")) return;
  try {
    await f();
    console.log(`ok   ${name}`);
  } catch (e) {
    failures++;
    console.log(`FAIL ${name}: ${e.stack ?? e}`);
    const shot = join(shots, `FAILED-${name.replace(/[^a-z0-9]+/gi, "-").slice(0, 60)}.png`);
    await current?.screenshot({ path: shot, fullPage: true }).catch(() => {});
  }
}

try {
  const ctx = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  const page = await ctx.newPage();
  current = page;
  page.on("request", (r) => {
    if (!r.url().startsWith(url)) outside.push(r.url());
  });
  // Every JSON answer the UI gets from the API is checked against /api/openapi.json at the end.
  page.on("response", (r) => {
    const u = new URL(r.url());
    if (u.origin !== new URL(url).origin || !u.pathname.startsWith("/api/") || !(r.headers()["content-type"] ?? "").includes("json")) return;
    answers.push(r.json().then((body) => ({ method: r.request().method().toLowerCase(), path: u.pathname, status: r.status(), body }), () => null));
  });

  const approveMe = await startRun({ customer: "Ada", amount: 250 });
  const rejectMe = await startRun({ customer: "Bo", amount: 900 });
  const readOnly = await startRun({ customer: "Cy", amount: 300 });
  for (const r of [approveMe, rejectMe, readOnly]) await waitStatus(r, "paused");

  await step("every API path the UI calls is in the server's OpenAPI document", async () => {
    const doc = (await api("GET", "/api/openapi.json")).json;
    const norm = (p) => p.replace(/\{[^}]+\}/g, "{}").replace(/\$\{[^}]*\}[^/]*/g, "{}");
    const documented = new Set(Object.keys(doc.paths).map(norm));
    const src = join(here, "../src");
    const files = readdirSync(src, { recursive: true }).filter((f) => /\.tsx?$/.test(f) && !f.endsWith(".test.ts"));
    const used = new Set();
    for (const f of files) {
      const text = readFileSync(join(src, f), "utf8");
      for (const m of text.matchAll(/[`"](\/api\/[^`"?]*)/g)) used.add(norm(m[1].replace(/([^/])\$\{[^}]*$/, "$1").replace(/\$\{[^}]*\}$/, "{}")));
    }
    if (used.size < 8) fail(`found only ${[...used]}`);
    const missing = [...used].filter((p) => !documented.has(p) && !documented.has(p.replace(/\/$/, "")));
    if (missing.length) fail(`not in /api/openapi.json: ${missing.join(", ")}`);
  });

  await step("sign in from the printed address, the token leaves the address bar", async () => {
    await page.goto(`${url}/?token=${token}`);
    await page.getByText("initial admin · admin").waitFor();
    if (page.url().includes("token=")) fail(`token still in ${page.url()}`);
    await page.getByRole("cell", { name: approveMe.slice(0, 8) }).waitFor();
    await page.screenshot({ path: join(shots, "runs.png"), fullPage: true });
  });

  await step("the runs list filters by status", async () => {
    await page.getByLabel("status").selectOption("paused");
    await page.getByRole("cell", { name: readOnly.slice(0, 8) }).waitFor();
    await page.getByLabel("status").selectOption("succeeded");
    await page.getByText("No runs match.").waitFor();
    await page.getByLabel("status").selectOption("");
  });

  await step("a run waiting at a gate is approved with an input, live", async () => {
    await page.getByRole("cell", { name: approveMe.slice(0, 8) }).click();
    await page.getByText(/Waiting at/).waitFor();
    await page.screenshot({ path: join(shots, "run-paused.png"), fullPage: true });
    await page.getByLabel("approval input").fill('{"note": "approved in the UI"}');
    await page.getByLabel("comment").fill("fine");
    await page.getByRole("button", { name: "Approve" }).click();
    await page.locator("h2 .status.succeeded").waitFor({ timeout: 30000 });
    const rec = await waitStatus(approveMe, "succeeded");
    if (rec.state.note !== "approved in the UI") fail(`input not merged: ${JSON.stringify(rec.state)}`);
    await page.screenshot({ path: join(shots, "run-approved.png"), fullPage: true });
  });

  await step("the timeline shows each step, and an agent step's attempts and calls", async () => {
    const first = page.locator("li.step").first();
    await first.locator("button.row").click();
    await page.locator("table.attempts").first().waitFor();
    await page.getByText(/#1/).first().waitFor();
    await page.screenshot({ path: join(shots, "run-timeline.png"), fullPage: true });
  });

  await step("another is rejected with a reason", async () => {
    await page.goto(`${url}/runs/${rejectMe}`);
    await page.getByText(/Waiting at/).waitFor();
    await page.getByLabel("comment").fill("too expensive");
    await page.getByRole("button", { name: "Reject" }).click();
    await page.getByText("gate_rejected").waitFor({ timeout: 30000 });
    await waitStatus(rejectMe, "failed");
  });

  await step("the workflows page lists the examples", async () => {
    await page.goto(`${url}/workflows`);
    await page.getByText("approval", { exact: true }).waitFor();
    await page.screenshot({ path: join(shots, "workflows.png"), fullPage: true });
  });

  await step("a graph document is drawn at its positions; machine and pipeline ones laid out", async () => {
    for (const [id, nodes] of [["support-triage", 10], ["quality-loop", 0], ["early-exit", 0]]) {
      await page.goto(`${url}/workflows/${id}`);
      await page.locator(".react-flow__node").first().waitFor();
      const drawn = await page.locator(".react-flow__node").count();
      if (nodes && drawn !== nodes) fail(`${id}: ${drawn} nodes drawn, want ${nodes}`);
      if (drawn < 2) fail(`${id}: only ${drawn} nodes drawn`);
      if ((await page.locator(".react-flow__edge").count()) < 1) fail(`${id}: no edges drawn`);
      await page.screenshot({ path: join(shots, `workflow-${id}.png`), fullPage: true });
    }
  });

  await step("a run's graph is coloured by its steps' status", async () => {
    await page.goto(`${url}/runs/${approveMe}`);
    await page.locator(".react-flow__node.succeeded").first().waitFor();
  });

  await step("build a three-node workflow on the canvas, fix the error pinned on it, save and run it", async () => {
    await page.goto(`${url}/workflows/new`);
    await page.getByRole("button", { name: "+ agent" }).click();
    const form = page.getByRole("form", { name: "node agent1" });
    await form.getByLabel("model").fill("");
    await form.getByLabel("user_message").fill("hello from the builder");
    // The validator pins the missing model on the agent and on its field.
    await form.locator("label.invalid", { hasText: "model" }).waitFor();
    await page.locator(".react-flow__node.invalid").first().waitFor();
    await page.screenshot({ path: join(shots, "builder-error.png"), fullPage: true });
    await form.getByLabel("model").fill("mock");
    // The model picker offers the models the server prices and allows.
    await form.locator('datalist option[value="claude-haiku-4-5"]').waitFor({ state: "attached" });
    await page.getByRole("button", { name: "+ tool" }).click();
    const tool = page.getByRole("form", { name: "node tool1" });
    await tool.getByLabel("tool_name").fill("delay");
    await tool.getByLabel("params").fill('{"ms": 300}');
    await tool.getByLabel("output_key").fill("waited");
    await page.getByRole("button", { name: "+ end" }).click();
    const drag = async (from, to) => {
      const a = await page.locator(`.react-flow__node[data-id="${from}"] .react-flow__handle.source`).boundingBox();
      const b = await page.locator(`.react-flow__node[data-id="${to}"] .react-flow__handle.target`).boundingBox();
      await page.mouse.move(a.x + a.width / 2, a.y + a.height / 2);
      await page.mouse.down();
      await page.mouse.move(b.x + b.width / 2, b.y + b.height / 2, { steps: 8 });
      await page.mouse.up();
    };
    await page.getByRole("button", { name: "fit view" }).click().catch(() => {});
    await drag("agent1", "tool1");
    await drag("tool1", "end1");
    await page.waitForFunction(() => document.querySelectorAll(".react-flow__edge").length === 2);
    // Undo takes the last edge away, redo brings it back.
    await page.getByRole("button", { name: "Undo" }).click();
    await page.waitForFunction(() => document.querySelectorAll(".react-flow__edge").length === 1);
    await page.getByRole("button", { name: "Redo" }).click();
    await page.waitForFunction(() => document.querySelectorAll(".react-flow__edge").length === 2);
    await page.getByRole("status").filter({ hasText: "valid" }).waitFor();
    const source = await page.getByLabel("source").inputValue();
    if (!source.includes('"target": "end1"')) fail(`the source view lags the canvas: ${source}`);
    await page.getByLabel("workflow id").fill("built");
    await page.getByRole("button", { name: "Create" }).click();
    await page.waitForURL(/\/workflows\/built\/edit$/);
    await page.screenshot({ path: join(shots, "builder.png"), fullPage: true });
    const started = await api("POST", "/api/workflows/built/runs", { input: {} });
    if (started.status !== 202) fail(`run: ${JSON.stringify(started.json)}`);
    await page.goto(`${url}/runs/${started.json.run_id}`);
    await page.locator("li.step").nth(1).waitFor({ timeout: 30000 });
    await page.locator("h2 .status.succeeded").waitFor({ timeout: 30000 });
    if ((await page.locator("li.step").count()) !== 3) fail("three steps in the timeline");
  });

  await step("import a machine document from a file, see it laid out, then delete it", async () => {
    await page.goto(`${url}/workflows`);
    const file = join(here, "../../examples/machine/deploy-gate.yaml");
    await page.getByLabel("import a workflow file").setInputFiles(file);
    await page.waitForURL(/\/workflows\/deploy-gate$/);
    await page.locator(".react-flow__node").nth(3).waitFor();
    await page.goto(`${url}/workflows`);
    // Its input schema becomes the run form.
    await page.locator("li", { hasText: "deploy-gate" }).getByRole("button", { name: "Run…" }).click();
    await page.getByLabel("env").fill("staging");
    await page.getByRole("button", { name: "Start run" }).click();
    await page.waitForURL(/\/runs\/[^/]+$/);
    const ranId = page.url().split("/").pop();
    const ran = await api("GET", `/api/runs/${ranId}`);
    if (ran.json.input.env !== "staging") fail(`the form's input: ${JSON.stringify(ran.json.input)}`);
    await page.goto(`${url}/workflows`);
    page.once("dialog", (d) => void d.accept());
    await page.getByRole("button", { name: "Delete deploy-gate" }).click();
    await page.getByRole("button", { name: "Delete deploy-gate" }).waitFor({ state: "detached" });
    if ((await api("GET", "/api/workflows/deploy-gate")).status !== 404) fail("the deleted workflow is still listed");
  });

  await step("a machine document edited on the canvas: a route cut, a node added and wired, saved", async () => {
    await page.goto(`${url}/workflows/quality-loop/edit`);
    await page.locator(".react-flow__node").nth(3).waitFor();
    for (const t of ["ai_agent", "ai_judge", "consensus", "script", "condition", "human_gate", "end"])
      await page.getByRole("button", { name: `+ ${t}`, exact: true }).waitFor();
    await page.getByRole("button", { name: "+ end", exact: true }).click();
    await page.locator('.react-flow__node[data-id="end1"]').waitFor();
    // Edges are reachable from the keyboard: focus one, Enter selects it.
    await page.locator('.react-flow__edge[data-id="quality-check-false->revise"]').focus();
    await page.keyboard.press("Enter");
    await page.keyboard.press("Delete");
    await page.locator('.react-flow__edge[data-id="quality-check-false->revise"]').waitFor({ state: "detached" });
    await page.getByRole("button", { name: "fit view" }).click().catch(() => {});
    const a = await page.locator('.react-flow__node[data-id="quality-check"] .react-flow__handle.source').boundingBox();
    const b = await page.locator('.react-flow__node[data-id="end1"] .react-flow__handle.target').boundingBox();
    await page.mouse.move(a.x + a.width / 2, a.y + a.height / 2);
    await page.mouse.down();
    await page.mouse.move(b.x + b.width / 2, b.y + b.height / 2, { steps: 8 });
    await page.mouse.up();
    // The free route of the boolean judge is filled.
    await page.locator('.react-flow__edge[data-id="quality-check-false->end1"]').waitFor();
    const source = await page.getByLabel("source").inputValue();
    if (!/"?false"?: end1/.test(source.replace(/'/g, '"'))) fail(`the source view lags the canvas: ${source}`);
    await page.screenshot({ path: join(shots, "builder-machine.png"), fullPage: true });
    await page.getByRole("button", { name: "Save version" }).click();
    await page.getByText(/saved as version 2/).waitFor();
    const saved = (await api("GET", "/api/workflows/quality-loop")).json;
    if (!/false'?"?: end1/.test(saved.source)) fail(`saved: ${saved.source}`);
  });

  await step("a pipeline document edited on the canvas: a step added and moved, a jump added", async () => {
    await page.goto(`${url}/workflows/early-exit/edit`);
    await page.locator(".react-flow__node").nth(2).waitFor();
    await page.getByRole("button", { name: "+ step", exact: true }).click();
    const form = page.getByRole("form", { name: "node step1" });
    await form.getByLabel("systemPrompt").fill("Check the answer.");
    await page.getByRole("button", { name: "Move earlier" }).click();
    await page.waitForFunction(() => /- id: step1[\s\S]*- id: answer/.test(document.querySelector('textarea[aria-label="source"]').value));
    await page.getByRole("status").filter({ hasText: "valid" }).waitFor();
    await page.screenshot({ path: join(shots, "builder-pipeline.png"), fullPage: true });
  });

  await step("settings: a token made and revoked, a custom tool added and deleted, the model allowlist", async () => {
    await page.goto(`${url}/settings`);
    await page.getByText("every model").waitFor();
    await page.getByLabel("token name").fill("ci-bot");
    await page.getByLabel("token scope").selectOption("run");
    await page.getByRole("button", { name: "Create token" }).click();
    const made = (await page.locator(".made code").textContent()).trim();
    if ((await api("GET", "/api/runs", undefined, made)).status !== 200) fail("the new token does not work");
    await page.getByRole("button", { name: "Revoke ci-bot" }).click();
    await page.getByRole("row", { name: /ci-bot/ }).getByText("revoked").waitFor();
    if ((await api("GET", "/api/runs", undefined, made)).status !== 401) fail("the revoked token still works");
    await page.getByLabel("tool name").fill("lookup");
    await page.getByRole("button", { name: "Add tool" }).click();
    await page.getByRole("cell", { name: "lookup", exact: true }).waitFor();
    await page.screenshot({ path: join(shots, "settings.png"), fullPage: true });
    await page.getByRole("button", { name: "Delete lookup" }).click();
    await page.getByRole("cell", { name: "lookup", exact: true }).waitFor({ state: "detached" });
  });

  await step("a failing then succeeding attempt shows both, with the error class and the backoff", async () => {
    const flaky = { name: "Flaky", nodes: [{ id: "ask", type: "agent", config: { model: "mock", user_message: "flaky question", retry_count: 2 } }], edges: [] };
    const put = await fetch(`${url}/api/workflows/flaky`, { method: "PUT", headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/json" }, body: JSON.stringify(flaky) });
    if (put.status !== 200) fail(`save: ${put.status}`);
    const run = (await api("POST", "/api/workflows/flaky/runs", { input: {} })).json.run_id;
    await waitStatus(run, "succeeded");
    await page.goto(`${url}/runs/${run}`);
    await page.locator("li.step button.row").first().click();
    const rows = page.locator("table.attempts tr.attempt");
    await rows.nth(1).waitFor();
    const first = await rows.nth(0).textContent();
    const second = await rows.nth(1).textContent();
    if (!first.includes("failed") || !first.includes("rate_limit")) fail(`first attempt: ${first}`);
    if (!/\d+(\.\d)? (ms|s)/.test(first.split("rate_limit")[1] ?? "")) fail(`no backoff shown: ${first}`);
    if (!second.includes("succeeded")) fail(`second attempt: ${second}`);
    await page.screenshot({ path: join(shots, "run-attempts.png"), fullPage: true });
  });

  await step("an agent's tool call waits for approval; the reviewer edits its arguments; the timeline shows the call", async () => {
    const agent = { name: "Careful", nodes: [{ id: "waiter", type: "agent", config: { model: "mock", user_message: "Wait a moment, then say so.", tools: ["delay"], approve_tools: ["delay"], output_key: "said" } }], edges: [] };
    const put = await fetch(`${url}/api/workflows/careful`, { method: "PUT", headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/json" }, body: JSON.stringify(agent) });
    if (put.status !== 200) fail(`save: ${put.status} ${await put.text()}`);
    const run = (await api("POST", "/api/workflows/careful/runs", { input: {} })).json.run_id;
    const paused = await waitStatus(run, "paused");
    if (paused.pending_gate?.kind !== "tool_call") fail(`gate: ${JSON.stringify(paused.pending_gate)}`);
    await page.goto(`${url}/runs/${run}`);
    await page.getByText("Agent waiter wants to call delay").waitFor();
    const args = page.getByLabel("tool arguments");
    if (!(await args.inputValue()).includes('"seconds": 5')) fail(`arguments shown: ${await args.inputValue()}`);
    await args.fill('{"seconds": 0}');
    await page.getByText("edited: the tool gets yours").waitFor();
    await page.screenshot({ path: join(shots, "run-tool-approval.png"), fullPage: true });
    await page.getByRole("button", { name: "Approve call" }).click();
    const done = await waitStatus(run, "succeeded");
    if (done.state.said !== "Waited as asked.") fail(`state: ${JSON.stringify(done.state)}`);
    await page.locator("h2 .status.succeeded").waitFor({ timeout: 30000 });
    await page.locator("li.step button.row").last().click();
    const call = page.locator("tr.tool-call").first();
    await call.waitFor();
    const text = await call.textContent();
    if (!text.includes("delay") || !text.includes('{"seconds":0}') || !text.includes("arguments edited")) fail(`tool call row: ${text}`);
    await page.screenshot({ path: join(shots, "run-tool-calls.png"), fullPage: true });
  });

  await step("an agent's reply grows on the run page as the model writes it, and the step keeps it whole", async () => {
    const teller = { name: "Teller", nodes: [{ id: "story", type: "agent", config: { model: "mock", user_message: "Tell a long story.", output_key: "story" } }], edges: [] };
    const put = await fetch(`${url}/api/workflows/teller`, { method: "PUT", headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/json" }, body: JSON.stringify(teller) });
    if (put.status !== 200) fail(`save: ${put.status} ${await put.text()}`);
    const run = (await api("POST", "/api/workflows/teller/runs", { input: {} })).json.run_id;
    await page.goto(`${url}/runs/${run}`);
    const box = page.getByLabel("reply being written");
    await box.waitFor({ timeout: 10000 });
    const words = async () => ((await box.textContent()) ?? "").trim().split(/\s+/).length;
    const before = await words();
    await page.waitForTimeout(1200);
    const after = await words();
    if (!(after > before)) fail(`the reply did not grow: ${before} → ${after} words`);
    await page.screenshot({ path: join(shots, "run-reply-streaming.png"), fullPage: true });
    await waitStatus(run, "succeeded");
    await page.locator("h2 .status.succeeded").waitFor({ timeout: 30000 });
    if ((await box.count()) !== 0) fail("the live reply stayed after the step committed");
    if (!(await page.getByText("word60.").count())) fail("the committed reply is not shown");
  });

  await step("re-run from a step reuses the steps before it (the gate asks again)", async () => {
    await page.goto(`${url}/runs/${approveMe}`);
    const pay = page.locator("li.step", { hasText: "pay" });
    await pay.locator("button.row").click();
    await pay.getByRole("button", { name: "Re-run from pay" }).click();
    await page.waitForURL((u) => !u.pathname.endsWith(approveMe));
    const again = page.url().split("/").pop();
    // Human gates always run again: the new run waits at the review, its earlier steps reused.
    const rec = await waitStatus(again, "paused");
    const reused = rec.events.filter((e) => e.type === "step_reused").map((e) => e.node_id);
    if (!reused.includes("assess") || reused.includes("pay")) fail(`reused: ${reused}`);
    await page.getByText(/Waiting at review/).waitFor();
  });

  await step("a pipeline run shows its passes and pruned outputs; a consensus run its votes", async () => {
    const save = async (id, path) => {
      const r = await fetch(`${url}/api/workflows/${id}`, { method: "PUT", headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/yaml" }, body: readFileSync(join(here, "../../examples", path), "utf8") });
      if (r.status !== 200) fail(`save ${id}: ${r.status} ${await r.text()}`);
    };
    await save("reflexion", "pipeline/reflexion.yaml");
    await save("incident-vote", "machine/incident-vote.yaml");
    const input = (p) => JSON.parse(readFileSync(join(here, "../../examples", p), "utf8"));
    const refl = (await api("POST", "/api/workflows/reflexion/runs", { input: input("pipeline/reflexion.input.json") })).json.run_id;
    const vote = (await api("POST", "/api/workflows/incident-vote/runs", { input: input("machine/incident-vote.input.json") })).json.run_id;
    await waitStatus(refl, "succeeded");
    await waitStatus(vote, "succeeded");
    await page.goto(`${url}/runs/${refl}`);
    await page.getByText("pass 2").first().waitFor();
    const critique = page.locator("li.step", { hasText: "critique" }).first();
    await critique.locator("button.row").click();
    await critique.getByRole("table", { name: "pipeline outputs" }).getByText("pruned", { exact: true }).waitFor();
    await page.screenshot({ path: join(shots, "run-pipeline.png"), fullPage: true });
    await page.goto(`${url}/runs/${vote}`);
    const first = page.locator("li.step").first();
    await first.locator("button.row").click();
    await first.getByRole("table", { name: "consensus votes" }).getByText(/quorum 2 of 3/).waitFor();
    await page.screenshot({ path: join(shots, "run-consensus.png"), fullPage: true });
  });

  await step("a long delay run is cancelled from its page", async () => {
    const slow = { name: "Slow", nodes: [{ id: "wait", type: "tool", config: { tool_name: "delay", params: { ms: 60000 }, output_key: "w" } }], edges: [] };
    const put = await fetch(`${url}/api/workflows/slow`, { method: "PUT", headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/json" }, body: JSON.stringify(slow) });
    if (put.status !== 200) fail(`save: ${put.status}`);
    const run = (await api("POST", "/api/workflows/slow/runs", { input: {} })).json.run_id;
    await waitStatus(run, "running");
    await page.goto(`${url}/runs/${run}`);
    await page.getByRole("button", { name: "Cancel" }).click();
    await page.locator("h2 .status.cancelled").waitFor({ timeout: 30000 });
    await waitStatus(run, "cancelled");
  });

  // Measured, not asserted (timings are benchmarks here, not pass/fail): the figures go to
  // artifacts/perf.json and BENCHMARKS.md; the goal is every frame of a drag under 50 ms.
  await step("a 500-node workflow opens and a node drags (frame times recorded)", async () => {
    const nodes = [];
    const edges = [];
    for (let i = 0; i < 500; i++) {
      nodes.push({ id: `n${i}`, type: "merge", position: { x: (i % 25) * 200, y: Math.floor(i / 25) * 100 } });
      if (i) edges.push({ id: `e${i}`, source: `n${i - 1}`, target: `n${i}` });
    }
    const put = await fetch(`${url}/api/workflows/big`, { method: "PUT", headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/json" }, body: JSON.stringify({ name: "Big", nodes, edges }) });
    if (put.status !== 200) fail(`save: ${put.status}`);
    const opened = Date.now();
    await page.goto(`${url}/workflows/big/edit`);
    await page.locator(".react-flow__node").nth(499).waitFor({ state: "attached", timeout: 30000 });
    const openMs = Date.now() - opened;
    const node = page.locator('.react-flow__node[data-id="n262"]');
    // The canvas fits the view once every node is measured.
    let box = await node.boundingBox();
    for (let i = 0; i < 50 && !(box && box.x > 0 && box.y > 0); i++) {
      await page.waitForTimeout(100);
      box = await node.boundingBox();
    }
    await page.evaluate(() => {
      window.__frames = [];
      let last = performance.now();
      window.__tick = (t) => {
        window.__frames.push(t - last);
        last = t;
        if (!window.__stop) requestAnimationFrame(window.__tick);
      };
      window.__stop = false;
      requestAnimationFrame(window.__tick);
    });
    await page.mouse.move(box.x + box.width / 2, box.y + box.height / 2);
    await page.mouse.down();
    for (let i = 1; i <= 40; i++) await page.mouse.move(box.x + box.width / 2 + i * 4, box.y + box.height / 2 + i * 2);
    const frames = await page.evaluate(() => window.__frames.slice(1));
    // The drop commits the move to the document (a new undo step, the source view, a
    // validation): its frames are recorded apart from the drag's.
    await page.mouse.up();
    await page.waitForTimeout(300);
    const drop = await page.evaluate((n) => ((window.__stop = true), window.__frames.slice(n + 1)), frames.length);
    const worst = Math.max(...frames);
    const moved = JSON.parse(await page.getByLabel("source").inputValue()).nodes[262].position;
    if (moved.x === 2400 && moved.y === 1000) fail("the drag did not move the node");
    const sorted = [...frames].sort((a, b) => a - b);
    const perf = { nodes: 500, open_ms: openMs, drag_frames: frames.length, drag_frame_p50_ms: sorted[Math.floor(sorted.length / 2)], drag_frame_worst_ms: worst, drop_frame_worst_ms: Math.max(...drop), frames, drop };
    writeFileSync(join(shots, "perf.json"), JSON.stringify(perf, null, 2));
    console.log(`     500 nodes: opened in ${openMs} ms; drag: ${frames.length} frames, p50 ${perf.drag_frame_p50_ms.toFixed(1)} ms, worst ${worst.toFixed(1)} ms; drop: worst frame ${perf.drop_frame_worst_ms.toFixed(1)} ms`);
  });

  await step("a read token sees no approve button, and the API refuses it anyway", async () => {
    const made = await api("POST", "/api/tokens", { name: "viewer", scope: "read" });
    const read = made.json.token;
    const rctx = await browser.newContext({ viewport: { width: 1280, height: 800 } });
    const rpage = await rctx.newPage();
    await rpage.goto(`${url}/runs/${readOnly}?token=${read}`);
    await rpage.getByText(/cannot decide gates/).waitFor();
    if ((await rpage.getByRole("button", { name: "Approve" }).count()) !== 0) fail("approve shown to a read token");
    if ((await rpage.getByRole("button", { name: "Cancel" }).count()) !== 0) fail("cancel shown to a read token");
    const refused = await api("POST", `/api/runs/${readOnly}/approve`, { gate: "review" }, read);
    if (refused.status !== 403) fail(`the API answered ${refused.status} to a read token's approval`);
    await rctx.close();
  });

  await step("the approval page works on a phone-sized screen, from the keyboard", async () => {
    const phone = await browser.newContext({ viewport: { width: 375, height: 740 }, isMobile: true, hasTouch: true });
    const p = await phone.newPage();
    await p.goto(`${url}/runs/${readOnly}?token=${token}`);
    await p.getByText(/Waiting at/).waitFor();
    await p.screenshot({ path: join(shots, "approve-phone.png"), fullPage: true });
    await p.getByLabel("approval input").focus();
    await p.keyboard.press("Tab"); // comment
    await p.keyboard.press("Tab"); // Approve
    await p.keyboard.press("Enter");
    await waitStatus(readOnly, "succeeded");
    await phone.close();
  });

  await step("every API answer the UI received matches /api/openapi.json, and the client's types name its fields", async () => {
    const doc = (await api("GET", "/api/openapi.json")).json;
    const ajv = new Ajv2020({ strict: false, allErrors: true, validateFormats: false });
    const routes = Object.entries(doc.paths).map(([p, ops]) => ({ re: new RegExp(`^${p.replace(/\{[^}]+\}/g, "[^/]+")}$`), ops }));
    const compiled = new Map();
    const bad = [];
    let checked = 0;
    for (const a of (await Promise.all(answers)).filter(Boolean)) {
      const route = routes.find((r) => r.re.test(a.path));
      const op = route?.ops[a.method];
      if (!op) {
        bad.push(`${a.method} ${a.path}: not in the document`);
        continue;
      }
      const schema = op.responses?.[a.status]?.content?.["application/json"]?.schema;
      if (!schema) {
        bad.push(`${a.method} ${a.path} ${a.status}: no schema for this status`);
        continue;
      }
      const key = JSON.stringify(schema);
      if (!compiled.has(key)) compiled.set(key, ajv.compile({ ...schema, components: doc.components }));
      const validate = compiled.get(key);
      checked++;
      if (!validate(a.body)) bad.push(`${a.method} ${a.path} ${a.status}: ${ajv.errorsText(validate.errors)}`);
    }
    if (checked < 20) fail(`only ${checked} answers checked`);
    // The client's hand-written interfaces against the schemas they mirror: a field the UI
    // reads that the server does not document is drift.
    const client = readFileSync(join(here, "../src/api.ts"), "utf8");
    for (const [iface, schemaName] of [["Session", "SessionOut"], ["WorkflowOut", "WorkflowOut"], ["RunSummary", "RunSummaryOut"], ["ToolOut", "ToolOut"], ["TokenOut", "TokenOut"], ["ModelsOut", "ModelsOut"]]) {
      const body = client.match(new RegExp(`export interface ${iface} \\{([^}]*)\\}`))?.[1];
      const props = doc.components.schemas[schemaName]?.properties;
      if (!body || !props) {
        bad.push(`${iface} / ${schemaName}: not found`);
        continue;
      }
      for (const m of body.matchAll(/^\s*([a-z_]+)\??:/gm)) if (!(m[1] in props)) bad.push(`${iface}.${m[1]} is not a field of ${schemaName}`);
    }
    if (bad.length) fail(bad.join("\n"));
    console.log(`     ${checked} answers checked against the OpenAPI document`);
  });

  if (outside.length) {
    failures++;
    console.log(`FAIL requests to other hosts: ${outside.join(", ")}`);
  }
} finally {
  await browser.close();
  server.child.kill("SIGTERM");
}
if (failures) {
  console.log(`${failures} UI check(s) failed; screenshots in ${shots}`);
  process.exit(1);
}
console.log(`UI end to end: all checks passed; screenshots in ${shots}`);
