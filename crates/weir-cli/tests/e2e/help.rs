//! Help a newcomer reads (EXAMPLES, exit codes, every flag described), `weir completions`,
//! `weir doctor`, `weir explain` and the validator's warnings for likely mistakes.

use crate::support::Weir;

/// Every subcommand's `--help`, as `weir help` lists them.
const COMMANDS: &[&[&str]] = &[
    &["run"],
    &["init"],
    &["validate"],
    &["approve"],
    &["reject"],
    &["resume"],
    &["cancel"],
    &["runs", "list"],
    &["runs", "show"],
    &["runs", "prune"],
    &["serve"],
    &["worker"],
    &["explain"],
    &["doctor"],
    &["replay"],
    &["test"],
    &["completions"],
    &["tokens", "create"],
    &["tokens", "list"],
    &["tokens", "revoke"],
];

#[test]
fn every_subcommand_has_examples_and_describes_every_argument() {
    let w = Weir::new();
    for cmd in COMMANDS {
        let mut args = cmd.to_vec();
        args.push("--help");
        let ran = w.run(&args);
        assert_eq!(ran.code, 0, "{cmd:?}: {}", ran.stderr);
        let help = &ran.stdout;
        assert!(
            help.contains("Examples:\n  weir "),
            "{cmd:?} has no examples:\n{help}"
        );
        // Each example names the command it is about.
        let name = cmd.join(" ");
        assert!(help.contains(&format!("weir {name}")), "{cmd:?}:\n{help}");
        // Every argument and option has a description: no line is a bare flag or name.
        let mut section = "";
        for line in help.lines() {
            if !line.starts_with(' ') {
                section = line;
                continue;
            }
            if section == "Arguments:" || section == "Options:" {
                let item = line.trim();
                let undescribed =
                    (item.starts_with('-') || item.starts_with('<') || item.starts_with('['))
                        && !item.contains("  ");
                assert!(
                    !undescribed,
                    "{cmd:?}: `{item}` has no description:\n{help}"
                );
            }
        }
    }
    let run = w.run(&["run", "--help"]).stdout;
    for code in [
        "0    the run succeeded",
        "3    the run is paused",
        "130  interrupted",
    ] {
        assert!(run.contains(code), "{run}");
    }
    let top = w.run(&["--help"]).stdout;
    assert!(
        top.contains("Exit codes:") && top.contains("weir explain E003"),
        "{top}"
    );
}

#[test]
fn completions_are_printed_for_each_shell() {
    let w = Weir::new();
    for (shell, marker) in [
        ("bash", "complete -F"),
        ("zsh", "#compdef weir"),
        ("fish", "complete -c weir"),
    ] {
        let ran = w.run(&["completions", shell]);
        assert_eq!(ran.code, 0, "{shell}: {}", ran.stderr);
        assert!(ran.stdout.contains(marker), "{shell}: {}", ran.stdout);
        assert!(ran.stdout.contains("approve"), "{shell}");
    }
    assert_eq!(w.run(&["completions", "tcsh"]).code, 2);
}

#[test]
fn doctor_reports_settings_database_bun_and_keys_without_their_values() {
    let w = Weir::new()
        .env("ANTHROPIC_API_KEY", "sk-ant-SECRETVALUE")
        .env("OPENAI_API_KEY", "")
        .env("PATH", "/usr/bin:/bin")
        .env("WEIR_TOOLS_DIR", "/nonexistent")
        .env("WEIR_BUN", "");
    let db = w.path("fresh/weir.db");
    let db_s = db.to_string_lossy().into_owned();
    let ran = w.run(&["--db", &db_s, "doctor"]);
    assert_eq!(ran.code, 0, "{}{}", ran.stdout, ran.stderr);
    let out = &ran.stdout;
    assert!(out.contains("✓ settings"), "{out}");
    assert!(
        out.contains(&format!(
            "✓ database   {db_s} (from --db) does not exist yet; `weir run` creates it"
        )),
        "{out}"
    );
    assert!(
        out.contains("✓ anthropic  ANTHROPIC_API_KEY is set"),
        "{out}"
    );
    assert!(
        out.contains("! openai     OPENAI_API_KEY is not set"),
        "{out}"
    );
    assert!(out.contains("! bun        not found"), "{out}");
    assert!(!out.contains("SECRETVALUE"), "{out}");
    assert!(!db.exists(), "doctor must not create the database");

    // A broken weir.toml and an unwritable database place fail it, as JSON too.
    let cfg = w.file("weir.toml", "[modles]\n");
    let ran = w.run(&[
        "--config",
        &cfg,
        "--db",
        "/proc/weir/x.db",
        "doctor",
        "--json",
    ]);
    assert_eq!(ran.code, 1, "{}", ran.stdout);
    let checks = ran.json();
    let by = |name: &str| {
        checks
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["check"] == name)
            .cloned()
            .unwrap()
    };
    assert_eq!(by("settings")["status"], "fail");
    assert!(
        by("settings")["detail"]
            .as_str()
            .unwrap()
            .contains("unknown section [modles]")
    );
    assert_eq!(by("database")["status"], "fail");
}

