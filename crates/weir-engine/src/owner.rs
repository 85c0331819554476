//! Which process drives a run. `resume` is for runs whose process died; resuming a run that
//! a live process is still driving would execute its steps twice, so the engine records
//! `host:pid` in the snapshot and `resume` refuses when that process is alive on this host.

/// `host:pid` of this process.
pub fn this_process() -> String {
    static ME: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    ME.get_or_init(|| format!("{}:{}", hostname(), std::process::id()))
        .clone()
}

fn hostname() -> String {
    static HOST: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    HOST.get_or_init(read_hostname).clone()
}

fn read_hostname() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|h| h.trim().to_string())
        })
        .unwrap_or_else(|| "localhost".into())
}

/// The pid in `owner` when it names a different process on this host that is still alive
/// (checked through `/proc`, so only on Linux; elsewhere the check is skipped).
pub fn live_local_pid(owner: &str) -> Option<u32> {
    let (host, pid) = owner.rsplit_once(':')?;
    let pid: u32 = pid.parse().ok()?;
    if host != hostname() || pid == std::process::id() {
        return None;
    }
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    // A recycled pid that is not weir does not count.
    let exe = cmdline.split(|b| *b == 0).next().unwrap_or_default();
    String::from_utf8_lossy(exe)
        .ends_with("weir")
        .then_some(pid)
}
