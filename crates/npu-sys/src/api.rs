//! The function-pointer table, generated from the header's function list.

use std::fmt;

/// The required symbols a library did not export, found by [`AclApi::from_library`].
///
/// Read, never built, by users: `#[non_exhaustive]`, so that a field can be added.
///
/// ```
/// use npu_sys::AclApi;
///
/// // The C library is loaded in every process and exports none of ACL's functions.
/// let libc = libloading::Library::from(libloading::os::unix::Library::this());
/// // SAFETY: no symbol is found, so no pointer of a wrong type is ever produced.
/// let missing = unsafe { AclApi::from_library(&libc) }.unwrap_err();
/// assert_eq!(missing.missing.len(), AclApi::REQUIRED.len());
/// assert!(missing.to_string().starts_with("missing required ACL symbols: "));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct MissingSymbols {
    /// Names of the required ACL functions that could not be resolved.
    pub missing: Vec<&'static str>,
}

impl fmt::Display for MissingSymbols {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "missing required ACL symbols: {}",
            self.missing.join(", ")
        )
    }
}

impl std::error::Error for MissingSymbols {}

macro_rules! define_acl_api {
    (
        required { $( fn $r:ident ( $($ra:ident : $rt:ty),* ) -> $rr:ty ; )* }
        optional { $( fn $o:ident ( $($oa:ident : $ot:ty),* ) -> $or:ty ; )* }
    ) => {
        /// The ACL runtime as a table of C function pointers, one per function npu-rs binds.
        ///
        /// Required functions, the ones npu-rs calls unconditionally, are plain pointers; a
        /// library lacking one fails to load. Functions a runtime may lack (those only newer
        /// CANN releases export, deprecated ones a later release removes, the model dump trio,
        /// and those npu-rs never calls) are `Option`s and `None` where the loaded runtime does
        /// not export them.
        ///
        /// ```no_run
        /// use npu_sys::AclApi;
        ///
        /// // SAFETY: CANN's runtime library; loading it runs CANN's initialisers.
        /// let library = unsafe { libloading::Library::new("libascendcl.so") }?;
        /// // SAFETY: CANN's library exports ACL's functions with ACL's prototypes, and
        /// // `library` outlives every use of `api` here.
        /// let api = unsafe { AclApi::from_library(&library) }?;
        /// // SAFETY: a NULL configuration path is allowed.
        /// let code = unsafe { (api.aclInit)(std::ptr::null()) };
        /// println!("aclInit: {code}; not exported: {:?}", api.unsupported());
        /// # Ok::<(), Box<dyn std::error::Error>>(())
        /// ```
        #[derive(Clone, Copy)]
        pub struct AclApi {
            $(
                #[doc = concat!("`", stringify!($r), "`.")]
                pub $r: unsafe extern "C" fn($($rt),*) -> $rr,
            )*
            $(
                #[doc = concat!("`", stringify!($o), "`, if the runtime exports it.")]
                pub $o: Option<unsafe extern "C" fn($($ot),*) -> $or>,
            )*
        }

        impl AclApi {
            /// Names of the functions every supported runtime must export.
            pub const REQUIRED: &'static [&'static str] = &[$(stringify!($r)),*];
            /// Names of the functions that are probed and may be absent.
            pub const OPTIONAL: &'static [&'static str] = &[$(stringify!($o)),*];

            /// Resolves every function from a loaded AscendCL runtime library.
            ///
            /// Fails with the list of missing required symbols; absent optional symbols are
            /// left `None` (see [`AclApi::unsupported`]).
            ///
            /// ```
            /// use npu_sys::AclApi;
            ///
            /// // This program's own symbols: the C library's, and none of ACL's.
            /// let this = libloading::Library::from(libloading::os::unix::Library::this());
            /// // SAFETY: no symbol is found, so no pointer of a wrong type is ever produced.
            /// let missing = unsafe { AclApi::from_library(&this) }.unwrap_err();
            /// assert!(missing.missing.contains(&"aclInit"));
            /// ```
            ///
            /// # Safety
            ///
            /// `library` must be an AscendCL runtime whose exported functions have the
            /// prototypes of npu-rs's ACL header, and it must stay loaded for as long as the
            /// returned table (or any copy of it) is used.
            pub unsafe fn from_library(
                library: &libloading::Library,
            ) -> Result<Self, MissingSymbols> {
                let mut missing = Vec::new();
                $(
                    // SAFETY: the caller guarantees the symbol has this prototype.
                    let $r = unsafe {
                        library.get::<unsafe extern "C" fn($($rt),*) -> $rr>(
                            concat!(stringify!($r), "\0").as_bytes(),
                        )
                    }
                    .map(|symbol| *symbol)
                    .map_err(|_| missing.push(stringify!($r)))
                    .ok();
                )*
                $(
                    // SAFETY: as above; absence is allowed for optional functions.
                    let $o = unsafe {
                        library.get::<unsafe extern "C" fn($($ot),*) -> $or>(
                            concat!(stringify!($o), "\0").as_bytes(),
                        )
                    }
                    .map(|symbol| *symbol)
                    .ok();
                )*
                let table = (|| Some(Self { $($r: $r?,)* $($o,)* }))();
                table.ok_or(MissingSymbols { missing })
            }

            /// Names of the optional functions this runtime does not export (see the
            /// example of [`AclApi`]).
            pub fn unsupported(&self) -> Vec<&'static str> {
                let mut names = Vec::new();
                $(
                    if self.$o.is_none() {
                        names.push(stringify!($o));
                    }
                )*
                names
            }
        }

        impl std::fmt::Debug for AclApi {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct("AclApi")
                    .field("required", &Self::REQUIRED.len())
                    .field("unsupported", &self.unsupported())
                    .finish()
            }
        }
    };
}

