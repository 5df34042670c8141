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
mod app_log;
mod atomic;
mod binary;
mod callback;
mod cann_attr;
mod capture;
mod check;
mod cmo;
mod cnt_notify;
mod cond_task;
mod context;
mod control;
mod copy;
#[cfg(test)]
pub(crate) use copy::run_now;
mod copy_batch;
mod copy_indirect;
mod data_buffer;
mod device;
mod device_id;
mod device_limit;
mod device_query;
mod dump;
mod event;
mod event_wait;
mod exception;
mod group;
mod host;
mod host_func;
mod init;
mod ipc;
mod ipc_event;
mod ipc_notify;
mod kernel;
mod kernel_args;
mod label;
mod managed;
mod managed_attr;
mod mbuf;
mod mem_query;
mod memory;
mod model_build;
mod model_ri;
mod model_task;
mod model_task_params;
mod notify;
mod numeric;
mod op_timeout;
mod overflow;
mod platform;
mod pool;
mod prof_trace;
mod random;
mod recovery;
mod reduce;
mod res_limit;
mod shareable;
mod snapshot;
mod stream;
mod stream_config;
mod stream_control;
mod symbol;
mod sys_param;
mod task_group;
mod task_info;
mod task_schedule;
mod task_update;
mod value;
mod version;
mod vmm;
mod workspace;

pub use allocator::*;
pub use atomic::*;
pub use binary::*;
pub use callback::*;
pub use cann_attr::*;
pub use capture::*;
pub use cmo::*;
pub use cnt_notify::*;
pub use cond_task::*;
pub use context::*;
pub use control::*;
pub use copy::*;
pub use copy_batch::*;
pub use copy_indirect::*;
pub use data_buffer::*;
pub use device::*;
pub use device_id::*;
pub use device_limit::*;
pub use device_query::*;
pub use dump::*;
pub use event::*;
pub use event_wait::*;
pub use exception::*;
pub use group::*;
pub use host::*;
pub use host_func::*;
pub use init::*;
pub use ipc::*;
pub use ipc_event::*;
pub use ipc_notify::*;
pub use kernel::*;
pub use kernel_args::*;
pub use label::*;
pub use managed::*;
pub use managed_attr::*;
pub use mbuf::*;
pub use mem_query::*;
pub use memory::*;
pub use model_build::*;
pub use model_ri::*;
pub use model_task::*;
pub use model_task_params::*;
pub use notify::*;
pub use numeric::*;
pub use op_timeout::*;
pub use overflow::*;
pub use platform::*;
pub use pool::*;
pub use prof_trace::*;
pub use random::*;
pub use recovery::*;
pub use reduce::*;
pub use res_limit::*;
pub use shareable::*;
pub use snapshot::*;
pub use stream::*;
pub use stream_config::*;
pub use stream_control::*;
pub use symbol::*;
pub use sys_param::*;
pub use task_group::*;
pub use task_info::*;
pub use task_schedule::*;
pub use task_update::*;
pub use value::*;
pub use version::*;
pub use vmm::*;
pub use workspace::*;

pub use npu_sys::{aclError, aclrtContext, aclrtEvent, aclrtStream};
