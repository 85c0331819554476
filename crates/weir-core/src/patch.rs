//! Snapshot patches: the lean durable path (DESIGN §8, §11). A durable step commit writes
//! the run's public state as a patch (the keys written since the previous write), with the
//! last output and pipeline history only when they changed, and the scheduler's bookkeeping
//! (pending nodes, counters: node ids and numbers) whole; every [`COMPACT_EVERY`]
//! commits or more (`compact_every`), and at every park, release and end, it writes the
//! whole snapshot again. A store
//! keeps the last whole snapshot and the patches written after it, and a reader applies them
//! in commit order ([`SnapshotPatch::apply`]) to get the snapshot of the last commit. What
//! grows with a run (the outputs in its state, and the nodes completed and visited) is written
//! once, not again at every step: a patch carries the completed nodes and the visit counts
//! that changed since the driver's last write (`completed_add`, `completed_del`,
//! `visits_set`, `visits_del`; the scheduler tells the [`Tracker`] each node it changes), or
//! both whole when the driver does not know what the store holds (its first patch). A
//! commit writes the whole snapshot instead of a patch whenever what the
//! patch would leave out is small ([`WHOLE_BELOW`]).

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use std::sync::Arc;

use serde_json::{Map, Value};

use crate::record::{NodeId, PendingGate, Reused, Snapshot, StepPass};

/// Commits between two whole snapshots, at least: a patch is written for the others.
pub const COMPACT_EVERY: u32 = 16;

/// A commit writes the whole snapshot instead of a patch when what the patch would leave
/// out comes to fewer bytes of JSON than this (estimated). A patch is a row of its own
/// (`run_patches` in SQLite: a table and an index, two more pages in the commit, and a
/// statement); the whole snapshot only grows the run's row, which the commit writes anyway.
/// Measured (BENCHMARKS.md): a 20-node durable chain whose run input has one key no node
/// writes cost 125,600 instructions and 34 µs per node with a patch at every commit, against
/// 102,700 and 25 µs with the whole snapshot. A kilobyte of left-out JSON costs about what
/// the patch row does, and keeps the run's row within one 2 KiB page.
pub const WHOLE_BELOW: usize = 1024;

/// Commits between two whole snapshots of `now`: [`COMPACT_EVERY`], or a quarter of the
/// nodes the run has completed when more. A whole snapshot grows with those nodes (their
/// outputs, their ids in the bookkeeping) and a patch does not, so a long run writing the
/// whole snapshot at a fixed interval would write O(n²) bytes in all; at an interval that
/// grows with it, each node's share is written a few times, and a reader applies patches
/// worth about a quarter of the snapshot at most.
fn compact_every(now: &Snapshot) -> u32 {
    COMPACT_EVERY.max(u32::try_from(now.completed.len() / 4).unwrap_or(u32::MAX))
}

/// A patch as a driver writes it, borrowed from its snapshot ([`Tracker::next`]).
#[derive(Debug, Serialize)]
pub struct Patch<'a> {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    state: Vec<StateSet<&'a Value>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    output: Option<&'a crate::record::Output>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    history: BTreeMap<String, Option<&'a Vec<StepPass>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reuse: Option<&'a BTreeMap<String, Vec<Reused>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    resume: Option<&'a BTreeMap<String, crate::record::Resume>>,
    loops: &'a BTreeMap<String, u32>,
    pending: &'a Vec<NodeId>,
    /// Whole, or what changed since the last write.
    #[serde(skip_serializing_if = "Option::is_none")]
    completed: Option<&'a BTreeSet<NodeId>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    completed_add: Vec<NodeId>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    completed_del: Vec<NodeId>,
    arrivals: &'a BTreeMap<String, BTreeSet<String>>,
    hops: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    visits: Option<&'a BTreeMap<NodeId, u32>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    visits_set: Vec<(NodeId, u32)>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    visits_del: Vec<NodeId>,
    next_seq: u32,
    cost_usd: f64,
    #[serde(skip_serializing_if = "crate::record::Usage::is_zero")]
    usage: crate::record::Usage,
    gates: &'a Vec<PendingGate>,
    pass: u32,
}

/// A value written into the public state: at `key`, or at `key.sub` (the machine and
/// pipeline dialects' `variables.<node>`, so a patch does not carry every node's variable).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StateSet<V> {
    pub key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sub: Option<String>,
    pub value: V,
}

