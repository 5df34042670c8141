//! Testing your own async NPU code without hardware.
//!
//! `scale_on_device` below stands for your code: it takes host data, runs a kernel on the NPU
//! and returns the result. The `#[tokio::test]`s at the bottom are how you would test it:
//!
//! - **configure the simulator from the test**: two devices, 16 MiB of memory each and a
//!   timing model, installed before anything touches a device. The configuration is
//!   process-wide and fixed at first use, which is why tests like these belong in a test
//!   binary of their own (an example, or a separate file under `tests/`), never next to tests
//!   that want another configuration;
//! - **inject faults** with `npu::sim` (`fail_task` on a stream, `fail_kernel` on a kernel's
//!   launches whichever stream runs them, `fail_next_alloc` and `lose` on a device, running
//!   out of device memory) and assert that your code returns them as errors; `clear_faults`
//!   disarms those that never fired; the controls take npu-rs's own `Device` and `Stream` and
//!   return `npu::Result`, so `?` works in tests;
//! - **check for leaks**: the simulator counts live allocations; after
//!   `npu::sim::flush_releases()` (which waits for deferred frees) they must be back to where
//!   the test started;
//! - **time in simulated time**: with the timing model and `npu::sim::hold` (a guard that
//!   releases the device when dropped, even when the test panics), event timestamps are
//!   deterministic;
//! - **paused Tokio time**: `#[tokio::test(start_paused = true)]` works with device work in
//!   flight: every future waiting on the device (an operation, an event or completion wait)
//!   keeps the paused clock from jumping ahead, so a one-hour timeout around a copy does not
//!   fire before the copy finishes (a pool allocation queued for a block does not: see
//!   docs/observability.md).
//!
//! ```sh
//! cargo test --example test_harness     # the tests
//! cargo run --example test_harness      # runs scale_on_device once and checks the result
//! ```

use std::process::ExitCode;

use npu::Stream;
use npu::prelude::*;

#[path = "support/kernels.rs"]
mod kernels;

/// "Your code": multiplies `data` by `alpha` on the NPU.
///
/// It allocates device memory first, then a pinned staging buffer, copies in, launches
/// `scale_f32`, copies out. Every failure (allocation, copy, kernel) is an `Err`; whatever it
/// allocated is freed on the way out, because npu-rs buffers free themselves on drop once the
/// device is done with them.
async fn scale_on_device(
    stream: &Stream,
    scale: &Function,
    data: &[f32],
    alpha: f32,
) -> npu::Result<Vec<f32>> {
    let ctx = stream.context();
    let device = DeviceBuffer::<f32>::new(ctx, data.len())?;
    let host = PinnedBuffer::from_slice(ctx, data)?;
    let (host, device) = stream.copy_h2d(host, device).await?;
    // SAFETY: scale_f32(float *x, uint64_t n, float alpha) scales n elements of x in place;
    // x holds data.len().
    let launch = unsafe { stream.launch(scale, 4, (device, data.len() as u64, alpha)) };
    let (device, _, _) = launch.await?;
    let (_device, host) = stream.copy_d2h(device, host).await?;
    Ok(host.to_vec())
}

