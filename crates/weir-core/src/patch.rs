//! Snapshot patches: the lean durable path (DESIGN §8, §11). A durable step commit writes
//! only what changed in the run's [`Snapshot`] since the previous write, and every
//! [`COMPACT_EVERY`] commits (and at every park, release and end) the whole snapshot again.
//! A store keeps the last whole snapshot and the patches written after it; a reader applies
//! them in commit order ([`SnapshotPatch::apply`]) to get the snapshot of the last commit.
//!
//! The driver keeps a [`Tracker`]: the snapshot as the store has it (without the public
//! state, which is tracked by the keys the driver wrote), from which it computes each patch.
//! Nothing of the snapshot is serialised or copied whole per step.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::record::{PendingGate, Reused, Snapshot, StepPass};

/// Commits between two whole snapshots: a patch is written for the others.
pub const COMPACT_EVERY: u32 = 16;

/// A value written into the public state: at `key`, or at `key.sub` (the machine and
/// pipeline dialects' `variables.<node>`, so a patch does not carry every node's variable).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StateSet {
    pub key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sub: Option<String>,
    pub value: Value,
}

/// What changed in a snapshot between two writes. Maps carry the changed entries, with
/// `null` for an entry removed; whole fields are present only when they changed.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SnapshotPatch {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub state: Vec<StateSet>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub loops: BTreeMap<String, Option<u32>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending: Option<Vec<String>>,
    /// Node id → now completed (`true`) or no longer (`false`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub completed: BTreeMap<String, bool>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub arrivals: BTreeMap<String, Option<BTreeSet<String>>>,
    pub hops: u32,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub visits: BTreeMap<String, Option<u32>>,
    pub next_seq: u32,
    pub cost_usd: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gates: Option<Vec<PendingGate>>,
    pub pass: u32,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub history: BTreeMap<String, Option<Vec<StepPass>>>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub reuse: BTreeMap<String, Option<Vec<Reused>>>,
}

impl SnapshotPatch {
    /// Applies the patch to the snapshot it was computed against (or one that the earlier
    /// patches of the same store brought to it).
    pub fn apply(self, to: &mut Snapshot) {
        if !self.state.is_empty() {
            let state = std::sync::Arc::make_mut(&mut to.state);
            for set in self.state {
                set_state(state, set);
            }
        }
        apply_map(&mut to.loops, self.loops);
        if let Some(p) = self.pending {
            to.pending = p;
        }
        for (id, done) in self.completed {
            if done {
                to.completed.insert(id);
            } else {
                to.completed.remove(&id);
            }
        }
        apply_map(&mut to.arrivals, self.arrivals);
        to.hops = self.hops;
        apply_map(&mut to.visits, self.visits);
        to.next_seq = self.next_seq;
        to.cost_usd = self.cost_usd;
        if let Some(o) = self.output {
            to.output = o;
        }
        if let Some(g) = self.gates {
            to.gates = g;
        }
        to.pass = self.pass;
        apply_map(&mut to.history, self.history);
        apply_map(&mut to.reuse, self.reuse);
    }
}

fn set_state(state: &mut Map<String, Value>, set: StateSet) {
    match set.sub {
        None => {
            state.insert(set.key, set.value);
        }
        Some(sub) => {
            let slot = state
                .entry(set.key)
                .or_insert_with(|| Value::Object(Map::new()));
            if !slot.is_object() {
                *slot = Value::Object(Map::new());
            }
            if let Value::Object(m) = slot {
                m.insert(sub, set.value);
            }
        }
    }
}

fn apply_map<V>(to: &mut BTreeMap<String, V>, changes: BTreeMap<String, Option<V>>) {
    for (k, v) in changes {
        match v {
            Some(v) => {
                to.insert(k, v);
            }
            None => {
                to.remove(&k);
            }
        }
    }
}

/// The entries of `now` that differ from `base`, and `None` for the keys `now` lacks.
fn diff_map<V: Clone + PartialEq>(
    base: &BTreeMap<String, V>,
    now: &BTreeMap<String, V>,
) -> BTreeMap<String, Option<V>> {
    let mut out = BTreeMap::new();
    for (k, v) in now {
        if base.get(k) != Some(v) {
            out.insert(k.clone(), Some(v.clone()));
        }
    }
    if base.len() + out.len() != now.len() {
        for k in base.keys() {
            if !now.contains_key(k) {
                out.insert(k.clone(), None);
            }
        }
    }
    out
}

/// What a driver knows of the snapshot its store holds, to write patches instead of it.
#[derive(Debug, Clone)]
pub struct Tracker {
    /// The stored snapshot, its public state left out (empty).
    base: Snapshot,
    /// Public state written since the last write: `(key, sub)`.
    dirty: Vec<(String, Option<String>)>,
    /// Commits since the last whole snapshot.
    since_whole: u32,
}

impl Tracker {
    /// After a whole snapshot was written (or read): the next commit may write a patch.
    pub fn new(stored: &Snapshot) -> Self {
        Self {
            base: without_state(stored),
            dirty: Vec::new(),
            since_whole: 0,
        }
    }

    /// A write into the public state at `key` (or `key.sub`), to go into the next patch.
    pub fn touch(&mut self, key: &str, sub: Option<&str>) {
        if !self
            .dirty
            .iter()
            .any(|(k, s)| k == key && s.as_deref() == sub)
        {
            self.dirty.push((key.to_string(), sub.map(str::to_string)));
        }
    }