#[test]
fn explain_prints_the_embedded_page_of_a_code() {
    let w = Weir::new();
    let ran = w.run(&["explain", "e003"]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    assert!(
        ran.stdout.starts_with("# E003: edge to a missing node"),
        "{}",
        ran.stdout
    );
    assert!(
        ran.stdout.contains("(online: docs/errors/E003.md"),
        "{}",
        ran.stdout
    );
    let run_error = w.run(&["explain", "gate_rejected"]);
    assert_eq!(run_error.code, 0);
    assert!(
        run_error
            .stdout
            .contains("docs/errors/runs/gate_rejected.md")
    );
    let list = w.run(&["explain", "--list"]).stdout;
    assert!(list.contains("  W105  unknown model name"), "{list}");
    assert!(list.contains("  node_failed"), "{list}");
    let unknown = w.run(&["explain", "E999"]);
    assert_eq!(unknown.code, 2);
    assert!(
        unknown.stderr.contains("weir explain --list"),
        "{}",
        unknown.stderr
    );
}

/// A misspelled model, a node never wired, several start nodes, a template input key the
/// schema lacks: warnings with the fix, and `--deny-warnings` fails on them.
#[test]
fn likely_mistakes_are_warnings_and_deny_warnings_fails_on_them() {
    let w = Weir::new();
    let graph = w.file(
        "g.json",
        r#"{"nodes": [
  {"id": "a", "type": "agent", "config": {"model": "claude-sonet-4-5", "user_message": "hi"}},
  {"id": "b", "type": "agent", "config": {"model": "mock", "user_message": "hi"}},
  {"id": "c", "type": "agent", "config": {"model": "mock", "user_message": "hi"}},
  {"id": "d", "type": "agent", "config": {"model": "mock", "user_message": "hi"}},
  {"id": "lost", "type": "agent", "config": {"model": "mock", "user_message": "hi"}}
], "edges": [{"id": "e1", "source": "a", "target": "c"}, {"id": "e2", "source": "b", "target": "d"}]}"#,
    );
    let ran = w.run(&["validate", &graph]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let err = &ran.stderr;
    assert!(
        err.contains("warning[W105]: model `claude-sonet-4-5` is not a model weir knows"),
        "{err}"
    );
    assert!(err.contains("did you mean `claude-sonnet-4-5`?"), "{err}");
    assert!(
        err.contains("warning[W106]: node `lost` has no edges"),
        "{err}"
    );
    assert!(
        err.contains(
            "warning[W107]: 2 start nodes (no incoming edge), which run at once: `a`, `b`"
        ),
        "{err}"
    );
    assert!(err.contains("= docs: weir explain W105"), "{err}");
    let denied = w.run(&["validate", "--deny-warnings", &graph, "--json"]);
    assert_eq!(denied.code, 2);
    assert_eq!(denied.json()[0]["valid"], false);
    let codes: Vec<String> = denied.json()[0]["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["code"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(codes, ["W106", "W107", "W105"], "{codes:?}");

    let machine = w.file(
        "m.yaml",
        "dialect: machine
name: typo
input:
  type: object
  properties:
    ticket: {type: string}
start: answer
nodes:
  answer:
    type: ai_agent
    model: mock
    prompt: \"Reply to {{ input.tiket }}\"
    next: finish
  finish:
    type: end
",
    );
    let ran = w.run(&["validate", &machine]);
    assert!(
        ran.stderr.contains("warning[W108]: a template of `answer` reads `input.tiket`, which the input schema does not declare"),
        "{}",
        ran.stderr
    );
    assert!(
        ran.stderr.contains("did you mean `ticket`?"),
        "{}",
        ran.stderr
    );
    // The examples carry none of these warnings.
    let examples = crate::support::repo_root().join("examples");
    let mut files = Vec::new();
    for dir in ["graph", "machine", "pipeline"] {
        for e in std::fs::read_dir(examples.join(dir)).unwrap() {
            files.push(e.unwrap().path().to_string_lossy().into_owned());
        }
    }
    let mut args = vec!["validate", "--deny-warnings"];
    args.extend(files.iter().map(String::as_str));
    let ran = w.run(&args);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
}

/// The caret runs under the whole offending value, not one character.
#[test]
fn the_caret_underlines_the_whole_value() {
    let w = Weir::new();
    let f = w.file(
        "bad.json",
        r#"{"nodes": [
  {"id": "a", "type": "agent", "config": {"model": "claude-sonet-4-5", "user_message": "hi"}}
], "edges": [{"id": "e1", "source": "a", "target": "notfy"}]}"#,
    );
    let ran = w.run(&["validate", &f]);
    assert_eq!(ran.code, 2);
    let err = &ran.stderr;
    assert!(
        err.contains("error[E003]: edge `e1` has target `notfy`, which is not a node"),
        "{err}"
    );
    // The label names the edge, the caret underlines the target's value.
    assert!(err.contains("(edge `e1`)"), "{err}");
    let lines: Vec<&str> = err.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.contains(r#""target": "notfy""#))
        .expect(err);
    let src = lines[at];
    let carets = lines[at + 1];
    let start = src.find(r#""notfy""#).unwrap();
    assert_eq!(carets.find('^'), Some(start), "{src}\n{carets}");
    assert_eq!(
        carets.trim_end().len() - start,
        r#""notfy""#.len(),
        "{src}\n{carets}"
    );
}

/// A machine's key typed into a graph file is named as such, with the way a graph says it,
/// instead of errors worded as if the key were a typo.
#[test]
fn a_key_of_another_dialect_is_named_with_its_dialect() {
    let w = Weir::new();
    let f = w.file(
        "x.yaml",
        "name: loop
start: a
nodes:
  - {id: a, type: agent, next: b, config: {model: mock, user_message: hi}}
  - {id: b, type: agent, config: {model: mock, user_message: hi}}
edges:
  - {id: e1, source: a, target: b}
  - {id: e2, source: b, target: a}
",
    );
    let ran = w.run(&["validate", &f]);
    assert_eq!(ran.code, 2);
    let err = &ran.stderr;
    assert!(
        err.contains("error[E009]: `start` is a key of the machine dialect, not of this file's"),
        "{err}"
    );
    assert!(err.contains("this file is read as a graph"), "{err}");
    assert!(
        err.contains("a graph says it with edges: {id: e1, source: a, target: NEXT}"),
        "{err}"
    );
    // No follow-on finding about entry nodes, worded for graphs.
    assert!(!err.contains("E012"), "{err}");
    assert!(
        ran.stdout.contains("2 errors, 0 warnings"),
        "{}",
        ran.stdout
    );
}

/// Under `--json`, even an error in how weir was called (an unknown flag, a missing value)
/// is one JSON object on stdout; clap's own text stays on stderr.
#[test]
fn usage_errors_under_json_are_json_too() {
    let w = Weir::new();
    for args in [
        vec!["run", "--json", "--bogus", "x.yaml"],
        vec!["runs", "list", "--json", "--status"],
    ] {
        let ran = w.run(&args);
        assert_eq!(ran.code, 2, "{args:?}");
        let body = ran.json();
        assert_eq!(body["error"]["code"], "usage", "{args:?}: {body}");
        assert!(
            body["error"]["message"].as_str().unwrap().contains("--"),
            "{body}"
        );
        assert!(
            ran.stderr.contains("For more information, try '--help'"),
            "{}",
            ran.stderr
        );
    }
    // Without --json nothing but clap's text.
    let ran = w.run(&["run", "--bogus", "x.yaml"]);
    assert_eq!(ran.code, 2);
    assert!(ran.stdout.is_empty());
}

/// `--model` is offered where it changes something: on the commands that run or check
/// workflows, not on `runs list`, `tokens` or `cancel`.
#[test]
fn model_is_offered_only_where_it_changes_something() {
    let w = Weir::new();
    for args in [
        &["run", "--help"][..],
        &["approve", "--help"],
        &["resume", "--help"],
        &["serve", "--help"],
        &["worker", "--help"],
        &["validate", "--help"],
        &["test", "--help"],
    ] {
        let help = w.run(args);
        assert!(
            help.stdout.contains("--model <NAME>"),
            "{args:?}: {}",
            help.stdout
        );
    }
    for args in [
        &["runs", "list", "--help"][..],
        &["runs", "show", "--help"],
        &["tokens", "list", "--help"],
        &["cancel", "--help"],
        &["reject", "--help"],
    ] {
        let help = w.run(args);
        assert!(
            !help.stdout.contains("--model"),
            "{args:?}: {}",
            help.stdout
        );
    }
    let refused = w.run(&["runs", "list", "--model", "mock"]);
    assert_eq!(refused.code, 2, "{}", refused.stderr);
}
