//! Batched copies through the C ABI: both directions, pinned and pageable host memory, on the
//! caller and on a stream, and every error path with its failIndex.

extern crate ascendcl as npu_sim;

#[macro_use]
mod common;

use std::ffi::c_void;
use std::ptr;

use common::*;
use npu_sim::abi::*;
use npu_sys::*;

fn location(type_: aclrtMemLocationType, id: u32) -> aclrtMemLocation {
    aclrtMemLocation { id, type_ }
}

fn h2d(device: u32) -> aclrtMemcpyBatchAttr {
    aclrtMemcpyBatchAttr {
        dstLoc: location(ACL_MEM_LOCATION_TYPE_DEVICE, device),
        srcLoc: location(ACL_MEM_LOCATION_TYPE_HOST, 0),
        rsv: [0; 16],
    }
}

fn d2h(device: u32) -> aclrtMemcpyBatchAttr {
    aclrtMemcpyBatchAttr {
        dstLoc: location(ACL_MEM_LOCATION_TYPE_HOST, 0),
        srcLoc: location(ACL_MEM_LOCATION_TYPE_DEVICE, device),
        rsv: [0; 16],
    }
}

/// One batch's arrays, kept alive for the call.
struct Batch {
    dsts: Vec<*mut c_void>,
    maxs: Vec<usize>,
    srcs: Vec<*mut c_void>,
    sizes: Vec<usize>,
    attrs: Vec<aclrtMemcpyBatchAttr>,
    starts: Vec<usize>,
    fail: usize,
}

impl Batch {
    fn new(
        copies: &[(*mut c_void, *mut c_void, usize)],
        attrs: &[(usize, aclrtMemcpyBatchAttr)],
    ) -> Self {
        Batch {
            dsts: copies.iter().map(|c| c.0).collect(),
            maxs: copies.iter().map(|c| c.2).collect(),
            srcs: copies.iter().map(|c| c.1).collect(),
            sizes: copies.iter().map(|c| c.2).collect(),
            attrs: attrs.iter().map(|a| a.1).collect(),
            starts: attrs.iter().map(|a| a.0).collect(),
            fail: 0,
        }
    }

    fn run(&mut self, stream: Option<aclrtStream>) -> aclError {
        /// Calls `$api` with the batch's arrays (and the stream, for the async form).
        macro_rules! call {
            ($api:ident $(, $stream:expr)?) => {
                code!($api(
                    self.dsts.as_mut_ptr(),
                    self.maxs.as_mut_ptr(),
                    self.srcs.as_mut_ptr(),
                    self.sizes.as_mut_ptr(),
                    self.dsts.len(),
                    self.attrs.as_mut_ptr(),
                    self.starts.as_mut_ptr(),
                    self.attrs.len(),
                    &mut self.fail
                    $(, $stream)?
                ))
            };
        }
        match stream {
            None => call!(aclrtMemcpyBatch),
            Some(stream) => call!(aclrtMemcpyBatchAsync, stream),
        }
    }

    /// Runs the batch with the V2 form (no failIndex).
    fn run_v2(&mut self, stream: Option<aclrtStream>) -> aclError {
        /// Calls `$api` with the batch's arrays (and the stream, for the async form).
        macro_rules! call {
            ($api:ident $(, $stream:expr)?) => {
                code!($api(
                    self.dsts.as_mut_ptr(),
                    self.maxs.as_mut_ptr(),
                    self.srcs.as_mut_ptr(),
                    self.sizes.as_mut_ptr(),
                    self.dsts.len(),
                    self.attrs.as_mut_ptr(),
                    self.starts.as_mut_ptr(),
                    self.attrs.len()
                    $(, $stream)?
                ))
            };
        }
        match stream {
            None => call!(aclrtMemcpyBatchV2),
            Some(stream) => call!(aclrtMemcpyBatchAsyncV2, stream),
        }
    }

    /// Runs the batch expecting `code` and `failIndex`.
    fn fails(&mut self, stream: Option<aclrtStream>, code: aclError, fail: usize) {
        assert_eq!(self.run(stream), code, "{}", recent_message());
        assert_eq!(self.fail, fail);
    }
}