/// A patch as a store reads it back.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct SnapshotPatch {
    #[serde(default)]
    pub state: Vec<StateSet<Value>>,
    #[serde(default)]
    pub output: Option<Value>,
    /// Pipeline step → its whole history now (`null`: none).
    #[serde(default)]
    pub history: BTreeMap<String, Option<Vec<StepPass>>>,
    #[serde(default)]
    pub reuse: Option<BTreeMap<String, Vec<Reused>>>,
    #[serde(default)]
    pub resume: Option<BTreeMap<String, crate::record::Resume>>,
    pub loops: BTreeMap<String, u32>,
    pub pending: Vec<NodeId>,
    /// The completed nodes whole (a driver's first patch, and every patch an earlier weir
    /// wrote), or the changes since the patch or snapshot before.
    #[serde(default)]
    pub completed: Option<BTreeSet<NodeId>>,
    #[serde(default)]
    pub completed_add: Vec<NodeId>,
    #[serde(default)]
    pub completed_del: Vec<NodeId>,
    pub arrivals: BTreeMap<String, BTreeSet<String>>,
    pub hops: u32,
    /// The visit counts whole, or those that changed and those that went.
    #[serde(default)]
    pub visits: Option<BTreeMap<NodeId, u32>>,
    #[serde(default)]
    pub visits_set: Vec<(NodeId, u32)>,
    #[serde(default)]
    pub visits_del: Vec<NodeId>,
    pub next_seq: u32,
    pub cost_usd: f64,
    #[serde(default)]
    pub usage: crate::record::Usage,
    pub gates: Vec<PendingGate>,
    pub pass: u32,
}

impl SnapshotPatch {
    /// Applies the patch to the snapshot written before it (whole, or brought to it by the
    /// earlier patches).
    pub fn apply(self, to: &mut Snapshot) {
        if !self.state.is_empty() {
            let state = Arc::make_mut(&mut to.state);
            for set in self.state {
                set_state(state, set);
            }
        }
        if let Some(o) = self.output {
            to.output = Arc::new(o.into());
        }
        for (id, h) in self.history {
            match h {
                Some(h) => {
                    to.history.insert(id, h);
                }
                None => {
                    to.history.remove(&id);
                }
            }
        }
        if let Some(r) = self.reuse {
            to.reuse = r;
        }
        if let Some(r) = self.resume {
            to.resume = r;
        }
        to.loops = self.loops;
        to.pending = self.pending;
        if let Some(c) = self.completed {
            to.completed = c;
        }
        for id in &self.completed_del {
            to.completed.remove(id);
        }
        to.completed.extend(self.completed_add);
        to.arrivals = self.arrivals;
        to.hops = self.hops;
        if let Some(v) = self.visits {
            to.visits = v;
        }
        for id in &self.visits_del {
            to.visits.remove(id);
        }
        to.visits.extend(self.visits_set);
        to.next_seq = self.next_seq;
        to.cost_usd = self.cost_usd;
        to.usage = self.usage;
        to.gates = self.gates;
        to.pass = self.pass;
    }
}

