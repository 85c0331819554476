//! Budgets (`budget:` on a workflow and on a node): before every model call an agent makes,
//! the worst case of the call (its input, estimated at four characters a token, and its
//! `max_tokens`, at the model's price) is checked against what is left; before every tool
//! call of an agent's loop, the tool-call count; before any node that calls models starts,
//! whether the run's budget is spent already. A call that could exceed a limit is not made:
//! the node fails with `budget_exceeded` (`on_exceeded: fail`, the default) or the run parks
//! at a gate of kind `budget` (`pause`), where approving with `{"raise": {"usd": 1.0}}`
//! raises the limit and goes on.
//!
//! The run's budget counts what the run had spent when the node started and what the node
//! spent since (nodes running beside it are counted when they end); a node's budget counts
//! one attempt of the node (an agent's whole loop, across a crash or a pause).

use serde_json::{Value, json};
use weir_core::ModelRequest;
use weir_core::ir::Budget;
use weir_core::record::Usage;

use crate::nodes::{NodeCtx, Spent};

/// Output tokens a request that sets no `max_tokens` may get (the providers' default here).
const DEFAULT_MAX_TOKENS: u64 = 1024;

/// The limits a node runs under, fixed when it starts.
#[derive(Debug, Clone)]
pub struct Limits {
    /// The run's budget (raised as decided) and what the run had spent at the node's start.
    pub run: Option<(Budget, f64, Usage)>,
    /// The node's own budget (raised as decided).
    pub node: Option<Budget>,
}

/// What is about to happen.
pub enum Next<'a> {
    /// The node starts (it calls models).
    Start,
    Model(&'a ModelRequest),
    Tool,
}

/// A limit the next call would cross.
#[derive(Debug, Clone)]
pub struct Exceeded {
    pub pause: bool,
    /// `run` or `node`.
    pub scope: &'static str,
    pub message: String,
    pub detail: Value,
}

/// The worst case of a model call: its tokens and its cost.
fn worst(ctx: &NodeCtx, req: &ModelRequest) -> (u64, f64) {
    let mut chars = req.system.as_ref().map_or(0, String::len);
    for m in &req.messages {
        chars += m.content.len();
        chars += m
            .tool_returns
            .iter()
            .map(|r| r.content.len())
            .sum::<usize>();
        chars += m
            .tool_uses
            .iter()
            .map(|u| u.arguments.to_string().len() + u.name.len())
            .sum::<usize>();
    }
    chars += req
        .tools
        .iter()
        .map(|t| t.description.len() + t.parameters.to_string().len() + t.name.len())
        .sum::<usize>();
    let input = (chars as u64).div_ceil(4);
    let output = req.max_tokens.map_or(DEFAULT_MAX_TOKENS, u64::from);
    let models = ctx.services.models.as_ref();
    let usd = std::iter::once(&*req.model)
        .chain(req.fallback_models.iter().map(String::as_str))
        .filter_map(|m| models.price(m, input, output))
        .fold(0.0, f64::max);
    (input + output, usd)
}

/// Checks one budget: what it allows against what was used and what comes next.
fn check(
    b: &Budget,
    scope: &'static str,
    used_usd: f64,
    used: Usage,
    next: (u64, f64, u64, u64),
) -> Option<Exceeded> {
    let (tokens, usd, model_calls, tool_calls) = next;
    let over =
        |limit: Option<f64>, used: f64, more: f64| limit.filter(|l| used + more > *l + 1e-12);
    let what: Option<(&str, f64, f64, f64)> = if let Some(l) = over(b.usd, used_usd, usd) {
        Some(("usd", l, used_usd, usd))
    } else if let Some(l) = over(
        b.tokens.map(|t| t as f64),
        used.tokens as f64,
        tokens as f64,
    ) {
        Some(("tokens", l, used.tokens as f64, tokens as f64))
    } else if let Some(l) = over(
        b.model_calls.map(|t| t as f64),
        used.model_calls as f64,
        model_calls as f64,
    ) {
        Some((
            "model_calls",
            l,
            used.model_calls as f64,
            model_calls as f64,
        ))
    } else {
        over(
            b.tool_calls.map(|t| t as f64),
            used.tool_calls as f64,
            tool_calls as f64,
        )
        .map(|l| ("tool_calls", l, used.tool_calls as f64, tool_calls as f64))
    };
    let (what, limit, spent, more) = what?;
    let show = |x: f64| {
        if what == "usd" {
            format!("${x:.4}")
        } else {
            format!("{x}")
        }
    };
    let whose = if scope == "run" {
        "the run's"
    } else {
        "the node's"
    };
    let message = format!(
        "{whose} budget of {} {what} would be exceeded: {} spent, the next call may take {} more",
        show(limit),
        show(spent),
        show(more)
    );
    Some(Exceeded {
        pause: b.pause,
        scope,
        message,
        detail: json!({"scope": scope, "limit": what, "allowed": limit, "spent": spent, "next": more}),
    })
}

