//! Contexts follow the task, not the thread: tasks using two devices interleave across the
//! workers of a multi-threaded Tokio runtime without ever hitting 107002 (no context) or
//! 107003 (wrong context).

mod common;

use npu_core::{Context, Runtime, acl_call, ffi};

/// Allocates on the task's context, checks where the memory landed and frees it.
fn touch(context: &Context) -> npu_core::Result<()> {
    context.bind()?;
    let runtime = context.runtime();
    let mut ptr = std::ptr::null_mut();
    // SAFETY: `ptr` is a valid out-pointer and `context` is bound on this thread.
    unsafe { acl_call!(runtime, aclrtMalloc(&mut ptr, 256, 0)) }?;
    let mut attributes = ffi::aclrtPtrAttributes::default();
    // SAFETY: `ptr` is a live allocation and `attributes` a valid out-pointer.
    let located = unsafe {
        npu_core::acl_call_opt!(runtime, aclrtPointerGetAttributes(ptr, &mut attributes))
    };
    // SAFETY: `ptr` came from aclrtMalloc above and is freed once.
    unsafe { acl_call!(runtime, aclrtFree(ptr)) }?;
    located?;
    assert_eq!(
        attributes.location.id,
        context.device_id(),
        "allocated on the task's device"
    );
    Ok(())
}

async fn exercise(runtime: Runtime) {
    let devices = [runtime.device(0).unwrap(), runtime.device(1).unwrap()];
    let explicit = devices[1].create_context().unwrap();
    let contexts = [devices[0].primary_context().clone(), explicit];
    let mut tasks = Vec::new();
    for task in 0..32usize {
        let contexts = contexts.clone();
        tasks.push(tokio::spawn(async move {
            let mut threads = std::collections::HashSet::new();
            for round in 0..50usize {
                threads.insert(std::thread::current().id());
                touch(&contexts[(task + round) % 2]).expect("no context errors after migrating");
                tokio::task::yield_now().await;
            }
            threads.len()
        }));
    }
    let mut migrated = 0;
    for task in tasks {
        if task.await.unwrap() > 1 {
            migrated += 1;
        }
    }
    // Not asserted: whether Tokio moved a given task is up to its scheduler.
    println!("{migrated} of 32 tasks ran on more than one worker thread");
}

#[test]
fn tasks_using_two_devices_interleave_across_workers() {
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .build()
        .unwrap();
    for (_, runtime) in common::runtimes() {
        tokio.block_on(exercise(runtime));
    }
}