fn set_state(state: &mut Map<String, Value>, set: StateSet<Value>) {
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

/// What a driver changed since its last write of the snapshot, marked as it changes it: the
/// parts that may be large (public state, the last output, pipeline history, a re-run's
/// recorded outputs) go into the next patch only when marked.
#[derive(Debug, Clone, Default)]
pub struct Tracker {
    /// Public state written: `(key, sub)`.
    state: Vec<(String, Option<String>)>,
    output: bool,
    /// Pipeline steps whose history changed.
    history: Vec<String>,
    reuse: bool,
    /// Agents' loops to go on from changed.
    resume: bool,
    /// Commits since the last whole snapshot.
    since_whole: u32,
    /// A patch was written since the last whole snapshot.
    patched: bool,
    /// The driver knows what the store holds of the completed nodes and visit counts: its
    /// memory, but for the nodes in `nodes`. False until its first write (a patch then
    /// carries both lists whole).
    known: bool,
    /// The nodes whose completion or visit count changed since the driver's last write,
    /// each with what that write left of it ([`completed_was`](Self::completed_was),
    /// [`visits_was`](Self::visits_was)): a patch carries their changes, found without
    /// walking the lists (which grow with the run).
    nodes: Vec<Was>,
    /// Debug builds: both lists as the driver's last patch left them, to check `nodes`
    /// against a walk of the lists (a change the tracker was not told would otherwise
    /// leave the store's snapshot wrong, seen only when another driver takes the run over).
    #[cfg(debug_assertions)]
    shadow: Option<Bookkeeping>,
}

/// A node's completion and visit count as the driver's last write left them: `None` where
/// that one has not changed since.
#[derive(Debug, Clone)]
struct Was {
    id: NodeId,
    completed: Option<bool>,
    visits: Option<Option<u32>>,
}

/// The parts of the scheduler's bookkeeping that grow with a run, as last written.
#[cfg(debug_assertions)]
#[derive(Debug, Clone)]
struct Bookkeeping {
    completed: BTreeSet<NodeId>,
    visits: BTreeMap<NodeId, u32>,
}

#[cfg(debug_assertions)]
impl Bookkeeping {
    fn of(now: &Snapshot) -> Self {
        Self {
            completed: now.completed.clone(),
            visits: now.visits.clone(),
        }
    }
}

impl Tracker {
    /// A driver's tracker when it starts: the run it drives may carry patches of an earlier
    /// driver (one that died after writing them), so its first whole snapshot deletes them
    /// too. The next commit may write a patch.
    pub fn new() -> Self {
        Self {
            patched: true,
            ..Self::default()
        }
    }

    /// A write into the public state at `key` (or `key.sub`).
    pub fn touch(&mut self, key: &str, sub: Option<&str>) {
        if !self
            .state
            .iter()
            .any(|(k, s)| k == key && s.as_deref() == sub)
        {
            self.state.push((key.to_string(), sub.map(str::to_string)));
        }
    }

    /// The snapshot's last output was set.
    pub fn touch_output(&mut self) {
        self.output = true;
    }

    /// A pipeline step's history changed.
    pub fn touch_history(&mut self, node_id: &str) {
        if !self.history.iter().any(|h| h == node_id) {
            self.history.push(node_id.to_string());
        }
    }

    /// A re-run's recorded outputs were used.
    pub fn touch_reuse(&mut self) {
        self.reuse = true;
    }

    /// An agent's loop to go on from was added or taken.
    pub fn touch_resume(&mut self) {
        self.resume = true;
    }

    /// The node `id` was marked completed (`was` false) or no longer (`was` true). The first
    /// change since the driver's last write tells what the store holds of it.
    pub fn completed_was(&mut self, id: &NodeId, was: bool) {
        if let Some(w) = self.was(id) {
            w.completed.get_or_insert(was);
        }
    }

    /// The node's visit count changed; it was `was` (`None`: not visited).
    pub fn visits_was(&mut self, id: &NodeId, was: Option<u32>) {
        if let Some(w) = self.was(id) {
            w.visits.get_or_insert(was);
        }
    }

    /// The node `id` is about to be marked completed or not, or its visit count to change,
    /// in `now` (not changed yet): both as they are now, for a caller that does not know
    /// them otherwise.
    pub fn touch_node(&mut self, id: &NodeId, now: &Snapshot) {
        self.completed_was(id, now.completed.contains(id));
        self.visits_was(id, now.visits.get(id).copied());
    }

    /// The entry of a node changed since the driver's last write; none while the driver
    /// does not know what the store holds (its next patch carries both lists whole).
    fn was(&mut self, id: &NodeId) -> Option<&mut Was> {
        if !self.known {
            return None;
        }
        let at = match self.nodes.iter().position(|w| w.id == *id) {
            Some(at) => at,
            None => {
                self.nodes.push(Was {
                    id: id.clone(),
                    completed: None,
                    visits: None,
                });
                self.nodes.len() - 1
            }
        };
        self.nodes.get_mut(at)
    }

    /// About how many bytes of `now`'s JSON a patch would leave out (counted up to
    /// `budget`, then abandoned): the state keys (or variables) not written since the last
    /// write, an output, history or recorded outputs not changed, and the completed nodes
    /// and visit counts (a patch carries only their changes).
    fn left_out(&self, now: &Snapshot, budget: usize) -> usize {
        let mut n = 0;
        for (key, value) in now.state.iter() {
            if !self.state.iter().any(|(k, _)| k == key) {
                n += key.len() + 4 + approx_size(value, budget.saturating_sub(n));
            } else if !self.state.iter().any(|(k, s)| k == key && s.is_none()) {
                // Only some of its variables were written: the others are left out.
                if let Value::Object(m) = value {
                    for (sub, v) in m {
                        if !self
                            .state
                            .iter()
                            .any(|(k, s)| k == key && s.as_deref() == Some(sub))
                        {
                            n += sub.len() + 4 + approx_size(v, budget.saturating_sub(n));
                        }
                        if n >= budget {
                            return n;
                        }
                    }
                }
            }
            if n >= budget {
                return n;
            }
        }
        // An output or recorded outputs left as they were, or a step's history: sized as
        // large (they are seldom left, and an output is typed until read as JSON).
        if (!self.output && !now.output.is_null())
            || (!self.reuse && !now.reuse.is_empty())
            || (!self.resume && !now.resume.is_empty())
            || now
                .history
                .keys()
                .any(|id| !self.history.iter().any(|h| h == id))
        {
            return budget;
        }
        // Counted until the budget is reached: a few hundred entries at most, however long
        // the run.
        let ids = now.completed.iter().map(|id| id.len() + 3);
        for size in ids.chain(now.visits.keys().map(|id| id.len() + 6)) {
            n += size;
            if n >= budget {
                break;
            }
        }
        n
    }

    /// The driver writes the whole snapshot: the marks start again, and the store holds
    /// what the driver holds (the next patch carries only the nodes changed after this).
    /// True when it covers patches written since the last whole one, or may (the first
    /// whole snapshot of a drive): the store deletes them.
    pub fn whole(&mut self) -> bool {
        let mut nodes = std::mem::take(&mut self.nodes);
        nodes.clear();
        let patched = std::mem::take(self).patched;
        // The store holds the driver's memory now. The list keeps its room.
        self.known = true;
        self.nodes = nodes;
        patched
    }

    /// The next commit's write: a patch from the stored snapshot to `now`, or `None` when
    /// this commit writes the whole snapshot (every [`compact_every`] commits, or when a
    /// patch would leave nothing out; then call [`whole`](Self::whole)).
    #[expect(
        clippy::too_many_lines,
        reason = "one pass over the snapshot's fields in their order, each compared with the stored one; the fields are the list a reader checks against Snapshot"
    )]
    pub fn next<'a>(&mut self, now: &'a Snapshot) -> Option<Patch<'a>> {
        self.since_whole += 1;
        if self.since_whole >= compact_every(now) || self.left_out(now, WHOLE_BELOW) < WHOLE_BELOW {
            return None;
        }
        self.patched = true;
        let mut state = Vec::with_capacity(self.state.len());
        for (key, sub) in self.state.drain(..) {
            let value = match (&sub, now.state.get(&key)) {
                (None, Some(v)) => v,
                (Some(s), Some(Value::Object(m))) => match m.get(s) {
                    Some(v) => v,
                    None => continue,
                },
                _ => continue,
            };
            state.push(StateSet { key, sub, value });
        }
        let history = self
            .history
            .drain(..)
            .map(|id| {
                let h = now.history.get(&id);
                (id, h)
            })
            .collect();
        let mut patch = Patch {
            state,
            output: std::mem::take(&mut self.output).then_some(&*now.output),
            history,
            reuse: std::mem::take(&mut self.reuse).then_some(&now.reuse),
            resume: std::mem::take(&mut self.resume).then_some(&now.resume),
            loops: &now.loops,
            pending: &now.pending,
            completed: None,
            completed_add: Vec::new(),
            completed_del: Vec::new(),
            arrivals: &now.arrivals,
            hops: now.hops,
            visits: None,
            visits_set: Vec::new(),
            visits_del: Vec::new(),
            next_seq: now.next_seq,
            cost_usd: now.cost_usd,
            usage: now.usage,
            gates: &now.gates,
            pass: now.pass,
        };
        if self.known {
            self.nodes.sort_unstable_by(|a, b| a.id.cmp(&b.id));
            for was in self.nodes.drain(..) {
                if let Some(before) = was.completed {
                    match (before, now.completed.contains(&was.id)) {
                        (false, true) => patch.completed_add.push(was.id.clone()),
                        (true, false) => patch.completed_del.push(was.id.clone()),
                        _ => {}
                    }
                }
                if let Some(before) = was.visits {
                    let count = now.visits.get(&was.id).copied();
                    if count != before {
                        match count {
                            Some(n) => patch.visits_set.push((was.id, n)),
                            None => patch.visits_del.push(was.id),
                        }
                    }
                }
            }
            #[cfg(debug_assertions)]
            if let Some(shadow) = &mut self.shadow {
                // The walk brings the shadow to `now` as well.
                let walked = (
                    set_changes(&mut shadow.completed, &now.completed),
                    count_changes(&mut shadow.visits, &now.visits),
                );
                assert_eq!(
                    walked,
                    (
                        (patch.completed_add.clone(), patch.completed_del.clone()),
                        (patch.visits_set.clone(), patch.visits_del.clone())
                    ),
                    "a node's completion or visit count changed without the Tracker being told"
                );
            } else {
                // The first patch after a whole snapshot: checked from the next one on.
                self.shadow = Some(Bookkeeping::of(now));
            }
        } else {
            patch.completed = Some(&now.completed);
            patch.visits = Some(&now.visits);
            self.nodes.clear();
            self.known = true;
            #[cfg(debug_assertions)]
            {
                self.shadow = Some(Bookkeeping::of(now));
            }
        }
        Some(patch)
    }
}

