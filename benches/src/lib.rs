//! Benchmarks of npu-rs, printed as one table by `cargo bench -p npu-benches`.
//!
//! Each area measures in its own module and adds rows to a [`Table`]; `benches/npu.rs` runs
//! them all.

pub mod alternatives;
pub mod pipeline;
pub mod pool;
pub mod sim;
pub mod stats;
pub mod stream;
mod table;

pub use table::{Row, Table};
