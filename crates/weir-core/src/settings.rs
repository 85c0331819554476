//! Workspace settings: `weir.toml` (DESIGN §7). This module parses and checks them; the
//! binary finds the file (`--config`, `WEIR_CONFIG`, or `./weir.toml`) and hands the
//! parsed settings to the providers.

use std::collections::BTreeMap;

use serde::Deserialize;

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    #[serde(default)]
    pub models: ModelSettings,
    #[serde(default)]
    pub providers: ProviderSection,
    /// Per-model prices, overriding the built-in table. Keys are model names as workflows
    /// write them (`ollama:llama3.2`, `gpt-4o`).
    #[serde(default)]
    pub pricing: BTreeMap<String, Price>,
    #[serde(default)]
    pub mcp: McpSettings,
    /// Custom tools, used as `tool_name: custom:<name>`.
    #[serde(default)]
    pub tools: BTreeMap<String, CustomTool>,
    /// Secret references: `NAME = { env = "VAR" }`. `{secrets.NAME}` in tool params reads
    /// the variable; a name not listed here never resolves (a workflow cannot read an
    /// arbitrary environment variable such as `ANTHROPIC_API_KEY`).
    #[serde(default)]
    pub secrets: BTreeMap<String, SecretRef>,
    /// How long a driver's lease lives without a heartbeat, and how often it renews.
    #[serde(default)]
    pub lease: LeaseSettings,
    /// What `script` nodes may see of the environment.
    #[serde(default)]
    pub scripts: ScriptSettings,
    /// Size limits on what a run is given.
    #[serde(default)]
    pub limits: Limits,
    /// What `weir serve` may connect to beyond public addresses.
    #[serde(default)]
    pub network: NetworkSettings,
    /// How long ended runs are kept: `weir serve` prunes on this schedule.
    #[serde(default)]
    pub retention: Option<RetentionSettings>,
    /// `[webhooks]`: how many deliveries each webhook takes.
    #[serde(default)]
    pub webhooks: WebhookSettings,
}

/// `[webhooks] requests_per_minute = 120`: each webhook of each saved workflow takes that
/// many deliveries a minute on each `weir serve` process (bursts up to that many at once);
/// more are answered 429 with `Retry-After`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookSettings {
    #[serde(default = "default_hook_rate")]
    pub requests_per_minute: u32,
}

impl Default for WebhookSettings {
    fn default() -> Self {
        Self {
            requests_per_minute: default_hook_rate(),
        }
    }
}

fn default_hook_rate() -> u32 {
    120
}

/// `[retention] older_than = "30d"`: `weir serve` deletes runs that ended longer ago than
/// that (of `statuses` when given), every `every` (default `1h`). Paused, queued and running
/// runs are never deleted. `weir runs prune` does the same by hand.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetentionSettings {
    pub older_than: String,
    #[serde(default)]
    pub statuses: Vec<String>,
    #[serde(default = "default_every")]
    pub every: String,
}

fn default_every() -> String {
    "1h".into()
}

/// `ip`, `ip:port`, `[v6]:port` or `ip/prefix`.
fn allow_entry_ok(entry: &str) -> bool {
    use std::net::{IpAddr, SocketAddr};
    let e = entry.trim();
    if e.parse::<IpAddr>().is_ok() || e.parse::<SocketAddr>().is_ok() {
        return true;
    }
    match e.split_once('/') {
        Some((ip, prefix)) => match (ip.parse::<IpAddr>(), prefix.parse::<u8>()) {
            (Ok(IpAddr::V4(_)), Ok(p)) => p <= 32,
            (Ok(IpAddr::V6(_)), Ok(p)) => p <= 128,
            _ => false,
        },
        None => false,
    }
}

/// An age such as `30d`, `12h`, `90m`, `45s` or `2w`.
pub fn parse_age(text: &str) -> Result<std::time::Duration, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (n, unit) = t.split_at(split);
    let n: u64 = n.parse().map_err(|_| {
        format!("`{text}` is not an age: write a number and a unit, e.g. 30d, 12h, 90m")
    })?;
    let secs = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        "w" => 604_800,
        _ => {
            return Err(format!(
                "`{text}`: the unit must be s, m, h, d or w (e.g. 30d)"
            ));
        }
    };
    n.checked_mul(secs)
        .filter(|s| *s > 0)
        .map(std::time::Duration::from_secs)
        .ok_or_else(|| format!("`{text}` is not a positive age"))
}

