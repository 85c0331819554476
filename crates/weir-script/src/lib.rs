//! weir-script: runs `script` nodes under bun, behind [`weir_core::ScriptRunner`].
//!
//! Each run gets a fresh temporary directory holding the node's source (`main.ts`), the run's
//! public state (`state.json`, exposed as `globalThis.weir`) and a small runner that imports
//! the module, awaits its `export default`, and writes the value, reduced the ways the
//! validators need it, to a result file. stdout and stderr are captured (1 MiB each). bun runs
//! in its own process group, so a timeout kills the whole tree (shell commands included). A
//! throw, or a shell command that fails without `.nothrow()`, exits non-zero: a failure, not a
//! value. The script sees only the environment variables it is allowed (`[scripts] env` in
//! weir.toml, plus `PATH`, `HOME`, `TMPDIR`, `LANG`, `LC_ALL`, `TZ`); the engine redacts
//! every secret value from what it records, the captured output included.

#![warn(missing_docs)]

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Instant;

use async_trait::async_trait;
use tokio::io::AsyncReadExt;
use weir_core::script::{
    BASE_ENV, ScriptCall, ScriptError, ScriptResult, ScriptRunner, ScriptValue,
};

const RUNNER: &str = r#"const dir = import.meta.dir;
// If weir dies (even by SIGKILL), this process is given to another parent: the script's
// whole process group goes with it.
const parent = process.ppid;
setInterval(() => {
  if (process.ppid !== parent) process.kill(-process.pid, "SIGKILL");
}, 250).unref();
(globalThis as any).weir = await Bun.file(`${dir}/state.json`).json();
// Reading a variable weir does not pass fails the script, naming it: an `undefined` would
// silently change what the script decides.
const passed = new Set<string>(await Bun.file(`${dir}/env.json`).json());
const guarded = (env: Record<string, string | undefined>) =>
  new Proxy(env, {
    get(target, key, receiver) {
      if (typeof key === "string" && !passed.has(key) && !(key in target)) {
        throw new Error(
          `process.env.${key} is not passed to scripts: add "${key}" to env under [scripts] in weir.toml`,
        );
      }
      return Reflect.get(target, key, receiver);
    },
  });
Object.defineProperty(process, "env", { value: guarded(process.env), configurable: true, writable: true });
let value: unknown;
try {
  const mod = await import(`${dir}/main.ts`);
  value = await mod.default;
} catch (e) {
  console.error(e instanceof Error ? (e.stack ?? e.message) : String(e));
  process.exit(1);
}
let json: unknown = null;
try {
  json = value === undefined ? null : JSON.parse(JSON.stringify(value) ?? "null");
} catch {
  json = null;
}
let score: number | null = null;
if (typeof value === "number") score = value;
else if (value !== null && typeof value === "object" && typeof (value as any).score === "number") score = (value as any).score;
await Bun.write(`${dir}/result.json`, JSON.stringify({ json, js_type: typeof value, truthy: !!value, string: String(value), score }));
"#;

const MAX_OUTPUT: usize = 1 << 20;

/// Runs scripts with the `bun` found as `$WEIR_BUN`, else on `PATH`, else where
/// `scripts/test` installs it (`$WEIR_TOOLS_DIR`, default `~/.cache/weir-tools`, under
/// `node_modules/.bin`).
pub struct Bun {
    program: PathBuf,
    /// Environment variables passed through besides the base ones.
    env: Vec<String>,
}

impl Bun {
    /// bun from `$WEIR_BUN`, else `bun` on `PATH`.
    pub fn from_env() -> Self {
        Self {
            program: find_bun().unwrap_or_else(|| PathBuf::from("bun")),
            env: Vec::new(),
        }
    }

    /// Also passes these environment variables to scripts (`[scripts] env`).
    pub fn with_env(mut self, env: Vec<String>) -> Self {
        self.env = env;
        self
    }
}

impl Default for Bun {
    fn default() -> Self {
        Self::from_env()
    }
}

/// The bun a script runs with: `WEIR_BUN`, else `bun` on `PATH`, else the one `scripts/test`
/// installed (`$WEIR_TOOLS_DIR` or `~/.cache/weir-tools`); `None` when there is none (a
/// script's failure to start then names the fix).
pub fn find_bun() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("WEIR_BUN").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    if let Some(path) = std::env::var_os("PATH")
        && let Some(dir) = std::env::split_paths(&path).find(|dir| dir.join("bun").is_file())
    {
        return Some(dir.join("bun"));
    }
    let tools = std::env::var_os("WEIR_TOOLS_DIR")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/weir-tools")))?;
    let bun = tools.join("node_modules/.bin/bun");
    bun.is_file().then_some(bun)
}

fn runtime(e: impl std::fmt::Display) -> ScriptError {
    ScriptError::Runtime(e.to_string())
}

async fn read_capped<R: tokio::io::AsyncRead + Unpin>(mut r: R) -> String {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        match r.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if buf.len() < MAX_OUTPUT {
                    let take = n.min(MAX_OUTPUT - buf.len());
                    buf.extend_from_slice(&chunk[..take]);
                }
            }
        }
    }
    String::from_utf8_lossy(&buf).into_owned()
}

