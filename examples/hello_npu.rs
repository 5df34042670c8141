//! The first program: CANN's ten-step "typical flow", written with `async`/`await`.
//!
//! Open a device (1), create a stream (2), allocate pinned host memory (3) and device memory
//! (4), copy host to device (5), launch a kernel, a vector add (6), await it (7), copy device to
//! host (8), verify (9), free everything and reset the device (10).
//!
//! ```sh
//! cargo run --example hello_npu              # on the simulator (no NPU needed)
//! cargo build --example hello_npu            # on CANN, started directly, not by cargo run (docs/ascend.md)
//! NPU_BACKEND=acl NPU_EXAMPLE_KERNELS=/path/kernels.o target/debug/examples/hello_npu
//! ```
//!
//! It prints the device, the backend and the verified result, and exits non-zero if the
//! result is wrong or anything fails.

use std::process::ExitCode;

use npu::prelude::*;

#[path = "support/kernels.rs"]
mod kernels;

/// Elements per vector in the default run.
const ELEMENTS: usize = 1 << 20;

/// What one run did and found.
#[derive(Debug)]
struct Report {
    device: u32,
    soc: String,
    backend: String,
    elements: usize,
    /// The first elements of the result, `c = a + b`.
    head: Vec<f32>,
    /// Indices whose result differs from the expected value.
    mismatches: usize,
    /// What each of the ten steps (some reported together) did, in order.
    steps: Vec<(&'static str, String)>,
}

/// The inputs: `a[i] = i`, `b[i] = 2 i`, so `c[i] = 3 i` (exact in f32 below 2^24).
fn input(i: usize) -> (f32, f32) {
    (i as f32, 2.0 * i as f32)
}

async fn run(elements: usize) -> npu::Result<Report> {
    // 1. The device: the simulator unless NPU_BACKEND picks CANN.
    let device = Device::open(0)?;
    let ctx = device.primary_context();
    let mut report = Report {
        device: device.id(),
        soc: device.soc_name().unwrap_or_default(),
        backend: device.runtime().backend().to_string(),
        elements,
        head: Vec::new(),
        mismatches: 0,
        steps: Vec::new(),
    };
    let mut step = |number: &'static str, text: String| report.steps.push((number, text));
    step(
        "1",
        format!(
            "opened device {} ({})",
            device.id(),
            device.runtime().backend()
        ),
    );
    // 2. A stream.
    let stream = NpuStream::new(ctx)?;
    let add = kernels::load(ctx)?.function("vector_add_f32")?;
    step(
        "2",
        format!(
            "created stream {} and loaded kernel vector_add_f32",
            stream.id()
        ),
    );

    // 3. Pinned host memory, filled on the host.
    let mut a = PinnedBuffer::<f32>::new(ctx, elements)?;
    let mut b = PinnedBuffer::<f32>::new(ctx, elements)?;
    for (i, (a, b)) in a.iter_mut().zip(b.iter_mut()).enumerate() {
        (*a, *b) = input(i);
    }
    // 4. Device memory.
    let (da, db) = (
        DeviceBuffer::new(ctx, elements)?,
        DeviceBuffer::new(ctx, elements)?,
    );
    let dc = DeviceBuffer::<f32>::new(ctx, elements)?;
    let bytes = elements * size_of::<f32>();
    step(
        "3-4",
        format!("allocated 2 pinned host buffers and 3 device buffers of {bytes} bytes"),
    );

    // 5. Host to device. Each copy takes its buffers and hands them back when done.
    let (a, da) = stream.copy_h2d(a, da).await?;
    let (b, db) = stream.copy_h2d(b, db).await?;
    step(
        "5",
        format!(
            "copied a and b to the device ({} bytes, awaited)",
            2 * bytes
        ),
    );

    // 6 and 7. The kernel, awaited: no worker thread blocks while the device computes.
    // SAFETY: vector_add_f32(const float *a, const float *b, float *c, uint64_t n) reads n
    // elements of a and b and writes n elements of c; all three hold `elements`.
    let launch = unsafe { stream.launch(&add, 16, (da, db, dc, elements as u64)) };
    let (da, db, dc, _) = launch.await?;
    step(
        "6-7",
        "launched c = a + b on 16 blocks and awaited it".to_string(),
    );

    // 8. Device to host, into the pinned buffer `a` (its input is no longer needed).
    let (dc, c) = stream.copy_d2h(dc, a).await?;
    step(
        "8",
        format!("copied c back to the host ({bytes} bytes, awaited)"),
    );

    // 9. Verify on the host.
    report.mismatches = c
        .iter()
        .enumerate()
        .filter(|&(i, &c)| {
            let (x, y) = input(i);
            c != x + y
        })
        .count();
    let head = c.iter().take(4).copied().collect();
    step("9", "checked every element of c on the host".to_string());

    // 10. Free and reset: dropping a buffer frees it once the device is done with it (here it
    // already is), and the device is reset when its last handle is gone.
    drop((b, c, da, db, dc, stream, add));
    drop(device);
    #[cfg(feature = "sim")]
    npu::sim::flush_releases();
    step(
        "10",
        "freed every buffer and released the device".to_string(),
    );

    report.head = head;
    Ok(report)
}

#[tokio::main]
async fn main() -> ExitCode {
    match run(ELEMENTS).await {
        Ok(report) => {
            for (number, text) in &report.steps {
                println!("step {number:>4}: {text}");
            }
            println!("device:  {} ({})", report.device, report.soc);
            println!("backend: {}", report.backend);
            println!(
                "c = a + b over {} elements, first {:?}",
                report.elements, report.head
            );
            if report.mismatches == 0 {
                println!("verified: all {} elements are correct", report.elements);
                ExitCode::SUCCESS
            } else {
                println!("FAILED: {} elements are wrong", report.mismatches);
                ExitCode::FAILURE
            }
        }
        Err(err) => {
            eprintln!("hello_npu failed: {err}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_ten_steps_compute_a_plus_b() {
        let report = run(1000).await.unwrap();
        assert_eq!(report.mismatches, 0);
        assert_eq!(report.head, [0.0, 3.0, 6.0, 9.0]);
        assert!(!report.backend.is_empty());
        assert_eq!(report.steps.len(), 8, "{:?}", report.steps);
        // Step 10 left nothing behind on the simulator.
        #[cfg(feature = "sim")]
        if matches!(
            Device::open(0).unwrap().runtime().backend(),
            npu::runtime::Backend::Simulator
        ) {
            assert_eq!(npu::sim::host_stats().unwrap().pinned_allocations, 0);
        }
    }
}
