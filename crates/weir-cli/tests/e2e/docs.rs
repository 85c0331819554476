//! Every command the documentation shows is run, as a reader would run it.
//!
//! The fenced shell blocks of README.md, examples/README.md and docs/ (```sh, ```bash, and the
//! `$ ` lines of ```console transcripts) are run in order, one folder per page: a fresh
//! folder holding a copy of `examples/`, a fresh database, a fresh `weir serve` for the
//! pages that call the API, and the `weir` under test first on `PATH`. A command fails the
//! page when it exits with anything but 0 or 3 (3: the run waits at a human gate, which is
//! what a page shows when it runs an approval) or, for `curl`, when the server answers with
//! an error status. A command that ends otherwise on purpose says so after it: `# exits 1`.
//!
//! What a page cannot know, the test fills in: `RUN_ID` (or a run id printed in a
//! transcript) is the newest run: the newest paused one for `approve`, `reject` and
//! `cancel`, the newest that succeeded for an event stream and a re-run; `TOKEN_ID` is the newest token; `weir_…` is the admin token the server printed;
//! `127.0.0.1:8080` is the port the test's server listens on; `cargo run --release -p
//! weir-cli --` is the binary under test. A block whose first line is a comment starting
//! `# needs ` (a Slack webhook, Docker, a Postgres server) says why it is not run here, and
//! is listed as skipped. Any other `…` left in a command fails the page: write a value the
//! reader can paste, or mark the block.

use super::support::{bin, repo_root};
use std::path::{Path, PathBuf};
use std::process::Command;

/// One command of a page, with where it is written.
struct Cmd {
    line: usize,
    text: String,
}

/// The runnable commands of one page, and the blocks it marks as not runnable here.
#[derive(Default)]
struct Page {
    commands: Vec<Cmd>,
    skipped: Vec<(usize, String)>,
}