/// `[network] allow = ["127.0.0.1:9000", "10.0.0.0/8"]`: internal addresses the server's
/// tools may reach (DESIGN §7). `weir run` is not limited.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkSettings {
    #[serde(default)]
    pub allow: Vec<String>,
}

/// `[limits]`: the size budget of a run, each in bytes. What would pass one is refused
/// before it is built, sent or written, and fails the node (or, for input, the request)
/// saying which limit it met.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// The largest run input (and approval input) accepted, as JSON (1 MiB).
    #[serde(default = "default_input_bytes")]
    pub input_bytes: usize,
    /// What one evaluation of a whole template may build, all its placeholders together: a
    /// prompt, a tool's params, an end node's output (8 MiB).
    #[serde(default = "default_template_bytes")]
    pub template_bytes: usize,
    /// One step's output, as JSON (16 MiB).
    #[serde(default = "default_step_output_bytes")]
    pub step_output_bytes: usize,
    /// A tool call's request: its params as JSON, the body they carry included (8 MiB).
    #[serde(default = "default_tool_request_bytes")]
    pub tool_request_bytes: usize,
    /// A run's state, as JSON, after each step's write (64 MiB).
    #[serde(default = "default_state_bytes")]
    pub state_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            input_bytes: default_input_bytes(),
            template_bytes: default_template_bytes(),
            step_output_bytes: default_step_output_bytes(),
            tool_request_bytes: default_tool_request_bytes(),
            state_bytes: default_state_bytes(),
        }
    }
}

fn default_input_bytes() -> usize {
    1 << 20
}

fn default_template_bytes() -> usize {
    crate::expr::MAX_TEMPLATE_BYTES
}

fn default_step_output_bytes() -> usize {
    16 << 20
}

fn default_tool_request_bytes() -> usize {
    8 << 20
}

fn default_state_bytes() -> usize {
    64 << 20
}

/// `[scripts] env = ["ENV", "CI"]`: the environment variables passed to script nodes, besides
/// `PATH`, `HOME`, `TMPDIR`, `LANG`, `LC_ALL` and `TZ`. Nothing else reaches a script.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptSettings {
    #[serde(default)]
    pub env: Vec<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeaseSettings {
    #[serde(default = "default_ttl")]
    pub ttl_seconds: f64,
    #[serde(default = "default_heartbeat")]
    pub heartbeat_seconds: f64,
    /// Takeovers (a lease expired with steps in flight) in a row, with no step finishing in
    /// between, after which a run fails instead of being taken over again: a step that
    /// kills every worker that runs it must not loop forever.
    #[serde(default = "default_max_takeovers")]
    pub max_takeovers: u32,
}

impl Default for LeaseSettings {
    fn default() -> Self {
        Self {
            ttl_seconds: default_ttl(),
            heartbeat_seconds: default_heartbeat(),
            max_takeovers: default_max_takeovers(),
        }
    }
}

fn default_ttl() -> f64 {
    30.0
}

fn default_heartbeat() -> f64 {
    5.0
}