#[test]
fn batches_copy_every_entry_both_ways() {
    set_device(0);
    let (a, b) = (malloc(256), malloc(256));
    let pinned = malloc_host(256);
    // SAFETY: 256 bytes of pinned memory.
    unsafe { ptr::write_bytes(pinned.cast::<u8>(), 5, 256) };
    let mut pageable = vec![6u8; 128];
    let mut batch = Batch::new(
        &[
            (a, pinned, 256),
            (b, pageable.as_mut_ptr().cast(), 128),
            (b.cast::<u8>().wrapping_add(128).cast(), pinned, 0),
        ],
        &[(0, h2d(0)), (1, h2d(0))],
    );
    assert_eq!(batch.run(None), 0, "{}", recent_message());
    assert_eq!(batch.fail, usize::MAX);
    assert_eq!(download::<u8>(a, 256), vec![5; 256]);
    assert_eq!(&download::<u8>(b, 128)[..], &[6; 128][..]);

    // Device to host on a stream, into pinned and pageable memory.
    let stream = create_stream();
    acl!(aclrtMemset(a, 256, 9, 256));
    let mut back = vec![0u8; 64];
    let mut batch = Batch::new(
        &[(pinned, a, 256), (back.as_mut_ptr().cast(), a, 64)],
        &[(0, d2h(0))],
    );
    assert_eq!(batch.run(Some(stream)), 0, "{}", recent_message());
    acl!(aclrtSynchronizeStream(stream));
    // SAFETY: 256 bytes of pinned memory, written by the finished stream.
    let copied = unsafe { std::slice::from_raw_parts(pinned.cast::<u8>(), 256) };
    assert_eq!(copied, &[9; 256][..]);
    assert_eq!(back, vec![9; 64]);
    acl!(aclrtFreeHost(pinned));
    acl!(aclrtFree(a));
    acl!(aclrtFree(b));
    acl!(aclrtDestroyStream(stream));
}

#[test]
fn bad_batches_name_the_failing_copy() {
    set_device(1);
    let dev = malloc(64);
    let host = malloc_host(64);
    let none = usize::MAX;
    let good = [(dev, host, 64), (dev, host, 64)];

    // Structure: no copy to blame.
    let mut batch = Batch::new(&good, &[(0, h2d(1))]);
    batch.attrs.clear();
    batch.starts.clear();
    batch.fails(None, ACL_ERROR_RT_PARAM_INVALID, none);
    let mut batch = Batch::new(&good[..1], &[(0, h2d(1)), (1, h2d(1))]);
    batch.fails(None, ACL_ERROR_RT_PARAM_INVALID, none);
    let mut batch = Batch::new(&good, &[(1, h2d(1))]);
    batch.fails(None, ACL_ERROR_RT_PARAM_INVALID, none);
    let mut batch = Batch::new(&good, &[(0, h2d(1)), (0, h2d(1))]);
    batch.fails(None, ACL_ERROR_RT_PARAM_INVALID, none);
    let mut batch = Batch::new(&good, &[(0, h2d(1)), (2, h2d(1))]);
    batch.fails(None, ACL_ERROR_RT_PARAM_INVALID, none);
    let mut batch = Batch::new(&good, &[(0, h2d(1))]);
    batch.maxs[1] = 63;
    batch.fails(None, ACL_ERROR_RT_PARAM_INVALID, none);

    // Attributes and directions: the copy is named.
    let mut host_to_host = h2d(1);
    host_to_host.dstLoc.type_ = ACL_MEM_LOCATION_TYPE_HOST;
    let mut batch = Batch::new(&good, &[(0, h2d(1)), (1, host_to_host)]);
    batch.fails(None, ACL_ERROR_RT_PARAM_INVALID, 1);
    let mut batch = Batch::new(
        &[(dev, host, 64), (host, dev, 64)],
        &[(0, h2d(1)), (1, d2h(1))],
    );
    batch.fails(Some(ptr::null_mut()), ACL_ERROR_RT_PARAM_INVALID, 1);
    let mut batch = Batch::new(&good, &[(0, h2d(0))]);
    batch.fails(None, ACL_ERROR_RT_PARAM_INVALID, 0);
    let mut batch = Batch::new(&[(dev, host, 64), (host, dev, 64)], &[(0, h2d(1))]);
    batch.fails(None, ACL_ERROR_RT_PARAM_INVALID, 1);

    // NULL arguments.
    let mut batch = Batch::new(&good, &[(0, h2d(1))]);
    batch.dsts[1] = ptr::null_mut();
    batch.fails(None, ACL_ERROR_INVALID_PARAM, none);
    let mut batch = Batch::new(&[], &[(0, h2d(1))]);
    batch.fails(None, ACL_ERROR_INVALID_PARAM, none);
    let mut batch = Batch::new(&good, &[(0, h2d(1))]);
    batch.srcs[1] = ptr::null_mut();
    batch.fails(None, ACL_ERROR_INVALID_PARAM, none);
    assert!(recent_message().contains("srcs[i] is NULL"));
    // A count no batch can have: refused before any array is read for it.
    let mut batch = Batch::new(&good, &[(0, h2d(1))]);
    let mut fail = 123;
    let code = code!(aclrtMemcpyBatch(
        batch.dsts.as_mut_ptr(),
        batch.maxs.as_mut_ptr(),
        batch.srcs.as_mut_ptr(),
        batch.sizes.as_mut_ptr(),
        1 << 17,
        batch.attrs.as_mut_ptr(),
        batch.starts.as_mut_ptr(),
        1,
        &mut fail
    ));
    assert_eq!(code, ACL_ERROR_RT_PARAM_INVALID);
    assert!(recent_message().contains("implausible"));
    assert_eq!(fail, none);
    // Each array NULL in turn, the others valid: refused naming it, failIndex SIZE_MAX.
    let arrays = ["dsts", "destMaxs", "srcs", "sizes", "attrs", "attrsIndexes"];
    for (at, name) in arrays.into_iter().enumerate() {
        let mut batch = Batch::new(&good, &[(0, h2d(1))]);
        /// The array's pointer, or NULL for the one under test.
        fn or_null<T>(array: &mut [T], null: bool) -> *mut T {
            if null {
                ptr::null_mut()
            } else {
                array.as_mut_ptr()
            }
        }
        let mut fail = 123;
        let code = code!(aclrtMemcpyBatch(
            or_null(&mut batch.dsts, at == 0),
            or_null(&mut batch.maxs, at == 1),
            or_null(&mut batch.srcs, at == 2),
            or_null(&mut batch.sizes, at == 3),
            2,
            or_null(&mut batch.attrs, at == 4),
            or_null(&mut batch.starts, at == 5),
            1,
            &mut fail
        ));
        assert_eq!(code, ACL_ERROR_INVALID_PARAM, "{name}");
        let message = recent_message();
        assert!(message.contains(&format!("{name} is NULL")), "{message}");
        assert_eq!(fail, none, "{name}");
    }
    // The arrays the Batch helper cannot make NULL: srcs, failIndex.
    let (mut d, mut m, mut s, mut z) = ([dev], [64usize], [host], [64usize]);
    let (mut attr, mut start) = ([h2d(1)], [0usize]);
    let mut with = |srcs: *mut *mut c_void, fail: *mut usize| {
        code!(aclrtMemcpyBatch(
            d.as_mut_ptr(),
            m.as_mut_ptr(),
            srcs,
            z.as_mut_ptr(),
            1,
            attr.as_mut_ptr(),
            start.as_mut_ptr(),
            1,
            fail
        ))
    };
    assert_eq!(
        with(s.as_mut_ptr(), ptr::null_mut()),
        ACL_ERROR_INVALID_PARAM
    );
    assert!(recent_message().contains("failIndex"));
    // The pointers in parameter order: a NULL srcs is named before a NULL failIndex.
    assert_eq!(
        with(ptr::null_mut(), ptr::null_mut()),
        ACL_ERROR_INVALID_PARAM
    );
    let message = recent_message();
    assert!(message.contains("srcs is NULL"), "{message}");
    // A NULL array names no copy: failIndex is SIZE_MAX, not what the caller left in it.
    let mut fail = 123;
    assert_eq!(with(ptr::null_mut(), &mut fail), ACL_ERROR_INVALID_PARAM);
    assert!(recent_message().contains("srcs"));
    assert_eq!(fail, none);
    // A stream of another context.
    let mut batch = Batch::new(&good, &[(0, h2d(1))]);
    batch.fails(Some(stream_of_device(0)), ACL_ERROR_RT_STREAM_CONTEXT, none);
    assert!(recent_message().contains("aclrtMemcpyBatchAsync failed"));
    acl!(aclrtFreeHost(host));
    acl!(aclrtFree(dev));
}

