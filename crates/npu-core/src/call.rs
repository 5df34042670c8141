//! Checked ACL calls.

/// Calls a required ACL function through a [`Runtime`](crate::Runtime)'s table and checks the
/// result, producing an [`Error::Acl`](crate::Error::Acl) that names the function.
///
/// The expansion calls a raw C function pointer, so it must be written inside an `unsafe`
/// block whose `// SAFETY:` comment justifies the arguments. In a forked child (forked after
/// npu-rs started a runtime or one of its threads, or while it made or started one) the
/// function is not called and the result is
/// [`Error::Forked`](crate::Error::Forked) (see [`forked`](crate::forked)).
///
/// Unlike the rest of the plumbing npu-rs's crates share, it takes no
/// [`Seal`](crate::seal::Seal): its expansion names only public items (what any caller of
/// [`Runtime::api`](crate::Runtime::api) could write) and needs `unsafe` already, so npu-rs's
/// tests and examples use it as any crate may.
///
/// ```
/// use npu_core::{acl_call, Runtime};
///
/// let rt = Runtime::global()?;
/// let mut count = 0u32;
/// // SAFETY: `count` is a valid out-pointer for the duration of the call.
/// unsafe { acl_call!(&rt, aclrtGetDeviceCount(&mut count)) }?;
/// assert!(count >= 1);
/// # Ok::<(), npu_core::Error>(())
/// ```
#[doc(hidden)]
#[macro_export]
macro_rules! acl_call {
    ($runtime:expr, $function:ident ( $($argument:expr),* $(,)? )) => {{
        let runtime: &$crate::Runtime = $runtime;
        match $crate::forked() {
            false => runtime.check(stringify!($function), (runtime.api().$function)($($argument),*)),
            true => Err($crate::Error::Forked { api: stringify!($function) }),
        }
    }};
}

/// Like [`acl_call!`], for the optional functions (only newer runtimes export some, later ones
/// drop the deprecated ones): when the loaded runtime lacks
/// the function, the result is [`Error::Unsupported`](crate::Error::Unsupported).
#[doc(hidden)]
#[macro_export]
macro_rules! acl_call_opt {
    ($runtime:expr, $function:ident ( $($argument:expr),* $(,)? )) => {{
        let runtime: &$crate::Runtime = $runtime;
        match (runtime.api().$function, $crate::forked()) {
            (Some(function), false) => runtime.check(stringify!($function), function($($argument),*)),
            (None, _) => Err($crate::Error::Unsupported { api: stringify!($function) }),
            (Some(_), true) => Err($crate::Error::Forked { api: stringify!($function) }),
        }
    }};
}