crate::for_each_acl_function!(define_acl_api!());

#[cfg(test)]
mod tests {
    use super::AclApi;

    #[test]
    fn required_and_optional_lists_are_disjoint_and_complete() {
        for name in AclApi::OPTIONAL {
            assert!(
                !AclApi::REQUIRED.contains(name),
                "{name} is both required and optional"
            );
        }
        assert!(AclApi::REQUIRED.contains(&"aclrtRecordEvent"));
        assert!(AclApi::OPTIONAL.contains(&"aclrtQueryEventStatus"));
        // Deprecated functions CANN says a later release removes: their absence must not fail
        // the load.
        assert!(AclApi::OPTIONAL.contains(&"aclrtQueryEvent"));
        assert!(AclApi::OPTIONAL.contains(&"aclGetDataBufferSize"));
        // Declared in acl_base_rt.h, acl_rt.h's first and last blocks: the lists span the headers.
        assert!(AclApi::REQUIRED.contains(&"aclrtGetSocName"));
        assert!(AclApi::REQUIRED.contains(&"aclInit"));
        assert!(AclApi::OPTIONAL.contains(&"aclrtCheckArchCompatibility"));
        assert!(AclApi::OPTIONAL.contains(&"aclrtMemPoolMallocAsync"));
        // The header declares each function once, so no name may repeat.
        let mut names: Vec<_> = AclApi::REQUIRED.iter().chain(AclApi::OPTIONAL).collect();
        let total = names.len();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), total, "a function is listed twice");
    }

    #[test]
    fn loading_a_library_without_acl_reports_every_required_symbol() {
        // The C library is always loaded and exports none of ACL's names.
        let lib = libloading::Library::from(libloading::os::unix::Library::this());
        // SAFETY: no symbol is found, so no pointer of a wrong type is ever produced.
        let err = unsafe { AclApi::from_library(&lib) }.unwrap_err();
        assert_eq!(err.missing.len(), AclApi::REQUIRED.len());
        assert!(
            err.to_string()
                .starts_with("missing required ACL symbols: ")
        );
    }
}
