//! The exported AscendCL functions, with CANN's names and the exact signatures of npu-rs's
//! header (`include/acl/*.h`).
//!
//! They are `#[unsafe(no_mangle)] extern "C"`, so `libascendcl.so` exports them to C, and they
//! can be called from Rust like any unsafe function. Every function validates its arguments in
//! CANN's order, never dereferences a handle (handles are checked tokens), never panics across
//! the boundary, and on failure records the thread's last error and a message naming itself
//! and the problem (aclGetRecentErrMsg).
//!
//! The `npusim*` functions ([`npusimLoseDevice`], ...) are the simulator's own controls, also
//! declared in `include/npusim/control.h`.

// Parameter and struct field names are the C header's, so that the Rust signatures read like
// the documentation.
#![allow(non_snake_case, non_camel_case_types)]

mod allocator;
mod callback;
mod check;
mod context;
mod control;
mod copy;
mod copy_batch;
mod device;
mod event;
mod host;
mod init;
mod kernel;
mod managed;
mod mem_query;
mod memory;
mod pool;
mod stream;
mod vmm;

pub use allocator::*;
pub use callback::*;
pub use context::*;
pub use control::*;
pub use copy::*;
pub use copy_batch::*;
pub use device::*;
pub use event::*;
pub use host::*;
pub use init::*;
pub use kernel::*;
pub use managed::*;
pub use mem_query::*;
pub use memory::*;
pub use pool::*;
pub use stream::*;
pub use vmm::*;

pub use npu_sys::{aclError, aclrtContext, aclrtEvent, aclrtStream};
