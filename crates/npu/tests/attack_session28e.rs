//! Session 28e: several devices at once (peer copies, a lost device beside working ones),
//! contexts bound per thread, runtimes of one library dropped in either order, and the errors
//! a lost device gives, through the facade only. Devices 2 and 3 belong to
//! `a_lost_device_stops_neither_the_others_work_nor_its_peers_streams`, which loses device 3
//! for the rest of the process.

mod common;

use common::{STRATEGIES, exclusive, run, stream, until_released};
use npu::prelude::*;
use npu::stream::Copy2d;
use npu::{Error, sim};

fn bytes(ctx: &Context, value: u8, len: usize) -> DeviceBuffer<u8> {
    DeviceBuffer::from_host_blocking(ctx, &vec![value; len]).unwrap()
}

/// Waits until nothing, not even a copy's own guard, keeps `from`'s access to `to` enabled: a
/// copy drops its guard after it completes, so the access can outlive the caller's guard.
fn until_disabled(from: &Context, to: &Context) {
    until_released("peer access disabled", || {
        from.device().peer_access_to(&to.device()).is_none()
    });
}

/// Access is directional: a copy between two devices runs when the device of the stream it is
/// queued on has access to the other one's memory, and is otherwise refused by the runtime with
/// a typed error naming the copy's ACL call, both buffers back (1D and 2D, the stream on either
/// side, no access, access the other way, access this way).
#[test]
fn peer_copies_run_exactly_when_the_streams_device_has_access_to_the_other() {
    let (_guard, d0, d1) = exclusive(Some(4));
    let shape = Copy2d {
        width: 8,
        height: 4,
        src_pitch: 16,
        dst_pitch: 16,
    };
    for strategy in STRATEGIES {
        for (ours, theirs) in [(&d0, &d1), (&d1, &d0)] {
            for access in [None, Some((theirs, ours)), Some((ours, theirs))] {
                until_disabled(ours, theirs);
                until_disabled(theirs, ours);
                let s = stream(ours, strategy);
                let guard = access
                    .map(|(from, to)| from.device().enable_peer_access(&to.device()).unwrap());
                let works = access.is_some_and(|(from, _)| from.same(ours));
                let what = format!("{strategy:?}, stream on {ours:?}, access {access:?}");
                let one = run(s.copy_d2d(bytes(&d0, 7, 64), bytes(&d1, 0, 64)));
                let two = run(s.copy_2d_d2d(bytes(&d0, 9, 64), bytes(&d1, 0, 64), shape));
                match (one, two) {
                    (Ok((_, one)), Ok((_, two))) if works => {
                        assert_eq!(one.to_vec_blocking().unwrap(), [7; 64], "{what}");
                        let two = two.to_vec_blocking().unwrap();
                        for row in two.chunks(16) {
                            assert_eq!(row, [[9; 8], [0; 8]].concat().as_slice(), "{what}");
                        }
                    }
                    (Err(one), Err(two)) if !works => {
                        for (err, api) in [
                            (&one.error, "aclrtMemcpyAsync"),
                            (&two.error, "aclrtMemcpy2dAsync"),
                        ] {
                            assert!(err.acl_code().is_some(), "{what}: {err}");
                            assert!(err.to_string().starts_with(api), "{what}: {err}");
                            assert!(err.to_string().contains("peer access"), "{what}: {err}");
                        }
                        let (one, two) = (one.value.unwrap(), two.value.unwrap());
                        assert_eq!(one.0.len() + two.1.len(), 128, "{what}");
                    }
                    (one, two) => panic!(
                        "{what}: works {works}, 1D {:?}, 2D {:?}",
                        one.map(drop).map_err(|e| e.error),
                        two.map(drop).map_err(|e| e.error)
                    ),
                }
                drop(guard);
            }
        }
    }
}

/// The errors of a lost device name their API and say the device is lost.
fn lost(what: &str, err: &Error) {
    assert!(err.is_device_lost(), "{what}: {err}");
    let shown = err.to_string();
    assert!(
        shown.starts_with("acl") || shown.contains("::"),
        "{what}: {shown}"
    );
}