#[tokio::main]
async fn main() -> ExitCode {
    let outcome = async {
        let ctx = Device::open(0)?.primary_context().clone();
        let stream = Stream::new(&ctx)?;
        let scale = kernels::load(&ctx)?.function("scale_f32")?;
        let data: Vec<f32> = (0..10_000).map(|i| i as f32).collect();
        let out = scale_on_device(&stream, &scale, &data, 0.5).await?;
        let ok = out.iter().zip(&data).all(|(y, x)| *y == x * 0.5);
        Ok::<_, npu::Error>((ctx.runtime().backend().to_string(), data.len(), ok))
    }
    .await;
    match outcome {
        Ok((backend, n, ok)) => {
            println!("backend: {backend}");
            println!(
                "scale_on_device(x, 0.5) over {n} elements: {}",
                if ok { "verified" } else { "WRONG" }
            );
            println!("the tests: cargo test --example test_harness");
            if ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(err) => {
            eprintln!("test_harness failed: {err}");
            ExitCode::FAILURE
        }
    }
}

// The harness is the simulator's: its tests need the `sim` feature.
#[cfg(all(test, feature = "sim"))]
mod tests {
    use std::sync::OnceLock;
    use std::time::Duration;

    use npu::error::AclCode;
    use npu::runtime::{Backend, BackendChoice};
    use npu::sim::{self, SimConfig, TimingModel};

    use super::*;

    /// Memory of each simulated device in these tests.
    const DEVICE_MEMORY: u64 = 16 << 20;
    /// Simulated duration of one `scale_f32` launch.
    const SCALE_NS: u64 = 200_000;
    /// The timing model's launch latency, added to every task.
    const LATENCY_NS: u64 = 2_000;
    /// The device [`a_lost_device_fails_its_work`] loses; no other test uses it.
    const LOST: u32 = 2;

    /// Installs this binary's simulator configuration (once, before any device is touched)
    /// and returns a runtime on the in-process simulator.
    fn simulator() -> Runtime {
        static RUNTIME: OnceLock<Runtime> = OnceLock::new();
        RUNTIME
            .get_or_init(|| {
                SimConfig::default()
                    .devices(3)
                    .memory_per_device(DEVICE_MEMORY)
                    .timing(
                        TimingModel::default()
                            .h2d_bandwidth(10_000_000_000)
                            .d2h_bandwidth(10_000_000_000)
                            .launch_latency_ns(LATENCY_NS)
                            .kernel("scale_f32", SCALE_NS),
                    )
                    .install()
                    .expect("the simulator was already initialised with another configuration");
                let runtime = Runtime::builder()
                    .backend(BackendChoice::Sim)
                    .build()
                    .unwrap();
                assert_eq!(runtime.backend(), &Backend::Simulator);
                runtime
            })
            .clone()
    }

    fn device(id: u32) -> Device {
        simulator().device(id).unwrap()
    }

    /// Live simulator allocations: device memory of `device` and pinned host memory.
    fn live_allocations(device: &Device) -> (u64, u64) {
        sim::flush_releases();
        let on_device = sim::device_stats(device).unwrap();
        let host = sim::host_stats().unwrap();
        (on_device.live_allocations, host.pinned_allocations)
    }

    /// Tests compare process-wide counters and use the hold gate, so they take turns.
    async fn serial() -> tokio::sync::MutexGuard<'static, ()> {
        static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
        TURN.lock().await
    }

    /// A stream and the `scale_f32` kernel on `device`.
    fn setup(device: &Device) -> (Stream, Function) {
        let stream = Stream::new(device.primary_context()).unwrap();
        let scale = kernels::load(device.primary_context())
            .unwrap()
            .function("scale_f32")
            .unwrap();
        (stream, scale)
    }

    #[tokio::test]
    async fn the_simulator_has_the_configured_devices() {
        let runtime = simulator();
        assert_eq!(runtime.device_count().unwrap(), 3);
        let memory = device(1).memory_info(npu::device::MemAttr::Normal);
        assert_eq!(memory.unwrap().total, DEVICE_MEMORY as usize);
    }

    #[tokio::test]
    async fn scales_on_either_device() {
        let _turn = serial().await;
        for id in 0..2 {
            let (stream, scale) = setup(&device(id));
            let out = scale_on_device(&stream, &scale, &[1.0, -2.0, 3.5], 2.0).await;
            assert_eq!(out.unwrap(), [2.0, -4.0, 7.0]);
        }
    }

    /// Runs `scale_on_device` on `device` after `inject` set up a fault, and checks that it
    /// fails with ACL error `code` and leaves no allocation behind.
    async fn fails_cleanly(
        device: &Device,
        data: &[f32],
        inject: impl FnOnce(&Stream) -> npu::Result<()>,
        code: i32,
    ) -> (Stream, Function) {
        let (stream, scale) = setup(device);
        let before = live_allocations(device);
        inject(&stream).unwrap();
        let err = scale_on_device(&stream, &scale, data, 3.0)
            .await
            .unwrap_err();
        assert_eq!(err.acl_code(), Some(AclCode(code)), "{err}");
        assert_eq!(live_allocations(device), before, "leaked an allocation");
        (stream, scale)
    }

    #[tokio::test]
    async fn a_failing_kernel_is_an_error_and_leaks_nothing() {
        let _turn = serial().await;
        // Task 1 on the stream is the copy in, task 2 the kernel: make the kernel trap.
        let trap = |stream: &Stream| sim::fail_task(stream, 2, AclCode(507015));
        let (stream, scale) = fails_cleanly(&device(0), &[1.0; 1000], trap, 507015).await;
        assert_eq!(
            device(0).status().unwrap(),
            npu::device::DeviceStatus::Normal,
            "a kernel fault fails the request, not the device"
        );
        // The stream is still usable.
        let out = scale_on_device(&stream, &scale, &[1.0; 8], 3.0).await;
        assert_eq!(out.unwrap(), [3.0; 8]);
    }

    #[tokio::test]
    async fn a_kernel_fault_needs_no_stream_and_an_unfired_one_is_disarmed() {
        let _turn = serial().await;
        let zero = device(0);
        // Code that picks its own stream (from a `StreamPool`, say): arm the fault on the
        // kernel's name instead, for its next launch on any stream of the device.
        let trap = |_: &Stream| sim::fail_kernel(&zero, "scale_f32", 1, AclCode(507015));
        let (stream, scale) = fails_cleanly(&zero, &[1.0; 64], trap, 507015).await;
        // A fault armed for work that never comes must not wait for the tests after this one.
        sim::fail_kernel(&zero, "scale_f32", 2, AclCode(507015)).unwrap();
        let out = scale_on_device(&stream, &scale, &[1.0; 8], 3.0).await;
        assert_eq!(out.unwrap(), [3.0; 8], "the first launch runs");
        assert_eq!(
            sim::clear_faults(&zero).unwrap(),
            1,
            "one fault disarmed unfired"
        );
    }

    #[tokio::test]
    async fn a_failed_allocation_is_an_error_and_leaks_nothing() {
        let _turn = serial().await;
        let one = device(1);
        let fail_alloc = |_: &Stream| sim::fail_next_alloc(&one);
        fails_cleanly(&one, &[1.0; 16], fail_alloc, 207001).await;
    }

    #[tokio::test]
    async fn input_larger_than_device_memory_is_an_error() {
        let _turn = serial().await;
        // 5 Mi floats are 20 MiB: more than the 16 MiB device.
        fails_cleanly(&device(0), &vec![0.0f32; 5 << 20], |_| Ok(()), 207001).await;
    }

    #[tokio::test]
    async fn a_lost_device_fails_its_work() {
        let _turn = serial().await;
        let lost = device(LOST);
        let (stream, scale) = setup(&lost);
        assert_eq!(
            scale_on_device(&stream, &scale, &[1.0], 2.0).await.unwrap(),
            [2.0]
        );
        sim::lose(&lost).unwrap();
        let err = scale_on_device(&stream, &scale, &[1.0], 2.0)
            .await
            .unwrap_err();
        // Your code can tell a lost device (fail the health check, stop routing to it) from a
        // request the device failed (`err.fault()`), which a kernel fault is.
        assert!(err.is_device_lost(), "{err}");
        assert_eq!(lost.status().unwrap(), npu::device::DeviceStatus::Abnormal);
        assert!(sim::device_stats(&lost).unwrap().lost);
    }

    #[tokio::test]
    async fn kernels_take_their_simulated_time() {
        let _turn = serial().await;
        let one = device(1);
        let (stream, scale) = setup(&one);
        let ctx = stream.context().clone();
        let x = DeviceBuffer::<f32>::new(&ctx, 64).unwrap();
        let (start, end) = (Event::new(&ctx).unwrap(), Event::new(&ctx).unwrap());

        // Hold the device so the kernel starts exactly when it is released, right after the
        // start event: the elapsed time is then the kernel's simulated duration, however
        // loaded the machine running the test is.
        let held = sim::hold(&one).unwrap();
        start.record(&stream).unwrap();
        // SAFETY: scale_f32(float *x, uint64_t n, float alpha); x holds 64 elements.
        let launch = unsafe { stream.launch(&scale, 1, (x, 64u64, 1.0f32)) };
        end.record(&stream).unwrap();
        held.release().unwrap();
        launch.await.unwrap();
        end.wait().await.unwrap();

        let elapsed = Event::elapsed(&start, &end).unwrap();
        let expected = Duration::from_nanos(SCALE_NS + LATENCY_NS);
        let error = elapsed.abs_diff(expected);
        assert!(
            error < Duration::from_micros(1),
            "{elapsed:?} vs {expected:?}"
        );
    }

    #[tokio::test]
    async fn a_test_that_panics_while_holding_leaves_the_device_released() {
        let _turn = serial().await;
        let zero = device(0);
        let held_then_panicked = std::panic::catch_unwind(|| {
            let _held = sim::hold(&zero).unwrap();
            panic!("the test failed while the device was held");
        });
        assert!(held_then_panicked.is_err());
        let (stream, scale) = setup(&zero);
        let out = scale_on_device(&stream, &scale, &[4.0], 0.25).await;
        assert_eq!(out.unwrap(), [1.0], "the device runs work again");
    }

    #[tokio::test]
    async fn control_errors_convert_into_npu_errors() {
        let _turn = serial().await;
        // A refused control is an npu error (a typed invalid argument here), so `?` carries it
        // out of a test helper.
        fn fail_task_zero(stream: &Stream) -> npu::Result<()> {
            sim::fail_task(stream, 0, AclCode(507015))?;
            Ok(())
        }
        let (stream, _) = setup(&device(0));
        let err = fail_task_zero(&stream).unwrap_err();
        assert!(matches!(err, npu::Error::InvalidArgument { .. }), "{err}");
        let raw = sim::raw_control::lose_device(99).unwrap_err();
        let err = npu::Error::from(raw);
        assert_eq!(err.acl_code(), Some(AclCode(107001)), "{err}");
    }

    /// A 4 MiB round trip (about 0.8 ms of paced device time at 10 GB/s) under a paused
    /// clock races a one-hour timeout: the copy must win every time.
    #[tokio::test(start_paused = true)]
    async fn paused_time_waits_for_device_work() {
        let _turn = serial().await;
        let ctx = device(0).primary_context().clone();
        let stream = Stream::new(&ctx).unwrap();
        let n = 1 << 20;
        for round in 0..20 {
            let host = PinnedBuffer::from_slice(&ctx, &vec![round as f32; n]).unwrap();
            let round_trip = async {
                let (host, dev) = stream.copy_h2d(host, DeviceBuffer::new(&ctx, n)?).await?;
                Ok::<_, npu::Error>(stream.copy_d2h(dev, host).await?)
            };
            let (_, host) = tokio::time::timeout(Duration::from_secs(3600), round_trip)
                .await
                .expect("the one-hour timeout fired before the copy finished")
                .unwrap();
            assert!(host.iter().all(|&x| x == round as f32));
        }
    }
}
