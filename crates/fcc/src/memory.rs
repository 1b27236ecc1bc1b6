//! The big arrays of every algorithm (states, copies, bit arrays, records)
//! live in `epochdb-memory` regions, mapped straight from the kernel so that
//! they can ask for transparent huge pages (§5.6: "Using large pages
//! resulted in a considerable performance improvement"), and so that an
//! array's pages go back to the kernel when it is dropped (back-to-back
//! benchmark runs do not inherit each other's page sizes through the
//! allocator).

pub use epochdb_memory::{anon_huge_page_bytes, evict_page_cache, HugePages};
pub(crate) use epochdb_memory::{Region, Zeroable};
