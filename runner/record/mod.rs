//! Run records that outlive any session (seed 000 "runs/"): the manifest and lineage, written
//! atomically under file locks.
