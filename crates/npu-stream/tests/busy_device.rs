//! A device whose other streams keep completing work still has its stopped streams' work
//! failed: the callback worker checks its streams' health on time, not only in the quiet
//! moments a busy device never has.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use common::{HANG, STRATEGIES, stream};
use npu_core::Device;
use npu_mem::DeviceBuffer;
use npu_stream::Notify;

#[test]
fn a_stopped_streams_work_fails_while_another_stream_keeps_the_device_busy() {
    let ctx = Device::open(0).unwrap().primary_context().clone();
    for strategy in STRATEGIES {
        let (busy, stopped) = (stream(&ctx, strategy), stream(&ctx, strategy));
        let never = Notify::new(&ctx).unwrap();
        let blocked = stopped.wait_notify(&never);
        let behind = stopped.memset(DeviceBuffer::<u8>::new(&ctx, 64).unwrap(), 1);
        stopped.stop().unwrap();
        let resolved = Arc::new(AtomicBool::new(false));
        let tokio = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_time()
            .build()
            .unwrap();
        let outcome = tokio.block_on(async {
            // Completions on the busy stream arrive back to back until the stopped stream's
            // work has failed; without the timely check they keep its worker from ever
            // looking, and the bound below turns that into a failure.
            let keep_busy = {
                let (busy, ctx, resolved) = (busy.clone(), ctx.clone(), resolved.clone());
                tokio::spawn(async move {
                    let mut buffer = DeviceBuffer::<u8>::new(&ctx, 64).unwrap();
                    while !resolved.load(Ordering::Acquire) {
                        buffer = busy.memset(buffer, 2).await.unwrap();
                    }
                })
            };
            let outcome = tokio::time::timeout(HANG, async {
                let outcome = (blocked.await, behind.await);
                resolved.store(true, Ordering::Release);
                outcome
            })
            .await;
            resolved.store(true, Ordering::Release);
            keep_busy.await.unwrap();
            outcome
        });
        let (blocked, behind) = outcome.unwrap_or_else(|_| panic!("{strategy:?}: hung"));
        assert!(blocked.is_err(), "{strategy:?}: {blocked:?}");
        assert!(behind.is_err(), "{strategy:?}: {behind:?}");
    }
}
