//! Tools (DESIGN §6–7): send_email against a real SMTP server, mcp_call against real MCP
//! servers (the reference "everything" server over stdio and streamable HTTP, and one of our
//! own built with rmcp's server side), custom HTTP and MCP tools, deleted tools, and secrets.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::{
    StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
};
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use serde_json::{Value, json};

use crate::support::{Fake, Reply, Weir, steps, wait_until};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A child process killed when the test ends.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn smtp() -> (Proc, u16, std::path::PathBuf, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("mail.jsonl");
    let port = free_port();
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/e2e/smtp_server.py");
    let mut child = Command::new("python3")
        .arg(script)
        .arg(port.to_string())
        .arg(&out)
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 with aiosmtpd (scripts/test installs it)");
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "READY", "the SMTP server did not start");
    (Proc(child), port, out, dir)
}

fn email_flow(to: &str, extra: &str) -> String {
    format!(
        r#"{{"nodes": [{{"id": "notify", "type": "tool", "config": {{"tool_name": "send_email"{extra},
          "params": {{"to": {to}, "cc": "lead@example.com", "from": "weir@example.com",
                      "subject": "Lead {{lead}} scored", "text": "Score: {{score}}", "html": "<b>Score: {{score}}</b>"}}}}}}],
          "edges": []}}"#
    )
}

#[test]
fn send_email_delivers_over_smtp_with_auth() {
    let (_server, port, out, _dir) = smtp();
    let w = Weir::new().env(
        "SMTP_URL",
        &format!("smtp://weir:s3cret-pass@127.0.0.1:{port}"),
    );
    let f = w.file(
        "e.json",
        &email_flow(r#"["sales@example.com", "ops@example.com"]"#, ""),
    );
    let ran = w.run(&[
        "run",
        &f,
        "--input",
        r#"{"lead": "Ada", "score": 91}"#,
        "--json",
    ]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let r = ran.json();
    let o = &steps(&r, "notify")[0]["output"];
    assert_eq!(o["ok"], true);
    assert_eq!(o["code"], "250");
    assert_eq!(o["to"], json!(["sales@example.com", "ops@example.com"]));
    let delivered: Vec<Value> = std::fs::read_to_string(&out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(delivered.len(), 1);
    let m = &delivered[0];
    assert_eq!(m["from"], "weir@example.com");
    assert_eq!(
        m["to"],
        json!(["sales@example.com", "ops@example.com", "lead@example.com"])
    );
    assert_eq!(m["auth"], true);
    let data = m["data"].as_str().unwrap();
    assert!(data.contains("Subject: Lead Ada scored"), "{data}");
    assert!(
        data.contains("Score: 91") && data.contains("<b>Score: 91</b>"),
        "{data}"
    );
    assert!(data.contains("multipart/alternative"));
    assert!(!ran.stdout.contains("s3cret-pass"));
}

#[test]
fn a_refused_recipient_fails_without_retrying() {
    let (_server, port, out, _dir) = smtp();
    let w = Weir::new().env(
        "SMTP_URL",
        &format!("smtp://weir:s3cret-pass@127.0.0.1:{port}"),
    );
    let f = w.file(
        "e.json",
        &email_flow(r#""nobody@example.com""#, r#", "retry_count": 2"#),
    );
    let ran = w.run(&[
        "run",
        &f,
        "--input",
        r#"{"lead": "Ada", "score": 1}"#,
        "--json",
    ]);
    assert_eq!(ran.code, 1);
    let r = ran.json();
    let step = steps(&r, "notify")[0];
    assert_eq!(step["attempts"].as_array().unwrap().len(), 1);
    let err = step["error"].as_str().unwrap();
    assert!(err.contains("refused") && err.contains("550"), "{err}");
    assert!(!std::path::Path::new(&out).exists());
}

#[test]
fn a_dead_smtp_server_is_retried_and_the_password_stays_hidden() {
    let port = free_port();
    let w = Weir::new().env(
        "SMTP_URL",
        &format!("smtp://weir:hunter2-pass@127.0.0.1:{port}"),
    );
    let f = w.file(
        "e.json",
        &email_flow(r#""sales@example.com""#, r#", "retry_count": 1"#),
    );
    let ran = w.run(&[
        "run",
        &f,
        "--input",
        r#"{"lead": "Ada", "score": 1}"#,
        "--json",
    ]);
    assert_eq!(ran.code, 1);
    let r = ran.json();
    assert_eq!(
        steps(&r, "notify")[0]["attempts"].as_array().unwrap().len(),
        2
    );
    assert!(!ran.stdout.contains("hunter2-pass") && !ran.stderr.contains("hunter2-pass"));
}

fn everything() -> String {
    std::env::var("WEIR_MCP_EVERYTHING")
        .expect("WEIR_MCP_EVERYTHING (scripts/test installs the server)")
}

const ECHO_FLOW: &str = r#"{"nodes": [
  {"id": "first", "type": "tool", "config": {"tool_name": "mcp_call", "output_key": "echoed",
     "params": {"server": "everything", "tool": "echo", "arguments": {"message": "hello {who}"}}}},
  {"id": "second", "type": "tool", "config": {"tool_name": "mcp_call",
     "params": {"server": "everything", "tool": "echo", "arguments": {"message": "{echoed.text}"}}}}],
  "edges": [{"source": "first", "target": "second"}]}"#;

#[test]
fn mcp_call_over_stdio_with_the_reference_server() {
    let w = Weir::new();
    w.file(
        "weir.toml",
        &format!(
            "[mcp.servers.everything]\ncommand = \"{}\"\nargs = [\"stdio\"]\n",
            everything()
        ),
    );
    let f = w.file("m.json", ECHO_FLOW);
    let ran = w.run(&["run", &f, "--input", r#"{"who": "Ada"}"#, "--json"]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let r = ran.json();
    assert_eq!(r["state"]["echoed"]["text"], "Echo: hello Ada");
    assert_eq!(
        r["state"]["echoed"]["content"][0],
        json!({"type": "text", "text": "Echo: hello Ada"})
    );
    assert_eq!(r["state"]["second"]["text"], "Echo: Echo: hello Ada");
    // An unknown tool on a known server fails the node and names the tools it has.
    let f = w.file(
        "bad.json",
        r#"{"nodes": [{"id": "x", "type": "tool", "config": {"tool_name": "mcp_call",
        "params": {"server": "everything", "tool": "no_such_tool"}}}], "edges": []}"#,
    );
    let r = w.run(&["run", &f, "--json"]).json();
    assert_eq!(r["status"], "failed");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no_such_tool"),
        "{}",
        r["error"]
    );
}

