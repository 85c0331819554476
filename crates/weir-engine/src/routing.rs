//! Routing: which nodes become ready when a node finishes (DESIGN §2). An edge that fires
//! makes its target pending unless it already completed (a loop re-arms its body) or is
//! pending already; in the machine and pipeline layouts every transition runs its target
//! again. A merge becomes ready once every incoming edge has fired or can no longer fire:
//! an edge can still fire when its source is pending or running, or reachable from one that
//! is.

use weir_core::Workflow;
use weir_core::ir::{NodeKind, StateLayout};
use weir_core::record::Snapshot;

use crate::nodes::Route;
use crate::scheduler::InFlights;

/// Marks a human gate approved and fires its outgoing edges (a decision, with no driver).
pub fn complete_gate(wf: &Workflow, snapshot: &mut Snapshot, gate_id: &str) {
    let Some(at) = wf.position(gate_id) else {
        snapshot.completed.insert(gate_id.into());
        return;
    };
    snapshot.completed.insert(wf.node_id(at).clone());
    fire(wf, snapshot, at, &Route::All);
    ready_merges(wf, snapshot, &InFlights::default());
}

/// Fires the edges `route` takes out of `node`: their targets become pending, or, for a
/// merge, the edge is recorded as arrived. The caller then runs [`ready_merges`] (once for
/// several nodes finished together).
pub(crate) fn fire(wf: &Workflow, snapshot: &mut Snapshot, node: usize, route: &Route) {
    // In the state-machine layouts every transition runs its target again.
    let revisit = wf.layout == StateLayout::Variables;
    for (e, at, target) in wf.successors(node) {
        let fires = match route {
            Route::All => true,
            Route::Key(k) => e.matches(k),
            Route::Park { .. } | Route::End(_) => false,
        };
        if !fires {
            continue;
        }
        if matches!(target.kind, NodeKind::Merge) {
            // An entry by its id, without copying the id when the merge has one already.
            match snapshot.arrivals.get_mut(&target.id) {
                Some(a) => {
                    if !a.contains(&e.id) {
                        a.insert(e.id.clone());
                    }
                }
                None => {
                    snapshot
                        .arrivals
                        .insert(target.id.clone(), [e.id.clone()].into());
                }
            }
        } else if (revisit || !snapshot.completed.contains(target.id.as_str()))
            && !snapshot.pending.iter().any(|p| **p == *target.id)
        {
            snapshot.pending.push(wf.node_id(at).clone());
        }
    }
}

/// Makes ready every merge whose un-arrived incoming edges can no longer fire.
pub(crate) fn ready_merges(wf: &Workflow, snapshot: &mut Snapshot, in_flight: &InFlights) {
    if snapshot.arrivals.is_empty() {
        return;
    }
    loop {
        // Decided against the state at the start of the pass, then applied: a merge made
        // ready in this pass is still among the arrivals, so it counts as live for the
        // others (as a pending one would), and the next pass sees it pending.
        let mut ready: Vec<String> = Vec::new();
        for (m, arrived) in &snapshot.arrivals {
            if arrived.is_empty()
                || snapshot.pending.iter().any(|p| **p == **m)
                || snapshot.completed.contains(m.as_str())
            {
                continue;
            }
            let mut open = wf
                .incoming(m)
                .filter(|e| !arrived.contains(&e.id))
                .peekable();
            // Every branch arrived (a fan-out whose branches all ended): nothing can block
            // the merge, and the graph need not be walked to tell.
            if open.peek().is_none() {
                ready.push(m.clone());
                continue;
            }
            // The common case of a fan-out: a branch still running or about to run blocks
            // the merge without a walk of the graph.
            let direct = open.any(|e| {
                e.source != *m
                    && (wf
                        .position(&e.source)
                        .is_some_and(|i| in_flight.contains(i))
                        || snapshot.pending.iter().any(|p| **p == *e.source))
            });
            let blocked = direct || {
                let live = live_from_frontier(wf, snapshot, in_flight, m);
                wf.incoming(m)
                    .filter(|e| !arrived.contains(&e.id))
                    .any(|e| wf.position(&e.source).is_some_and(|i| live[i]))
            };
            if !blocked {
                ready.push(m.clone());
            }
        }
        let changed = !ready.is_empty();
        for m in ready {
            snapshot.arrivals.remove(&m);
            let id = wf
                .position(&m)
                .map_or_else(|| m.as_str().into(), |at| wf.node_id(at).clone());
            snapshot.pending.push(id);
        }
        if !changed {
            // Merges that wait on each other (possible only through cycles) must not
            // stall the run: once nothing else can make progress, release the first.
            let stalled =
                snapshot.pending.is_empty() && in_flight.is_empty() && snapshot.gates.is_empty();
            if !stalled {
                break;
            }
            let first = wf.nodes.iter().find(|n| {
                snapshot.arrivals.get(&n.id).is_some_and(|a| !a.is_empty())
                    && !snapshot.completed.contains(n.id.as_str())
            });
            match first {
                Some(m) => {
                    snapshot.arrivals.remove(&m.id);
                    snapshot.pending.push(m.id.as_str().into());
                }
                None => break,
            }
        }
    }
}

/// Nodes that may still run: pending ones, in-flight ones, parked gates, other merges
/// that some branch has reached (they will fire), and everything reachable from them
/// without passing through `merge`; by position in the workflow's nodes.
fn live_from_frontier(
    wf: &Workflow,
    snapshot: &Snapshot,
    in_flight: &InFlights,
    merge: &str,
) -> Vec<bool> {
    let mut live = vec![false; wf.nodes.len()];
    let merge_at = wf.position(merge);
    let frontier = snapshot
        .pending
        .iter()
        .map(|p| &**p)
        .chain(in_flight.nodes().map(|i| wf.nodes[i].id.as_str()))
        .chain(snapshot.gates.iter().map(|g| g.node_id.as_str()))
        .chain(
            snapshot
                .arrivals
                .iter()
                .filter(|(m, a)| *m != merge && !a.is_empty())
                .map(|(m, _)| m.as_str()),
        );
    let mut stack: Vec<usize> = frontier.filter_map(|id| wf.position(id)).collect();
    while let Some(i) = stack.pop() {
        if Some(i) == merge_at || live[i] {
            continue;
        }
        live[i] = true;
        stack.extend(
            wf.outgoing(&wf.nodes[i].id)
                .filter_map(|e| wf.position(&e.target)),
        );
    }
    live
}
