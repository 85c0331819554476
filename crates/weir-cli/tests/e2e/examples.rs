//! Every file in `examples/` validates and runs on the mock model. A sidecar
//! `<name>.input.json` gives a run its input (`$FAKE` in it is the fake server's URL, which
//! also serves `/zen` and a Slack webhook for the examples that call out), and a sidecar
//! `<name>.mock.json` scripts the mock model (`WEIR_MOCK`).

use crate::support::{Fake, Reply, Weir, repo_root};

#[test]
fn every_example_validates_and_runs_on_the_mock_model() {
    let fake = Fake::start();
    fake.always("/zen", Reply::text(200, "Keep it logically awesome."));
    fake.always("/hook", Reply::text(200, "ok"));
    let mut ran_any = 0;
    for dir in ["examples/graph", "examples/machine", "examples/pipeline"] {
        let mut files: Vec<_> = std::fs::read_dir(repo_root().join(dir))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        for path in files {
            let name = path.to_string_lossy().to_string();
            if name.ends_with(".input.json")
                || name.ends_with(".mock.json")
                || !(name.ends_with(".json") || name.ends_with(".yaml"))
            {
                continue;
            }
            let mut w = Weir::new().env("SLACK_WEBHOOK_URL", &format!("{}/hook", fake.url));
            let mock = path.with_extension("mock.json");
            if mock.exists() {
                w = w.env("WEIR_MOCK", &mock.to_string_lossy());
            }
            let v = w.run(&["validate", &name]);
            assert_eq!(v.code, 0, "{name} does not validate:\n{}", v.stderr);
            let sidecar = path.with_extension("input.json");
            let input = std::fs::read_to_string(&sidecar)
                .unwrap_or_else(|_| "{}".into())
                .replace("$FAKE", &fake.url);
            let ran = w.run(&["run", &name, "--input", &input, "--json"]);
            // Exit 0 or 3 (an example may stop at a human gate).
            assert!(
                ran.code == 0 || ran.code == 3,
                "{name} exited {}:\n{}",
                ran.code,
                ran.stderr
            );
            let r = ran.json();
            if r["status"] == "paused" {
                let id = r["run_id"].as_str().unwrap();
                let done = w.run(&["approve", id, "--json"]);
                assert_eq!(done.code, 0, "{name} after approval:\n{}", done.stderr);
            }
            ran_any += 1;
        }
    }
    assert!(
        ran_any >= 12,
        "expected at least twelve examples, ran {ran_any}"
    );
}
