//! `weir test [PATH…]` and `weir test --record RUN_ID`: workflow tests as files beside the
//! workflow (`NAME.test.yaml`). Each test runs the workflow in memory with an input, the mock
//! model's rules for every model call (whatever model a node names: a test never calls a
//! provider), scripted results for tool nodes (an unscripted tool call fails the test, it is
//! never made) and decisions for human gates; then checks its expectations: the status, the
//! routes of given nodes, the output, state paths, cost bounds and the number of calls.
//! Scripts run under bun as they would in a run.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::Result;
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use weir_core::record::{Request, RunRecord, StepStatus};
use weir_core::tool::{ToolCall, ToolError, ToolRunner};
use weir_engine::{Decision, Engine, Quiet, Services, Source};

use crate::output::short;
use crate::wiring::{self, Env};
use crate::{Usage, exit};

/// A `NAME.test.yaml` file.
#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TestFile {
    /// The workflow, relative to the test file (default: `NAME.yaml`, `.yml` or `.json`
    /// beside it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow: Option<String>,
    pub tests: Vec<Case>,
}

#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Case {
    pub name: String,
    #[serde(default)]
    pub input: Value,
    /// The mock model's rules (docs/models.md), for every model call of the run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mock: Vec<Value>,
    /// Tool results by node id: `{result: …}` or `{error: "…"}`, or a list of them, one per
    /// visit.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tools: BTreeMap<String, Answers>,
    /// Human gate decisions by node id.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub gates: BTreeMap<String, Gate>,
    #[serde(default)]
    pub expect: Expect,
}

#[derive(Debug, Deserialize, Serialize)]
#[serde(untagged)]
pub enum Answers {
    Each(Vec<Answer>),
    One(Answer),
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Answer {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// For an agent's tool calls: this answer is for the call with exactly these arguments
    /// (calls made at once take their answers whatever order they arrive in).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<Value>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Gate {
    /// `true` approves; `false` rejects (with `reason`).
    pub approve: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<Value>,
}

#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// The route of a node's first visit, or a list of routes, one per visit.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub routes: BTreeMap<String, Value>,
    /// The run's output, exactly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
    /// Values at dotted paths of the run's final state (`variables.draft.response`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub state: BTreeMap<String, Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<Bounds>,
    /// How many model calls (every call, fallbacks and repairs included) and tool calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calls: Option<Calls>,
}

#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Bounds {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<f64>,
}

#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Calls {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<u64>,
}

/// Tool calls answered from the test's `tools`: by tool (`custom:weather`, `delay`: each
/// call takes the next answer, as an agent's calls do) or by tool node and visit; anything
/// else fails.
struct ScriptedTools(
    BTreeMap<String, Vec<Answer>>,
    Vec<String>,
    /// Which answers of each tool were taken.
    std::sync::Mutex<BTreeMap<String, Vec<bool>>>,
);

#[async_trait]
impl ToolRunner for ScriptedTools {
    fn has_tool(&self, name: &str) -> bool {
        self.1.iter().any(|t| t == name) || name.starts_with("mcp:")
    }

    fn tool_names(&self) -> Vec<String> {
        self.1.clone()
    }

    /// An agent's tools, offered by name with any arguments (their results are scripted).
    async fn describe(
        &self,
        tool_ref: &str,
    ) -> Result<Vec<(String, weir_core::model::ToolDef)>, ToolError> {
        let def = |r: &str| {
            let name = r.strip_prefix("custom:").unwrap_or(r);
            let name = name.rsplit('/').next().unwrap_or(name);
            (
                r.to_string(),
                weir_core::model::ToolDef {
                    name: name.to_string(),
                    description: String::new(),
                    parameters: serde_json::json!({"type": "object"}),
                },
            )
        };
        Ok(match tool_ref.strip_suffix('*') {
            Some(server) => self
                .0
                .keys()
                .filter(|k| k.starts_with(server))
                .map(|k| def(k))
                .collect(),
            None => vec![def(tool_ref)],
        })
    }

