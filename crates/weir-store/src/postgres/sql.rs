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
