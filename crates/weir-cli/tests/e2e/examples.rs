//! Every example runs as `examples/README.md` says: each command there is run exactly as
//! written (through `sh -c`, from the repository root, with this build's `weir` first on
//! `PATH`, a scratch database and no `WEIR_MOCK`), and ends as the `# → …` line after it
//! says. A YAML example's header repeats its commands, and must match. Only the network edge
//! is faked: the enrichment example's URL and Slack webhook point at a fake server.

use std::collections::BTreeMap;
use std::path::Path;

use crate::support::{Fake, Reply, Weir, bin, repo_root};

/// The commands of each example (`## graph/approval.yaml`), each with its expected ending.
fn readme_commands() -> BTreeMap<String, Vec<(String, String)>> {
    let text = std::fs::read_to_string(repo_root().join("examples/README.md")).unwrap();
    let mut out: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    let mut section = None;
    let mut in_block = false;
    for line in text.lines() {
        if let Some(name) = line.strip_prefix("## ") {
            section = Some(name.trim().to_string());
        } else if line.starts_with("```") {
            in_block = !in_block;
        } else if in_block && let Some(s) = &section {
            let cmds = out.entry(s.clone()).or_default();
            match line.strip_prefix("# → ") {
                Some(expect) => {
                    cmds.last_mut().expect("an outcome follows a command").1 = expect.into();
                }
                // A comment (`# needs …`) says what a command needs; it is not one.
                None if !line.trim().is_empty() && !line.starts_with("# ") => {
                    cmds.push((line.to_string(), String::new()));
                }
                None => {}
            }
        }
    }
    out
}

/// The commands a YAML example's header gives (`#   weir …` and `#   → …` lines).
fn header_commands(path: &Path) -> Vec<(String, String)> {
    let text = std::fs::read_to_string(path).unwrap();
    let mut cmds: Vec<(String, String)> = Vec::new();
    for line in text.lines().take_while(|l| l.starts_with('#')) {
        if let Some(expect) = line.strip_prefix("#   → ") {
            cmds.last_mut().expect("a command first").1 = expect.into();
        } else if let Some(cmd) = line.strip_prefix("#   ")
            && cmd.starts_with("weir ")
        {
            cmds.push((cmd.to_string(), String::new()));
        }
    }
    cmds
}

fn exit_code_of(status: &str) -> i32 {
    match status {
        "succeeded" => 0,
        "failed" | "cancelled" => 1,
        "paused" => 3,
        "aborted" => 4,
        other => panic!("unknown outcome `{other}` in examples/README.md"),
    }
}

