//! The secrets sweep: providers, tools and scripts that all try to echo secrets back. No
//! secret value may appear in the database file, its WAL, stdout or stderr.

use serde_json::json;

use crate::support::{Fake, Reply, Weir};

const API_KEY: &str = "sk-ant-sweep-7f3a9c2e41";
const OPENAI_KEY: &str = "sk-openai-sweep-b81d22";
/// A declared secret whose variable name does not look secret.
const CRED: &str = "crm-cred-5521-zz";

#[test]
fn no_secret_reaches_the_record_the_database_or_the_terminal() {
    let fake = Fake::start();
    // Providers that echo the key they were sent.
    let mut echoes = Vec::new();
    for _ in 0..4 {
        echoes.push(Reply::json(
            401,
            json!({"type": "error", "error": {"type": "authentication_error", "message": format!("invalid x-api-key {API_KEY}")}}),
        ));
        echoes.push(Reply::json(
            500,
            json!({"type": "error", "error": {"type": "api_error", "message": format!("internal error for key {API_KEY}")}}),
        ));
    }
    fake.queue("/v1/messages", echoes);
    fake.always(
        "/v1/messages",
        Reply::json(
            529,
            json!({"type": "error", "error": {"type": "overloaded_error", "message": format!("overloaded ({API_KEY})")}}),
        ),
    );
    fake.always(
        "/v1/chat/completions",
        Reply::json(
            500,
            json!({"error": {"message": format!("boom, Bearer {OPENAI_KEY}"), "type": "server_error"}}),
        ),
    );
    // An API that echoes the declared secret in a failing reply and in a good one.
    fake.queue(
        "/crm",
        vec![Reply::text(500, &format!("upstream refused token {CRED}"))],
    );
    fake.always("/crm", Reply::text(200, &format!("hello {CRED}")));
    let w = Weir::new()
        .env("ANTHROPIC_BASE_URL", &fake.url)
        .env("ANTHROPIC_API_KEY", API_KEY)
        .env("OPENAI_BASE_URL", &format!("{}/v1", fake.url))
        .env("OPENAI_API_KEY", OPENAI_KEY)
        .env("CRM_CRED", CRED);
    w.file(
        "weir.toml",
        "[secrets]\nCRM = { env = \"CRM_CRED\" }\n[scripts]\nenv = [\"CRM_CRED\"]\n",
    );
    let runs = [
        (
            "p1.json",
            r#"{"nodes": [{"id": "ask", "type": "agent", "config": {"model": "claude-haiku-4-5", "user_message": "hi"}}], "edges": []}"#.to_string(),
        ),
        (
            "p2.json",
            r#"{"nodes": [{"id": "ask", "type": "agent", "config": {"model": "claude-haiku-4-5", "user_message": "hi", "fallback_models": ["gpt-4o"]}}], "edges": []}"#.to_string(),
        ),
        (
            "t.json",
            format!(
                r#"{{"nodes": [{{"id": "crm", "type": "tool", "config": {{"tool_name": "http_request", "retry_count": 1,
                    "params": {{"url": "{}/crm", "headers": {{"Authorization": "Bearer {{secrets.CRM}}"}}}}}}}}], "edges": []}}"#,
                fake.url
            ),
        ),
        (
            "s.yaml",
            "nodes:\n  leak:\n    type: script\n    script: |\n      console.log('env', process.env.CRM_CRED);\n      console.error(process.env.CRM_CRED);\n      export default process.env.CRM_CRED;\n    next: fail\n  fail:\n    type: script\n    script: |\n      throw new Error('no ' + process.env.CRM_CRED);\n".to_string(),
        ),
    ];
    let mut printed = String::new();
    // 32 runs: each workflow four times, with and without --json.
    for _ in 0..4 {
        for (name, text) in &runs {
            let f = w.file(name, text);
            for args in [vec!["run", f.as_str(), "--json"], vec!["run", f.as_str()]] {
                let ran = w.run(&args);
                printed.push_str(&ran.stdout);
                printed.push_str(&ran.stderr);
            }
        }
    }
    let ids = w.run_ids();
    assert_eq!(ids.len(), 32);
    for id in &ids {
        let shown = w.run(&["runs", "show", id]);
        printed.push_str(&shown.stdout);
        printed.push_str(&w.run(&["runs", "show", id, "--json"]).stdout);
    }
    // The echoes were really there: they show redacted.
    assert!(printed.contains("[redacted]"), "{printed}");
    let mut stored = Vec::new();
    for f in ["weir.db", "weir.db-wal"] {
        if let Ok(bytes) = std::fs::read(w.path(f)) {
            stored.extend(bytes);
        }
    }
    assert!(!stored.is_empty());
    for secret in [API_KEY, OPENAI_KEY, CRED] {
        assert!(
            !printed.contains(secret),
            "{secret} was printed:\n{printed}"
        );
        assert!(
            !stored.windows(secret.len()).any(|w| w == secret.as_bytes()),
            "{secret} is in the database"
        );
    }
}

