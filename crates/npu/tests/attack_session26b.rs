//! Attacks of the twenty-sixth session's second helper, through the `npu` facade, on memory:
//! both device-pool backends when the device runs out of memory, a runtime of its own used
//! through every memory type and then dropped, and the other angles listed with each test.
//!
//! Each test names the promise it attacks. The simulator's hold gate is process-wide, so every
//! test takes the file's device lock; every wait is bounded (`run`, `until_released`,
//! `watchdog`), so a hang fails its test. The simulator of this process has 256 MiB per device
//! (installed by the first test to take the lock), so that a pool can fill a device.

mod common;

use std::pin::pin;
use std::sync::Once;
use std::task::Poll;

use common::*;
use npu::memory::{
    DevicePool, DevicePoolBackend, HostRegistration, PageAlignedBuffer, RegisterFlags,
};
use npu::prelude::*;
use npu::sim;
use npu::stream::ValueWord;

/// The memory of each simulated device in this process.
const DEVICE_MEMORY: u64 = 256 << 20;

/// [`exclusive`], with the simulator configured for this file first.
fn devices() -> (std::sync::MutexGuard<'static, ()>, Context, Context) {
    static CONFIG: Once = Once::new();
    CONFIG.call_once(|| {
        sim::SimConfig::default()
            .memory_per_device(DEVICE_MEMORY)
            .install()
            .unwrap()
    });
    exclusive(None)
}

/// "When the device is out of memory, the pool frees its cached blocks and tries once more"
/// (`DevicePool::alloc`), on both backends, while the device is busy (held): the pool's cache
/// holds idle blocks of one size class filling most of the device, and a request of another
/// class only fits once they are freed. The caching backend frees them with `aclrtFree` at
/// once; the runtime pool must also get the memory of the blocks it frees back before it
/// tries again, not fail with the device's out-of-memory error while its own idle blocks hold
/// the memory. Nothing leaks afterwards, and the pool serves the request's class again.
#[test]
fn a_pool_out_of_device_memory_frees_its_idle_blocks_and_serves_the_request() {
    let (_guard, ctx, _d1) = devices();
    let baseline = live_memory(&ctx);
    for backend in [DevicePoolBackend::Caching, DevicePoolBackend::RuntimePool] {
        for strategy in STRATEGIES {
            let what = format!("{backend:?}, {strategy:?}");
            let s = stream(&ctx, strategy);
            let pool = DevicePool::builder(&ctx).backend(backend).build().unwrap();
            // Blocks of 8 MiB until the device has no room for another, all cached once
            // dropped.
            let mut blocks = Vec::new();
            let full = loop {
                match run(pool.alloc::<u8>(&s, 8 << 20)) {
                    Ok(block) => blocks.push(block),
                    Err(err) => break err,
                }
            };
            assert!(full.is_out_of_memory(), "{what}: {full}");
            assert!(blocks.len() >= 10, "{what}: {} blocks", blocks.len());
            let cached = blocks.len() << 23;
            drop(blocks);
            assert_eq!(pool.stats().cache.cached, cached, "{what}");
            // 48 MiB only fits once the cache is given back.
            let hold = sim::hold(&ctx.device()).unwrap();
            let (block, busy) = {
                let mut request = pin!(pool.alloc::<u8>(&s, 48 << 20));
                let first = polled_once(request.as_mut());
                let busy = sim::device_stats(&ctx.device()).unwrap();
                hold.release().unwrap();
                match first {
                    Poll::Ready(done) => (done, busy),
                    Poll::Pending => (run(request), busy),
                }
            };
            let block = block.unwrap_or_else(|err| {
                panic!(
                    "{what}: out of memory although the pool's idle blocks hold it: {err} \
                     (device while held: {busy:?})"
                )
            });
            assert_eq!(block.len(), 48 << 20, "{what}");
            let block = run(s.memset(block, 0x5a)).unwrap();
            assert_eq!(run(s.download(block)).unwrap()[..], [0x5a; 48 << 20][..]);
            drop((pool, s));
            until_released(&format!("{what}: everything"), || {
                within(live_memory(&ctx), baseline)
            });
        }
    }
}