#[test]
fn mcp_call_over_streamable_http_with_the_reference_server() {
    let port = free_port();
    let _server = Proc(
        Command::new(everything())
            .arg("streamableHttp")
            .env("PORT", port.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_until("the MCP HTTP server to listen", || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    let w = Weir::new();
    w.file(
        "weir.toml",
        &format!("[mcp.servers.everything]\nurl = \"http://127.0.0.1:{port}/mcp\"\n"),
    );
    let f = w.file("m.json", ECHO_FLOW);
    let ran = w.run(&["run", &f, "--input", r#"{"who": "Bo"}"#, "--json"]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    assert_eq!(
        ran.json()["state"]["second"]["text"],
        "Echo: Echo: hello Bo"
    );
}

/// Our own MCP server, built with rmcp's server side: `lookup_lead` returns a lead with
/// structured content; `explode` returns an error result.
#[derive(Clone)]
struct Leads;

impl ServerHandler for Leads {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let schema = json!({"type": "object", "properties": {"lead_id": {"type": "string"}}});
        let schema = schema.as_object().unwrap().clone();
        Ok(ListToolsResult::with_all_items(vec![
            Tool::new("lookup_lead", "Find a lead", schema.clone()),
            Tool::new("explode", "Always fails", schema),
        ]))
    }

    async fn call_tool(
        &self,
        req: CallToolRequestParams,
        _: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let args = req.arguments.unwrap_or_default();
        match req.name.as_ref() {
            "lookup_lead" => {
                let id = args
                    .get("lead_id")
                    .and_then(Value::as_str)
                    .unwrap_or("?")
                    .to_string();
                let mut r = CallToolResult::success(vec![ContentBlock::text(format!(
                    "lead {id}: Ada Lovelace"
                ))]);
                r.structured_content = Some(json!({"id": id, "name": "Ada Lovelace", "score": 93}));
                Ok(r.into())
            }
            "explode" => {
                Ok(CallToolResult::error(vec![ContentBlock::text("the CRM is down")]).into())
            }
            _ => Err(McpError::invalid_params("no such tool", None)),
        }
    }
}

/// Serves [`Leads`] on loopback; counts sessions so reuse can be checked.
fn leads_server() -> (String, Arc<AtomicUsize>, tokio::runtime::Runtime) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let sessions = Arc::new(AtomicUsize::new(0));
    let counter = sessions.clone();
    let url = rt.block_on(async move {
        let service = StreamableHttpService::new(
            move || {
                counter.fetch_add(1, Ordering::SeqCst);
                Ok(Leads)
            },
            Arc::new(LocalSessionManager::default()),
            StreamableHttpServerConfig::default(),
        );
        let router = axum::Router::new().nest_service("/mcp", service);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!(
            "http://127.0.0.1:{}/mcp",
            listener.local_addr().unwrap().port()
        );
        tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
        url
    });
    (url, sessions, rt)
}

#[test]
fn custom_mcp_tools_and_mcp_call_against_our_own_server() {
    let (url, sessions, _rt) = leads_server();
    let w = Weir::new();
    w.file("weir.toml", &format!(
        "[mcp.servers.crm]\nurl = \"{url}\"\n\n[tools.lookup]\nkind = \"mcp\"\nserver = \"crm\"\ntool = \"lookup_lead\"\n"
    ));
    let f = w.file("c.json", r#"{"nodes": [
        {"id": "find", "type": "tool", "config": {"tool_name": "custom:lookup", "params": {"lead_id": "{lead}"}, "output_key": "lead_info"}},
        {"id": "again", "type": "tool", "config": {"tool_name": "mcp_call", "params": {"server": "crm", "tool": "lookup_lead", "arguments": {"lead_id": "{lead_info.structured_content.id}-2"}}}}],
      "edges": [{"source": "find", "target": "again"}]}"#);
    let ran = w.run(&["run", &f, "--input", r#"{"lead": "L-7"}"#, "--json"]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let r = ran.json();
    assert_eq!(r["state"]["lead_info"]["text"], "lead L-7: Ada Lovelace");
    assert_eq!(r["state"]["lead_info"]["structured_content"]["score"], 93);
    assert_eq!(r["state"]["again"]["text"], "lead L-7-2: Ada Lovelace");
    assert_eq!(steps(&r, "find")[0]["cost_usd"], 0.0);
    // Both calls shared one session.
    assert_eq!(sessions.load(Ordering::SeqCst), 1);
    // An error result fails the node with the server's text.
    let f = w.file(
        "x.json",
        r#"{"nodes": [{"id": "boom", "type": "tool", "config": {"tool_name": "mcp_call",
        "params": {"server": "crm", "tool": "explode"}}}], "edges": []}"#,
    );
    let r = w.run(&["run", &f, "--json"]).json();
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("the CRM is down")
    );
}

