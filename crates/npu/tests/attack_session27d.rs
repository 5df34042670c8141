//! The twenty-seventh session's kernel attacks: launches whose arguments a kernel reads as its
//! C struct, arguments that call back into their stream or panic when dropped, kernels under a
//! timing model, and kernels in a runtime of the program's own. Each test names the
//! strategies it runs under; every wait is bounded (`run`, `until_released`, `watchdog`), so a
//! hang fails its test.

mod common;

use std::sync::Once;

use common::*;
use npu::kernel::ByValue;
use npu::prelude::*;
use npu::sim;

/// A by-value parameter that asks for 64-byte alignment (a C struct holding an AVX-512
/// vector, say).
#[repr(C, align(64))]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Wide([u64; 8]);

/// A by-value parameter that asks for a page's alignment, `ArgPacker::MAX_ALIGN`.
#[repr(C, align(4096))]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Page([u64; 512]);

/// `{uint64_t *out, uint8_t tag, Wide wide}` as the kernel's C compiler lays it out: `wide`
/// at 64, 128 bytes in all, aligned to 64.
#[repr(C)]
struct WideParams {
    out: *mut u64,
    tag: u8,
    wide: Wide,
}

/// `{uint64_t *out, uint8_t tag, Page page}`: `page` at 4096, 8192 bytes, aligned to 4096.
#[repr(C)]
struct PageParams {
    out: *mut u64,
    tag: u8,
    page: Page,
}

/// Kernels that read their parameters as the struct they are, through a reference (what C
/// code does with `const Params *p = args; p->field`): each traps if the pointer it got is
/// not aligned for its struct, and otherwise copies the tag and the aligned field's first and
/// last words to `out`.
const READS_WIDE: &str = "npu_attack27d_reads_wide_params";
const READS_PAGE: &str = "npu_attack27d_reads_page_params";

fn register_struct_readers() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        sim::kernel::register_with_args_size(
            READS_WIDE,
            size_of::<WideParams>(),
            |block, _, args| {
                let params = args.cast::<WideParams>();
                if !params.is_aligned() {
                    return 1;
                }
                if block == 0 {
                    // SAFETY: launched with a WideParams (checked by size), aligned (above);
                    // `out` holds 3 words, kept allocated by the launch.
                    unsafe {
                        let params = &*params;
                        let words = [u64::from(params.tag), params.wide.0[0], params.wide.0[7]];
                        std::ptr::copy_nonoverlapping(words.as_ptr(), params.out, 3);
                    }
                }
                0
            },
        )
        .unwrap();
        sim::kernel::register_with_args_size(
            READS_PAGE,
            size_of::<PageParams>(),
            |block, _, args| {
                let params = args.cast::<PageParams>();
                if !params.is_aligned() {
                    return 1;
                }
                if block == 0 {
                    // SAFETY: as for READS_WIDE, with a PageParams.
                    unsafe {
                        let params = &*params;
                        let words = [u64::from(params.tag), params.page.0[0], params.page.0[511]];
                        std::ptr::copy_nonoverlapping(words.as_ptr(), params.out, 3);
                    }
                }
                0
            },
        )
        .unwrap();
    });
}

/// `ArgPacker`'s promise (npu-core): arguments are laid out "the way a C compiler lays out a
/// struct of the same fields ... The kernel reads the buffer as its argument struct". That
/// holds only if the buffer the kernel gets is aligned for the struct: a field aligned to 64
/// within the buffer is aligned to 64 in memory only if the buffer's start is. A `ByValue`
/// asking for 64 bytes (and one for a page, the packer's `MAX_ALIGN`) after a pointer and a
/// byte, launched 16 times each so that no allocator's luck hides a misaligned buffer; the
/// kernel reads its struct through a reference and must find it aligned and exact. All three
/// strategies.
#[test]
fn a_kernel_reads_its_arguments_as_the_aligned_struct_the_packer_laid_out() {
    register_struct_readers();
    let (_guard, ctx, _) = exclusive(None);
    let (wide, page) = (in_process(&ctx, READS_WIDE), in_process(&ctx, READS_PAGE));
    assert_eq!(
        (size_of::<WideParams>(), size_of::<PageParams>()),
        (128, 8192)
    );
    for strategy in STRATEGIES {
        let s = stream(&ctx, strategy);
        for round in 0..16u64 {
            let value = Wide([round; 8].map(|w| w * 3 + 1));
            let out = DeviceBuffer::<u64>::new(&ctx, 3).unwrap();
            // SAFETY: READS_WIDE takes {uint64_t *out, uint8_t tag, Wide wide} and writes 3
            // words of out, which holds 3.
            let launched = unsafe { s.launch(&wide, 2, (out, 7u8, ByValue(value))) };
            let (out, _, _) = run(launched).unwrap_or_else(|err| {
                panic!("{strategy:?} round {round}: a 64-byte aligned struct: {err}")
            });
            assert_eq!(
                out.to_vec_blocking().unwrap(),
                [7, round * 3 + 1, round * 3 + 1],
                "{strategy:?} round {round}"
            );

            let value = Box::new(ByValue(Page([round + 5; 512])));
            let out = DeviceBuffer::<u64>::new(&ctx, 3).unwrap();
            // SAFETY: READS_PAGE takes {uint64_t *out, uint8_t tag, Page page} and writes 3
            // words of out, which holds 3.
            let launched = unsafe { s.launch(&page, 1, (out, 9u8, value)) };
            let (out, _, _) = run(launched).unwrap_or_else(|err| {
                panic!("{strategy:?} round {round}: a page-aligned struct: {err}")
            });
            assert_eq!(
                out.to_vec_blocking().unwrap(),
                [9, round + 5, round + 5],
                "{strategy:?} round {round}"
            );
        }
        run(s.synchronize()).unwrap();
    }
}