/// Device 3 lost while device 2 holds copies into its memory, device 3 holds work of every
/// strategy (peer copies from device 2 among it), and tasks of a multi-thread runtime run round
/// trips on devices 0 and 1 throughout: the lost work fails as lost, device 2's own work and
/// streams go on, the round trips all finish exact, everything of device 3 is released and the
/// reactor is left with nothing pending. New calls on device 3 fail as lost, naming their API.
#[test]
fn a_lost_device_stops_neither_the_others_work_nor_its_peers_streams() {
    let (_guard, d0, d1) = exclusive(Some(4));
    let (dev2, dev3) = (Device::open(2).unwrap(), Device::open(3).unwrap());
    let (c2, c3) = (
        dev2.primary_context().clone(),
        dev3.primary_context().clone(),
    );
    let access = (
        dev2.enable_peer_access(&dev3).unwrap(),
        dev3.enable_peer_access(&dev2).unwrap(),
    );
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap();
    let workers: Vec<_> = (0..8)
        .map(|i| {
            let ctx = if i % 2 == 0 { d0.clone() } else { d1.clone() };
            tokio.spawn(async move {
                let s = stream(&ctx, STRATEGIES[i % 3]);
                for round in 0..40u8 {
                    let fresh = DeviceBuffer::<u8>::new(&ctx, 256).unwrap();
                    let buffer = s.memset(fresh, round).await.unwrap();
                    tokio::task::yield_now().await;
                    assert_eq!(buffer.to_vec_blocking().unwrap(), [round; 256]);
                }
            })
        })
        .collect();
    let on2: Vec<_> = STRATEGIES.iter().map(|&st| stream(&c2, st)).collect();
    let on3: Vec<_> = STRATEGIES.iter().map(|&st| stream(&c3, st)).collect();
    // A device pool on each side with a block cached and one to be out in a memset held on the
    // device (taken first: a runtime-pool block is awaited on its stream before it is handed out).
    let pools = [&c2, &c3].map(|ctx| DevicePool::builder(ctx).capacity(1 << 20).build().unwrap());
    let blocks: Vec<_> = pools
        .iter()
        .zip([&on2[0], &on3[0]])
        .map(|(pool, s)| {
            drop(run(pool.alloc::<u8>(s, 4096)).unwrap());
            run(pool.alloc::<u8>(s, 8192)).unwrap()
        })
        .collect();
    let held2 = sim::hold(&dev2).unwrap();
    let held3 = sim::hold(&dev3).unwrap();
    let into3: Vec<_> = on2
        .iter()
        .map(|s| {
            s.copy_d2d(
                bytes(&c2, 5, 4096),
                DeviceBuffer::<u8>::new(&c3, 4096).unwrap(),
            )
        })
        .collect();
    let from2: Vec<_> = on3
        .iter()
        .map(|s| {
            s.copy_d2d(
                bytes(&c2, 6, 4096),
                DeviceBuffer::<u8>::new(&c3, 4096).unwrap(),
            )
        })
        .collect();
    let memsets3: Vec<_> = on3
        .iter()
        .map(|s| s.memset(DeviceBuffer::<u8>::new(&c3, 4096).unwrap(), 1))
        .collect();
    let memsets2: Vec<_> = on2
        .iter()
        .map(|s| s.memset(DeviceBuffer::<u8>::new(&c2, 4096).unwrap(), 2))
        .collect();
    let pooled: Vec<_> = blocks
        .into_iter()
        .zip([&on2[0], &on3[0]])
        .map(|(block, s)| s.memset(block, 4))
        .collect();
    sim::lose(&dev3).unwrap();
    drop(held3);
    drop(held2);
    drop(access);
    run(async {
        // Queued on device 2 before the loss, a copy into the lost device's memory fails as
        // its submission after the loss would, both buffers back.
        for op in into3 {
            let failed = op.await.unwrap_err();
            lost("a copy from a live device into the lost one", &failed.error);
            let (src, dst) = failed.value.expect("a failed copy hands its buffers back");
            assert_eq!((src.len(), dst.len()), (4096, 4096));
        }
        for op in from2 {
            let failed = op.await.unwrap_err();
            lost("a copy queued on the lost device", &failed.error);
        }
        for op in memsets3 {
            lost(
                "a memset queued on the lost device",
                &op.await.unwrap_err().error,
            );
        }
        for op in memsets2 {
            assert_eq!(op.await.unwrap().to_vec_blocking().unwrap(), [2; 4096]);
        }
    });
    let mut pooled = pooled.into_iter();
    let block2 = run(pooled.next().unwrap()).unwrap();
    assert_eq!(run(on2[1].download(block2)).unwrap(), [4; 8192]);
    let failed = run(pooled.next().unwrap()).unwrap_err();
    lost(
        "a memset of a pooled block of the lost device",
        &failed.error,
    );
    drop(failed);
    // The live device's pool serves again, its cached and returned blocks reused; the lost
    // device's pool refuses as lost, and neither counts a block it does not hold.
    let again = run(pools[0].alloc::<u8>(&on2[1], 4096)).unwrap();
    let again = run(on2[1].memset(again, 6)).unwrap();
    assert_eq!(run(on2[1].download(again)).unwrap(), [6; 4096]);
    let refused = run(pools[1].alloc::<u8>(&on3[1], 100_000));
    lost("DevicePool::alloc", &refused.map(drop).unwrap_err());
    until_released("both pools' blocks back", || {
        pools.iter().all(|pool| {
            let stats = pool.stats().cache;
            stats.allocated == 0 && stats.waiters == 0 && stats.cached <= stats.reserved
        })
    });
    drop(pools);
    for s in &on2 {
        let again = run(s.memset(DeviceBuffer::<u8>::new(&c2, 64).unwrap(), 9));
        assert_eq!(again.unwrap().to_vec_blocking().unwrap(), [9; 64]);
    }
    for worker in workers {
        tokio.block_on(worker).unwrap();
    }
    lost("Stream::new", &NpuStream::new(&c3).unwrap_err());
    lost(
        "DeviceBuffer::new",
        &DeviceBuffer::<u8>::new(&c3, 64).unwrap_err(),
    );
    lost("Event::new", &Event::new(&c3).unwrap_err());
    lost(
        "synchronize_blocking",
        &c3.synchronize_blocking().unwrap_err(),
    );
    until_disabled(&c2, &c3);
    let refused = dev2.enable_peer_access(&dev3).unwrap_err();
    lost("Device::enable_peer_access", &refused);
    drop((on2, on3));
    until_released("device 3's memory", || {
        sim::device_stats(&dev3).is_ok_and(|s| s.live_allocations == 0 && s.lost)
    });
    let stats = npu::reactor_stats();
    assert_eq!(stats.pending(), 0, "{stats:?}");
}