/// A secret in the forms it travels in (URL-encoded by a service that echoes its query,
/// base64 in a header it echoes) and a secret an operator types into a run's input, an
/// approval's input or a rejection's reason: none is recorded, printed or stored.
#[test]
fn encoded_and_operator_typed_secrets_are_redacted() {
    use base64::Engine as _;
    // Characters that URL-encoding changes, so the encoded form differs from the value.
    const KEY: &str = "tok en/5521+zz=";
    let encoded = "tok%20en%2F5521%2Bzz%3D";
    let form = "tok+en%2F5521%2Bzz%3D";
    let b64 = base64::engine::general_purpose::STANDARD.encode(KEY);
    let fake = Fake::start();
    fake.always(
        "/echo",
        Reply::text(200, &format!("you sent key={encoded} ({form}) auth={b64}")),
    );
    let w = Weir::new().env("CRM_CRED", KEY);
    w.file("weir.toml", "[secrets]\nCRM = { env = \"CRM_CRED\" }\n");
    let f = w.file(
        "echo.json",
        &format!(
            r#"{{"nodes": [{{"id": "echo", "type": "tool", "config": {{"tool_name": "http_request",
                "params": {{"url": "{}/echo", "headers": {{"Authorization": "Basic {{secrets.CRM}}"}}}}}}}}],
               "edges": []}}"#,
            fake.url
        ),
    );
    let mut printed = String::new();
    let ran = w.run(&[
        "run",
        &f,
        "--json",
        "--input",
        &json!({"note": KEY}).to_string(),
    ]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    printed.push_str(&ran.stdout);
    printed.push_str(&ran.stderr);
    // A gate decided with the secret typed into the approval's input, and one rejected
    // with it as the reason.
    let (approval, reason) = (json!({"why": KEY}).to_string(), format!("leaked {KEY}"));
    for [verb, flag, text] in [
        ["approve", "--input", approval.as_str()],
        ["reject", "--reason", reason.as_str()],
    ] {
        assert_eq!(w.run_approval("Ada", 500).code, 3);
        let id = w.run_ids().pop().unwrap();
        let ran = w.run(&[verb, &id, flag, text]);
        printed.push_str(&ran.stdout);
        printed.push_str(&ran.stderr);
    }
    for id in w.run_ids() {
        printed.push_str(&w.run(&["runs", "show", &id, "--json"]).stdout);
        printed.push_str(&w.run(&["runs", "show", &id]).stdout);
    }
    assert!(printed.contains("[redacted]"), "{printed}");
    let mut stored = Vec::new();
    for f in ["weir.db", "weir.db-wal"] {
        if let Ok(bytes) = std::fs::read(w.path(f)) {
            stored.extend(bytes);
        }
    }
    for form in [KEY, encoded, form, b64.as_str()] {
        assert!(!printed.contains(form), "{form} was printed:\n{printed}");
        assert!(
            !stored.windows(form.len()).any(|w| w == form.as_bytes()),
            "{form} is in the database"
        );
    }
}

/// A request that cannot be sent names its URL, so a reader sees what failed; only a
/// password in the URL, and declared secrets, are hidden.
#[test]
fn a_failed_request_names_its_url_without_its_password() {
    let w = Weir::new();
    let f = w.file(
        "get.yaml",
        "name: get\nnodes:\n  - id: fetch\n    type: tool\n    config:\n      tool_name: \
         http_request\n      params: {url: \"http://ada:hunter2@127.0.0.1:9/status?page=2\"}\n\
         edges: []\n",
    );
    let ran = w.run(&["run", &f, "--json"]);
    assert_eq!(ran.code, 1, "{}", ran.stderr);
    let message = ran.json()["error"]["message"].as_str().unwrap().to_string();
    // The credentials travel as basic auth, not in the URL the error shows.
    assert!(
        message.contains("(http://127.0.0.1:9/status?page=2)"),
        "{message}"
    );
    assert!(!message.contains("hunter2"), "{message}");
    assert!(!ran.stdout.contains("hunter2") && !ran.stderr.contains("hunter2"));
}
