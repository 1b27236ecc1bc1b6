//! The ordered concurrent index behind every table: a B+-tree with
//! optimistic lock coupling over byte-string keys (see `tree`), whose
//! nodes compare 8-byte key heads as integers (see `key`).

mod key;
mod tree;

pub(crate) use tree::{free_leaf, InsertedInto, LeafVersion, Tree};

#[cfg(test)]
mod tests;