#[test]
fn every_example_runs_as_its_readme_says() {
    let fake = Fake::start();
    fake.always("/zen", Reply::text(200, "Keep it logically awesome."));
    fake.always("/hook", Reply::text(200, "ok"));
    let readme = readme_commands();
    let root = repo_root();
    let bin_dir = Path::new(bin()).parent().unwrap().to_path_buf();
    let mut checked = 0;
    for dir in ["graph", "machine", "pipeline"] {
        let mut files: Vec<_> = std::fs::read_dir(root.join("examples").join(dir))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        for path in files {
            let name = path.file_name().unwrap().to_string_lossy().to_string();
            if name.ends_with(".input.json")
                || name.ends_with(".mock.json")
                || name.ends_with(".test.yaml")
                || !(name.ends_with(".json") || name.ends_with(".yaml"))
            {
                continue;
            }
            let key = format!("{dir}/{name}");
            let cmds = readme
                .get(&key)
                .unwrap_or_else(|| panic!("examples/README.md has no section `## {key}`"));
            assert!(!cmds.is_empty(), "{key}: no commands in examples/README.md");
            if name.ends_with(".yaml") {
                assert_eq!(
                    &header_commands(&path),
                    cmds,
                    "{key}: its header's commands differ from examples/README.md"
                );
            }
            let w = Weir::new();
            let scratch = w.dir.path().to_path_buf();
            let mut run_id = String::new();
            for (cmd, expect) in cmds {
                // The network edge: the enrichment example calls out to a URL and a webhook.
                let mut cmd = cmd.replace(
                    "https://hooks.slack.com/services/…",
                    &format!("{}/hook", fake.url),
                );
                if key == "graph/enrichment.json" {
                    let input =
                        std::fs::read_to_string(root.join("examples/graph/enrichment.input.json"))
                            .unwrap()
                            .replace("https://api.github.com", &fake.url);
                    let local = scratch.join("enrichment.input.json");
                    std::fs::write(&local, input).unwrap();
                    cmd = cmd.replace(
                        "@examples/graph/enrichment.input.json",
                        &format!("@{}", local.display()),
                    );
                }
                let cmd = cmd.replace("RUN_ID", &run_id);
                let out = std::process::Command::new("sh")
                    .arg("-c")
                    .arg(&cmd)
                    .current_dir(&root)
                    .env_clear()
                    .env(
                        "PATH",
                        format!(
                            "{}:{}",
                            bin_dir.display(),
                            std::env::var("PATH").unwrap_or_default()
                        ),
                    )
                    .env("HOME", &scratch)
                    .env("WEIR_DB", scratch.join("weir.db"))
                    .output()
                    .unwrap();
                let stderr = String::from_utf8_lossy(&out.stderr).to_string();
                let stdout = String::from_utf8_lossy(&out.stdout).to_string();
                let status = expect.split_whitespace().next().unwrap_or_default();
                assert_eq!(
                    out.status.code(),
                    Some(exit_code_of(status)),
                    "{key}: `{cmd}` should end {expect}:\n{stdout}\n{stderr}"
                );
                if let Some(id) = stderr.lines().find_map(|l| {
                    l.strip_prefix("run ")
                        .and_then(|r| r.split_whitespace().next())
                }) {
                    run_id = id.to_string();
                }
                let record = w.run(&["runs", "show", &run_id, "--json"]).json();
                assert_eq!(record["status"], status, "{key}: `{cmd}`: {record}");
                if let Some(gate) = expect.split('`').nth(1) {
                    assert_eq!(record["pending_gate"]["node_id"], gate, "{key}: {record}");
                }
                // A sidecar mock script is used without being named, and the run says so.
                if path.with_extension("mock.json").exists() && cmd.starts_with("weir run") {
                    assert!(
                        stderr.contains(".mock.json"),
                        "{key}: the run does not say it used its mock script:\n{stderr}"
                    );
                }
            }
            // Replayed unchanged, offline: no provider reachable, no bun, no fake URL
            // called again; nothing differs.
            let calls_before = fake.seen("/zen").len() + fake.seen("/hook").len();
            let replayed = w.run_with(
                &["replay", &run_id],
                &[
                    ("ANTHROPIC_BASE_URL", "http://127.0.0.1:9"),
                    ("OPENAI_BASE_URL", "http://127.0.0.1:9/v1"),
                    ("WEIR_BUN", "/nonexistent/bun"),
                ],
            );
            assert_eq!(
                replayed.code, 0,
                "{key}: replay of {run_id} differs:\n{}{}",
                replayed.stdout, replayed.stderr
            );
            assert!(
                replayed.stdout.contains("identical: "),
                "{key}: {}",
                replayed.stdout
            );
            assert_eq!(
                fake.seen("/zen").len() + fake.seen("/hook").len(),
                calls_before,
                "{key}: the replay called out"
            );
            checked += 1;
        }
    }
    assert!(
        checked >= 13,
        "expected thirteen examples, checked {checked}"
    );
}

#[test]
fn every_example_validates_and_companions_are_skipped() {
    let w = Weir::new();
    let root = repo_root();
    for dir in ["graph", "machine", "pipeline"] {
        // The glob the README gives: companions (`.input.json`, `.mock.json`) included.
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!(
                "{} validate examples/{dir}/*.json examples/{dir}/*.yaml 2>&1",
                bin()
            ))
            .current_dir(&root)
            .env("WEIR_DB", w.path("weir.db"))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "examples/{dir}:\n{text}");
        assert!(text.contains(".input.json: skipped"), "{text}");
    }
}

/// A newcomer's first outputs read like a model's: the demos' mock scripts answer each
/// prompt as a model plausibly would, and the refund example ends with a result a reader
/// understands.
#[test]
fn the_demos_answer_like_a_model_would() {
    let w = Weir::new();
    let ex = repo_root().join("examples/graph");
    let path = |f: &str| ex.join(f).to_string_lossy().into_owned();
    let triage = w.run(&[
        "run",
        &path("support-triage.json"),
        "--input",
        &format!("@{}", path("support-triage.input.json")),
        "--json",
    ]);
    assert_eq!(triage.code, 0, "{}", triage.stderr);
    let out = &triage.json()["output"];
    assert_eq!(out["category"], "billing", "{out}");
    let reply = out["reply"].as_str().unwrap();
    assert!(
        reply.starts_with("Hi Ada,") && !reply.contains("mock reply"),
        "{reply}"
    );

    let refund = w.run_approval("Ada", 40);
    assert_eq!(refund.code, 0, "{}", refund.stderr);
    let out = &refund.json()["output"];
    assert_eq!(out["status"], "refunded", "{out}");
    assert_eq!(out["amount"], 40);
    assert!(!out.to_string().contains("mock reply"), "{out}");
}
