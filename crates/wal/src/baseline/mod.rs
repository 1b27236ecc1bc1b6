//! The baselines of eleda's evaluation, behind the same pipeline so they
//! run side by side with GRASSHOPPER: the "vanilla" centralized log (one
//! mutex around reserve + copy, §2.2.1) lives in `pipeline.rs` as a mutex
//! in the tracker; the bitmap scan of §6.5.1 / Figure 21 is [`bitmap`].

pub(crate) mod bitmap;
