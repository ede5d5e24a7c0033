//! The module's allocator: big blocks (a trace's growing columns) straight from the kernel.
//!
//! The trace's columns grow chunk by chunk by doubling. Through glibc's malloc, whose mmap
//! threshold rises after each free of a big block, they end up in the heap: each doubling
//! copies and leaves a hole that is never given back (60 MB of 234 MB RSS after reading a
//! 311 MB trace). Here a block of 256 KiB or more is its own mapping: it grows with `mremap`
//! (no copy, no hole) and its pages go back to the system when freed. Small blocks go to
//! malloc as before. Rust allocations of this module only; Python and polars are untouched.

use std::alloc::{GlobalAlloc, Layout, System};

pub struct BigMaps;

#[cfg(target_os = "linux")]
mod sys {
    use std::ffi::{c_int, c_void};

    extern "C" {
        pub fn mmap(addr: *mut c_void, len: usize, prot: c_int, flags: c_int, fd: c_int, off: i64) -> *mut c_void;
        pub fn munmap(addr: *mut c_void, len: usize) -> c_int;
        pub fn mremap(old: *mut c_void, old_len: usize, new_len: usize, flags: c_int, ...) -> *mut c_void;
    }
    pub const PROT_RW: c_int = 0x1 | 0x2;
    pub const MAP_PRIVATE_ANON: c_int = 0x02 | 0x20;
    pub const MREMAP_MAYMOVE: c_int = 1;
    pub const PAGE: usize = 4096;
    pub const BIG: usize = 256 << 10;

    pub fn failed(p: *mut c_void) -> bool {
        p as isize == -1
    }
}

#[cfg(target_os = "linux")]
impl BigMaps {
    #[inline]
    fn big(size: usize, align: usize) -> bool {
        size >= sys::BIG && align <= sys::PAGE
    }

    fn pages(size: usize) -> usize {
        size.div_ceil(sys::PAGE) * sys::PAGE
    }

    unsafe fn map(size: usize) -> *mut u8 {
        // SAFETY: an anonymous private mapping; no aliasing.
        let p = unsafe {
            sys::mmap(std::ptr::null_mut(), Self::pages(size), sys::PROT_RW, sys::MAP_PRIVATE_ANON, -1, 0)
        };
        if sys::failed(p) {
            std::ptr::null_mut()
        } else {
            p.cast()
        }
    }
}

#[cfg(target_os = "linux")]
unsafe impl GlobalAlloc for BigMaps {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        if Self::big(l.size(), l.align()) {
            unsafe { Self::map(l.size()) }
        } else {
            unsafe { System.alloc(l) }
        }
    }

    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        if Self::big(l.size(), l.align()) {
            unsafe { Self::map(l.size()) } // fresh pages are zero
        } else {
            unsafe { System.alloc_zeroed(l) }
        }
    }

    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        if Self::big(l.size(), l.align()) {
            unsafe { sys::munmap(p.cast(), Self::pages(l.size())) };
        } else {
            unsafe { System.dealloc(p, l) }
        }
    }

    unsafe fn realloc(&self, p: *mut u8, l: Layout, new_size: usize) -> *mut u8 {
        let (was, will) = (Self::big(l.size(), l.align()), Self::big(new_size, l.align()));
        match (was, will) {
            (false, false) => unsafe { System.realloc(p, l, new_size) },
            (true, true) => {
                let q = unsafe {
                    sys::mremap(p.cast(), Self::pages(l.size()), Self::pages(new_size), sys::MREMAP_MAYMOVE)
                };
                if sys::failed(q) {
                    std::ptr::null_mut()
                } else {
                    q.cast()
                }
            }
            _ => {
                // Across the threshold: a fresh block of the other kind, the bytes copied.
                let nl = unsafe { Layout::from_size_align_unchecked(new_size, l.align()) };
                let q = unsafe { self.alloc(nl) };
                if !q.is_null() {
                    unsafe { std::ptr::copy_nonoverlapping(p, q, l.size().min(new_size)) };
                    unsafe { self.dealloc(p, l) };
                }
                q
            }
        }
    }
}

#[cfg(not(target_os = "linux"))]
unsafe impl GlobalAlloc for BigMaps {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new_size: usize) -> *mut u8 {
        unsafe { System.realloc(p, l, new_size) }
    }
}
