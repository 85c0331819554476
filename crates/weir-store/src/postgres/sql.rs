//! Pieces of SQL the Postgres store's statements share.

/// The patches written after a run's whole snapshot (`r`), as one JSON array in commit
/// order: a column of the statement that reads the snapshot, so both come from one read.
macro_rules! patches {
    () => {
        "(SELECT COALESCE(json_agg(p.patch::json ORDER BY p.seq), '[]')::text
          FROM run_patches p WHERE p.run_id = r.id) AS patches"
    };
}

pub(super) use patches;

/// The time now on the database's clock, in unix milliseconds. Leases are set and compared
/// on this one clock, so a worker whose own clock jumps (or drifts) can neither take a run
/// whose lease is alive nor keep one past its expiry in the others' eyes.
macro_rules! db_now {
    () => {
        "(extract(epoch from clock_timestamp()) * 1000)::int8"
    };
}

pub(super) use db_now;
