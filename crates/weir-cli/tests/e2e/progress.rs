//! Live progress on a terminal (a pseudo-terminal from `script`): a redrawn area with a
//! timer per running step and a footer; plain lines with `TERM=dumb` and when piped.

use crate::support::{Weir, bin};

const SLOW: &str = "name: slow
nodes:
  - {id: wait, type: tool, config: {tool_name: delay, params: {ms: 900}, output_key: w}}
  - {id: after, type: agent, config: {model: mock, user_message: hi}}
edges:
  - {id: e1, source: wait, target: after}
";

/// Runs `weir run FILE` under `script`, which gives it a terminal, and returns what the
/// terminal received.
fn on_a_terminal(w: &Weir, file: &str, extra_env: &[(&str, &str)]) -> String {
    let log = w.path("tty.log");
    let c = w.command(&[]);
    let cmd = format!("{} run {file}", bin());
    let mut script = std::process::Command::new("script");
    script
        .args(["-qec", &cmd, log.to_str().unwrap()])
        .env_clear()
        .envs(c.get_envs().filter_map(|(k, v)| Some((k, v?))))
        .env("TERM", "xterm-256color")
        .current_dir(w.path(""));
    for (k, v) in extra_env {
        script.env(k, v);
    }
    let out = script.output().expect("script (util-linux) runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::read_to_string(&log).unwrap()
}

#[test]
fn a_terminal_gets_a_redrawn_area_with_timers_and_a_footer() {
    let w = Weir::new();
    let f = w.file("slow.yaml", SLOW);
    let tty = on_a_terminal(&w, &f, &[]);
    // The running step's line with its timer, redrawn in place (erase-line sequences).
    assert!(tty.contains("wait (tool) 0."), "{tty}");
    assert!(tty.contains("\u{1b}[2K"), "{tty}");
    // The footer: how many run, how many are done, the cost so far, the elapsed time.
    assert!(tty.contains("1 running · 0 done · $0.000000 · "), "{tty}");
    assert!(
        tty.contains("0 running · 1 done") || tty.contains("1 running · 1 done"),
        "{tty}"
    );
    // Finished steps stay, in colour, and the summary follows the cleared area.
    assert!(tty.contains("\u{1b}[32m✓\u{1b}[0m wait"), "{tty}");
    assert!(tty.contains("succeeded in "), "{tty}");

    // NO_COLOR: still live, no colour.
    let plain_colour = on_a_terminal(&w, &f, &[("NO_COLOR", "1")]);
    assert!(plain_colour.contains("running · "), "{plain_colour}");
    assert!(!plain_colour.contains("\u{1b}[32m"), "{plain_colour}");

    // TERM=dumb: one line per step, nothing redrawn, no escape sequences at all.
    let dumb = on_a_terminal(&w, &f, &[("TERM", "dumb")]);
    assert!(!dumb.contains('\u{1b}'), "{dumb}");
    assert!(!dumb.contains("running · "), "{dumb}");
    let wait = dumb.find("✓ wait").expect(&dumb);
    let after = dumb.find("✓ after").expect(&dumb);
    assert!(wait < after, "{dumb}");
}

#[test]
fn piped_progress_is_plain_lines_in_order() {
    let w = Weir::new();
    let f = w.file("slow.yaml", SLOW);
    let ran = w.run(&["run", &f]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    assert!(!ran.stderr.contains('\u{1b}'), "{}", ran.stderr);
    let lines: Vec<&str> = ran.stderr.lines().collect();
    assert!(lines[0].starts_with("run "), "{}", ran.stderr);
    assert!(lines[1].starts_with("  ✓ wait "), "{}", ran.stderr);
    assert!(lines[2].starts_with("  ✓ after "), "{}", ran.stderr);
}

/// A fallback is in the log when it happens, not when its step ends: with a fallback model
/// that takes 1.2 s, the `model_fallback` event is stamped a second before the step's end.
#[test]
fn a_fallback_is_logged_as_it_happens() {
    let w = Weir::new()
        .env("ANTHROPIC_API_KEY", "sk-ant-test")
        .env("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")
        .env(
            "WEIR_MOCK",
            r#"[{"match": "slowly", "reply": "done", "delay_ms": 1200}]"#,
        );
    let f = w.file(
        "fb.json",
        r#"{"nodes": [{"id": "ask", "type": "agent", "config": {"model": "claude-haiku-4-5",
            "fallback_models": ["mock"], "user_message": "answer slowly"}}], "edges": []}"#,
    );
    let ran = w.run(&["run", &f, "--json"]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let r = ran.json();
    let events = r["events"].as_array().unwrap();
    let at = |t: &str| {
        let e = events
            .iter()
            .find(|e| e["type"] == t)
            .unwrap_or_else(|| panic!("no {t}: {r}"));
        chrono::DateTime::parse_from_rfc3339(e["at"].as_str().unwrap()).unwrap()
    };
    let fell = events
        .iter()
        .find(|e| e["type"] == "model_fallback")
        .unwrap();
    assert_eq!(fell["model"], "claude-haiku-4-5");
    assert_eq!(fell["error_class"], "network");
    assert_eq!(fell["next"], "mock");
    let gap = at("step_finished") - at("model_fallback");
    assert!(
        gap.num_milliseconds() >= 1000,
        "logged {gap} before the step ended"
    );
    assert!(
        ran.stderr.is_empty() || !ran.stderr.contains("↪"),
        "--json prints no progress"
    );
}
