//! Agents that call tools: the tool-use loop through the binary, on the mock model and on
//! fake Anthropic and OpenAI servers speaking their tool-call wire formats, with a custom
//! HTTP tool served by a fake on loopback.

use serde_json::{Value, json};

use crate::support::{Fake, Reply, Weir, repo_root, steps};

const FLOW: &str = r#"
name: Packing advice
nodes:
  - id: advise
    type: agent
    config:
      model: MODEL
      system_prompt: You help travellers pack.
      user_message: "What should I wear in {city}?"
      tools: [custom:weather, delay]
      output_key: advice
edges: []
"#;

/// The packing agent on `model` with `config` (YAML lines of the agent's config) added,
/// written to `file`.
fn flow_with(w: &Weir, file: &str, model: &str, config: &str) -> String {
    w.file(
        file,
        &FLOW.replace("MODEL", model).replace(
            "      output_key",
            &format!("      {config}\n      output_key"),
        ),
    )
}

/// A scratch folder whose weir.toml registers `custom:weather`, served by `fake`.
fn setup(fake: &Fake, model: &str) -> (Weir, String) {
    fake.always(
        "/weather/Paris",
        Reply::json(200, json!({"city": "Paris", "sky": "rain", "celsius": 12})),
    );
    fake.always(
        "/weather/Oslo",
        Reply::json(200, json!({"city": "Oslo", "sky": "snow", "celsius": -3})),
    );
    let w = Weir::new()
        .env("ANTHROPIC_BASE_URL", &fake.url)
        .env("ANTHROPIC_API_KEY", "sk-ant-TESTKEY")
        .env("OPENAI_BASE_URL", &fake.url)
        .env("OPENAI_API_KEY", "sk-TESTKEY");
    w.file(
        "weir.toml",
        &format!(
            "[tools.weather]\nkind = \"http\"\nurl = \"{}/weather/{{city}}\"\nresponse = \"body\"\ndescription = \"Today's weather in a city\"\n",
            fake.url
        ),
    );
    let flow = w.file("pack.yaml", &FLOW.replace("MODEL", model));
    (w, flow)
}

