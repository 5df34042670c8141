//! What the dynamic loader knows of kernel code: the symbol a kernel's code starts with (its
//! name and size) and where a kernel library's image was mapped.

use std::ffi::{CStr, c_char, c_int, c_void};

/// dladdr1's request for the symbol's ELF entry (glibc's `RTLD_DL_SYMENT`, which the libc
/// crate does not define).
const RTLD_DL_SYMENT: c_int = 1;

/// The symbol that starts at `address` (the exports of the program and of the shared objects
/// loaded): the loader's info and its ELF entry. The entry is in the symbol table of the
/// object holding `address`, mapped while that object is.
fn symbol_at(address: usize) -> Option<(libc::Dl_info, *const libc::Elf64_Sym)> {
    // SAFETY: Dl_info is plain pointers, for which all-zero is valid.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    let mut entry: *mut c_void = std::ptr::null_mut();
    // SAFETY: dladdr1 only reads the loader's tables for the address, never the address
    // itself; `info` and `entry` are valid for its writes.
    let found = unsafe {
        libc::dladdr1(
            address as *const c_void,
            &mut info,
            &mut entry,
            RTLD_DL_SYMENT,
        )
    } != 0;
    let starts_here = info.dli_saddr as usize == address;
    (found && starts_here && !info.dli_sname.is_null() && !entry.is_null())
        .then_some((info, entry.cast_const().cast()))
}

/// The name of the symbol that starts at `address`.
pub(crate) fn symbol_name(address: usize) -> Option<String> {
    let (info, _) = symbol_at(address)?;
    // SAFETY: dladdr's symbol name is a NUL-terminated string of the loader's, valid while the
    // object is loaded; it is copied at once.
    let name = unsafe { CStr::from_ptr(info.dli_sname) };
    name.to_str().ok().map(str::to_owned)
}

/// The size of the code that starts at `address`, as its ELF symbol gives it; 0 where the
/// loader knows no symbol starting there.
pub(crate) fn code_size(address: usize) -> usize {
    symbol_at(address).map_or(0, |(_, entry)| {
        // SAFETY: the symbol's entry, in the table of the object that holds the code; the
        // caller keeps that object loaded (the code is a kernel it may launch).
        usize::try_from(unsafe { (*entry).st_size }).unwrap_or(0)
    })
}

/// The start of glibc's `struct link_map`, whose leading members are public ABI.
#[repr(C)]
struct LinkMapHead {
    l_addr: usize,
    l_name: *const c_char,
}

/// The loaded object [`visit`] looks for (its load bias and the loader's name for it) and the
/// range found.
struct Search {
    base: usize,
    name: *const c_char,
    span: Option<(usize, usize)>,
}

/// dl_iterate_phdr's callback: for the object searched for, the range from the start of its
/// lowest loadable segment to the end of its highest.
unsafe extern "C" fn visit(
    info: *mut libc::dl_phdr_info,
    _size: usize,
    data: *mut c_void,
) -> c_int {
    // SAFETY: dl_iterate_phdr passes a valid info for the call; `data` is the `Search` that
    // `mapped_span` passed, borrowed by nothing else meanwhile.
    let (info, search) = unsafe { (&*info, &mut *data.cast::<Search>()) };
    if info.dlpi_addr as usize != search.base || info.dlpi_name != search.name {
        return 0;
    }
    // SAFETY: the loader's program headers of the object, `dlpi_phnum` of them.
    let headers =
        unsafe { std::slice::from_raw_parts(info.dlpi_phdr, usize::from(info.dlpi_phnum)) };
    let loads = || {
        headers
            .iter()
            .filter(|header| header.p_type == libc::PT_LOAD)
    };
    let start = loads().map(|header| header.p_vaddr).min();
    let end = loads().map(|header| header.p_vaddr + header.p_memsz).max();
    if let (Some(start), Some(end)) = (start, end) {
        search.span = Some((search.base + start as usize, (end - start) as usize));
    }
    1
}

/// Where the loader mapped `library`: the address of its image and its size (from its lowest
/// loadable segment to the end of its highest); `None` if the loader does not say.
pub(crate) fn mapped_span(
    library: libloading::Library,
) -> (libloading::Library, Option<(usize, usize)>) {
    let raw = libloading::os::unix::Library::from(library).into_raw();
    let mut map: *const LinkMapHead = std::ptr::null();
    // SAFETY: `raw` is a live dlopen handle; RTLD_DI_LINKMAP stores its `struct link_map *`
    // in `map`.
    let known = unsafe { libc::dlinfo(raw, libc::RTLD_DI_LINKMAP, (&raw mut map).cast()) } == 0;
    // SAFETY: `raw` is the handle `into_raw` gave up just above, given back to an owner once.
    let library = unsafe { libloading::os::unix::Library::from_raw(raw) }.into();
    if !known || map.is_null() {
        return (library, None);
    }
    // SAFETY: the loader's link map of the object, alive while `library` keeps it loaded.
    let (base, name) = unsafe { ((*map).l_addr, (*map).l_name) };
    let mut search = Search {
        base,
        name,
        span: None,
    };
    // SAFETY: `visit` reads only what the loader passes and the `Search` given as data.
    unsafe { libc::dl_iterate_phdr(Some(visit), (&raw mut search).cast()) };
    (library, search.span)
}