    async fn call(&self, call: ToolCall) -> Result<Value, ToolError> {
        let fail = |message: String| ToolError {
            message,
            retryable: false,
        };
        let answer_of = |a: &Answer| match (&a.error, &a.result) {
            (Some(e), _) => Err(fail(e.clone())),
            (None, Some(v)) => Ok(v.clone()),
            (None, None) => Ok(Value::Object(Default::default())),
        };
        if let Some(answers) = self.0.get(&call.tool_name) {
            // The first answer not taken yet that is for these arguments, else the first
            // not taken that is for any; one answer for any arguments answers every call.
            let picked = {
                let mut used = self
                    .2
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                let taken = used
                    .entry(call.tool_name.clone())
                    .or_insert_with(|| vec![false; answers.len()]);
                let free = |i: &usize| !taken[*i];
                let i = (0..answers.len())
                    .filter(free)
                    .find(|&i| answers[i].arguments.as_ref() == Some(&call.params))
                    .or_else(|| {
                        (0..answers.len())
                            .filter(free)
                            .find(|&i| answers[i].arguments.is_none())
                    });
                if let Some(i) = i {
                    taken[i] = true;
                }
                i.or((answers.len() == 1 && answers[0].arguments.is_none()).then_some(0))
            };
            return match picked {
                Some(i) => answer_of(&answers[i]),
                None => Err(fail(format!(
                    "the test scripts {} result{} for `{}`, none left for this call (arguments {})",
                    answers.len(),
                    if answers.len() == 1 { "" } else { "s" },
                    call.tool_name,
                    call.params
                ))),
            };
        }
        let site = weir_engine::replay::call_site()
            .ok_or_else(|| fail("a tool call outside any step".into()))?;
        let answers = self.0.get(&site.node_id).ok_or_else(|| {
            // An agent's calls carry `RUN:NODE:VISIT:TURN:INDEX`; a tool node's, a UUID.
            if call.idempotency_key.matches(':').count() >= 4 {
                fail(format!(
                    "the test scripts no result for `{}`, which agent `{}` called; add tools: {{\"{}\": {{result: …}}}}",
                    call.tool_name, site.node_id, call.tool_name
                ))
            } else {
                fail(format!(
                    "the test scripts no result for tool node `{}` ({}); add tools: {{{}: {{result: …}}}}",
                    site.node_id, call.tool_name, site.node_id
                ))
            }
        })?;
        let answer = answers
            .get(site.visit as usize - 1)
            .or(if answers.len() == 1 {
                answers.first()
            } else {
                None
            })
            .ok_or_else(|| {
                fail(format!(
                    "the test scripts {} result{} for tool node `{}`, and this is visit {}",
                    answers.len(),
                    if answers.len() == 1 { "" } else { "s" },
                    site.node_id,
                    site.visit
                ))
            })?;
        answer_of(answer)
    }
}

/// What one test found.
struct Outcome {
    failures: Vec<String>,
    steps: usize,
    ms: u128,
}

pub async fn run(env: &Env, args: crate::cli::TestArgs) -> Result<u8> {
    let (paths, record) = (&args.paths, args.record.as_deref());
    if let Some(run_id) = record {
        return write_recorded(env, run_id, paths).await;
    }
    let files = test_files(paths)?;
    if files.is_empty() {
        return Err(Usage(format!(
            "no *.test.yaml files under {}; `weir test --record RUN_ID` writes one from a run",
            if paths.is_empty() {
                ".".to_string()
            } else {
                paths.join(", ")
            }
        ))
        .into());
    }
    let (mut passed, mut failed) = (0, 0);
    for file in &files {
        println!("{}", file.display());
        let (wf_path, parsed) = match load(file) {
            Ok(x) => x,
            Err(e) => {
                println!("  ✗ {e:#}");
                failed += 1;
                continue;
            }
        };
        for case in &parsed.tests {
            match run_case(env, &wf_path, case).await {
                Ok(o) if o.failures.is_empty() => {
                    passed += 1;
                    println!(
                        "  ✓ {} ({} step{}, {} ms)",
                        case.name,
                        o.steps,
                        if o.steps == 1 { "" } else { "s" },
                        o.ms
                    );
                }
                Ok(o) => {
                    failed += 1;
                    println!("  ✗ {}", case.name);
                    for f in o.failures {
                        println!("      {f}");
                    }
                }
                Err(e) => {
                    failed += 1;
                    println!("  ✗ {}\n      {e:#}", case.name);
                }
            }
        }
    }
    println!("{passed} passed, {failed} failed");
    Ok(if failed == 0 { 0 } else { exit::FAILED })
}

