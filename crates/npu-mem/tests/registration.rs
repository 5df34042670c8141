//! Host registration: the rules checked before ACL, ACL's own errors, and registered memory
//! in async copies.

use std::ffi::c_void;

use npu_core::{AclCode, Context, Device, acl_call_opt};
use npu_mem::{
    DeviceBuffer, HacType, HostRegistration, PageAlignedBuffer, RegisterFlags, StableBuffer,
    host_mem_map_capability,
};
use npu_stream::Stream;

fn context() -> Context {
    Device::open(0).unwrap().primary_context().clone()
}

/// A page-aligned buffer that exposes only `range` of itself: how a test builds misaligned
/// and partial-page buffers deterministically.
struct Window {
    pages: PageAlignedBuffer<u8>,
    range: std::ops::Range<usize>,
}

// SAFETY: a fixed sub-range of a page-aligned buffer, which never moves and is owned here.
unsafe impl StableBuffer for Window {
    type Elem = u8;

    fn as_slice(&self) -> &[u8] {
        &self.pages[self.range.clone()]
    }

    fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.pages[self.range.clone()]
    }
}

fn window(range: std::ops::Range<usize>) -> Window {
    Window {
        pages: PageAlignedBuffer::new(4 * 4096).unwrap(),
        range,
    }
}

#[test]
fn misaligned_partial_and_empty_buffers_are_refused_before_acl() {
    let ctx = context();
    for (buffer, rule) in [
        (window(64..64 + 4096), "not 4 KiB aligned"),
        (window(0..100), "not whole 4 KiB pages"),
        (window(0..0), "holds no bytes"),
    ] {
        let rejected = HostRegistration::new(&ctx, buffer, RegisterFlags::PINNED).unwrap_err();
        assert!(rejected.error.acl_code().is_none(), "{}", rejected.error);
        assert!(
            rejected.error.to_string().contains(rule),
            "{}",
            rejected.error
        );
        assert!(rejected.error.to_string().contains("HostRegistration::new"));
        assert_eq!(
            rejected.buffer.pages.len(),
            4 * 4096,
            "the buffer is handed back"
        );
    }
}

/// Two pages, of which the buffer claims to register only the first: a `StableBuffer` whose
/// `registered_bytes` falls short of its slice.
struct ShortClaim(PageAlignedBuffer<u8>);

// SAFETY: the page-aligned buffer never moves and is owned here; its first page belongs to the
// allocation (the claim is short, not wrong).
unsafe impl StableBuffer for ShortClaim {
    type Elem = u8;

    fn as_slice(&self) -> &[u8] {
        &self.0
    }

    fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.0
    }

    fn registered_bytes(&self) -> usize {
        4096
    }
}

/// A registration is page-locked host memory for every element it holds (`HostSlice`), so a
/// buffer that would register fewer bytes than its slice is refused, and handed back.
#[test]
fn a_buffer_registering_less_than_its_elements_is_refused() {
    let buffer = ShortClaim(PageAlignedBuffer::new(2 * 4096).unwrap());
    let rejected = HostRegistration::new(&context(), buffer, RegisterFlags::PINNED).unwrap_err();
    let text = rejected.error.to_string();
    assert!(text.contains("HostRegistration::new"), "{text}");
    assert!(text.contains("registers 4096 bytes of its 8192"), "{text}");
    assert_eq!(
        rejected.buffer.0.len(),
        2 * 4096,
        "the buffer is handed back"
    );
}

#[tokio::test]
async fn registering_a_registered_range_is_acl_error_507910() {
    let ctx = context();
    let mut buffer = PageAlignedBuffer::<u8>::new(8192).unwrap();
    let ptr = buffer.as_mut_ptr().cast::<c_void>();
    // Someone else (another library in the process) registered the range first.
    ctx.bind().unwrap();
    // SAFETY: the buffer outlives the registration, which is undone below.
    unsafe {
        acl_call_opt!(
            ctx.runtime(),
            aclrtHostRegisterV2(ptr, 8192, npu_core::ffi::ACL_HOST_REG_MAPPED)
        )
    }
    .unwrap();
    let rejected = HostRegistration::new(&ctx, buffer, RegisterFlags::PINNED).unwrap_err();
    assert_eq!(rejected.error.acl_code(), Some(AclCode(507910)));
    assert!(
        rejected.error.to_string().contains("already registered"),
        "{}",
        rejected.error
    );
    // SAFETY: undoes the raw registration above.
    unsafe { acl_call_opt!(ctx.runtime(), aclrtHostUnregister(ptr)) }.unwrap();
    let registration = HostRegistration::new(&ctx, rejected.buffer, RegisterFlags::PINNED);
    assert!(registration.is_ok(), "free to register once unregistered");
}

#[tokio::test]
async fn unregistering_what_is_not_registered_is_reported() {
    let ctx = context();
    let registration = HostRegistration::new(
        &ctx,
        PageAlignedBuffer::<u8>::new(4096).unwrap(),
        RegisterFlags::PINNED,
    )
    .unwrap();
    let ptr = registration.as_ptr().cast_mut().cast::<c_void>();
    // Someone else unregistered it behind the registration's back.
    // SAFETY: the buffer stays alive (owned by the registration).
    unsafe { acl_call_opt!(ctx.runtime(), aclrtHostUnregister(ptr)) }.unwrap();
    let err = registration.into_inner().await.unwrap_err();
    assert_eq!(err.acl_code(), Some(AclCode(507911)), "{err}");
    assert!(err.to_string().contains("aclrtHostUnregister"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registered_buffer_is_used_in_async_copies() {
    let ctx = context();
    let stream = Stream::new(&ctx).unwrap();
    let data: Vec<u32> = (0..4096).collect();
    let source = HostRegistration::new(
        &ctx,
        PageAlignedBuffer::from_slice(&data).unwrap(),
        RegisterFlags::PINNED | RegisterFlags::MAPPED,
    )
    .unwrap();
    assert!(source.device_ptr().is_some());
    let device = DeviceBuffer::<u32>::new(&ctx, data.len()).unwrap();
    let (source, device) = stream.copy_h2d(source, device).await.unwrap();

    let target = HostRegistration::new(
        &ctx,
        PageAlignedBuffer::<u32>::new(4096).unwrap(),
        RegisterFlags::PINNED,
    )
    .unwrap();
    let (_device, target) = stream.copy_d2h(device, target).await.unwrap();
    assert_eq!(&target[..], &data[..]);
    assert_eq!(&source.into_inner().await.unwrap()[..], &data[..]);
}

#[test]
fn map_capabilities_are_queried_per_engine() {
    let device = Device::open(0).unwrap();
    assert!(host_mem_map_capability(&device, HacType::AiCore).unwrap());
    assert!(!host_mem_map_capability(&device, HacType::Dvpp).unwrap());
}