/// Two runtimes of the one in-process library, each with its own explicit contexts, streams of
/// every strategy and work held on both devices (a peer copy between a buffer of each runtime
/// among it), every handle of one runtime and then of the other dropped, in both orders, before
/// the devices run: no drop waits, the work completes with its bytes, and nothing is left
/// allocated.
#[test]
fn runtimes_of_one_library_dropped_in_either_order_with_work_in_flight_lose_nothing() {
    let (_guard, d0, d1) = exclusive(Some(4));
    let baseline = |ctx: &Context| sim::device_stats(&ctx.device()).unwrap().live_allocations;
    let before = (baseline(&d0), baseline(&d1));
    for a_first in [true, false] {
        let holds = (
            sim::hold(&d0.device()).unwrap(),
            sim::hold(&d1.device()).unwrap(),
        );
        let mut ops = Vec::new();
        let mut copies = Vec::new();
        let mut runtimes = Vec::new();
        for id in [0, 1] {
            let rt = Runtime::builder()
                .backend(npu::runtime::BackendChoice::Sim)
                .build()
                .unwrap();
            let device = rt.device(id).unwrap();
            let explicit = device.create_context().unwrap();
            for ctx in [device.primary_context().clone(), explicit] {
                for strategy in STRATEGIES {
                    let s = stream(&ctx, strategy);
                    ops.push(s.memset(DeviceBuffer::<u8>::new(&ctx, 512).unwrap(), 3 + id as u8));
                }
            }
            runtimes.push((rt, device));
        }
        let (a, b) = (&runtimes[0].1, &runtimes[1].1);
        let access = a.enable_peer_access(b).unwrap();
        let s = stream(a.primary_context(), npu::stream::Strategy::EventPoll);
        copies.push(s.copy_d2d(
            bytes(a.primary_context(), 8, 512),
            bytes(b.primary_context(), 0, 512),
        ));
        drop((s, access));
        let (first, second) = {
            let mut runtimes = runtimes.into_iter();
            let (a, b) = (runtimes.next().unwrap(), runtimes.next().unwrap());
            if a_first { (a, b) } else { (b, a) }
        };
        drop(first);
        drop(second);
        drop(holds);
        run(async {
            for (i, op) in ops.into_iter().enumerate() {
                let expected = if i < 6 { 3 } else { 4 };
                assert_eq!(
                    op.await.unwrap().to_vec_blocking().unwrap(),
                    [expected; 512]
                );
            }
            for op in copies {
                let (_, dst) = op.await.unwrap();
                assert_eq!(dst.to_vec_blocking().unwrap(), [8; 512]);
            }
        });
        until_released("every allocation of both runtimes", || {
            (baseline(&d0), baseline(&d1)) <= before
        });
    }
}