#[test]
fn the_v2_forms_copy_and_check_the_same_without_a_fail_index() {
    set_device(0);
    let (dev, host) = (malloc(64), malloc_host(64));
    let mut pageable = vec![3u8; 64];
    let mut batch = Batch::new(&[(dev, pageable.as_mut_ptr().cast(), 64)], &[(0, h2d(0))]);
    assert_eq!(batch.run_v2(None), 0, "{}", recent_message());
    assert_eq!(download::<u8>(dev, 64), vec![3; 64]);
    let stream = create_stream();
    let mut batch = Batch::new(&[(host, dev, 64)], &[(0, d2h(0))]);
    assert_eq!(batch.run_v2(Some(stream)), 0, "{}", recent_message());
    acl!(aclrtSynchronizeStream(stream));
    // SAFETY: 64 bytes of pinned memory, written by the finished stream.
    let copied = unsafe { std::slice::from_raw_parts(host.cast::<u8>(), 64) };
    assert_eq!(copied, &[3; 64][..]);

    // The checks of the V1 forms, with nothing to name the copy through.
    let mut two_ways = Batch::new(
        &[(dev, host, 64), (host, dev, 64)],
        &[(0, h2d(0)), (1, d2h(0))],
    );
    assert_eq!(two_ways.run_v2(None), ACL_ERROR_RT_PARAM_INVALID);
    assert!(recent_message().contains("aclrtMemcpyBatchV2"));
    let mut misplaced = Batch::new(&[(dev, host, 64)], &[(0, h2d(1))]);
    assert_eq!(misplaced.run_v2(Some(stream)), ACL_ERROR_RT_PARAM_INVALID);
    assert!(recent_message().contains("aclrtMemcpyBatchAsyncV2"));
    let mut empty = Batch::new(&[], &[(0, h2d(0))]);
    assert_eq!(empty.run_v2(None), ACL_ERROR_INVALID_PARAM);
    recent_message();
    acl!(aclrtDestroyStream(stream));
    acl!(aclrtFreeHost(host));
    acl!(aclrtFree(dev));
}
