//! Benchmarks of npu-rs, printed as one table by `cargo bench -p npu-benches`.
//!
//! Each area measures in its own module and adds rows to a [`Table`]; `benches/npu.rs` runs
//! them all, or those a [`Filter`] names, and records the machine's load around them.

pub mod alternatives;
mod filter;
pub mod host;
pub mod pipeline;
mod placement;
pub mod pool;
pub mod sim;
pub mod stats;
pub mod stream;
mod table;

pub use filter::Filter;
pub use table::{Row, Table};