impl NodeCtx {
    /// Whether `next` would cross a budget of the run or of this node, given what this
    /// attempt has spent so far.
    pub fn over_budget(&self, spent: &Spent, next: Next<'_>) -> Option<Exceeded> {
        let limits = self.limits.as_deref()?;
        let (tokens, usd, model_calls, tool_calls) = match next {
            Next::Start => (0, 0.0, 0, 0),
            Next::Model(req) => {
                let (t, u) = worst(self, req);
                (t, u, 1, 0)
            }
            Next::Tool => (0, 0.0, 0, 1),
        };
        let mine = Usage {
            tokens: spent.tokens.input + spent.tokens.output,
            model_calls: spent.model_calls,
            tool_calls: spent.tools_made,
        };
        let (before_usd, before) = spent.before;
        let node_used = Usage {
            tokens: mine.tokens + before.tokens,
            model_calls: mine.model_calls + before.model_calls,
            tool_calls: mine.tool_calls + before.tool_calls,
        };
        if let Some(b) = &limits.node
            && let Some(e) = check(
                b,
                "node",
                spent.cost_usd + before_usd,
                node_used,
                (tokens, usd, model_calls, tool_calls),
            )
        {
            return Some(e);
        }
        let (b, cost, used) = limits.run.as_ref()?;
        let used = Usage {
            tokens: used.tokens + mine.tokens,
            model_calls: used.model_calls + mine.model_calls,
            tool_calls: used.tool_calls + mine.tool_calls,
        };
        // Starting: a spent budget stops the node; nothing more is known of what it needs.
        if matches!(next, Next::Start) {
            let spent_all = b.usd.is_some_and(|l| cost + spent.cost_usd >= l)
                || b.tokens.is_some_and(|l| used.tokens >= l)
                || b.model_calls.is_some_and(|l| used.model_calls >= l);
            if !spent_all {
                return None;
            }
            return check(b, "run", cost + spent.cost_usd, used, (1, 1e-9, 1, 0));
        }
        check(
            b,
            "run",
            cost + spent.cost_usd,
            used,
            (tokens, usd, model_calls, tool_calls),
        )
    }
}

/// The failure of a node whose next call would cross a budget (`on_exceeded: fail`).
pub fn failure(
    e: &Exceeded,
    request: Option<&weir_core::record::Request>,
    spent: Spent,
) -> crate::nodes::Failure {
    let mut f = crate::nodes::Failure::fatal("budget_exceeded", e.message.clone());
    f.request = request.map(|r| Box::new(r.clone()));
    f.spent = Some(Box::new(spent));
    f
}

/// The prompt of a `budget` gate.
pub fn prompt(e: &Exceeded) -> String {
    let limit = e.detail["limit"].as_str().unwrap_or("usd");
    format!(
        "{}. Approve with a raise to go on, e.g. {{\"raise\": {{\"{limit}\": {}}}}}; reject to fail the run.",
        e.message,
        if limit == "usd" {
            "1.0".to_string()
        } else {
            "10".to_string()
        }
    )
}
