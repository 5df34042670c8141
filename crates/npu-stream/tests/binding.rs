//! Calls on a context's objects that the reference states no context for (event times, the
//! device pool's trims and counters) still make the object's context current, as frees do:
//! whatever context the calling thread had current, the runtime sees the object's.

mod common;

use common::{in_process, run, stream};
use npu_core::{Context, acl_call, ffi};
use npu_stream::{DevicePool, DevicePoolBackend, Event, Strategy};

/// The context current on the calling thread.
fn current(context: &Context) -> ffi::aclrtContext {
    let mut raw = std::ptr::null_mut();
    // SAFETY: `raw` is a valid out-pointer.
    unsafe { acl_call!(context.runtime(), aclrtGetCurrentContext(&mut raw)) }.unwrap();
    raw
}

#[test]
fn event_times_and_pool_calls_bind_their_context_on_any_thread() {
    let runtime = in_process();
    let other = runtime.device(0).unwrap().primary_context().clone();
    let ctx = runtime.device(1).unwrap().create_context().unwrap();
    let s = stream(&ctx, Strategy::EventPoll);
    let (start, end) = (Event::new(&ctx).unwrap(), Event::new(&ctx).unwrap());
    start.record(&s).unwrap();
    end.record(&s).unwrap();
    run(end.wait()).unwrap();
    let pool = DevicePool::builder(&ctx)
        .backend(DevicePoolBackend::RuntimePool)
        .build()
        .unwrap();
    drop(run(pool.alloc::<u8>(&s, 4096)).unwrap());
    run(s.synchronize()).unwrap();
    std::thread::spawn(move || {
        let calls: [(&str, &dyn Fn()); 4] = [
            ("Event::elapsed", &|| {
                Event::elapsed(&start, &end).unwrap();
            }),
            ("Event::timestamp_us", &|| {
                end.timestamp_us().unwrap();
            }),
            ("DevicePool::trim_to", &|| {
                pool.trim_to(0).unwrap();
            }),
            ("DevicePool::stats", &|| {
                assert!(
                    pool.stats().runtime.is_some(),
                    "the runtime pool's counters"
                )
            }),
        ];
        for (what, call) in calls {
            other.bind().unwrap();
            assert_eq!(current(&other), other.as_raw(), "{what}: set up");
            call();
            assert_eq!(
                current(&ctx),
                ctx.as_raw(),
                "{what} made its context current"
            );
        }
    })
    .join()
    .unwrap();
}