#[expect(
    clippy::too_many_lines,
    reason = "run starts bun with the script's sandbox (environment, limits, timeout), feeds it, and reads its result or classifies its failure, in one sequence"
)]
#[async_trait]
impl ScriptRunner for Bun {
    async fn run(&self, call: ScriptCall) -> Result<ScriptResult, ScriptError> {
        sweep_once();
        let dir = tempfile::Builder::new()
            .prefix("weir-script-")
            .tempdir()
            .map_err(runtime)?;
        // Who owns the folder, for the sweep of a later process if this one is killed.
        std::fs::write(dir.path().join("owner"), std::process::id().to_string())
            .map_err(runtime)?;
        std::fs::write(dir.path().join("main.ts"), &call.source).map_err(runtime)?;
        std::fs::write(dir.path().join("runner.ts"), RUNNER).map_err(runtime)?;
        let passed: Vec<&str> = BASE_ENV
            .iter()
            .copied()
            .chain(self.env.iter().map(String::as_str))
            .collect();
        std::fs::write(
            dir.path().join("env.json"),
            serde_json::to_vec(&passed).map_err(runtime)?,
        )
        .map_err(runtime)?;
        std::fs::write(
            dir.path().join("state.json"),
            serde_json::to_vec(&call.state).map_err(runtime)?,
        )
        .map_err(runtime)?;
        let started = Instant::now();
        let mut child = tokio::process::Command::new(&self.program)
            .arg("run")
            .arg("--no-install")
            .arg(dir.path().join("runner.ts"))
            .current_dir(std::env::current_dir().unwrap_or_else(|_| dir.path().to_path_buf()))
            .env_clear()
            .envs(
                BASE_ENV
                    .iter()
                    .map(ToString::to_string)
                    .chain(self.env.iter().cloned())
                    .filter_map(|k| std::env::var_os(&k).map(|v| (k, v))),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| {
                ScriptError::Runtime(format!(
                    "cannot start bun ({}): {e}; script nodes need bun: install it with `npm install -g bun` (or run scripts/test, which puts it in ~/.cache/weir-tools), or set WEIR_BUN to its path",
                    self.program.display()
                ))
            })?;
        let pid = child.id();
        // If the node is cancelled (attempt timeout, a failing sibling), the future is
        // dropped: the guard still kills the whole process group.
        let _group = GroupGuard(pid);
        let stdout = tokio::spawn(read_capped(child.stdout.take().expect("stdout is piped")));
        let stderr = tokio::spawn(read_capped(child.stderr.take().expect("stderr is piped")));
        let status = match tokio::time::timeout(call.timeout, child.wait()).await {
            Ok(s) => s.map_err(runtime)?,
            Err(_) => {
                kill_tree(pid);
                let _ = child.wait().await;
                return Err(ScriptError::Timeout(call.timeout));
            }
        };
        // Children the script left behind must not outlive the node.
        kill_tree(pid);
        let stdout = stdout.await.unwrap_or_default();
        let stderr = stderr.await.unwrap_or_default();
        let exit_code = status.code().unwrap_or(-1);
        if !status.success() {
            let message = stderr
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("the script exited with an error")
                .trim()
                .to_string();
            let message = stderr
                .lines()
                .find(|l| l.contains("error") || l.contains("Error"))
                .map_or(message, |l| l.trim().to_string());
            return Err(ScriptError::Failed {
                exit_code,
                message,
                stdout,
                stderr,
            });
        }
        let raw = std::fs::read(dir.path().join("result.json")).map_err(|e| {
            ScriptError::Runtime(format!("the script finished without a result: {e}"))
        })?;
        let value: ScriptValue = serde_json::from_slice(&raw).map_err(runtime)?;
        Ok(ScriptResult {
            stdout,
            stderr,
            exit_code,
            value,
            duration_ms: started.elapsed().as_millis() as u64,
        })
    }
}

/// Removes, once per process, the script folders of weir processes that died without
/// removing theirs (a `kill -9` during a script step): each folder names its owner's pid,
/// and only folders whose owner is gone are removed.
fn sweep_once() {
    static SWEPT: std::sync::Once = std::sync::Once::new();
    SWEPT.call_once(|| {
        // Whether a pid is alive is read from /proc (Linux); elsewhere nothing is removed.
        if !std::path::Path::new("/proc/self").exists() {
            return;
        }
        let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
            return;
        };
        for e in entries.flatten() {
            let name = e.file_name();
            if !name.to_string_lossy().starts_with("weir-script-") {
                continue;
            }
            let owner = std::fs::read_to_string(e.path().join("owner"))
                .ok()
                .and_then(|p| p.trim().parse::<u32>().ok());
            let gone =
                owner.is_some_and(|pid| !std::path::Path::new(&format!("/proc/{pid}")).exists());
            if gone {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    });
}

/// Kills a process group when dropped.
struct GroupGuard(Option<u32>);

impl Drop for GroupGuard {
    fn drop(&mut self) {
        kill_tree(self.0);
    }
}

fn kill_tree(pid: Option<u32>) {
    if let Some(pid) = pid.and_then(|p| i32::try_from(p).ok()) {
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}
