//! `triggers:` at the top of a document (every dialect): what starts runs of a saved
//! workflow by itself.

use crate::fields::Cx;
use crate::tree::{self, Kind};

impl Cx {
    /// `triggers: [{kind: schedule, name, cron, timezone, input, overlap, catch_up, enabled}]`
    /// at the top of a document (every dialect). A trigger that cannot fire is E027.
    pub(crate) fn triggers(&mut self, doc: &tree::Node) -> Vec<weir_core::ir::Trigger> {
        let Some(v) = doc.get("triggers") else {
            return Vec::new();
        };
        let items = match &v.kind {
            Kind::Seq(items) => items,
            Kind::Null => return Vec::new(),
            _ => {
                self.err(
                    "E027",
                    None,
                    v.span,
                    format!("`triggers` must be a list, found {}", v.type_name()),
                    "write triggers: [{kind: schedule, name: nightly, cron: \"0 2 * * *\", timezone: UTC}]",
                );
                return Vec::new();
            }
        };
        let mut out: Vec<weir_core::ir::Trigger> = Vec::new();
        for item in items {
            if let Some(t) = self.trigger(item)
                && !out.iter().any(|o| o.name == t.name)
            {
                out.push(t);
            } else if let Some(name) = item.get("name").and_then(tree::Node::as_str)
                && out.iter().any(|o| o.name == name)
            {
                self.err(
                    "E027",
                    None,
                    item.get("name").and_then(|n| n.span),
                    format!("two triggers are named `{name}`"),
                    "give each trigger its own name (it names the trigger's runs and commands)",
                );
            }
        }
        out
    }

    fn trigger(&mut self, item: &tree::Node) -> Option<weir_core::ir::Trigger> {
        use weir_core::ir::{Trigger, TriggerKind};
        const KEYS: &[&str] = &[
            "kind",
            "name",
            "enabled",
            "cron",
            "timezone",
            "input",
            "overlap",
            "catch_up",
            "secret",
            "signature",
            "dedupe",
        ];
        if item.as_map().is_none() {
            self.err(
                "E027",
                None,
                item.span,
                format!("a trigger must be a map, found {}", item.type_name()),
                "write {kind: schedule, name: nightly, cron: \"0 2 * * *\", timezone: UTC}",
            );
            return None;
        }
        for (k, kv) in item.as_map().unwrap_or_default() {
            if !KEYS.contains(&k.as_str()) {
                self.err(
                    "E009",
                    None,
                    kv.key_span.or(kv.span),
                    format!(
                        "unknown trigger key `{k}`{}",
                        weir_core::validate::suggest(k, KEYS.iter().copied())
                    ),
                    "a schedule has kind, name, cron, timezone, input, overlap, catch_up and enabled; a webhook has kind, name, secret, signature, input, dedupe and enabled",
                );
            }
        }
        let name = self.trigger_name(item)?;
        let kind = self.string("", item, "kind");
        let kind = match kind.as_deref() {
            Some("schedule") => TriggerKind::Schedule(self.schedule(&name, item)?),
            Some("webhook") => TriggerKind::Webhook(self.webhook(&name, item)?),
            other => {
                self.err(
                    "E027",
                    None,
                    item.get("kind").and_then(|n| n.span).or(item.span),
                    match other {
                        Some(k) => format!(
                            "trigger `{name}` has kind `{k}`, not schedule or webhook"
                        ),
                        None => format!("trigger `{name}` has no `kind`"),
                    },
                    "write kind: schedule with a cron expression, or kind: webhook with a signature",
                );
                return None;
            }
        };
        Some(Trigger {
            enabled: self.enabled(&name, item),
            name,
            kind,
        })
    }

    /// A trigger's `name`: letters, digits, `_` and `-`.
    fn trigger_name(&mut self, item: &tree::Node) -> Option<String> {
        match self.string("", item, "name") {
            Some(n)
                if !n.is_empty()
                    && n.chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') =>
            {
                Some(n)
            }
            other => {
                self.err(
                    "E027",
                    None,
                    item.get("name").and_then(|n| n.span).or(item.span),
                    match other {
                        Some(n) => {
                            format!("trigger name `{n}` is not letters, digits, `_` and `-`")
                        }
                        None => "a trigger has no `name`".into(),
                    },
                    "name it like nightly or weekday-digest: it appears in URLs and commands",
                );
                None
            }
        }
    }

    /// A webhook's own fields: `signature`, `secret`, `input`, `dedupe`.
    fn webhook(&mut self, name: &str, item: &tree::Node) -> Option<weir_core::ir::Webhook> {
        use weir_core::ir::Signature;
        let at = |key: &str| item.get(key).and_then(|n| n.span).or(item.span);
        let signature = self.string("", item, "signature");
        let Some(signature) = signature.as_deref().and_then(Signature::parse) else {
            self.err(
                "E027",
                None,
                at("signature"),
                match signature {
                    Some(s) => format!("webhook `{name}`: signature `{s}` is none of {}", Signature::NAMES.join(", ")),
                    None => format!("webhook `{name}` has no `signature`"),
                },
                "write signature: github (or hmac-sha256, stripe, slack; token for a sender that cannot sign)",
            );
            return None;
        };
        let secret = self.string("", item, "secret");
        match (signature, &secret) {
            (Signature::Token, Some(_)) => {
                self.err(
                    "E027",
                    None,
                    at("secret"),
                    format!("webhook `{name}`: the token scheme takes no `secret`"),
                    "remove secret: weir makes the URL token when the workflow is saved and shows it once",
                );
                return None;
            }
            (Signature::Token, None) | (_, Some(_)) => {}
            (_, None) => {
                self.err(
                    "E027",
                    None,
                    item.span,
                    format!(
                        "webhook `{name}`: signature {} needs a `secret`",
                        signature.as_str()
                    ),
                    "write secret: NAME, a secret declared under [secrets] in weir.toml that the sender signs with",
                );
                return None;
            }
        }
        let input = self.hook_input(name, item)?;
        let dedupe = self.string("", item, "dedupe");
        for key in ["cron", "timezone", "overlap", "catch_up"] {
            if item.get(key).is_some() {
                self.err(
                    "E027",
                    None,
                    at(key),
                    format!("webhook `{name}`: `{key}` is a schedule's key"),
                    "remove it, or make the trigger kind: schedule",
                );
            }
        }
        Some(weir_core::ir::Webhook {
            secret,
            signature,
            input,
            dedupe,
        })
    }

