//! What a finished node does to its run's state: its result written under its output key
//! or as its variable, a pipeline's passes, a loop's counter and re-armed body; and the view
//! of state that templates and expressions read.

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;

use serde_json::Value;
use weir_core::ir::{NodeKind, StateLayout};

use super::Run;
use crate::nodes::Route;

impl Run<'_> {
    /// Writes a node's result into state: under its output key (graph), or as
    /// `variables.<id>` (machine and pipeline, where every node's output is its variable).
    pub(super) fn write(&mut self, node: &weir_core::Node, outcome: &mut crate::nodes::Outcome) {
        match self.wf.layout {
            StateLayout::Flat => {
                // Moved into state: nothing reads an outcome's `write` after it in this layout.
                if let Some(v) = outcome.write.take() {
                    let key = node.output_key.as_deref().unwrap_or(&node.id);
                    if let Some(t) = &mut self.stored {
                        t.touch(key, None);
                    }
                    Arc::make_mut(&mut self.snapshot.state).insert(key.to_string(), v);
                }
            }
            StateLayout::Variables => {
                if matches!(node.kind, NodeKind::End(_) | NodeKind::HumanGate(_)) {
                    return;
                }
                let value = outcome
                    .write
                    .clone()
                    .unwrap_or_else(|| Value::clone(&outcome.output));
                let vars = Arc::make_mut(&mut self.snapshot.state)
                    .entry("variables")
                    .or_insert_with(|| Value::Object(Default::default()));
                if let Value::Object(m) = vars {
                    m.insert(node.id.clone(), value);
                }
                if let Some(t) = &mut self.stored {
                    t.touch("variables", Some(&node.id));
                }
            }
        }
    }

    /// Pipeline bookkeeping: remember what the step left visible in this pass, and start a
    /// new pass on a backward jump.
    pub(super) fn record_pass(&mut self, node: &weir_core::Node, outcome: &crate::nodes::Outcome) {
        let pass = self.snapshot.pass.max(1);
        let visible = match &outcome.write {
            Some(Value::Array(v)) => v.clone(),
            _ => Vec::new(),
        };
        self.snapshot
            .history
            .entry(node.id.clone())
            .or_default()
            .push(weir_core::record::StepPass { pass, visible });
        if let Some(t) = &mut self.stored {
            t.touch_history(&node.id);
        }
        self.snapshot.pass = pass;
        if let Route::Key(k) = &outcome.route
            && let Some(target) = k.strip_prefix("jump:")
        {
            let at = |id: &str| self.wf.position(id);
            if at(target) <= at(&node.id) {
                self.snapshot.pass = pass + 1;
            }
        }
    }

    /// Loop bookkeeping: on continue keep the counter and re-arm the body; on exit clear it.
    pub(super) fn route_loop(&mut self, index: usize, route: &Route) {
        let wf = self.wf.clone();
        let loop_id = wf.nodes[index].id.as_str();
        let cont = matches!(route, Route::Key(k) if k == "true");
        if cont {
            let count = self.snapshot.loops.get(loop_id).copied().unwrap_or(0) + 1;
            self.snapshot.loops.insert(loop_id.to_string(), count);
            // Re-arm: every node reachable from the true branch back up to the loop.
            let starts: Vec<String> = self
                .wf
                .outgoing(loop_id)
                .filter(|e| e.matches("true"))
                .map(|e| e.target.clone())
                .collect();
            let mut seen: HashSet<String> = HashSet::new();
            let mut queue: VecDeque<String> = starts.into();
            while let Some(id) = queue.pop_front() {
                if id == loop_id || !seen.insert(id.clone()) {
                    continue;
                }
                if self.stored.is_some()
                    && let Some(at) = wf.position(&id)
                {
                    self.touch_node(wf.node_id(at));
                }
                self.snapshot.completed.remove(id.as_str());
                self.snapshot.arrivals.remove(&id);
                queue.extend(self.wf.outgoing(&id).map(|e| e.target.clone()));
            }
            self.touch_node(wf.node_id(index));
            self.snapshot.completed.remove(loop_id);
        } else {
            self.snapshot.loops.remove(loop_id);
            self.touch_node(wf.node_id(index));
            self.snapshot.completed.insert(wf.node_id(index).clone());
        }
    }

    /// The node's completion or visit count is about to change: the tracker notes what the
    /// store holds of it (`Tracker::touch_node`; every change of either goes through here).
    pub(super) fn touch_node(&mut self, id: &weir_core::record::NodeId) {
        if let Some(t) = &mut self.stored {
            t.touch_node(id, &self.snapshot);
        }
    }
}

/// What templates and expressions see: public state, plus in the `Variables` layout each
/// variable under its node id (`{{ build.stdout }}` as well as `{{ variables.build.stdout }}`),
/// never shadowing `input` or `variables`.
pub fn view(
    layout: StateLayout,
    state: &serde_json::Map<String, Value>,
) -> serde_json::Map<String, Value> {
    let mut out = state.clone();
    if layout == StateLayout::Variables
        && let Some(Value::Object(vars)) = state.get("variables")
    {
        for (k, v) in vars {
            if !out.contains_key(k) {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    out
}