    /// The next commit's write: a patch from the stored snapshot to `now`, or `None` when
    /// this commit writes the whole snapshot (every [`COMPACT_EVERY`] commits). Either way
    /// the tracker then takes `now` as what the store holds.
    pub fn next(&mut self, now: &Snapshot) -> Option<SnapshotPatch> {
        self.since_whole += 1;
        if self.since_whole >= COMPACT_EVERY {
            *self = Self::new(now);
            return None;
        }
        let b = &self.base;
        let mut state = Vec::with_capacity(self.dirty.len());
        for (key, sub) in self.dirty.drain(..) {
            let value = match (&sub, now.state.get(&key)) {
                (None, Some(v)) => v.clone(),
                (Some(s), Some(Value::Object(m))) => match m.get(s) {
                    Some(v) => v.clone(),
                    None => continue,
                },
                _ => continue,
            };
            state.push(StateSet { key, sub, value });
        }
        let patch = SnapshotPatch {
            state,
            loops: diff_map(&b.loops, &now.loops),
            pending: (b.pending != now.pending).then(|| now.pending.clone()),
            completed: {
                let mut c = BTreeMap::new();
                for id in now.completed.difference(&b.completed) {
                    c.insert(id.clone(), true);
                }
                for id in b.completed.difference(&now.completed) {
                    c.insert(id.clone(), false);
                }
                c
            },
            arrivals: diff_map(&b.arrivals, &now.arrivals),
            hops: now.hops,
            visits: diff_map(&b.visits, &now.visits),
            next_seq: now.next_seq,
            cost_usd: now.cost_usd,
            output: (b.output != now.output).then(|| now.output.clone()),
            gates: (b.gates != now.gates).then(|| now.gates.clone()),
            pass: now.pass,
            history: diff_map(&b.history, &now.history),
            reuse: diff_map(&b.reuse, &now.reuse),
        };
        // The base follows the store: the same patch, its state left out.
        let mut bookkeeping = patch.clone();
        bookkeeping.state.clear();
        bookkeeping.apply(&mut self.base);
        Some(patch)
    }
}

fn without_state(s: &Snapshot) -> Snapshot {
    Snapshot {
        state: Default::default(),
        loops: s.loops.clone(),
        pending: s.pending.clone(),
        completed: s.completed.clone(),
        arrivals: s.arrivals.clone(),
        hops: s.hops,
        visits: s.visits.clone(),
        next_seq: s.next_seq,
        cost_usd: s.cost_usd,
        output: s.output.clone(),
        gates: s.gates.clone(),
        pass: s.pass,
        history: s.history.clone(),
        reuse: s.reuse.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn snap() -> Snapshot {
        let mut s = Snapshot::default();
        std::sync::Arc::make_mut(&mut s.state).insert("input".into(), json!({"q": 1}));
        s.pending = vec!["a".into()];
        s
    }

    /// Stored whole snapshot + every patch read back from JSON, applied in order.
    fn replay(whole: &Snapshot, patches: &[SnapshotPatch]) -> Snapshot {
        let mut s: Snapshot = serde_json::from_str(&serde_json::to_string(whole).unwrap()).unwrap();
        for p in patches {
            let p: SnapshotPatch =
                serde_json::from_str(&serde_json::to_string(p).unwrap()).unwrap();
            p.apply(&mut s);
        }
        s
    }

    #[test]
    fn patches_applied_in_order_rebuild_every_commit() {
        let mut now = snap();
        let whole = now.clone();
        let mut t = Tracker::new(&now);
        let mut patches = Vec::new();
        for i in 0..(COMPACT_EVERY - 1) {
            let id = format!("n{i}");
            // A node ran: state written (flat and as a variable), bookkeeping moved.
            let state = std::sync::Arc::make_mut(&mut now.state);
            state.insert(format!("k{}", i % 3), json!(i));
            t.touch(&format!("k{}", i % 3), None);
            let vars = state.entry("variables").or_insert_with(|| json!({}));
            vars.as_object_mut()
                .unwrap()
                .insert(id.clone(), json!({"i": i}));
            t.touch("variables", Some(&id));
            now.pending = vec![format!("n{}", i + 1)];
            now.completed.insert(id.clone());
            if i % 4 == 3 {
                now.completed.remove(&format!("n{}", i - 1));
            }
            *now.visits.entry(id.clone()).or_default() += 1;
            now.hops += 1;
            now.next_seq += 2;
            now.cost_usd += 0.25;
            now.output = json!({"last": i});
            if i == 5 {
                now.loops.insert("l".into(), 2);
                now.arrivals
                    .insert("m".into(), ["e1".to_string()].into_iter().collect());
                now.gates.push(PendingGate {
                    node_id: "g".into(),
                    prompt: "ok?".into(),
                    seq: 3,
                });
                now.history.insert(
                    "p".into(),
                    vec![StepPass {
                        pass: 1,
                        visible: vec![json!("x")],
                    }],
                );
            }
            if i == 8 {
                now.loops.remove("l");
                now.arrivals.remove("m");
                now.gates.clear();
                now.pass = 2;
            }
            let p = t.next(&now).expect("a patch between whole snapshots");
            patches.push(p);
            assert_eq!(replay(&whole, &patches), now, "after commit {i}");
        }
        // The COMPACT_EVERY-th commit writes the whole snapshot; the next is a patch again.
        assert!(t.next(&now).is_none());
        let whole = now.clone();
        now.hops += 1;
        now.completed.insert("late".into());
        let p = t.next(&now).expect("a patch after the whole snapshot");
        assert_eq!(p.completed.len(), 1, "only what changed since the whole one");
        assert_eq!(replay(&whole, &[p]), now);
    }

    #[test]
    fn an_unchanged_field_is_left_out_of_the_patch() {
        let now = snap();
        let mut t = Tracker::new(&now);
        let p = t.next(&now).unwrap();
        let text = serde_json::to_string(&p).unwrap();
        assert_eq!(text, r#"{"hops":0,"next_seq":0,"cost_usd":0.0,"pass":0}"#);
    }
}
