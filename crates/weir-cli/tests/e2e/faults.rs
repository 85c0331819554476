//! Faults of the machine under a run: a full disk under SQLite, a process whose clock
//! jumps. The disk is a small `tmpfs` mounted in a private mount namespace (`unshare`), so
//! nothing outside the test sees it; where the machine allows no such namespace the test
//! says so loudly and passes, unless `WEIR_REQUIRE_FAULTS=1` (CI).

use std::collections::HashSet;
use std::path::Path;
use std::process::Command;

use crate::support::{Weir, bin};

/// How to run a shell script in a mount namespace of its own: as root, or as an
/// unprivileged user mapped to root in a user namespace. `None` where neither works.
fn private_mounts(dir: &Path) -> Option<Vec<&'static str>> {
    let probe = dir.join("probe");
    std::fs::create_dir_all(&probe).ok()?;
    for prefix in [vec!["unshare", "-m"], vec!["unshare", "-rm"]] {
        let ok = Command::new(prefix[0])
            .args(&prefix[1..])
            .args(["sh", "-c", "mount -t tmpfs -o size=1m tmpfs \"$1\"", "sh"])
            .arg(&probe)
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            return Some(prefix);
        }
    }
    skip_fault_test(
        "no mount namespace can be made here (unshare -m)",
        "full-disk",
    );
    None
}

/// Says loudly that a fault test cannot run here and is skipped, or fails when the machine
/// must run it (`WEIR_REQUIRE_FAULTS=1`, as in CI).
pub fn skip_fault_test(why: &str, test: &str) {
    assert!(
        std::env::var("WEIR_REQUIRE_FAULTS").as_deref() != Ok("1"),
        "WEIR_REQUIRE_FAULTS=1 but {why}"
    );
    eprintln!("************************************************************************");
    eprintln!("*** {why}: the {test} test is SKIPPED.");
    eprintln!("************************************************************************");
}

/// A loop of steps that each record about 200 KB (the prompt is kept in the step's
/// attempt), 26 times: about 5 MB in all.
const FILL: &str = "name: fill
nodes:
  - id: start
    type: condition
    config: {expression: 'true'}
  - id: write
    type: agent
    config: {model: mock, user_message: \"{'x' * 200000}\"}
  - id: again
    type: loop
    config: {expression: 'true', max_iterations: 25}
  - id: done
    type: end
edges:
  - {source: start, target: write, condition_value: 'true'}
  - {source: write, target: again}
  - {source: again, target: write, condition_value: 'true'}
  - {source: again, target: done, condition_value: 'false'}
";

#[test]
fn a_full_disk_under_sqlite_stops_the_run_cleanly_and_loses_nothing_committed() {
    let w = Weir::new();
    let Some(unshare) = private_mounts(w.dir.path()) else {
        return;
    };
    let wf = w.file("fill.yaml", FILL);
    w.short_lease(1.0, 0.3);
    let (disk, saved) = (w.path("disk"), w.path("saved"));
    std::fs::create_dir_all(&disk).unwrap();
    std::fs::create_dir_all(&saved).unwrap();
    // In the namespace: a 3 MB disk, the run on a database there, its output kept, and the
    // database files copied out as the failed run left them.
    let script = r#"
        set -u
        mount -t tmpfs -o size=3m tmpfs "$DISK" || exit 90
        "$WEIR" run "$WF" --db "$DISK/w.db" >"$SAVED/stdout" 2>"$SAVED/stderr"
        echo $? >"$SAVED/code"
        cp "$DISK"/w.db* "$SAVED/"
    "#;
    let status = Command::new(unshare[0])
        .args(&unshare[1..])
        .args(["sh", "-c", script])
        .env("DISK", &disk)
        .env("SAVED", &saved)
        .env("WEIR", bin())
        .env("WF", &wf)
        .env("WEIR_CONFIG", w.path("weir.toml"))
        .env_remove("WEIR_DB")
        .current_dir(w.dir.path())
        .status()
        .unwrap();
    assert!(status.success(), "the script ran: {status}");
    let read = |name: &str| std::fs::read_to_string(saved.join(name)).unwrap();
    let stderr = read("stderr");
    assert_eq!(read("code").trim(), "1", "{stderr}");
    assert!(stderr.contains("database or disk is full"), "{stderr}");
    assert!(stderr.contains("weir resume "), "{stderr}");
    let error = stderr
        .lines()
        .find(|l| l.starts_with("error:"))
        .expect("an error line");
    assert_eq!(
        error.matches("database or disk is full").count(),
        1,
        "the cause once: {error}"
    );
    assert!(error.contains("run "), "{error}");

    // The database as the full disk left it: intact, the run running with what it committed.
    let db = saved.join("w.db");
    let conn = rusqlite::Connection::open(&db).unwrap();
    let check: String = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(check, "ok");
    drop(conn);
    let w = w.env("WEIR_DB", &db.to_string_lossy());
    let run = w.run_ids().pop().expect("the run was created");
    let before = w.show(&run);
    assert_eq!(before["status"], "running");
    let committed: Vec<serde_json::Value> = crate::support::steps(&before, "write")
        .into_iter()
        .filter(|s| s["status"] == "succeeded")
        .cloned()
        .collect();
    assert!(
        committed.len() >= 3 && committed.len() < 26,
        "{} write steps committed before the disk filled",
        committed.len()
    );

    // With room again (the copy, on the real disk), the run continues from where it was.
    let ran = w.run(&["resume", &run, "--json"]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let after = w.show(&run);
    assert_eq!(after["status"], "succeeded");
    let writes: Vec<&serde_json::Value> = crate::support::steps(&after, "write")
        .into_iter()
        .filter(|s| s["status"] == "succeeded")
        .collect();
    // The first visit and one for each of the loop's 25 turns.
    assert_eq!(writes.len(), 26, "every visit once");
    let visits: HashSet<u64> = writes
        .iter()
        .map(|s| s["visit"].as_u64().unwrap())
        .collect();
    assert_eq!(visits.len(), 26, "no visit ran twice");
    for (was, is) in committed.iter().zip(&writes) {
        assert_eq!(was, *is, "a committed step is kept as it was");
    }
}