fn default_max_takeovers() -> u32 {
    5
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpSettings {
    #[serde(default)]
    pub servers: BTreeMap<String, McpServer>,
}

/// An MCP server: a command the engine starts (stdio) or a streamable-HTTP URL.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpServer {
    pub command: Option<String>,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    pub url: Option<String>,
    /// Extra HTTP headers (values may use `{secrets.NAME}`).
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum CustomTool {
    /// An HTTP endpoint. `url`, header values and `body` are templates over the node's params
    /// (`{lead_id}`) and secrets (`{secrets.CRM_TOKEN}`).
    Http {
        #[serde(default = "default_method")]
        method: String,
        url: String,
        #[serde(default)]
        headers: BTreeMap<String, String>,
        /// A string template, or a table whose string values are templates (sent as JSON).
        body: Option<toml::Value>,
        /// An expression over `{status, headers, body}` picking the tool's result; default:
        /// the whole response.
        response: Option<String>,
        description: Option<String>,
        /// The JSON Schema of its params, as an agent's model is told them (with a
        /// `description` per property); default: each placeholder of the templates, a string.
        parameters: Option<serde_json::Value>,
    },
    /// A tool on a configured MCP server; the node's params are its arguments.
    Mcp {
        server: String,
        tool: String,
        description: Option<String>,
    },
}

impl CustomTool {
    /// Checks what the definition's fields cannot say by their types: declared `parameters`
    /// are a JSON Schema of an object that names every placeholder of the templates.
    pub fn check(&self, name: &str) -> Result<(), String> {
        let CustomTool::Http {
            parameters: Some(schema),
            ..
        } = self
        else {
            return Ok(());
        };
        let at = format!("[tools.{name}] parameters");
        if schema.get("type").and_then(serde_json::Value::as_str) != Some("object") {
            return Err(format!(
                "{at}: give the JSON Schema of an object (`type = \"object\"` with `properties`)"
            ));
        }
        jsonschema::validator_for(schema).map_err(|e| format!("{at}: not a JSON Schema: {e}"))?;
        let declared = schema
            .get("properties")
            .and_then(serde_json::Value::as_object);
        for p in self.placeholders() {
            if !declared.is_some_and(|d| d.contains_key(&p)) {
                return Err(format!(
                    "{at}: the templates use `{{{p}}}`, which `properties` does not declare; add it (a model fills only what it is told)"
                ));
            }
        }
        Ok(())
    }

    /// The `{name}` placeholders of an HTTP tool's templates (not `{secrets.…}`), in order.
    pub fn placeholders(&self) -> Vec<String> {
        let CustomTool::Http {
            url, headers, body, ..
        } = self
        else {
            return Vec::new();
        };
        let mut texts: Vec<String> = vec![url.clone()];
        texts.extend(headers.values().cloned());
        if let Some(b) = body {
            // The body's strings, wherever they sit in it.
            let mut stack = vec![b];
            while let Some(v) = stack.pop() {
                match v {
                    toml::Value::String(t) => texts.push(t.clone()),
                    toml::Value::Array(items) => stack.extend(items.iter().rev()),
                    toml::Value::Table(t) => stack.extend(t.values().rev()),
                    _ => {}
                }
            }
        }
        let mut names = Vec::new();
        for text in texts {
            let mut rest = text.as_str();
            while let Some(open) = rest.find('{') {
                rest = &rest[open + 1..];
                let Some(close) = rest.find('}') else { break };
                let name = rest[..close].trim();
                let ok = !name.is_empty()
                    && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                    && !names.iter().any(|n| n == name);
                if ok {
                    names.push(name.to_string());
                }
                rest = &rest[close + 1..];
            }
        }
        names
    }
}

fn default_method() -> String {
    "GET".into()
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SecretRef {
    pub env: String,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelSettings {
    /// Globs (`*`, `?`) of allowed model names; absent = every model.
    pub allow: Option<Vec<String>>,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct ProviderSection {
    /// Allowed provider names (`anthropic`, `openai`, `mock`, or a named provider); absent
    /// = every provider.
    pub allow: Option<Vec<String>>,
    /// OpenAI-compatible providers by name: `[providers.ollama] base_url = "…"`.
    #[serde(flatten)]
    pub named: BTreeMap<String, NamedProvider>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NamedProvider {
    /// Base URL of an OpenAI-compatible API; the client posts to `{base_url}/chat/completions`.
    pub base_url: String,
    /// Environment variable holding the API key, if the server needs one.
    pub api_key_env: Option<String>,
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Price {
    pub input_per_mtok: f64,
    pub output_per_mtok: f64,
}

const BUILT_IN_PROVIDERS: &[&str] = &["anthropic", "openai", "mock"];

impl Settings {
    /// Parses `weir.toml` text; the error names the problem and, where it can, the line.
    #[expect(
        clippy::too_many_lines,
        reason = "one arm per weir.toml section, each a few lines of reading keys; the order follows the documented file"
    )]
    pub fn parse(text: &str) -> Result<Self, String> {
        let raw: toml::Table = toml::from_str(text).map_err(|e| e.to_string())?;
        for key in raw.keys() {
            match key.as_str() {
                "models" | "providers" | "pricing" | "mcp" | "tools" | "secrets" | "lease"
                | "scripts" | "limits" | "network" | "retention" | "webhooks" => {}
                other => {
                    return Err(format!(
                        "unknown section [{other}]; weir.toml has [models], [providers], [pricing], [mcp], [tools], [secrets], [lease], [scripts], [limits], [network], [retention] and [webhooks]"
                    ));
                }
            }
        }
        let s: Settings = toml::from_str(text).map_err(|e| e.to_string())?;
        for entry in &s.network.allow {
            if !allow_entry_ok(entry) {
                return Err(format!(
                    "[network] allow: `{entry}` is not an address, address:port or CIDR block (e.g. \"127.0.0.1:9000\", \"10.0.0.0/8\", \"[fd00::1]:443\")"
                ));
            }
        }
        if let Some(r) = &s.retention {
            parse_age(&r.older_than).map_err(|e| format!("[retention] older_than: {e}"))?;
            parse_age(&r.every).map_err(|e| format!("[retention] every: {e}"))?;
            for st in &r.statuses {
                if !crate::record::RunStatus::parse(st)
                    .is_some_and(super::record::RunStatus::is_terminal)
                {
                    return Err(format!(
                        "[retention] statuses: `{st}` is not an ended status (succeeded, failed, aborted, cancelled); paused and running runs are never pruned"
                    ));
                }
            }
        }
        for (name, p) in &s.providers.named {
            if BUILT_IN_PROVIDERS.contains(&name.as_str()) {
                return Err(format!(
                    "[providers.{name}]: `{name}` is a built-in provider; configure it with its environment variables"
                ));
            }
            if !(p.base_url.starts_with("http://") || p.base_url.starts_with("https://")) {
                return Err(format!(
                    "[providers.{name}] base_url must be an http(s) URL"
                ));
            }
        }
        for (name, srv) in &s.mcp.servers {
            match (&srv.command, &srv.url) {
                (Some(_), None) | (None, Some(_)) => {}
                _ => {
                    return Err(format!(
                        "[mcp.servers.{name}] needs exactly one of `command` (stdio) or `url` (streamable HTTP)"
                    ));
                }
            }
        }
        for (name, tool) in &s.tools {
            tool.check(name)?;
            if let CustomTool::Mcp { server, .. } = tool
                && !s.mcp.servers.contains_key(server)
            {
                return Err(format!(
                    "[tools.{name}] uses MCP server `{server}`, which is not under [mcp.servers]"
                ));
            }
        }
        // Templates in the settings may only use declared secrets.
        let mut used: Vec<(String, String)> = Vec::new();
        for (name, tool) in &s.tools {
            if let CustomTool::Http {
                url, headers, body, ..
            } = tool
            {
                let mut names = Vec::new();
                crate::secrets::scan(url, &mut names);
                headers
                    .values()
                    .for_each(|h| crate::secrets::scan(h, &mut names));
                if let Some(b) = body {
                    scan_toml(b, &mut names);
                }
                used.extend(names.into_iter().map(|n| (format!("[tools.{name}]"), n)));
            }
        }
        for (name, srv) in &s.mcp.servers {
            let mut names = Vec::new();
            srv.headers
                .values()
                .for_each(|h| crate::secrets::scan(h, &mut names));
            used.extend(
                names
                    .into_iter()
                    .map(|n| (format!("[mcp.servers.{name}]"), n)),
            );
        }
        for (section, secret) in used {
            if !s.secrets.contains_key(&secret) {
                return Err(format!(
                    "{section} uses secret `{secret}`, which is not declared: add `{secret} = {{ env = \"{secret}\" }}` under [secrets]"
                ));
            }
        }
        if !(s.lease.ttl_seconds > 0.0 && s.lease.heartbeat_seconds > 0.0)
            || s.lease.heartbeat_seconds >= s.lease.ttl_seconds
        {
            return Err(
                "[lease]: ttl_seconds and heartbeat_seconds must be above zero, the heartbeat shorter than the ttl".into(),
            );
        }
        let l = &s.limits;
        if [
            l.input_bytes,
            l.template_bytes,
            l.step_output_bytes,
            l.tool_request_bytes,
            l.state_bytes,
        ]
        .contains(&0)
        {
            return Err("[limits]: every limit must be at least 1 byte".into());
        }
        for (model, p) in &s.pricing {
            if !(p.input_per_mtok >= 0.0 && p.output_per_mtok >= 0.0) {
                return Err(format!(
                    "[pricing.\"{model}\"]: prices must be zero or more"
                ));
            }
        }
        Ok(s)
    }

    /// The value of secret `name`: the environment variable its `[secrets]` entry names.
    /// An undeclared name is refused, whatever the environment holds.
    pub fn secret(&self, name: &str) -> Result<String, String> {
        let Some(r) = self.secrets.get(name) else {
            return Err(format!(
                "secret `{name}` is not declared: add `{name} = {{ env = \"{name}\" }}` under [secrets] in weir.toml"
            ));
        };
        match std::env::var(&r.env) {
            Ok(v) if !v.is_empty() => Ok(v),
            _ => Err(format!(
                "secret `{name}` is not set: set the environment variable {} (from [secrets] in weir.toml)",
                r.env
            )),
        }
    }

    /// Whether the model allowlist (`[models] allow`) admits `model`, whatever serves it.
    pub fn model_allowed(&self, model: &str) -> bool {
        self.models
            .allow
            .as_ref()
            .is_none_or(|globs| globs.iter().any(|g| glob(g, model)))
    }

    /// Whether the workspace allows `model` served by `provider`; `Err` says why not.
    pub fn allows(&self, model: &str, provider: &str) -> Result<(), String> {
        if let Some(globs) = &self.models.allow
            && !self.model_allowed(model)
        {
            return Err(format!(
                "model `{model}` is not in the workspace model allowlist ({})",
                globs.join(", ")
            ));
        }
        if let Some(allowed) = &self.providers.allow
            && !allowed.iter().any(|p| p == provider)
        {
            return Err(format!(
                "provider `{provider}` is not in the workspace provider allowlist ({})",
                allowed.join(", ")
            ));
        }
        Ok(())
    }
}

/// Shell-style glob with `*` (any run) and `?` (one character).
/// Adds the secret names referenced in the strings of a TOML value.
fn scan_toml(v: &toml::Value, out: &mut Vec<String>) {
    match v {
        toml::Value::String(s) => crate::secrets::scan(s, out),
        toml::Value::Array(a) => a.iter().for_each(|x| scan_toml(x, out)),
        toml::Value::Table(t) => t.values().for_each(|x| scan_toml(x, out)),
        _ => {}
    }
}

pub fn glob(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    let (mut pi, mut ti) = (0, 0);
    let (mut star, mut mark) = (None, 0);
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = ti;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ti = mark;
        } else {
            return false;
        }
    }
    while pi < p.len() && p[pi] == '*' {
        pi += 1;
    }
    pi == p.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_documented_example() {
        let s = Settings::parse(
            r#"
[models]
allow = ["claude-*", "gpt-4o"]

[providers]
allow = ["anthropic", "openai", "ollama"]

[providers.ollama]
base_url = "http://127.0.0.1:11434/v1"

[pricing."ollama:llama3.2"]
input_per_mtok = 0.0
output_per_mtok = 0.0
"#,
        )
        .unwrap();
        assert!(s.allows("claude-haiku-4-5", "anthropic").is_ok());
        assert!(s.allows("gpt-4o", "openai").is_ok());
        assert!(s.allows("gpt-4o-mini", "openai").is_err());
        assert!(s.allows("claude-haiku-4-5", "mock").is_err());
        assert!(s.model_allowed("claude-opus-4-5") && !s.model_allowed("gpt-4o-mini"));
        assert_eq!(
            s.providers.named["ollama"].base_url,
            "http://127.0.0.1:11434/v1"
        );
        assert_eq!(s.pricing["ollama:llama3.2"].input_per_mtok, 0.0);
    }

    #[test]
    fn parses_tools_mcp_and_secrets() {
        let s = Settings::parse(
            r#"
[mcp.servers.everything]
command = "npx"
args = ["-y", "@modelcontextprotocol/server-everything"]

[mcp.servers.docs]
url = "http://127.0.0.1:3001/mcp"

[tools.crm_lookup]
kind = "http"
method = "GET"
url = "https://crm.example.com/leads/{lead_id}"
headers = { Authorization = "Bearer {secrets.CRM_TOKEN}" }

[tools.search_docs]
kind = "mcp"
server = "docs"
tool = "search"

[secrets]
CRM_TOKEN = { env = "CRM_TOKEN" }
"#,
        )
        .unwrap();
        assert_eq!(s.mcp.servers.len(), 2);
        assert!(matches!(s.tools["crm_lookup"], CustomTool::Http { .. }));
        assert!(matches!(s.tools["search_docs"], CustomTool::Mcp { .. }));
        assert!(s.secret("WEIR_TEST_SURELY_UNSET_VAR").is_err());
        // Only declared names resolve: PATH is set, but not a secret.
        assert!(s.secret("PATH").unwrap_err().contains("not declared"));
    }

    #[test]
    fn settings_templates_use_declared_secrets_only() {
        let e = Settings::parse(
            "[tools.t]\nkind = \"http\"\nurl = \"https://x/{secrets.ANTHROPIC_API_KEY}\"\n",
        )
        .unwrap_err();
        assert!(
            e.contains("ANTHROPIC_API_KEY") && e.contains("not declared"),
            "{e}"
        );
        let s = Settings::parse("[lease]\nttl_seconds = 2\nheartbeat_seconds = 0.5\n").unwrap();
        assert_eq!(s.lease.ttl_seconds, 2.0);
        assert!(Settings::parse("[lease]\nttl_seconds = 1\nheartbeat_seconds = 2\n").is_err());
    }

    #[test]
    fn rejects_what_it_does_not_know() {
        assert!(
            Settings::parse("[modles]\nallow = []")
                .unwrap_err()
                .contains("unknown section")
        );
        assert!(Settings::parse("[models]\nalow = []").is_err());
        assert!(Settings::parse("[network]\nallow_private = true").is_err());
        assert!(
            Settings::parse("[network]\nallow = [\"localhost\"]")
                .unwrap_err()
                .contains("not an address")
        );
        let ok = Settings::parse(
            "[network]\nallow = [\"127.0.0.1:9000\", \"10.0.0.0/8\", \"[::1]:80\", \"fd00::/8\"]\n[retention]\nolder_than = \"30d\"\nstatuses = [\"succeeded\"]",
        )
        .unwrap();
        assert_eq!(ok.network.allow.len(), 4);
        assert_eq!(ok.retention.unwrap().every, "1h");
        assert!(
            Settings::parse("[retention]\nolder_than = \"30 days\"")
                .unwrap_err()
                .contains("unit")
        );
        assert!(
            Settings::parse("[retention]\nolder_than = \"1d\"\nstatuses = [\"paused\"]")
                .unwrap_err()
                .contains("never pruned")
        );
        assert_eq!(parse_age("2w").unwrap().as_secs(), 1_209_600);
        assert!(
            Settings::parse("[mcp.servers.x]\nargs = []")
                .unwrap_err()
                .contains("exactly one")
        );
        assert!(
            Settings::parse("[tools.t]\nkind = \"mcp\"\nserver = \"nope\"\ntool = \"x\"")
                .unwrap_err()
                .contains("not under")
        );
        assert!(Settings::parse("[providers.openai]\nbase_url = \"http://x\"").is_err());
    }

    #[test]
    fn globs() {
        assert!(glob("claude-*", "claude-haiku-4-5"));
        assert!(glob("*", "anything"));
        assert!(glob("gpt-4?", "gpt-4o"));
        assert!(!glob("gpt-4o", "gpt-4o-mini"));
        assert!(!glob("claude-*", "gpt-4o"));
    }
}
