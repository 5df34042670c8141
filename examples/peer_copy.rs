//! Copying between two devices: peer access enabled in both directions, then an awaited
//! device-to-device copy each way, verified on the host.
//!
//! ```sh
//! cargo run --example peer_copy              # on the simulator's two devices
//! cargo build --example peer_copy            # on CANN, started directly, not by cargo run (docs/ascend.md)
//! NPU_BACKEND=acl target/debug/examples/peer_copy
//! ```
//!
//! A cross-device copy is issued on a stream of the device that performs it, and needs that
//! device to have peer access to the other one (ACL's access is directional). Without it ACL
//! refuses the copy, so this example enables 0 → 1 and 1 → 0, copies device 0 → device 1 on a
//! stream of device 0, then device 1 → device 0 on a stream of device 1.

use std::process::ExitCode;

use npu::Stream;
use npu::memory::MallocPolicy;
use npu::prelude::*;

/// Elements copied in the default run.
const ELEMENTS: usize = 1 << 20;

/// What one run found.
#[derive(Debug)]
struct Report {
    backend: String,
    elements: usize,
    /// Whether device 1 received exactly what device 0 held.
    forward_ok: bool,
    /// Whether the copy back to device 0 returned exactly the original data.
    backward_ok: bool,
}

/// Device memory usable for copies between devices.
fn peer_buffer(ctx: &Context, len: usize) -> npu::Result<DeviceBuffer<u32>> {
    DeviceBuffer::with_policy(ctx, len, MallocPolicy::HugeFirstP2p)
}

async fn run(elements: usize) -> npu::Result<Report> {
    let (dev0, dev1) = (Device::open(0)?, Device::open(1)?);
    for (from, to) in [(&dev0, &dev1), (&dev1, &dev0)] {
        if !from.can_access_peer(to)? {
            return Err(npu::Error::invalid(
                "peer_copy",
                "devices",
                format!("device {} cannot access device {}", from.id(), to.id()),
            ));
        }
    }
    // Access is directional: enable both ways. The guards disable it again when dropped.
    let _access = (
        dev0.enable_peer_access(&dev1)?,
        dev1.enable_peer_access(&dev0)?,
    );
    let (ctx0, ctx1) = (dev0.primary_context(), dev1.primary_context());
    let (stream0, stream1) = (Stream::new(ctx0)?, Stream::new(ctx1)?);

    let data: Vec<u32> = (0..elements as u32)
        .map(|i| i.wrapping_mul(2_654_435_761))
        .collect();
    let host = PinnedBuffer::from_slice(ctx0, &data)?;
    let (host, on0) = stream0.copy_h2d(host, peer_buffer(ctx0, elements)?).await?;

    // Device 0 → device 1, performed by device 0.
    let (_on0, on1) = stream0.copy_d2d(on0, peer_buffer(ctx1, elements)?).await?;
    let check1 = PinnedBuffer::<u32>::new(ctx1, elements)?;
    let (on1, check1) = stream1.copy_d2h(on1, check1).await?;
    let forward_ok = check1[..] == data[..];

    // Device 1 → device 0, performed by device 1, into a fresh buffer.
    let (_on1, back) = stream1.copy_d2d(on1, peer_buffer(ctx0, elements)?).await?;
    let (_back, host) = stream0.copy_d2h(back, host).await?;
    let backward_ok = host[..] == data[..];

    Ok(Report {
        backend: dev0.runtime().backend().to_string(),
        elements,
        forward_ok,
        backward_ok,
    })
}

#[tokio::main]
async fn main() -> ExitCode {
    match run(ELEMENTS).await {
        Ok(report) => {
            println!("backend: {}", report.backend);
            println!("peer access enabled: device 0 -> 1 and device 1 -> 0");
            let verdict = |ok: bool| if ok { "verified" } else { "WRONG" };
            println!(
                "device 0 -> device 1: {} u32 ({} bytes), {}",
                report.elements,
                report.elements * 4,
                verdict(report.forward_ok)
            );
            println!(
                "device 1 -> device 0: {} u32, {}",
                report.elements,
                verdict(report.backward_ok)
            );
            if report.forward_ok && report.backward_ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(err) => {
            eprintln!("peer_copy failed: {err}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn copies_both_ways_between_two_devices() {
        let report = run(4099).await.unwrap();
        assert!(
            report.forward_ok,
            "device 1 did not receive device 0's data"
        );
        assert!(report.backward_ok, "the copy back to device 0 differs");
    }
}
