//! Pieces of SQL the SQLite store's statements share: the walk over a run's chain of step
//! rows, the newest row of each step, a run's batches of events, its patches.

/// The step rows of one run, for the run whose id is the statement's first parameter: the
/// table `chain` (`r`: a row of `steps`) of a `WITH RECURSIVE` clause, walked from the run's
/// newest step row back through each row's `prev` (migration 18). A step written more than
/// once has a row for each write; [`newest_steps`] takes the last.
macro_rules! chain_of {
    () => {
        "chain(r) AS (
             SELECT last_row FROM runs WHERE runs.id = ?1 AND last_row IS NOT NULL
             UNION ALL
             SELECT steps.prev FROM steps, chain
             WHERE steps.row = chain.r AND steps.prev IS NOT NULL)"
    };
}

/// The newest row of each of a run's steps (the table `newest`, `r`: a row of `steps`),
/// after [`chain_of`] in the same `WITH RECURSIVE` clause.
macro_rules! newest_steps {
    () => {
        "newest(r) AS (SELECT MAX(steps.row) FROM steps, chain
                       WHERE steps.row = chain.r GROUP BY steps.id)"
    };
}

/// A run's batches of events (`seq`, `bodies`: one write's events, numbered from `seq`), for
/// the run whose id is the statement's first parameter: the rows of `run_events` and the
/// batches step rows hold (migration 17), as the table `batches` of a `WITH` clause. For a
/// whole record, which reads every step row anyway (`events_after` walks back only over the
/// newest).
macro_rules! event_batches {
    () => {
        concat!(
            "WITH RECURSIVE run(key) AS (SELECT key FROM runs WHERE id = ?1), ",
            $crate::sqlite::sql::chain_of!(),
            ", batches(seq, bodies) AS (
                 SELECT seq, bodies FROM run_events, run WHERE run_events.run_key = run.key
                 UNION ALL
                 SELECT event_seq, events FROM steps, chain
                 WHERE steps.row = chain.r AND events IS NOT NULL)"
        )
    };
}

/// The patches written after a run's whole snapshot, as one JSON array in commit order: a
/// column of the statement that reads the snapshot, so both come from one read.
macro_rules! patches {
    () => {
        "(SELECT json_group_array(json(p.patch) ORDER BY p.seq) FROM run_patches p
          WHERE p.run_key = runs.key) AS patches"
    };
}

pub(super) use {chain_of, event_batches, newest_steps, patches};
