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
            "kind", "name", "enabled", "cron", "timezone", "input", "overlap", "catch_up",
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
                    "a schedule trigger has kind, name, cron, timezone, input, overlap, catch_up and enabled",
                );
            }
        }
        let name = self.string("", item, "name");
        let kind = self.string("", item, "kind");
        let name = match name {
            Some(n)
                if !n.is_empty()
                    && n.chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') =>
            {
                n
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
                return None;
            }
        };
        if kind.as_deref() != Some("schedule") {
            self.err(
                "E027",
                None,
                item.get("kind").and_then(|n| n.span).or(item.span),
                match kind {
                    Some(k) => format!(
                        "trigger `{name}` has kind `{k}`: the kind this version fires is schedule"
                    ),
                    None => format!("trigger `{name}` has no `kind`"),
                },
                "write kind: schedule with a cron expression",
            );
            return None;
        }
        let schedule = self.schedule(&name, item)?;
        Some(Trigger {
            enabled: self.enabled(&name, item),
            name,
            kind: TriggerKind::Schedule(schedule),
        })
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