/// The `*.test.yaml` files named, or found under the folders named (default: `.`).
fn test_files(paths: &[String]) -> Result<Vec<PathBuf>> {
    let roots: Vec<PathBuf> = if paths.is_empty() {
        vec![PathBuf::from(".")]
    } else {
        paths.iter().map(PathBuf::from).collect()
    };
    let mut out = Vec::new();
    for root in roots {
        if root.is_file() {
            out.push(root);
        } else if root.is_dir() {
            walk(&root, &mut out);
        } else {
            return Err(Usage(format!("{}: no such file or folder", root.display())).into());
        }
    }
    out.sort();
    Ok(out)
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        if p.is_dir() {
            if !name.starts_with('.') && name != "node_modules" && name != "target" {
                walk(&p, out);
            }
        } else if name.ends_with(".test.yaml") || name.ends_with(".test.yml") {
            out.push(p);
        }
    }
}

/// The workflow a test file tests and the file itself.
fn load(file: &Path) -> Result<(PathBuf, TestFile)> {
    let text =
        std::fs::read_to_string(file).map_err(|e| Usage(format!("{}: {e}", file.display())))?;
    let parsed: TestFile = serde_saphyr::from_str(&text)
        .map_err(|e| Usage(format!("{}: not a test file: {e}", file.display())))?;
    let dir = file.parent().unwrap_or(Path::new("."));
    let wf = match &parsed.workflow {
        Some(w) => dir.join(w),
        None => {
            let name = file.file_name().unwrap_or_default().to_string_lossy();
            let stem = name
                .trim_end_matches(".test.yaml")
                .trim_end_matches(".test.yml");
            ["yaml", "yml", "json"]
                .iter()
                .map(|ext| dir.join(format!("{stem}.{ext}")))
                .find(|p| p.is_file())
                .ok_or_else(|| {
                    Usage(format!(
                        "{}: no {stem}.yaml, .yml or .json beside it; name the workflow with `workflow:`",
                        file.display()
                    ))
                })?
        }
    };
    Ok((wf, parsed))
}

#[expect(
    clippy::too_many_lines,
    reason = "one test case in order: fixtures to mock rules, tools and gate decisions, the drive, the decisions at each gate, the expectations"
)]
async fn run_case(env: &Env, wf_path: &Path, case: &Case) -> Result<Outcome> {
    let started = Instant::now();
    let path = wf_path.display().to_string();
    let text = crate::validate::read(&path)?;
    let wf = match crate::validate::compile(env, &path, &text) {
        Ok(v) => v.workflow,
        Err(diags) => {
            let first = diags
                .iter()
                .find(|d| d.is_error())
                .map(|d| format!("[{}] {}", d.code, d.message))
                .unwrap_or_default();
            return Err(Usage(format!("{path} does not validate: {first}")).into());
        }
    };
    let rules = serde_json::to_string(&case.mock)?;
    let mock =
        weir_providers::mock::Mock::from_rules(&rules, "the test's mock rules").map_err(Usage)?;
    let models = weir_providers::Router::with_mock(env.settings.clone(), mock)
        .forcing("mock")
        .map_err(Usage)?;
    let tools: BTreeMap<String, Vec<Answer>> = case
        .tools
        .iter()
        .map(|(k, a)| {
            (
                k.clone(),
                match a {
                    Answers::Each(v) => v.clone(),
                    Answers::One(a) => vec![a.clone()],
                },
            )
        })
        .collect();
    let names = weir_tools::Registry::new(env.settings.clone()).tool_names();
    let mut eng = Engine::new(
        Services {
            models: Arc::new(models),
            tools: Arc::new(ScriptedTools(tools, names, Default::default())),
            scripts: Arc::new(
                weir_script::Bun::from_env().with_env(env.settings.scripts.env.clone()),
            ),
            store: Arc::new(weir_store::Memory::new()),
            secrets: Arc::new(env.settings.clone()),
        },
        Arc::new(Quiet),
    );
    eng.replay = true;
    let source = Source {
        path: path.clone(),
        text: text.into(),
        pin: None,
    };
    let input = if case.input.is_null() {
        json!({})
    } else {
        case.input.clone()
    };
    let outcome = eng.start(wf.clone(), source, input).await?;
    let mut failures = Vec::new();
    let outcome = crate::replay::through_gates(&eng, &wf, outcome, |gate, _| {
        let Some(g) = case.gates.get(gate) else {
            failures.push(format!(
                "the run paused at gate `{gate}`, and the test has no decision for it (gates: {{{gate}: {{approve: true}}}})"
            ));
            return None;
        };
        Some(Decision {
            approved: g.approve,
            by: "weir test".into(),
            input: g.input.clone(),
            comment: if g.approve {
                g.comment.clone()
            } else {
                g.reason.clone().or_else(|| g.comment.clone())
            },
        })
    })
    .await?;
    let record = eng.store().get_record(&outcome.run_id).await?;
    check(&case.expect, &record, &mut failures);
    Ok(Outcome {
        failures,
        steps: record.steps.len(),
        ms: started.elapsed().as_millis(),
    })
}