#[test]
fn an_unconfigured_mcp_server_is_a_validation_error() {
    let w = Weir::new();
    let f = w.file(
        "m.json",
        r#"{"nodes": [{"id": "x", "type": "tool", "config": {"tool_name": "mcp_call",
        "params": {"server": "nowhere", "tool": "echo"}}}], "edges": []}"#,
    );
    let ran = w.run(&["validate", &f]);
    assert_eq!(ran.code, 2);
    assert!(
        ran.stderr.contains("error[E025]") && ran.stderr.contains("`nowhere` is not configured"),
        "{}",
        ran.stderr
    );
}

const CRM_TOML: &str = r#"[tools.crm_lookup]
kind = "http"
method = "GET"
url = "{base}/leads/{lead_id}"
headers = { Authorization = "Bearer {secrets.CRM_TOKEN}" }
response = "body.lead"

[secrets]
CRM_TOKEN = { env = "CRM_TOKEN_VALUE" }
"#;

#[test]
fn a_custom_http_tool_renders_params_and_secrets_and_never_records_the_secret() {
    let fake = Fake::start();
    // The endpoint echoes the header back, as a careless API might.
    fake.always(
        "/leads/42",
        Reply::json(
            200,
            json!({"lead": {"id": 42, "name": "Ada", "seen_auth": "Bearer tok-7f3a9c2e"}}),
        ),
    );
    let w = Weir::new().env("CRM_TOKEN_VALUE", "tok-7f3a9c2e");
    w.file("weir.toml", CRM_TOML);
    let f = w.file(
        "c.json",
        r#"{"nodes": [{"id": "crm", "type": "tool", "config": {"tool_name": "custom:crm_lookup",
        "params": {"base": "{api}", "lead_id": "{lead}"}, "output_key": "lead"}}], "edges": []}"#,
    );
    let input = json!({"api": fake.url, "lead": "42"}).to_string();
    let ran = w.run(&["run", &f, "--input", &input, "--json"]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let r = ran.json();
    assert_eq!(r["state"]["lead"]["name"], "Ada");
    assert_eq!(r["state"]["lead"]["seen_auth"], "Bearer [redacted]");
    let sent = &fake.seen("/leads/42")[0];
    assert_eq!(sent.headers["authorization"], "Bearer tok-7f3a9c2e");
    assert!(sent.headers.contains_key("idempotency-key"));
    assert!(!ran.stdout.contains("tok-7f3a9c2e") && !ran.stderr.contains("tok-7f3a9c2e"));
    // Without the secret the node fails and says how to set it.
    let w2 = Weir::new();
    w2.file("weir.toml", CRM_TOML);
    let f = w2.file("c.json", &std::fs::read_to_string(&f).unwrap());
    let r = w2.run(&["run", &f, "--input", &input, "--json"]).json();
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("CRM_TOKEN_VALUE"),
        "{}",
        r["error"]
    );
}