/// Tasks of a multi-thread runtime, each with explicit contexts of its own on two devices,
/// interleave allocations, memsets, peer copies and yields (so they move between worker
/// threads, each of which has some other context current), while another thread drops clones
/// of their contexts: every byte lands on the device its buffer names.
#[test]
fn tasks_moving_between_threads_with_explicit_contexts_of_two_devices_use_the_right_device() {
    let (_guard, d0, d1) = exclusive(Some(4));
    let access = (
        d0.device().enable_peer_access(&d1.device()).unwrap(),
        d1.device().enable_peer_access(&d0.device()).unwrap(),
    );
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap();
    let (drops, dropped) = std::sync::mpsc::channel::<Context>();
    let dropper = std::thread::spawn(move || dropped.into_iter().for_each(drop));
    let tasks: Vec<_> = (0..16u8)
        .map(|task| {
            let (d0, d1, drops) = (d0.device(), d1.device(), drops.clone());
            tokio.spawn(async move {
                let (x0, x1) = (d0.create_context().unwrap(), d1.create_context().unwrap());
                for round in 0..10u8 {
                    let value = task.wrapping_mul(16).wrapping_add(round);
                    let (here, there) = if round % 2 == 0 {
                        (&x0, &x1)
                    } else {
                        (&x1, &x0)
                    };
                    let s = stream(here, STRATEGIES[usize::from(round) % 3]);
                    let filled = s
                        .memset(DeviceBuffer::<u8>::new(here, 128).unwrap(), value)
                        .await
                        .unwrap();
                    tokio::task::yield_now().await;
                    let (filled, copied) = s
                        .copy_d2d(filled, DeviceBuffer::<u8>::new(there, 128).unwrap())
                        .await
                        .unwrap();
                    tokio::task::yield_now().await;
                    assert_eq!(filled.context().device_id(), here.device_id());
                    assert_eq!(copied.context().device_id(), there.device_id());
                    assert_eq!(copied.to_vec_blocking().unwrap(), [value; 128]);
                    drops.send(here.clone()).unwrap();
                }
            })
        })
        .collect();
    drop(drops);
    for task in tasks {
        tokio.block_on(task).unwrap();
    }
    dropper.join().unwrap();
    drop(access);
}

/// A FIFO in a directory of its own, removed with it.
struct Fifo(std::path::PathBuf);

impl Fifo {
    fn new(name: &str) -> Fifo {
        let dir = std::env::temp_dir().join(format!("npu-28e-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("fifo");
        let c_path = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
        let _ = std::fs::remove_file(&path);
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
        Fifo(path)
    }

    /// Lets a reader blocked in opening the FIFO go on (to read its end at once).
    fn unblock(&self) {
        use std::os::unix::fs::OpenOptionsExt;
        let _ = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&self.0);
    }
}

impl Drop for Fifo {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(self.0.parent().unwrap());
    }
}

