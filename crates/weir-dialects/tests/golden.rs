//! Golden files for the loader's diagnostics: `testdata/<case>.{json,yaml}` is loaded and
//! checked, and the rendered diagnostics must equal `testdata/<case>.golden`. Regenerate with
//! `UPDATE_GOLDEN=1 cargo test -p weir-dialects --test golden`.

use async_trait::async_trait;
use serde_json::Value;
use weir_core::{
    ModelClient, ModelError, ModelRequest, ModelResponse, ToolCall, ToolError, ToolRunner,
};

/// Fakes of the capability traits: the built-in tool names and the model routing rules.
struct Caps;

#[async_trait]
impl ToolRunner for Caps {
    fn has_tool(&self, name: &str) -> bool {
        ["http_request", "slack_message", "delay"].contains(&name)
    }
    fn tool_names(&self) -> Vec<String> {
        vec![
            "http_request".into(),
            "slack_message".into(),
            "delay".into(),
        ]
    }
    async fn call(&self, _: ToolCall) -> Result<Value, ToolError> {
        Err(ToolError::fatal("not in this test"))
    }
}

#[async_trait]
impl ModelClient for Caps {
    async fn complete(&self, _: ModelRequest) -> Result<ModelResponse, ModelError> {
        Err(ModelError::new(
            weir_core::ErrorClass::Network,
            "not in this test",
        ))
    }
    fn check_model(&self, m: &str) -> Result<(), String> {
        if m == "mock" || m.starts_with("claude-") || m.starts_with("gpt-") {
            Ok(())
        } else {
            Err("no provider serves this name".into())
        }
    }
}

impl weir_core::secrets::Secrets for Caps {
    fn secret(&self, _: &str) -> Result<String, String> {
        Err("not in this test".into())
    }
    fn is_declared(&self, name: &str) -> bool {
        name == "CRM_TOKEN"
    }
    fn declared(&self) -> Vec<String> {
        vec!["CRM_TOKEN".into()]
    }
}

fn render(path: &str, text: &str) -> String {
    let caps = weir_dialects::Capabilities {
        tools: &Caps,
        models: &Caps,
        secrets: &Caps,
    };
    let diags = weir_dialects::compile(path, text, &caps).map_or_else(|d| d, |v| v.warnings);
    if diags.is_empty() {
        return "ok\n".into();
    }
    diags
        .iter()
        .map(|d| d.render(Some(text)))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn diagnostics_match_golden_files() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata");
    let mut cases: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            matches!(
                p.extension().and_then(|e| e.to_str()),
                Some("json" | "yaml")
            )
        })
        .collect();
    cases.sort();
    assert!(cases.len() >= 8);
    let update = std::env::var_os("UPDATE_GOLDEN").is_some();
    let mut failures = Vec::new();
    for case in cases {
        let name = format!("testdata/{}", case.file_name().unwrap().to_string_lossy());
        let text = std::fs::read_to_string(&case).unwrap();
        let got = render(&name, &text);
        let golden = case.with_extension("golden");
        if update {
            std::fs::write(&golden, &got).unwrap();
            continue;
        }
        let want = std::fs::read_to_string(&golden).unwrap_or_default();
        if got != want {
            failures.push(format!("--- {name}\n{got}"));
        }
    }
    assert!(
        failures.is_empty(),
        "diagnostics changed (UPDATE_GOLDEN=1 to accept):\n{}",
        failures.join("\n")
    );
}

#[test]
fn json_and_yaml_lower_to_the_same_workflow() {
    let yaml = "nodes:\n  - {id: a, type: agent, config: {model: mock, user_message: 'hi {x}'}}\n  - {id: c, type: condition, config: {expression: 'x > 1'}}\nedges:\n  - {source: a, target: c}\n";
    let json = r#"{"nodes": [{"id": "a", "type": "agent", "config": {"model": "mock", "user_message": "hi {x}"}},
                            {"id": "c", "type": "condition", "config": {"expression": "x > 1"}}],
                 "edges": [{"source": "a", "target": "c"}]}"#;
    let a = weir_dialects::load("w.yaml", yaml).valid().unwrap();
    let b = weir_dialects::load("w.json", json).valid().unwrap();
    assert_eq!(
        serde_json::to_value(&a).unwrap(),
        serde_json::to_value(&b).unwrap()
    );
}

#[test]
fn yaml_booleans_are_strict() {
    // `yes` stays a string (YAML 1.2), so it is not a valid boolean-ish selector value.
    let yaml =
        "nodes:\n  - {id: a, type: agent, config: {model: mock, user_message: yes}}\nedges: []\n";
    let wf = weir_dialects::load("w.yaml", yaml).valid().unwrap();
    let weir_core::NodeKind::Agent(a) = &wf.nodes[0].kind else {
        panic!()
    };
    assert_eq!(a.user_message.source, "yes");
}

#[test]
fn every_diagnostic_code_has_a_docs_page() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut codes = std::collections::BTreeSet::new();
    // Every source file, in subfolders too.
    let mut files = Vec::new();
    let mut dirs = vec![
        root.join("crates/weir-core/src"),
        root.join("crates/weir-dialects/src"),
    ];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else {
                files.push(path);
            }
        }
    }
    for path in files {
        let text = std::fs::read_to_string(path).unwrap();
        let bytes = text.as_bytes();
        for i in 0..bytes.len().saturating_sub(5) {
            let c = bytes[i + 1];
            if bytes[i] == b'"'
                && (c == b'E' || c == b'W')
                && bytes[i + 2..i + 5].iter().all(u8::is_ascii_digit)
                && bytes[i + 5] == b'"'
            {
                codes.insert(text[i + 1..i + 5].to_string());
            }
        }
    }
    assert!(codes.len() >= 20, "{codes:?}");
    for code in codes {
        assert!(
            root.join(format!("docs/errors/{code}.md")).exists(),
            "diagnostic {code} has no docs/errors/{code}.md"
        );
    }
}