#[test]
fn secrets_in_built_in_tool_params_are_redacted() {
    let fake = Fake::start();
    fake.always("/echo", Reply::text(200, "you sent Bearer zz-secret-991"));
    let w = Weir::new().env("API_TOKEN_VALUE", "zz-secret-991");
    let f = w.file("s.json", &format!(r#"{{"nodes": [{{"id": "call", "type": "tool", "config": {{"tool_name": "http_request",
        "params": {{"url": "{}/echo", "headers": {{"Authorization": "Bearer {{secrets.API_TOKEN}}"}}}}}}}}], "edges": []}}"#, fake.url));
    // Only declared secrets resolve: without [secrets] the workflow is refused before it
    // runs, naming the node, although the environment holds a value.
    let refused = w.run(&["run", &f, "--json"]);
    assert_eq!(refused.code, 2, "{}", refused.stderr);
    assert!(
        refused.stderr.contains("E026") && refused.stderr.contains("node `call`"),
        "{}",
        refused.stderr
    );
    assert!(fake.seen("/echo").is_empty());
    w.file(
        "weir.toml",
        "[secrets]\nAPI_TOKEN = { env = \"API_TOKEN_VALUE\" }\n",
    );
    let ran = w.run(&["run", &f, "--json"]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    assert_eq!(
        fake.seen("/echo")[0].headers["authorization"],
        "Bearer zz-secret-991"
    );
    assert_eq!(
        ran.json()["state"]["call"]["body"],
        "you sent Bearer [redacted]"
    );
    assert!(!ran.stdout.contains("zz-secret-991"));
}

#[test]
fn a_custom_tool_deleted_after_the_workflow_was_saved() {
    let fake = Fake::start();
    fake.always("/leads/1", Reply::json(200, json!({"lead": {"id": 1}})));
    let w = Weir::new().env("CRM_TOKEN_VALUE", "tok-1234567");
    w.file("weir.toml", CRM_TOML);
    let f = w.file("d.json", r#"{"nodes": [
        {"id": "review", "type": "human_gate", "config": {"prompt": "look up {lead}?"}},
        {"id": "crm", "type": "tool", "config": {"tool_name": "custom:crm_lookup", "params": {"base": "{api}", "lead_id": "{lead}"}}}],
      "edges": [{"source": "review", "target": "crm"}]}"#);
    let input = json!({"api": fake.url, "lead": "1"}).to_string();
    let ran = w.run(&["run", &f, "--input", &input, "--json"]);
    assert_eq!(ran.code, 3, "{}", ran.stderr);
    let id = ran.json()["run_id"].as_str().unwrap().to_string();
    // The tool is removed from weir.toml while the run waits.
    w.file("weir.toml", "");
    // Validation catches it before the next run…
    let v = w.run(&["validate", &f]);
    assert_eq!(v.code, 2);
    assert!(
        v.stderr.contains("re-register it or update the node"),
        "{}",
        v.stderr
    );
    // …and approving the waiting run is refused with the same diagnostic instead of
    // skipping the side effect; the run stays paused at its gate, nothing is lost.
    let ran = w.run(&["approve", &id, "--json"]);
    assert_eq!(ran.code, 2, "{}", ran.stderr);
    assert!(
        ran.stderr.contains("re-register it or update the node")
            && ran.stderr.contains("no longer compiles"),
        "{}",
        ran.stderr
    );
    assert!(fake.seen("/leads/1").is_empty());
    assert_eq!(w.show(&id)["status"], "paused");
    // Once the tool is back, the approval goes through and the tool is called.
    w.file("weir.toml", CRM_TOML);
    let ran = w.run(&["approve", &id, "--json"]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    assert_eq!(fake.seen("/leads/1").len(), 1);
}