fn show(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{s:?}"),
        other => other.to_string(),
    }
}

/// Every expectation that does not hold, each naming what it is about and both values.
#[expect(
    clippy::too_many_lines,
    reason = "one block per kind of expectation a test file can state, each naming what it checks and both values"
)]
fn check(e: &Expect, r: &RunRecord, out: &mut Vec<String>) {
    if let Some(want) = &e.status
        && want != r.status.as_str()
    {
        let why = r
            .error
            .as_ref()
            .map(|e| format!(" ({}: {})", e.code, e.message))
            .unwrap_or_default();
        out.push(format!(
            "status: expected {want}, got {}{why}",
            r.status.as_str()
        ));
    }
    for (node, want) in &e.routes {
        let got: Vec<Value> = r
            .steps
            .iter()
            .filter(|s| *s.node_id == **node)
            .map(|s| s.route.clone().map_or(Value::Null, Value::from))
            .collect();
        match want {
            Value::Array(visits) => {
                if *visits != got {
                    out.push(format!(
                        "routes of `{node}`: expected {}, got {}",
                        want,
                        Value::Array(got)
                    ));
                }
            }
            one => match got.first() {
                Some(g) if g == one => {}
                Some(g) => out.push(format!(
                    "route of `{node}`: expected {}, got {}",
                    show(one),
                    show(g)
                )),
                None => out.push(format!(
                    "route of `{node}`: expected {}, but `{node}` did not run",
                    show(one)
                )),
            },
        }
    }
    if let Some(want) = &e.output
        && *want != r.output
    {
        out.push(format!(
            "output: expected {}, got {}",
            show(want),
            show(&r.output)
        ));
    }
    for (path, want) in &e.state {
        let got = path.split('.').try_fold(&r.state, |v, k| v.get(k)).cloned();
        match got {
            Some(g) if g == *want => {}
            Some(g) => out.push(format!(
                "state.{path}: expected {}, got {}",
                show(want),
                show(&g)
            )),
            None => out.push(format!(
                "state.{path}: expected {}, but the state has no such path",
                show(want)
            )),
        }
    }
    if let Some(b) = &e.cost_usd {
        if let Some(max) = b.max
            && r.cost_usd > max
        {
            out.push(format!(
                "cost_usd: expected at most {max}, got {}",
                r.cost_usd
            ));
        }
        if let Some(min) = b.min
            && r.cost_usd < min
        {
            out.push(format!(
                "cost_usd: expected at least {min}, got {}",
                r.cost_usd
            ));
        }
    }
    if let Some(c) = &e.calls {
        let (models, tools) = counts(r);
        if let Some(want) = c.model
            && want != models
        {
            out.push(format!("model calls: expected {want}, got {models}"));
        }
        if let Some(want) = c.tool
            && want != tools
        {
            out.push(format!("tool calls: expected {want}, got {tools}"));
        }
    }
}

/// Model calls (every model reached) and tool calls (every attempt of a tool node).
fn counts(r: &RunRecord) -> (u64, u64) {
    let models = r
        .steps
        .iter()
        .flat_map(|s| &s.attempts)
        .map(|a| a.calls.len() as u64)
        .sum();
    let tools = r
        .steps
        .iter()
        .filter(|s| s.node_type == "tool")
        .map(|s| s.attempts.len() as u64)
        .sum();
    (models, tools)
}

/// `v` as a test of the recording produces it: every object that names one of the models
/// and providers that answered the recorded run (`{model, provider, …}`: an agent's reply)
/// names the mock instead, which answers every call of a test.
fn as_mock_answers(v: &Value, answered_by: &[(String, String)]) -> Value {
    match v {
        Value::Object(m) => {
            let named = |k: &str| m.get(k).and_then(Value::as_str).unwrap_or_default();
            let by_recorded = answered_by
                .iter()
                .any(|(am, ap)| named("model") == am && named("provider") == ap);
            Value::Object(
                m.iter()
                    .map(|(k, x)| match k.as_str() {
                        "model" | "provider" if by_recorded => (k.clone(), json!("mock")),
                        _ => (k.clone(), as_mock_answers(x, answered_by)),
                    })
                    .collect(),
            )
        }
        Value::Array(a) => {
            Value::Array(a.iter().map(|x| as_mock_answers(x, answered_by)).collect())
        }
        other => other.clone(),
    }
}