#[test]
fn a_mock_agent_calls_tools_over_several_turns_and_every_call_is_recorded() {
    let fake = Fake::start();
    let (w, flow) = setup(&fake, "mock");
    w.file(
        "pack.mock.json",
        &json!([
            {"match": "What should I wear", "times": 1,
             "tool_calls": [{"name": "weather", "arguments": {"city": "Paris"}}]},
            {"match": "rain", "times": 1,
             "tool_calls": [{"name": "delay", "arguments": {"seconds": 0}},
                            {"name": "weather", "arguments": {"town": "Paris"}}]},
            {"match": "delayed_ms", "reply": "Rain in Paris today: take a coat and an umbrella."}
        ])
        .to_string(),
    );
    let ran = w.run(&["run", &flow, "--input", r#"{"city": "Paris"}"#, "--json"]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let r = ran.json();
    assert_eq!(
        r["state"]["advice"],
        "Rain in Paris today: take a coat and an umbrella."
    );
    let step = steps(&r, "advise")[0];
    assert_eq!(step["output"]["turns"], 3, "{step}");
    assert_eq!(step["output"]["tool_calls"], 3);
    let attempt = &step["attempts"][0];
    assert_eq!(
        attempt["calls"].as_array().unwrap().len(),
        3,
        "one per model turn"
    );
    let calls = attempt["tool_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 3, "{attempt}");
    assert_eq!(calls[0]["turn"], 1);
    assert_eq!(calls[0]["tool"], "custom:weather");
    assert_eq!(calls[0]["arguments"], json!({"city": "Paris"}));
    assert_eq!(calls[0]["result"]["sky"], "rain");
    assert_eq!(calls[1]["tool"], "delay");
    assert_eq!(calls[1]["result"]["delayed_ms"], 0);
    // Arguments that do not match the tool's schema are never sent; the model is told why.
    assert!(calls[2]["result"].is_null(), "{}", calls[2]);
    let why = calls[2]["error"].as_str().unwrap();
    assert!(why.contains("city"), "names the missing argument: {why}");
    let seen = fake.seen("/weather/Paris");
    assert_eq!(seen.len(), 1, "the invalid call reached no service");
    let run_id = r["run_id"].as_str().unwrap();
    assert_eq!(
        seen[0].headers["idempotency-key"],
        format!("{run_id}:advise:1:1:0"),
        "each tool call has the key run:node:visit:turn:index"
    );
    // The record, tool calls and all, is as the published schema says.
    conforms(&r);
    // The trace shows each call with its arguments.
    let show = w.run(&["runs", "show", run_id]);
    assert_eq!(show.code, 0, "{}", show.stderr);
    assert!(
        show.stdout.contains(r#"tool weather {"city":"Paris"}"#),
        "{}",
        show.stdout
    );
    // A replay answers every model and tool call from the record.
    let replay = w.run(&["replay", run_id]);
    assert_eq!(replay.code, 0, "{}\n{}", replay.stdout, replay.stderr);
    assert_eq!(
        fake.seen("/weather/Paris").len(),
        1,
        "the replay called nothing"
    );
}

/// The record is as the published schema says.
fn conforms(r: &Value) {
    let text = std::fs::read_to_string(repo_root().join("docs/run-record.schema.json")).unwrap();
    let schema = jsonschema::validator_for(&serde_json::from_str(&text).unwrap()).unwrap();
    let problems: Vec<String> = schema.iter_errors(r).map(|e| e.to_string()).collect();
    assert!(problems.is_empty(), "{problems:?}");
}

fn anthropic(content: Value, stop: &str) -> Reply {
    Reply::json(
        200,
        json!({"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-haiku-4-5",
               "content": content, "stop_reason": stop,
               "usage": {"input_tokens": 100, "output_tokens": 20}}),
    )
}

#[test]
fn an_anthropic_agent_runs_parallel_tool_calls_and_recovers_from_a_bad_argument() {
    let fake = Fake::start();
    let (w, flow) = setup(&fake, "claude-haiku-4-5");
    fake.queue(
        "/v1/messages",
        vec![
            anthropic(
                json!([{"type": "text", "text": "Let me check both cities."},
                       {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Paris"}},
                       {"type": "tool_use", "id": "toolu_2", "name": "weather", "input": {"city": "Oslo"}}]),
                "tool_use",
            ),
            anthropic(
                json!([{"type": "tool_use", "id": "toolu_3", "name": "delay", "input": {"seconds": "soon"}}]),
                "tool_use",
            ),
            anthropic(
                json!([{"type": "text", "text": "A raincoat for Paris, a down jacket for Oslo."}]),
                "end_turn",
            ),
        ],
    );
    let ran = w.run(&["run", &flow, "--input", r#"{"city": "Paris"}"#, "--json"]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let r = ran.json();
    assert_eq!(
        r["state"]["advice"],
        "A raincoat for Paris, a down jacket for Oslo."
    );
    let sent = fake.seen("/v1/messages");
    assert_eq!(sent.len(), 3);
    let first = sent[0].json();
    let tools = first["tools"].as_array().unwrap();
    assert_eq!(tools.len(), 2);
    assert_eq!(tools[0]["name"], "weather");
    assert_eq!(tools[0]["description"], "Today's weather in a city");
    assert_eq!(tools[0]["input_schema"]["required"], json!(["city"]));
    assert_eq!(first["tool_choice"], json!({"type": "auto"}));
    // Turn 2 carries turn 1's calls and both results, in the order asked.
    let second = sent[1].json();
    let msgs = second["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 3, "{second}");
    assert_eq!(msgs[1]["role"], "assistant");
    assert_eq!(msgs[1]["content"][1]["type"], "tool_use");
    assert_eq!(msgs[1]["content"][1]["id"], "toolu_1");
    let results = msgs[2]["content"].as_array().unwrap();
    assert_eq!(results[0]["type"], "tool_result");
    assert_eq!(results[0]["tool_use_id"], "toolu_1");
    assert!(results[0]["content"].as_str().unwrap().contains("rain"));
    assert_eq!(results[1]["tool_use_id"], "toolu_2");
    assert!(results[1]["content"].as_str().unwrap().contains("snow"));
    assert_eq!(results[1]["is_error"], false);
    // Turn 3 tells the model its arguments were wrong, as an error result.
    let third = sent[2].json();
    let last = third["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["content"][0]["tool_use_id"], "toolu_3");
    assert_eq!(last["content"][0]["is_error"], true);
    assert!(
        last["content"][0]["content"]
            .as_str()
            .unwrap()
            .contains("schema"),
        "{last}"
    );
    let step = steps(&r, "advise")[0];
    assert_eq!(step["output"]["turns"], 3);
    // Three priced model calls: $1 / $5 per million tokens, 100 in and 20 out each.
    assert!((step["cost_usd"].as_f64().unwrap() - 3.0 * 0.0002).abs() < 1e-12);
    assert_eq!(fake.seen("/weather/Oslo").len(), 1);
}

fn openai(message: Value, finish: &str) -> Reply {
    Reply::json(
        200,
        json!({"id": "chatcmpl-1", "object": "chat.completion", "model": "gpt-4o-mini",
               "choices": [{"index": 0, "message": message, "finish_reason": finish}],
               "usage": {"prompt_tokens": 50, "completion_tokens": 10, "total_tokens": 60}}),
    )
}

#[test]
fn an_openai_agent_calls_tools_and_its_results_go_back_as_tool_messages() {
    let fake = Fake::start();
    let (w, flow) = setup(&fake, "gpt-4o-mini");
    fake.queue(
        "/chat/completions",
        vec![
            openai(
                json!({"role": "assistant", "content": null, "tool_calls": [
                    {"id": "call_a", "type": "function",
                     "function": {"name": "weather", "arguments": "{\"city\": \"Oslo\"}"}}]}),
                "tool_calls",
            ),
            openai(
                json!({"role": "assistant", "content": "Snow in Oslo: boots and a warm coat."}),
                "stop",
            ),
        ],
    );
    let ran = w.run(&["run", &flow, "--input", r#"{"city": "Oslo"}"#, "--json"]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let r = ran.json();
    assert_eq!(r["state"]["advice"], "Snow in Oslo: boots and a warm coat.");
    let sent = fake.seen("/chat/completions");
    assert_eq!(sent.len(), 2);
    let first = sent[0].json();
    assert_eq!(first["tools"][0]["type"], "function");
    assert_eq!(first["tools"][0]["function"]["name"], "weather");
    assert_eq!(first["tool_choice"], "auto");
    assert_eq!(first["parallel_tool_calls"], true);
    let msgs = sent[1].json()["messages"].as_array().unwrap().clone();
    let asked = &msgs[msgs.len() - 2];
    assert_eq!(asked["role"], "assistant");
    assert_eq!(asked["tool_calls"][0]["id"], "call_a");
    assert_eq!(
        asked["tool_calls"][0]["function"]["arguments"],
        r#"{"city":"Oslo"}"#
    );
    let answer = &msgs[msgs.len() - 1];
    assert_eq!(answer["role"], "tool");
    assert_eq!(answer["tool_call_id"], "call_a");
    assert!(answer["content"].as_str().unwrap().contains("snow"));
}

#[test]
fn an_agent_that_keeps_calling_tools_stops_at_max_turns() {
    let fake = Fake::start();
    let (w, _) = setup(&fake, "mock");
    let flow = flow_with(&w, "loop.yaml", "mock", "max_turns: 3");
    w.file(
        "loop.mock.json",
        &json!([{"tool_calls": [{"name": "weather", "arguments": {"city": "Paris"}}]}]).to_string(),
    );
    let ran = w.run(&["run", &flow, "--input", r#"{"city": "Paris"}"#, "--json"]);
    assert_eq!(ran.code, 1, "{}", ran.stderr);
    let r = ran.json();
    assert_eq!(r["status"], "failed");
    let step = steps(&r, "advise")[0];
    assert_eq!(
        step["attempts"][0]["error_class"], "max_turns_exceeded",
        "{step}"
    );
    assert!(
        step["error"].as_str().unwrap().contains("3 turns"),
        "{}",
        step["error"]
    );
    assert_eq!(
        fake.seen("/weather/Paris").len(),
        3,
        "one tool call per turn"
    );
}

#[test]
fn an_agent_naming_a_tool_that_does_not_exist_is_refused_before_it_runs() {
    let w = Weir::new();
    let flow = w.file(
        "bad.yaml",
        &FLOW
            .replace("MODEL", "mock")
            .replace("custom:weather", "custom:wether"),
    );
    let ran = w.run(&["run", &flow, "--input", r#"{"city": "Paris"}"#]);
    assert_eq!(ran.code, 2, "{}", ran.stderr);
    assert!(ran.stderr.contains("E005"), "{}", ran.stderr);
    assert!(ran.stderr.contains("custom:wether"), "{}", ran.stderr);
    assert!(w.run_ids().is_empty(), "no run was created");
}

#[test]
fn weir_test_scripts_an_agent_s_tool_results_by_tool() {
    let w = Weir::new();
    w.file(
        "weir.toml",
        "[tools.weather]\nkind = \"http\"\nurl = \"http://127.0.0.1:9/weather/{city}\"\n",
    );
    w.file("pack.yaml", &FLOW.replace("MODEL", "claude-haiku-4-5"));
    w.file(
        "pack.test.yaml",
        r#"
tests:
  - name: rain in Paris means a coat
    input: {city: Paris}
    mock:
      - {match: "What should I wear", times: 1, tool_calls: [{name: weather, arguments: {city: Paris}}]}
      - {match: rain, reply: "Take a coat."}
    tools:
      custom:weather: {result: {sky: rain}}
    expect:
      status: succeeded
      state: {advice: Take a coat.}
      calls: {model: 2}
"#,
    );
    let ran = w.run(&["test"]);
    assert_eq!(ran.code, 0, "{}\n{}", ran.stdout, ran.stderr);
    assert!(ran.stdout.contains("1 passed, 0 failed"), "{}", ran.stdout);
}

#[test]
fn an_agent_offers_an_mcp_server_s_tools_as_the_server_describes_them() {
    let fake = Fake::start();
    let server = std::env::var("WEIR_MCP_EVERYTHING")
        .expect("WEIR_MCP_EVERYTHING (scripts/test installs the server)");
    let w = Weir::new()
        .env("ANTHROPIC_BASE_URL", &fake.url)
        .env("ANTHROPIC_API_KEY", "sk-ant-TESTKEY");
    w.file(
        "weir.toml",
        &format!("[mcp.servers.everything]\ncommand = \"{server}\"\nargs = [\"stdio\"]\n"),
    );
    let flow = w.file(
        "echo.yaml",
        &FLOW
            .replace("MODEL", "claude-haiku-4-5")
            .replace("[custom:weather, delay]", "[\"mcp:everything/echo\"]"),
    );
    fake.queue(
        "/v1/messages",
        vec![
            anthropic(
                json!([{"type": "tool_use", "id": "toolu_1", "name": "echo", "input": {"message": "hi"}}]),
                "tool_use",
            ),
            anthropic(json!([{"type": "text", "text": "It said hi back."}]), "end_turn"),
        ],
    );
    let ran = w.run(&["run", &flow, "--input", r#"{"city": "Paris"}"#, "--json"]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let sent = fake.seen("/v1/messages");
    let tool = &sent[0].json()["tools"][0];
    assert_eq!(tool["name"], "echo");
    assert!(
        !tool["description"].as_str().unwrap().is_empty(),
        "the server's description: {tool}"
    );
    assert!(
        tool["input_schema"]["properties"]["message"].is_object(),
        "the server's schema: {tool}"
    );
    let result = &sent[1].json()["messages"][2]["content"][0];
    assert_eq!(result["content"], "Echo: hi", "{result}");
    let r = ran.json();
    let call = &steps(&r, "advise")[0]["attempts"][0]["tool_calls"][0];
    assert_eq!(call["tool"], "mcp:everything/echo");
    assert_eq!(call["result"]["text"], "Echo: hi");
}

#[test]
fn an_agent_killed_mid_loop_goes_on_without_calling_a_tool_twice() {
    let fake = Fake::start();
    let (w, flow) = setup(&fake, "claude-haiku-4-5");
    w.short_lease(1.0, 0.25);
    // Oslo's first request hangs: the process is killed while that call is in flight.
    fake.queue(
        "/weather/Oslo",
        vec![
            Reply::json(200, json!({"sky": "never"})).delayed(std::time::Duration::from_secs(120)),
        ],
    );
    fake.queue(
        "/v1/messages",
        vec![
            anthropic(
                json!([{"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Paris"}}]),
                "tool_use",
            ),
            anthropic(
                json!([{"type": "tool_use", "id": "toolu_2", "name": "weather", "input": {"city": "Oslo"}}]),
                "tool_use",
            ),
            anthropic(
                json!([{"type": "text", "text": "Rain in Paris, snow in Oslo."}]),
                "end_turn",
            ),
        ],
    );
    let mut child = w.spawn(&["run", &flow, "--input", r#"{"city": "Paris"}"#, "--json"]);
    crate::support::wait_until("the second turn's tool call to start", || {
        fake.seen("/weather/Oslo").len() == 1
    });
    child.kill().expect("kill -9");
    child.wait().expect("reap");
    let id = w.run_ids()[0].clone();
    let before = w.show(&id);
    let running = steps(&before, "advise")[0];
    assert_eq!(running["status"], "running");
    assert_eq!(
        running["attempts"][0]["tool_calls"]
            .as_array()
            .unwrap()
            .len(),
        1,
        "turn 1's call was committed when it ended: {running}"
    );
    std::thread::sleep(std::time::Duration::from_millis(1200));
    let ran = w.run(&["resume", &id, "--json"]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let r = ran.json();
    assert_eq!(r["state"]["advice"], "Rain in Paris, snow in Oslo.");
    // Paris was called once; Oslo, in flight at the kill, once more with the same key; the
    // model was not asked turns 1 and 2 again.
    assert_eq!(fake.seen("/weather/Paris").len(), 1);
    let oslo = fake.seen("/weather/Oslo");
    assert_eq!(oslo.len(), 2);
    assert_eq!(
        oslo[0].headers["idempotency-key"],
        format!("{id}:advise:1:2:0")
    );
    assert_eq!(
        oslo[1].headers["idempotency-key"],
        oslo[0].headers["idempotency-key"]
    );
    let sent = fake.seen("/v1/messages");
    assert_eq!(sent.len(), 3, "one model call per turn, none repeated");
    let msgs = sent[2].json()["messages"].as_array().unwrap().clone();
    assert_eq!(msgs.len(), 5, "the whole conversation went on: {msgs:?}");
    assert!(msgs[2].to_string().contains("rain"));
    assert!(msgs[4].to_string().contains("snow"));
    // The record: the interrupted step with what it did and cost, the one that went on.
    let advise = steps(&r, "advise");
    assert_eq!(advise.len(), 2);
    assert_eq!(advise[0]["status"], "cancelled");
    assert!(
        advise[0]["cost_usd"].as_f64().unwrap() > 0.0,
        "{}",
        advise[0]
    );
    assert_eq!(advise[1]["status"], "succeeded");
    assert_eq!(advise[1]["visit"], 1);
    let calls = advise[1]["attempts"][0]["tool_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert_eq!(calls[1]["result"]["sky"], "snow");
    conforms(&r);
    let total: f64 = advise.iter().map(|s| s["cost_usd"].as_f64().unwrap()).sum();
    assert!(
        (r["cost_usd"].as_f64().unwrap() - total).abs() < 1e-9,
        "each call charged once"
    );
}

/// A mock agent whose `custom:weather` calls wait for a reviewer.
fn gated(fake: &Fake) -> (Weir, String) {
    let (w, _) = setup(fake, "mock");
    let flow = flow_with(&w, "gated.yaml", "mock", "approve_tools: [custom:weather]");
    w.file(
        "gated.mock.json",
        &json!([
            {"match": "What should I wear", "times": 1,
             "tool_calls": [{"name": "weather", "arguments": {"city": "Paris"}}]},
            {"match": "snow", "reply": "Snow in Oslo: a down jacket."},
            {"match": "rejected by", "reply": "I was not allowed to check the weather."}
        ])
        .to_string(),
    );
    (w, flow)
}

#[test]
fn a_tool_call_waits_for_approval_and_runs_with_the_reviewers_arguments() {
    let fake = Fake::start();
    let (w, flow) = gated(&fake);
    let ran = w.run(&["run", &flow, "--input", r#"{"city": "Paris"}"#]);
    assert_eq!(ran.code, 3, "paused: {}\n{}", ran.stdout, ran.stderr);
    let id = w.run_ids()[0].clone();
    let paused = w.show(&id);
    assert_eq!(paused["status"], "paused");
    conforms(&paused);
    let gate = &paused["pending_gate"];
    assert_eq!(gate["kind"], "tool_call", "{gate}");
    assert_eq!(gate["node_id"], "advise");
    assert_eq!(gate["detail"]["tool"], "custom:weather");
    assert_eq!(gate["detail"]["arguments"], json!({"city": "Paris"}));
    assert!(
        gate["prompt"].as_str().unwrap().contains("\"Paris\""),
        "{gate}"
    );
    assert!(
        fake.seen("/weather/Paris").is_empty(),
        "nothing called before the decision"
    );
    let shown = w.run(&["runs", "show", &id]);
    assert!(
        shown
            .stdout
            .contains("agent `advise` waits for approval of a tool call"),
        "{}",
        shown.stdout
    );
    // Arguments that do not match the tool's schema are refused, and the run still waits.
    let bad = w.run(&[
        "approve",
        &id,
        "--input",
        r#"{"arguments": {"town": "Oslo"}}"#,
    ]);
    assert_eq!(bad.code, 2, "{}\n{}", bad.stdout, bad.stderr);
    assert!(bad.stderr.contains("city"), "{}", bad.stderr);
    let ok = w.run(&[
        "approve",
        &id,
        "--input",
        r#"{"arguments": {"city": "Oslo"}}"#,
        "--by",
        "ana",
        "--json",
    ]);
    assert_eq!(ok.code, 0, "{}\n{}", ok.stdout, ok.stderr);
    let r = ok.json();
    assert_eq!(r["status"], "succeeded");
    assert_eq!(r["state"]["advice"], "Snow in Oslo: a down jacket.");
    assert!(fake.seen("/weather/Paris").is_empty());
    assert_eq!(fake.seen("/weather/Oslo").len(), 1);
    let advise = steps(&r, "advise");
    assert_eq!(advise.len(), 2, "the wait and the loop that went on");
    assert_eq!(advise[0]["route"], "approved");
    assert_eq!(advise[0]["output"]["by"], "ana");
    let call = &advise[1]["attempts"][0]["tool_calls"][0];
    assert_eq!(call["arguments"], json!({"city": "Oslo"}));
    assert_eq!(call["approval"]["by"], "ana");
    assert_eq!(
        call["approval"]["model_arguments"],
        json!({"city": "Paris"})
    );
    assert_eq!(call["result"]["sky"], "snow");
    conforms(&r);
    let shown = w.run(&["runs", "show", &id]);
    assert!(
        shown.stdout.contains("approved by ana (arguments edited)")
            && shown
                .stdout
                .contains("before the loop stopped (charged there)"),
        "{}",
        shown.stdout
    );
}

#[test]
fn a_rejected_tool_call_is_never_made_and_the_model_reads_why() {
    let fake = Fake::start();
    let (w, flow) = gated(&fake);
    let ran = w.run(&["run", &flow, "--input", r#"{"city": "Paris"}"#]);
    assert_eq!(ran.code, 3, "{}", ran.stderr);
    let id = w.run_ids()[0].clone();
    let no = w.run(&[
        "reject",
        &id,
        "--reason",
        "no weather lookups today",
        "--by",
        "bo",
        "--json",
    ]);
    assert_eq!(no.code, 0, "the run goes on: {}\n{}", no.stdout, no.stderr);
    let r = no.json();
    assert_eq!(r["status"], "succeeded");
    assert_eq!(
        r["state"]["advice"],
        "I was not allowed to check the weather."
    );
    assert!(fake.seen("/weather/Paris").is_empty());
    let call = &steps(&r, "advise")[1]["attempts"][0]["tool_calls"][0];
    assert_eq!(call["error"], "rejected by bo: no weather lookups today");
    assert_eq!(call["approval"]["approved"], false);
}

#[test]
fn a_call_that_could_cross_the_runs_budget_is_not_made_and_the_run_fails() {
    let fake = Fake::start();
    let (w, _) = setup(&fake, "claude-haiku-4-5");
    let flow = w.file(
        "budgeted.yaml",
        &FLOW
            .replace("MODEL", "claude-haiku-4-5")
            .replace(
                "name: Packing advice",
                "name: Packing advice\nbudget: {usd: 0.0005}",
            )
            .replace("      output_key", "      max_tokens: 50\n      output_key"),
    );
    fake.queue(
        "/v1/messages",
        vec![
            anthropic(
                json!([{"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Paris"}}]),
                "tool_use",
            ),
            anthropic(json!([{"type": "text", "text": "never asked"}]), "end_turn"),
        ],
    );
    let ran = w.run(&["run", &flow, "--input", r#"{"city": "Paris"}"#, "--json"]);
    assert_eq!(ran.code, 1, "{}\n{}", ran.stdout, ran.stderr);
    let r = ran.json();
    assert_eq!(r["status"], "failed");
    assert_eq!(r["error"]["code"], "budget_exceeded", "{}", r["error"]);
    let msg = r["error"]["message"].as_str().unwrap();
    assert!(msg.contains("the run's budget of $0.0005 usd"), "{msg}");
    assert!(msg.contains("$0.0002 spent"), "{msg}");
    // Turn 1 was made (its worst case fit); turn 2's worst case did not.
    assert_eq!(fake.seen("/v1/messages").len(), 1);
    assert_eq!(fake.seen("/weather/Paris").len(), 1);
    assert!((r["cost_usd"].as_f64().unwrap() - 0.0002).abs() < 1e-9);
    conforms(&r);
}

#[test]
fn a_node_budget_pauses_the_loop_and_a_raise_lets_it_go_on() {
    let fake = Fake::start();
    let (w, _) = setup(&fake, "mock");
    let flow = flow_with(
        &w,
        "capped.yaml",
        "mock",
        "budget: {tool_calls: 1, on_exceeded: pause}",
    );
    w.file(
        "capped.mock.json",
        &json!([
            {"match": "What should I wear", "times": 1,
             "tool_calls": [{"name": "weather", "arguments": {"city": "Paris"}}]},
            {"match": "rain", "times": 1,
             "tool_calls": [{"name": "weather", "arguments": {"city": "Oslo"}}]},
            {"match": "snow", "reply": "Rain in Paris, snow in Oslo."}
        ])
        .to_string(),
    );
    let ran = w.run(&["run", &flow, "--input", r#"{"city": "Paris"}"#]);
    assert_eq!(ran.code, 3, "{}\n{}", ran.stdout, ran.stderr);
    assert!(
        ran.stdout.contains("by a budget")
            && ran.stdout.contains(r#"{"raise": {"tool_calls": 10}}"#),
        "{}",
        ran.stdout
    );
    let id = w.run_ids()[0].clone();
    let paused = w.show(&id);
    assert_eq!(paused["pending_gate"]["kind"], "budget");
    assert_eq!(paused["pending_gate"]["detail"]["limit"], "tool_calls");
    assert_eq!(fake.seen("/weather/Paris").len(), 1);
    assert!(
        fake.seen("/weather/Oslo").is_empty(),
        "the call past the budget waits"
    );
    conforms(&paused);
    let nothing = w.run(&["approve", &id]);
    assert_eq!(nothing.code, 2, "a raise is needed: {}", nothing.stderr);
    assert!(nothing.stderr.contains("raise"), "{}", nothing.stderr);
    let ok = w.run(&[
        "approve",
        &id,
        "--input",
        r#"{"raise": {"tool_calls": 1}}"#,
        "--json",
    ]);
    assert_eq!(ok.code, 0, "{}\n{}", ok.stdout, ok.stderr);
    let r = ok.json();
    assert_eq!(r["state"]["advice"], "Rain in Paris, snow in Oslo.");
    assert_eq!(fake.seen("/weather/Paris").len(), 1, "made once");
    assert_eq!(fake.seen("/weather/Oslo").len(), 1);
    let advise = steps(&r, "advise");
    assert_eq!(advise[0]["route"], "approved");
    assert_eq!(advise[0]["output"]["raise"], json!({"tool_calls": 1}));
    assert_eq!(advise[1]["status"], "succeeded");
    conforms(&r);
}

#[test]
fn an_error_of_a_fatal_tool_fails_the_node_instead_of_going_back_to_the_model() {
    let fake = Fake::start();
    fake.always(
        "/weather/Lima",
        Reply::json(500, json!({"error": "weather service down"})),
    );
    let (w, _) = setup(&fake, "mock");
    let flow = flow_with(&w, "strict.yaml", "mock", "fatal_tools: [custom:weather]");
    w.file(
        "strict.mock.json",
        &json!([
            {"match": "What should I wear", "times": 1,
             "tool_calls": [{"name": "weather", "arguments": {"city": "Lima"}}]},
            {"match": "weather", "reply": "never asked"}
        ])
        .to_string(),
    );
    let ran = w.run(&["run", &flow, "--input", r#"{"city": "Lima"}"#, "--json"]);
    assert_eq!(ran.code, 1, "{}\n{}", ran.stdout, ran.stderr);
    let r = ran.json();
    assert_eq!(r["error"]["code"], "node_failed");
    let msg = r["error"]["message"].as_str().unwrap();
    assert!(msg.contains("`fatal_tools`"), "{msg}");
    let attempt = &steps(&r, "advise")[0]["attempts"][0];
    assert_eq!(attempt["error_class"], "tool");
    assert_eq!(
        attempt["calls"].as_array().unwrap().len(),
        1,
        "the model read no error"
    );
    assert_eq!(attempt["tool_calls"][0]["tool"], "custom:weather");
    assert!(attempt["tool_calls"][0]["error"].is_string());
    conforms(&r);
}

#[test]
fn declared_parameters_are_what_the_model_is_told_and_its_arguments_are_checked_against() {
    let fake = Fake::start();
    fake.always(
        "/weather/Oslo",
        Reply::json(200, json!({"city": "Oslo", "sky": "snow"})),
    );
    let w = Weir::new()
        .env("ANTHROPIC_BASE_URL", &fake.url)
        .env("ANTHROPIC_API_KEY", "sk-ant-TESTKEY");
    let toml = format!(
        r#"[tools.weather]
kind = "http"
url = "{}/weather/{{city}}?days={{days}}"
description = "The weather in a city for some days"

[tools.weather.parameters]
type = "object"
required = ["city"]
properties.city = {{ type = "string", description = "A city's name" }}
properties.days = {{ type = "integer", minimum = 1, maximum = 7 }}
"#,
        fake.url
    );
    w.file("weir.toml", &toml);
    let flow = w.file(
        "pack.yaml",
        &FLOW
            .replace("MODEL", "claude-haiku-4-5")
            .replace("[custom:weather, delay]", "[custom:weather]"),
    );
    fake.queue(
        "/v1/messages",
        vec![
            anthropic(
                json!([{"type": "tool_use", "id": "toolu_1", "name": "weather",
                        "input": {"city": "Oslo", "days": "many"}}]),
                "tool_use",
            ),
            anthropic(
                json!([{"type": "tool_use", "id": "toolu_2", "name": "weather",
                        "input": {"city": "Oslo", "days": 2}}]),
                "tool_use",
            ),
            anthropic(
                json!([{"type": "text", "text": "Snow: boots."}]),
                "end_turn",
            ),
        ],
    );
    let ran = w.run(&["run", &flow, "--input", r#"{"city": "Oslo"}"#, "--json"]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    assert_eq!(ran.json()["state"]["advice"], "Snow: boots.");
    let sent = fake.seen("/v1/messages");
    let offered = &sent[0].json()["tools"][0];
    assert_eq!(
        offered["description"],
        "The weather in a city for some days"
    );
    assert_eq!(
        offered["input_schema"],
        json!({"type": "object", "required": ["city"], "properties": {
            "city": {"type": "string", "description": "A city's name"},
            "days": {"type": "integer", "minimum": 1, "maximum": 7}}})
    );
    // The argument that did not match went back to the model, not to the endpoint.
    let second = sent[1].json();
    let result = &second["messages"][2]["content"][0];
    assert_eq!(result["is_error"], true, "{second}");
    assert!(
        result["content"].as_str().unwrap().contains("integer"),
        "{result}"
    );
    let called = fake.seen("/weather/Oslo");
    assert_eq!(called.len(), 1);
    assert_eq!(called[0].query, "days=2");

    // Parameters that leave out a placeholder are refused, naming both.
    w.file(
        "weir.toml",
        &toml.replace("required = [\"city\"]\nproperties.city = { type = \"string\", description = \"A city's name\" }\n", ""),
    );
    let ran = w.run(&["validate", &flow]);
    assert_ne!(ran.code, 0);
    assert!(
        ran.stderr.contains("[tools.weather] parameters") && ran.stderr.contains("{city}"),
        "{}",
        ran.stderr
    );
}
