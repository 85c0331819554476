//! What a finished node does to its run's state: its result written under its output key
//! or as its variable, a pipeline's passes, a loop's counter and re-armed body; and the view
//! of state that templates and expressions read.

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;

use serde_json::Value;
use weir_core::ir::{NodeKind, StateLayout};
use weir_core::json::{bytes, len_within};

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
                    let state = Arc::make_mut(&mut self.snapshot.state);
                    // A key a node names (`output_key`) is most often one that nodes share
                    // (a chain's `last`, a loop's draft): when it is there already, only its
                    // value changes, with no copy of the key made to be dropped. A key that
                    // is the node's id is most often new: inserted at once, not looked up
                    // twice.
                    let there = match node.output_key {
                        Some(_) => state.get_mut(key),
                        None => None,
                    };
                    match there {
                        Some(slot) => *slot = v,
                        None => {
                            state.insert(key.to_string(), v);
                        }
                    }
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

    /// Why a finished node's output, or the state its write would leave, does not fit the
    /// run's size budget (`[limits]`); `None` when both fit, and the state's size is then
    /// what the write leaves. Measured without building any text.
    pub(super) fn over_budget(
        &mut self,
        node: &weir_core::Node,
        outcome: &crate::nodes::Outcome,
    ) -> Option<String> {
        let limits = &self.engine.limits;
        let output_too_big = || {
            format!(
                "the step's output is larger than {}, the most one step may leave \
                 (`[limits] step_output_bytes` in weir.toml); it was not recorded",
                bytes(limits.step_output_bytes)
            )
        };
        let Some(output) = len_within(&outcome.output, limits.step_output_bytes) else {
            return Some(output_too_big());
        };
        let (key, old) = match self.wf.layout {
            StateLayout::Flat => {
                let key = node.output_key.as_deref().unwrap_or(&node.id);
                (key, self.snapshot.state.get(key))
            }
            StateLayout::Variables => {
                if matches!(node.kind, NodeKind::End(_) | NodeKind::HumanGate(_)) {
                    return None;
                }
                let old = match self.snapshot.state.get("variables") {
                    Some(Value::Object(vars)) => vars.get(&node.id),
                    _ => None,
                };
                (node.id.as_str(), old)
            }
        };
        let new = match (&outcome.write, self.wf.layout) {
            (Some(w), _) => match len_within(w, limits.step_output_bytes) {
                Some(n) => n,
                None => return Some(output_too_big()),
            },
            (None, StateLayout::Variables) => output,
            (None, StateLayout::Flat) => return None,
        };
        let before = match self.state_bytes {
            Some(n) => n,
            None => len_within(&*self.snapshot.state, usize::MAX).unwrap_or(usize::MAX),
        };
        // The value replaced goes; a new key brings its name, quotes, colon and comma.
        let after = match old {
            Some(v) => before.saturating_sub(len_within(v, usize::MAX).unwrap_or(0)),
            None => before.saturating_add(key.len() + 4),
        }
        .saturating_add(new);
        if after > limits.state_bytes {
            return Some(format!(
                "the run's state would grow to about {}, past {}, the most a run's state may \
                 hold (`[limits] state_bytes` in weir.toml); the step's result was not written",
                bytes(after),
                bytes(limits.state_bytes)
            ));
        }
        self.state_bytes = Some(after);
        None
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
                if self.snapshot.completed.remove(id.as_str())
                    && let Some(t) = &mut self.stored
                    && let Some(at) = wf.position(&id)
                {
                    t.completed_was(wf.node_id(at), true);
                }
                self.snapshot.arrivals.remove(&id);
                queue.extend(self.wf.outgoing(&id).map(|e| e.target.clone()));
            }
            self.set_completed(wf.node_id(index), false);
        } else {
            self.snapshot.loops.remove(loop_id);
            self.set_completed(wf.node_id(index), true);
        }
    }

    /// Marks a node completed, or no longer. Every change of the completed nodes goes
    /// through here (or tells the tracker as this does): a patch carries the changes the
    /// tracker was told (`Tracker::completed_was`).
    pub(super) fn set_completed(&mut self, id: &weir_core::record::NodeId, done: bool) {
        let changed = if done {
            self.snapshot.completed.insert(id.clone())
        } else {
            self.snapshot.completed.remove(id)
        };
        if changed && let Some(t) = &mut self.stored {
            t.completed_was(id, !done);
        }
    }

    /// Counts one more visit of a node (every change of the visit counts goes through
    /// here), telling the tracker the count before (`Tracker::visits_was`).
    pub(super) fn count_visit(&mut self, id: &weir_core::record::NodeId) {
        // One search of the map (the shared id is a reference count, not a copy).
        let count = self.snapshot.visits.entry(id.clone()).or_insert(0);
        let was = *count;
        *count += 1;
        if let Some(t) = &mut self.stored {
            t.visits_was(id, (was > 0).then_some(was));
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