    /// A webhook's `input`: templates over `body`, `headers` and `query` (`Some(None)`:
    /// none given; `None`: a mistake, reported).
    fn hook_input(&mut self, name: &str, item: &tree::Node) -> Option<Option<serde_json::Value>> {
        match item.get("input") {
            None => Some(None),
            Some(v) if v.as_map().is_some() => {
                let json = v.to_json();
                if let Err(e) = weir_core::expr::check_value(&json) {
                    self.err(
                        "E027",
                        None,
                        v.span,
                        format!("webhook `{name}`: `input` has a template that does not parse: {e}"),
                        "write input: {action: \"{body.action}\", event: \"{headers.x_github_event}\"}",
                    );
                    return None;
                }
                Some(Some(json))
            }
            Some(v) => {
                self.err(
                    "E027",
                    None,
                    v.span,
                    format!("webhook `{name}`: `input` must be a map, found {}", v.type_name()),
                    "write input: {action: \"{body.action}\"} (templates over body, headers and query)",
                );
                None
            }
        }
    }

    /// A schedule's own fields: `cron`, `timezone`, `overlap`, `catch_up`, `input`.
    fn schedule(&mut self, name: &str, item: &tree::Node) -> Option<weir_core::ir::Schedule> {
        use weir_core::ir::{CatchUp, Overlap, Schedule};
        let cron = self.string("", item, "cron");
        let timezone = self
            .string("", item, "timezone")
            .unwrap_or_else(|| "UTC".into());
        let Some(cron) = cron else {
            self.err(
                "E027",
                None,
                item.span,
                format!("schedule `{name}` has no `cron`"),
                "write cron: \"0 9 * * MON-FRI\" (minute hour day-of-month month day-of-week, an optional leading second)",
            );
            return None;
        };
        if let Err(why) = weir_core::schedule::Cron::parse(&cron, &timezone) {
            let key = if why.contains("time zone") {
                "timezone"
            } else {
                "cron"
            };
            self.err(
                "E027",
                None,
                item.get(key).and_then(|n| n.span).or(item.span),
                format!("schedule `{name}`: {why}"),
                "cron has five fields (minute hour day-of-month month day-of-week) or six with a leading second; timezone is an IANA name such as Europe/Paris",
            );
            return None;
        }
        let choice = |cx: &mut Self, key: &str, options: &[&str]| -> Option<usize> {
            let v = cx.string("", item, key)?;
            match options.iter().position(|o| *o == v) {
                Some(i) => Some(i),
                None => {
                    cx.err(
                        "E027",
                        None,
                        item.get(key).and_then(|n| n.span),
                        format!(
                            "schedule `{name}`: `{key}` is `{v}`, not one of {}",
                            options.join(", ")
                        ),
                        "overlap is skip, queue or allow; catch_up is none or latest",
                    );
                    None
                }
            }
        };
        let overlap = match choice(self, "overlap", &["skip", "queue", "allow"]) {
            Some(1) => Overlap::Queue,
            Some(2) => Overlap::Allow,
            _ => Overlap::Skip,
        };
        let catch_up = match choice(self, "catch_up", &["none", "latest"]) {
            Some(0) => CatchUp::None,
            _ => CatchUp::Latest,
        };
        let input = self.input(name, item);
        for key in ["secret", "signature", "dedupe"] {
            if item.get(key).is_some() {
                self.err(
                    "E027",
                    None,
                    item.get(key).and_then(|n| n.span),
                    format!("schedule `{name}`: `{key}` is a webhook's key"),
                    "remove it, or make the trigger kind: webhook",
                );
            }
        }
        Some(Schedule {
            cron,
            timezone,
            input,
            overlap,
            catch_up,
        })
    }

    /// A schedule's `input` (default `{}`).
    fn input(&mut self, name: &str, item: &tree::Node) -> serde_json::Value {
        match item.get("input") {
            None => serde_json::json!({}),
            Some(v) if v.as_map().is_some() => v.to_json(),
            Some(v) => {
                self.err(
                    "E027",
                    None,
                    v.span,
                    format!(
                        "schedule `{name}`: `input` must be a map, found {}",
                        v.type_name()
                    ),
                    "write input: {report: daily} (the run's input at each tick)",
                );
                serde_json::json!({})
            }
        }
    }

    /// `enabled` (default true).
    fn enabled(&mut self, name: &str, item: &tree::Node) -> bool {
        match item.get("enabled").map(|v| &v.kind) {
            None | Some(Kind::Null | Kind::Bool(true)) => true,
            Some(Kind::Bool(false)) => false,
            Some(_) => {
                self.err(
                    "E027",
                    None,
                    item.get("enabled").and_then(|n| n.span),
                    format!("trigger `{name}`: `enabled` must be true or false"),
                    "write enabled: false to keep a trigger without firing it",
                );
                true
            }
        }
    }
}