/// docs/ascend.md's teardown promise ("the last drop ... calls `aclFinalize`"), for memory: a
/// runtime of its own (npu-sim's cdylib) used through every kind of memory (both device-pool
/// backends, a pinned pool, `upload` / `download` through the stream's staging pool, a host
/// registration handed back by `into_inner` and one dropped registered, split parts of a
/// pinned buffer on two streams, a value word, a peer copy under enabled peer access), with
/// every future dropped as soon as it was submitted, and then every handle dropped. ACL must
/// then be finalised: a new runtime of that library with a configuration file applies it (a
/// runtime still initialised refuses it). A break: something of the memory side (a pool's
/// destruction, the staging pools, a registration, a peer guard) keeping the runtime alive.
#[test]
fn a_runtime_of_its_own_used_through_every_kind_of_memory_is_finalised_when_dropped() {
    let (_guard, _d0, _d1) = devices();
    let own = OwnRuntime::new("attack26b");
    for strategy in STRATEGIES {
        let runtime = own.build();
        let (dev0, dev1) = (runtime.device(0).unwrap(), runtime.device(1).unwrap());
        let ctx = dev0.primary_context().clone();
        let ctx1 = dev1.primary_context().clone();
        let (s, t) = (stream(&ctx, strategy), stream(&ctx, strategy));
        let s1 = stream(&ctx1, strategy);
        run(async {
            // Both device-pool backends, a block of each memset and dropped in flight.
            for backend in [DevicePoolBackend::Caching, DevicePoolBackend::RuntimePool] {
                let pool = DevicePool::builder(&ctx).backend(backend).build().unwrap();
                let block = pool.alloc::<u8>(&s, 4096).await.unwrap();
                drop(s.memset(block, 1));
                let block = pool.alloc::<u8>(&s, 4096).await.unwrap();
                let block = s.memset(block, 2).await.unwrap();
                assert_eq!(s.download(block).await.unwrap(), vec![2; 4096]);
            }
            // A pinned pool, its block copied in flight.
            let pinned = PinnedPool::builder(&ctx).capacity(1 << 20).build().unwrap();
            let mut staging = pinned.alloc::<u8>(4096).await.unwrap();
            staging.fill(3);
            drop(s.copy_h2d(staging, DeviceBuffer::<u8>::new(&ctx, 4096).unwrap()));
            // upload and download through the streams' staging pool.
            let up = s.upload(&[4u32; 1000]).await.unwrap();
            assert_eq!(t.download(up).await.unwrap(), vec![4; 1000]);
            // A registration handed back, and one dropped with its copy in flight.
            let page = PageAlignedBuffer::from_slice(&[5u8; 4096]).unwrap();
            let registered = HostRegistration::new(&ctx, page, RegisterFlags::PINNED).unwrap();
            let (registered, device) = s
                .copy_h2d(registered, DeviceBuffer::<u8>::new(&ctx, 4096).unwrap())
                .await
                .unwrap();
            assert_eq!(registered.into_inner().await.unwrap()[..], [5; 4096]);
            let page = PageAlignedBuffer::from_slice(&[6u8; 4096]).unwrap();
            let registered = HostRegistration::new(&ctx, page, RegisterFlags::PINNED).unwrap();
            drop(s.copy_d2h(device, registered));
            // Split parts of a pinned buffer on two streams, futures dropped.
            let (head, tail) = PinnedBuffer::<u8>::new(&ctx, 8192)
                .unwrap()
                .into_halves(4096)
                .unwrap();
            drop(s.copy_h2d(head, DeviceBuffer::<u8>::new(&ctx, 4096).unwrap()));
            drop(t.copy_h2d(tail, DeviceBuffer::<u8>::new(&ctx, 4096).unwrap()));
            // A value word written, dropped in flight.
            drop(s.write_value(ValueWord::new(&ctx, 0).unwrap(), 9));
            // A peer copy from device 1 into device 0, its guard dropped first.
            let access = (
                dev0.enable_peer_access(&dev1).unwrap(),
                dev1.enable_peer_access(&dev0).unwrap(),
            );
            let remote = s1.upload(&[7u8; 4096]).await.unwrap();
            let copy = s.copy_d2d(remote, DeviceBuffer::<u8>::new(&ctx, 4096).unwrap());
            drop(access);
            let (_remote, local) = copy.await.unwrap();
            assert_eq!(s.download(local).await.unwrap(), vec![7; 4096]);
        });
        drop((s, t, s1, ctx, ctx1, dev0, dev1, runtime));
        own.when_finalised(&format!("{strategy:?}"), |applied| {
            let ctx = applied.device(0).unwrap().primary_context().clone();
            let s = stream(&ctx, strategy);
            let pool = DevicePool::new(&ctx).unwrap();
            let block = run(pool.alloc::<u8>(&s, 64)).unwrap();
            let set = run(s.memset(block, 8)).unwrap();
            assert_eq!(run(s.download(set)).unwrap(), vec![8; 64]);
        });
    }
}