fn pages() -> Vec<PathBuf> {
    let root = repo_root();
    let mut out = vec![root.join("README.md"), root.join("examples/README.md")];
    let mut stack = vec![root.join("docs")];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("docs folder") {
            let path = entry.expect("docs entry").path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// Splits a shell block into commands: a line ending in `\`, or one that leaves a single
/// quote open, goes on with the next.
fn commands(lines: &[(usize, &str)], out: &mut Vec<Cmd>) {
    let mut current: Option<Cmd> = None;
    for &(line, text) in lines {
        match current.as_mut() {
            Some(c) => {
                c.text.push('\n');
                c.text.push_str(text);
            }
            None => {
                if text.trim().is_empty() || text.trim_start().starts_with('#') {
                    continue;
                }
                current = Some(Cmd {
                    line,
                    text: text.to_string(),
                });
            }
        }
        let c = current.as_ref().expect("a command");
        let open_quote = code(&c.text).matches('\'').count() % 2 == 1;
        if !(c.text.ends_with('\\') || open_quote) {
            out.push(current.take().expect("a command"));
        }
    }
    out.extend(current);
}

fn parse(text: &str) -> Page {
    let mut page = Page::default();
    let lines: Vec<&str> = text.lines().collect();
    let mut i = 0;
    while i < lines.len() {
        let Some(info) = lines[i].strip_prefix("```") else {
            i += 1;
            continue;
        };
        let start = i + 1;
        let mut end = start;
        while end < lines.len() && !lines[end].starts_with("```") {
            end += 1;
        }
        let body: Vec<(usize, &str)> = (start..end).map(|n| (n + 1, lines[n])).collect();
        i = end + 1;
        let first = body.iter().map(|(_, l)| l.trim()).find(|l| !l.is_empty());
        let runnable = match info.trim() {
            "sh" | "bash" | "shell" => body,
            "console" | "" => {
                // A `$ ` line, and the lines its trailing `\` carries on to.
                let mut taken: Vec<(usize, &str)> = Vec::new();
                let mut more = false;
                for &(n, l) in &body {
                    if let Some(c) = l.strip_prefix("$ ") {
                        taken.push((n, c));
                    } else if more {
                        taken.push((n, l));
                    } else {
                        continue;
                    }
                    more = l.ends_with('\\');
                }
                taken
            }
            _ => continue,
        };
        if runnable.is_empty() {
            continue;
        }
        if let Some(reason) = first.and_then(|l| l.strip_prefix("# needs ")) {
            page.skipped.push((start, format!("needs {reason}")));
            continue;
        }
        if first == Some("scripts/test") {
            page.skipped.push((start, "the test suite itself".into()));
            continue;
        }
        commands(&runnable, &mut page.commands);
    }
    page
}

/// Is `word` a run id as a transcript prints it (8 hex digits) or a token id (12)?
fn hex_id(word: &str, len: usize) -> bool {
    word.len() == len
        && word
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        && word.bytes().any(|b| b.is_ascii_digit())
}

/// The command with what a page cannot know filled in.
fn fill(text: &str) -> String {
    let verb = |verbs: &[&str]| {
        verbs
            .iter()
            .any(|v| text.contains(&format!("weir {v} ")) || text.contains(&format!("/{v}")))
    };
    let run = if verb(&["approve", "reject", "cancel"]) {
        "$(__run_id paused)"
    } else if verb(&["events", "rerun"]) {
        "$(__run_id succeeded)"
    } else {
        "$(__run_id)"
    };
    let text = text
        .replace("cargo run --release -p weir-cli --", "weir")
        .replace("cargo run -p weir-cli --", "weir")
        .replace("weir_…", "${WEIR_DOCS_TOKEN}")
        .replace("127.0.0.1:8080", "127.0.0.1:${WEIR_DOCS_PORT}")
        .replace("0.0.0.0:8080", "127.0.0.1:${WEIR_DOCS_PORT}")
        .replace("RUN_ID", run)
        .replace("TOKEN_ID", "$(__token_id)");
    let mut out = String::with_capacity(text.len());
    let mut word = String::new();
    for ch in text.chars().chain(std::iter::once(' ')) {
        if ch.is_ascii_alphanumeric() {
            word.push(ch);
            continue;
        }
        if hex_id(&word, 8) {
            out.push_str(run);
        } else if hex_id(&word, 12) {
            out.push_str("$(__token_id)");
        } else {
            out.push_str(&word);
        }
        word.clear();
        out.push(ch);
    }
    out.pop();
    out
}

/// The part of a command before its comment (a `#` after a space, outside quotes).
fn code(text: &str) -> String {
    let mut quote = None;
    let mut prev = ' ';
    let mut out = String::new();
    for ch in text.chars() {
        match (quote, ch) {
            (None, '\'' | '"') => quote = Some(ch),
            (Some(q), c) if c == q => quote = None,
            (None, '#') if prev.is_whitespace() => {
                // Skip to the end of the line.
                quote = Some('\n');
            }
            (Some('\n'), '\n') => quote = None,
            _ => {}
        }
        if quote != Some('\n') {
            out.push(ch);
        }
        prev = ch;
    }
    out
}

const PRELUDE: &str = r#"
set -uo pipefail
__fail() { echo "@@FAIL $1: exit $2" >&2; exit 1; }
__check() {
  if [ -n "${3:-}" ]; then [ "$1" = "$3" ] || __fail "$2 (it should exit $3)" "$1"; return; fi
  [ "$1" = 0 ] || [ "$1" = 3 ] || __fail "$2" "$1"
}
__run_id() {
  local id
  for _ in $(seq 100); do
    id=$(command weir runs list --json --limit 1 ${1:+--status "$1"} \
      | grep -o '"run_id": *"[^"]*"' | head -n 1 | cut -d '"' -f 4)
    [ -n "$id" ] && { echo "$id"; return; }
    sleep 0.1   # a server's worker may not have reached that state yet
  done
  echo "no ${1:-} run" >&2
}
__token_id() {
  command weir tokens list --json | grep -o '"id": *"[^"]*"' | tail -n 1 | cut -d '"' -f 4
}
curl() {
  command curl -sS --fail-with-body --max-time 30 "$@"
  local rc=$?
  echo
  return $rc
}
__serve() {
  case " $* " in *" --listen "*) ;; *) set -- "$@" --listen "127.0.0.1:${WEIR_DOCS_PORT}" ;; esac
  command weir serve "$@" >"$PWD/serve.log" 2>&1 &
  __SERVE_PID=$!
  trap 'kill $__SERVE_PID 2>/dev/null; wait $__SERVE_PID 2>/dev/null' EXIT
  for _ in $(seq 200); do
    command curl -fs "http://127.0.0.1:${WEIR_DOCS_PORT}/healthz" >/dev/null && break
    sleep 0.05
  done
  WEIR_DOCS_TOKEN=$(grep -o 'weir_[A-Za-z0-9_]*' "$PWD/serve.log" | head -n 1)
  export WEIR_DOCS_TOKEN
}
weir() {
  if [ "${1:-}" = serve ]; then shift; __serve "$@"; else command weir "$@"; fi
}
"#;

/// The script that runs a page's commands in order, failing at the first that fails.
fn script(name: &str, page: &Page) -> Result<String, String> {
    let mut s = String::from(PRELUDE);
    let needs_server = page
        .commands
        .iter()
        .any(|c| c.text.contains("curl") || c.text.contains("$W"));
    let starts_server = page
        .commands
        .iter()
        .any(|c| fill(&c.text).contains("weir serve"));
    if needs_server && !starts_server {
        s.push_str("__serve --listen 127.0.0.1:${WEIR_DOCS_PORT}\n");
    }
    for c in &page.commands {
        let filled = fill(&c.text);
        if code(&filled).contains('…') {
            return Err(format!(
                "{name}:{} `{}` holds a `…` no reader can run: write a value, or start its block with `# needs …` saying why it cannot run here",
                c.line, c.text
            ));
        }
        let at = format!("{name}:{} `{}`", c.line, c.text.replace('`', "'"));
        s.push_str(&format!("echo '@@ {}' >&2\n", at.replace('\'', "")));
        s.push_str(&filled);
        s.push('\n');
        // `# exits N` after a command says it ends with N on purpose (a replay that differs).
        let expected = c
            .text
            .split("# exits ")
            .nth(1)
            .and_then(|rest| rest.split(|ch: char| !ch.is_ascii_digit()).next())
            .unwrap_or("");
        s.push_str(&format!(
            "__check $? '{}' {expected}\n",
            at.replace('\'', "").replace('\n', " ")
        ));
    }
    Ok(s)
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read examples") {
        let entry = entry.expect("entry");
        let target = to.join(entry.file_name());
        if entry.path().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy example");
        }
    }
}

