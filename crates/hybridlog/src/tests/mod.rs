//! Tests that need the crate's internals (the index's hash and tags).

mod new_key_shift;
mod older_format;
mod rest_settled;