/// `build` on a thread of its own, bounded: a hang is unblocked through `fifo` and fails the test.
fn build_bounded(fifo: &Fifo, builder: npu::runtime::RuntimeBuilder) -> npu::Result<Runtime> {
    let (tx, rx) = std::sync::mpsc::channel();
    let thread = std::thread::spawn(move || tx.send(builder.build()).unwrap());
    let built = rx.recv_timeout(common::HANG);
    if built.is_err() {
        while !thread.is_finished() {
            fifo.unblock();
            std::thread::yield_now();
        }
    }
    thread.join().unwrap();
    built.expect("building the runtime hung on a file that is not a regular one")
}

/// Bad input is a typed error, never a hang: a FIFO (whose opening for reading waits for a
/// writer) given as the runtime library or as the ACL configuration file of a runtime of its
/// own, and a device file that never ends (`/dev/zero`) given as either, are refused by
/// `RuntimeBuilder::build` naming the file.
#[test]
fn a_fifo_or_a_device_file_as_library_or_acl_config_is_refused_not_waited_on() {
    let (_guard, _, _) = exclusive(Some(4));
    let library = std::env::current_exe()
        .unwrap()
        .parent()
        .unwrap()
        .join("libascendcl.so");
    // SAFETY: npu-sim's build of libascendcl.so, an AscendCL runtime; the other libraries
    // named below are a FIFO and a device file, refused before anything opens them.
    let library_at = |path: &std::path::Path| unsafe { Runtime::builder().library(path) };
    let own = || library_at(&library);
    let fifo = Fifo::new("library");
    let err = build_bounded(&fifo, library_at(&fifo.0)).unwrap_err();
    assert!(matches!(err, Error::Load(_)), "{err}");
    assert!(
        err.to_string().contains(&*fifo.0.to_string_lossy()),
        "{err}"
    );
    assert!(err.to_string().contains("not a regular file"), "{err}");
    let fifo = Fifo::new("config");
    let err = build_bounded(&fifo, own().acl_config(&fifo.0)).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("RuntimeBuilder::build: invalid argument `acl_config`"),
        "{err}"
    );
    assert!(err.to_string().contains("not a regular file"), "{err}");
    for builder in [
        library_at("/dev/zero".as_ref()),
        own().acl_config("/dev/zero"),
    ] {
        let err = build_bounded(&fifo, builder).unwrap_err();
        assert!(err.to_string().contains("/dev/zero"), "{err}");
        assert!(err.to_string().contains("not a regular file"), "{err}");
    }
    // The runtime of its own still starts with no file, and the refusals left nothing behind.
    drop(own().build().unwrap());
}

/// "Bad input gets a typed error naming the API and the problem": a `DevicePool` given a stream
/// of another context of its own runtime says so with both devices, and one given a stream of
/// another runtime on the same device number names the two runtimes, rather than calling it
/// "another context (device 0) than the pool's (device 0)".
#[test]
fn a_device_pool_given_a_stream_of_another_runtime_or_context_names_which() {
    let (_guard, d0, d1) = exclusive(Some(4));
    let pool = DevicePool::new(&d0).unwrap();
    let other_device = npu::Stream::new(&d1).unwrap();
    let err = run(pool.alloc::<u8>(&other_device, 64)).unwrap_err();
    let text = err.to_string();
    assert!(text.starts_with("DevicePool::alloc"), "{text}");
    assert!(text.contains("`stream`"), "{text}");
    assert!(
        text.contains("another context (device 1) than the pool's (device 0)"),
        "{text}"
    );
    let foreign = common::dlopened_simulator();
    let foreign_ctx = foreign.device(0).unwrap().primary_context().clone();
    let foreign_stream = npu::Stream::new(&foreign_ctx).unwrap();
    let err = run(pool.alloc::<u8>(&foreign_stream, 64)).unwrap_err();
    let text = err.to_string();
    assert!(text.starts_with("DevicePool::alloc"), "{text}");
    assert!(
        text.contains("another AscendCL runtime than the pool's"),
        "{text}"
    );
    assert!(text.contains("npu-sim (in-process)"), "{text}");
    assert!(text.contains("libascendcl.so"), "{text}");
}