/// Runs one page in a fresh folder; `Err` holds what failed and the output that says why.
fn run_page(path: &Path) -> Result<usize, String> {
    let root = repo_root();
    let name = path
        .strip_prefix(&root)
        .unwrap_or(path)
        .to_string_lossy()
        .into_owned();
    let text = std::fs::read_to_string(path).expect("read page");
    let page = parse(&text);
    if page.commands.is_empty() {
        return Ok(0);
    }
    let script = script(&name, &page)?;
    let dir = tempfile::tempdir().expect("temp dir");
    copy_dir(&root.join("examples"), &dir.path().join("examples"));
    let bin_dir = dir.path().join(".bin");
    std::fs::create_dir_all(&bin_dir).expect("bin dir");
    std::os::unix::fs::symlink(bin(), bin_dir.join("weir")).expect("link weir");
    let path_var = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new("bash")
        .arg("-c")
        .arg(&script)
        .env_clear()
        .env("PATH", path_var)
        .env("HOME", dir.path())
        .env("WEIR_DB", dir.path().join("weir.db"))
        .env("WEIR_DOCS_PORT", free_port().to_string())
        .env("NO_COLOR", "1")
        .current_dir(dir.path())
        .output()
        .expect("run bash");
    let stderr = String::from_utf8_lossy(&out.stderr);
    if out.status.success() {
        return Ok(page.commands.len());
    }
    let failed = stderr
        .lines()
        .find_map(|l| l.strip_prefix("@@FAIL "))
        .unwrap_or("the script")
        .to_string();
    // The failing command's own output: from its `@@` marker to the end.
    let tail = stderr.rfind("@@ ").map_or(&stderr[..], |at| &stderr[at..]);
    Err(format!(
        "{failed}\n--- stdout (end):\n{}\n--- stderr:\n{tail}",
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .rev()
            .take(30)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect::<Vec<_>>()
            .join("\n")
    ))
}

#[test]
fn every_documented_command_runs() {
    let pages = pages();
    let results: Vec<(PathBuf, Result<usize, String>)> = std::thread::scope(|s| {
        let handles: Vec<_> = pages
            .iter()
            .map(|p| s.spawn(move || (p.clone(), run_page(p))))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("page thread"))
            .collect()
    });
    let mut ran = 0;
    let mut failures = Vec::new();
    for (path, result) in results {
        let name = path
            .strip_prefix(repo_root())
            .unwrap_or(&path)
            .display()
            .to_string();
        match result {
            Ok(n) => {
                eprintln!("{name}: {n} commands ran");
                ran += n;
            }
            Err(e) => failures.push(e),
        }
    }
    for path in &pages {
        let page = parse(&std::fs::read_to_string(path).expect("read page"));
        for (line, reason) in page.skipped {
            let name = path
                .strip_prefix(repo_root())
                .unwrap_or(path)
                .display()
                .to_string();
            eprintln!("skipped {name}:{line}: {reason}");
        }
    }
    assert!(
        failures.is_empty(),
        "{} documented command(s) failed:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
    assert!(ran > 50, "only {ran} documented commands were found");
}

#[test]
fn the_docs_test_reads_blocks_as_a_reader_would() {
    let page = parse(
        "text\n```sh\nweir run a.yaml \\\n  --json   # one object\ncurl -d '{\n  \"a\": 1}' $W\n```\n```console\n$ weir runs show 72ea9e51\nrun 72ea9e51 succeeded\n```\n```sh\n# needs Docker\ndocker run x\n```\n```json\n{\"a\": 1}\n```\n",
    );
    let texts: Vec<&str> = page.commands.iter().map(|c| c.text.as_str()).collect();
    assert_eq!(
        texts,
        [
            "weir run a.yaml \\\n  --json   # one object",
            "curl -d '{\n  \"a\": 1}' $W",
            "weir runs show 72ea9e51"
        ]
    );
    assert_eq!(page.commands[2].line, 9);
    assert_eq!(page.skipped, [(12, "needs Docker".to_string())]);
    assert_eq!(
        fill("weir approve 72ea9e51 && weir runs show RUN_ID"),
        "weir approve $(__run_id paused) && weir runs show $(__run_id paused)"
    );
    assert_eq!(
        fill("weir tokens revoke 3f9a0c1d2e4b"),
        "weir tokens revoke $(__token_id)"
    );
    assert_eq!(code("curl $W/x   # \"ok\" … it's"), "curl $W/x   ");
    assert!(
        script(
            "p.md",
            &parse("```sh\ncurl \"$W/api/runs?cursor=…\"\n```\n")
        )
        .is_err(),
        "an unfilled placeholder fails the page"
    );
}
