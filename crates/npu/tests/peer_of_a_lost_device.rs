//! `Device::can_access_peer` towards (and from) a lost device answers as the rest of the peer
//! API does: the lost device's error, naming the method and the device, never `true`. The
//! loss is for the rest of the process, so this file is a process of its own.

mod common;

use npu::Device;
use npu::error::AclCode;
use npu::sim;

use common::exclusive;

#[test]
fn a_lost_device_is_no_ones_peer() {
    let (_devices, d0, d1) = exclusive(Some(4));
    let (live, other) = (d0.device(), d1.device());
    let lost = Device::open(3).unwrap();
    assert!(live.can_access_peer(&lost).unwrap(), "before the loss");
    sim::lose(&lost).unwrap();
    for (from, to) in [(&live, &lost), (&lost, &live)] {
        let err = from.can_access_peer(to).unwrap_err();
        assert!(err.is_device_lost(), "{err}");
        assert_eq!(err.acl_code(), Some(AclCode::DEVICE_LOST), "{err}");
        let text = err.to_string();
        assert!(text.starts_with("Device::can_access_peer failed"), "{text}");
        assert!(text.contains("device 3 is abnormal"), "{text}");
    }
    // As enabling access towards it is refused.
    let refused = live.enable_peer_access(&lost).unwrap_err();
    assert!(refused.is_device_lost(), "{refused}");
    // Healthy devices still answer, and their own arguments are still checked first.
    assert!(live.can_access_peer(&other).unwrap());
    let own = lost.can_access_peer(&lost).unwrap_err();
    assert!(
        own.to_string().contains("a device cannot be its own peer"),
        "{own}"
    );
}