/// What `now` adds to `was` and what it drops from it, both sorted; `was` becomes `now`.
#[cfg(debug_assertions)]
fn set_changes(was: &mut BTreeSet<NodeId>, now: &BTreeSet<NodeId>) -> (Vec<NodeId>, Vec<NodeId>) {
    let (add, del) = changes(was.iter().map(|id| (id, ())), now.iter().map(|id| (id, ())));
    for id in &del {
        was.remove(id);
    }
    let add: Vec<NodeId> = add.into_iter().map(|(id, ())| id).collect();
    was.extend(add.iter().cloned());
    (add, del)
}

/// The counts `now` sets (new or changed) and the nodes it drops, against `was`, which
/// becomes `now`.
#[cfg(debug_assertions)]
fn count_changes(
    was: &mut BTreeMap<NodeId, u32>,
    now: &BTreeMap<NodeId, u32>,
) -> (Vec<(NodeId, u32)>, Vec<NodeId>) {
    let (set, del) = changes(
        was.iter().map(|(id, n)| (id, *n)),
        now.iter().map(|(id, n)| (id, *n)),
    );
    for id in &del {
        was.remove(id);
    }
    was.extend(set.iter().cloned());
    (set, del)
}

/// One walk of two sorted sequences of entries: those of `now` that are new or whose value
/// changed, and the ids of `was` that `now` no longer has. Node ids are shared, so equal ones
/// compare by pointer first.
#[cfg(debug_assertions)]
fn changes<'a, V: PartialEq>(
    was: impl Iterator<Item = (&'a NodeId, V)>,
    now: impl Iterator<Item = (&'a NodeId, V)>,
) -> (Vec<(NodeId, V)>, Vec<NodeId>) {
    let (mut set, mut del) = (Vec::new(), Vec::new());
    let (mut a, mut b) = (was.peekable(), now.peekable());
    loop {
        match (a.peek(), b.peek()) {
            (None, None) => break,
            (Some((x, _)), Some((y, _))) if Arc::ptr_eq(x, y) || x == y => {
                if let (Some((_, m)), Some((y, n))) = (a.next(), b.next())
                    && m != n
                {
                    set.push((y.clone(), n));
                }
            }
            (Some((x, _)), Some((y, _))) if x < y => del.extend(a.next().map(|(x, _)| x.clone())),
            (_, Some(_)) => set.extend(b.next().map(|(y, n)| (y.clone(), n))),
            (Some(_), None) => del.extend(a.next().map(|(x, _)| x.clone())),
        }
    }
    (set, del)
}

/// About the size of `v`'s JSON text (strings unescaped, numbers as 8 bytes), counted up
/// to `budget` and abandoned there.
fn approx_size(v: &Value, budget: usize) -> usize {
    match v {
        Value::Null | Value::Bool(_) => 5,
        Value::Number(_) => 8,
        Value::String(s) => s.len() + 2,
        Value::Array(a) => {
            let mut n = 2;
            for x in a {
                n += 1 + approx_size(x, budget.saturating_sub(n));
                if n >= budget {
                    break;
                }
            }
            n
        }
        Value::Object(m) => {
            let mut n = 2;
            for (k, x) in m {
                n += k.len() + 4 + approx_size(x, budget.saturating_sub(n));
                if n >= budget {
                    break;
                }
            }
            n
        }
    }
}

#[cfg(test)]
mod tests;