/// What an agent was sent after its turn `turn`: its tool calls' results, in the order the
/// model asked for them (the record keeps them so): what a mock rule of the next turn
/// matches.
fn turn_results(a: &weir_core::record::Attempt, turn: u32) -> String {
    a.tool_calls
        .iter()
        .filter(|t| t.turn == turn)
        .map(|t| weir_engine::tool_return(t).content)
        .collect::<Vec<_>>()
        .join("\n")
}

/// `weir test --record RUN_ID [FILE]`: a test file from a recorded run. Its mock rules
/// answer each model call as it was answered, in order (`times: 1` each); its tools give
/// each tool node the results it got; its gates decide as the reviewers did; it expects
/// the recorded status, routes, output and number of calls.
#[expect(
    clippy::too_many_lines,
    reason = "a recorded test file built section by section in the file's own order (mock rules, tools, gates, expectations)"
)]
async fn write_recorded(env: &Env, run_id: &str, paths: &[String]) -> Result<u8> {
    let store = wiring::store(env, wiring::Open::MustExist).await?;
    let run_id = wiring::resolve_run(env, store.as_ref(), run_id).await?;
    let r = store.get_record(&run_id).await?;
    let stored = store.load_run(&run_id).await?;
    let source = PathBuf::from(&stored.source_path);
    let stem = source
        .file_stem()
        .map_or_else(|| "workflow".into(), |s| s.to_string_lossy().into_owned());
    let target = match paths.first() {
        Some(p) => PathBuf::from(p),
        None => source.with_file_name(format!("{stem}.test.yaml")),
    };
    let mut mock = Vec::new();
    // The models and providers that answered the recorded run: a test's calls all go to
    // the mock, which reports itself, so a recorded output naming them expects the mock.
    let mut answered_by: Vec<(String, String)> = Vec::new();
    let mut tools: BTreeMap<String, Vec<Answer>> = BTreeMap::new();
    let mut gates = BTreeMap::new();
    let mut routes = BTreeMap::new();
    for s in &r.steps {
        for a in &s.attempts {
            let prompts: Vec<String> = match &a.request {
                Some(Request::Model(m)) => vec![m.user.clone()],
                Some(Request::Other(v)) => match (v["user"].as_str(), v["nodes"].as_array()) {
                    (Some(u), _) => vec![u.to_string()],
                    (None, Some(nodes)) => nodes
                        .iter()
                        .filter_map(|n| n["user"].as_str().map(str::to_string))
                        .collect(),
                    _ => Vec::new(),
                },
                None => Vec::new(),
            };
            // An agent's turns after the first are matched by the tool results it was sent.
            let mut turn = 1;
            for (i, c) in a.calls.iter().enumerate() {
                let pattern = if turn > 1 {
                    turn_results(a, turn - 1)
                } else {
                    prompts
                        .get(i.min(prompts.len().saturating_sub(1)))
                        .cloned()
                        .unwrap_or_default()
                };
                if let (Some(m), Some(p)) = (c["model"].as_str(), c["provider"].as_str())
                    && p != "mock"
                    && !answered_by.iter().any(|(am, ap)| am == m && ap == p)
                {
                    answered_by.push((m.to_string(), p.to_string()));
                }
                let mut rule = json!({"match": pattern, "times": 1});
                match c["status"].as_str() {
                    Some("succeeded") => {
                        rule["reply"] = c["reply"].clone();
                        rule["input_tokens"] = c["input_tokens"].clone();
                        rule["output_tokens"] = c["output_tokens"].clone();
                        if let Some(uses) = c["tool_uses"].as_array() {
                            rule["tool_calls"] = uses
                                .iter()
                                .map(|u| json!({"name": u["name"], "arguments": u["arguments"]}))
                                .collect();
                            turn += 1;
                        }
                    }
                    _ => {
                        rule["error"] = c["error_class"].clone();
                        rule["message"] = c["error"].clone();
                    }
                }
                mock.push(rule);
            }
            // An agent's tool calls: each tool's results in the order they were made (a
            // rejected call was never made).
            for t in &a.tool_calls {
                if t.approval.as_ref().and_then(|d| d["approved"].as_bool()) == Some(false) {
                    continue;
                }
                tools.entry(t.tool.clone()).or_default().push(Answer {
                    result: t.result.clone().filter(|_| t.error.is_none()),
                    error: t.error.clone(),
                    arguments: Some(t.arguments.clone()),
                });
            }
        }
        if s.node_type == "tool" {
            let answer = match s.status {
                StepStatus::Succeeded => Answer {
                    result: Some(Value::clone(&s.output)),
                    error: None,
                    arguments: None,
                },
                _ => Answer {
                    result: None,
                    error: s.error.clone(),
                    arguments: None,
                },
            };
            tools
                .entry(String::from(&*s.node_id))
                .or_default()
                .push(answer);
        }
        if s.node_type == "human_gate"
            && let Some(approved) = s.output.get("approved").and_then(Value::as_bool)
        {
            let text = |k: &str| s.output.get(k).and_then(Value::as_str).map(str::to_string);
            gates.insert(
                String::from(&*s.node_id),
                Gate {
                    approve: approved,
                    reason: if approved { None } else { text("reason") },
                    comment: if approved { text("comment") } else { None },
                    input: s.output.get("input").cloned(),
                },
            );
        }
        if let Some(route) = &s.route {
            routes
                .entry(String::from(&*s.node_id))
                .or_insert_with(Vec::new)
                .push(Value::from(route.clone()));
        }
    }
    let (models, tool_calls) = counts(&r);
    let case = Case {
        name: format!("as recorded in run {}", short(&r.run_id)),
        input: stored.input.clone(),
        mock,
        tools: tools
            .into_iter()
            .map(|(k, mut v)| {
                (
                    k,
                    if v.len() == 1 {
                        Answers::One(v.remove(0))
                    } else {
                        Answers::Each(v)
                    },
                )
            })
            .collect(),
        gates,
        expect: Expect {
            status: Some(r.status.as_str().to_string()),
            routes: routes
                .into_iter()
                .map(|(k, mut v)| {
                    (
                        k,
                        if v.len() == 1 {
                            v.remove(0)
                        } else {
                            Value::Array(v)
                        },
                    )
                })
                .collect(),
            output: (!r.output.is_null()).then(|| as_mock_answers(&r.output, &answered_by)),
            state: BTreeMap::new(),
            cost_usd: None,
            calls: Some(Calls {
                model: Some(models),
                tool: Some(tool_calls),
            }),
        },
    };
    // Named only when the default (NAME.yaml beside NAME.test.yaml) would not find it.
    let beside = target.file_name().map(|n| {
        n.to_string_lossy()
            .trim_end_matches(".test.yaml")
            .to_string()
    }) == Some(stem.clone())
        && abs(target.parent().unwrap_or(Path::new(".")))
            == abs(source.parent().unwrap_or(Path::new(".")));
    let workflow = (!beside).then(|| {
        let (p, d) = (abs(&source), abs(target.parent().unwrap_or(Path::new("."))));
        match (p, d) {
            (Some(p), Some(d)) => p
                .strip_prefix(&d)
                .map_or_else(|_| p.display().to_string(), |r| r.display().to_string()),
            _ => stored.source_path.clone(),
        }
    });
    let file = TestFile {
        workflow,
        tests: vec![case],
    };
    if target.exists() {
        return Err(Usage(format!(
            "{} exists; give another path: weir test --record {} NEW.test.yaml",
            target.display(),
            short(&run_id)
        ))
        .into());
    }
    let yaml = serde_saphyr::to_string(&file)
        .map_err(|e| anyhow::anyhow!("cannot write the test as YAML: {e}"))?;
    std::fs::write(
        &target,
        format!(
            "# Recorded from run {} of {} by `weir test --record`.\n{yaml}",
            r.run_id, r.workflow
        ),
    )
    .map_err(|e| Usage(format!("{}: {e}", target.display())))?;
    println!("wrote {}", target.display());
    eprintln!("  run it: weir test {}", target.display());
    Ok(0)
}

fn abs(p: &Path) -> Option<PathBuf> {
    let p = if p.as_os_str().is_empty() {
        Path::new(".")
    } else {
        p
    };
    std::fs::canonicalize(p).ok()
}
