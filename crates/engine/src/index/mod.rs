//! The ordered concurrent index behind every table: a B+-tree with
//! optimistic lock coupling over byte-string keys (see `tree`), whose
//! nodes compare 8-byte key heads as integers (see `key`); and beside it,
//! optionally, a hash index for point reads of short keys (see `point`).

mod key;
mod point;
mod sync;
mod tree;

pub(crate) use point::PointIndex;
pub(crate) use tree::{free_leaf, InsertedInto, LeafVersion, Tree, PREFETCH_WALKS};

#[cfg(all(test, engine_shuttle))]
mod shuttle_check;
#[cfg(test)]
mod tests;
#[cfg(all(test, engine_shuttle))]
mod tree_schedule_tests;
