//! A contiguous buffer of any Python object (bytes, bytearray, a memoryview of one), read in
//! place. `PyObject_GetBuffer` joined the limited API only in 3.11, but the function and the
//! `Py_buffer` layout are the same in every CPython 3, so an abi3-py310 module declares them
//! itself. While the view is held, the exporter cannot resize the buffer (a bytearray raises
//! BufferError), so the bytes stay valid with the GIL released.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::ffi::PyObject;
use pyo3::prelude::*;
use std::os::raw::{c_char, c_int, c_void};

#[repr(C)]
struct PyBuffer {
    buf: *mut c_void,
    obj: *mut PyObject,
    len: isize,
    itemsize: isize,
    readonly: c_int,
    ndim: c_int,
    format: *mut c_char,
    shape: *mut isize,
    strides: *mut isize,
    suboffsets: *mut isize,
    internal: *mut c_void,
}

extern "C" {
    fn PyObject_GetBuffer(obj: *mut PyObject, view: *mut PyBuffer, flags: c_int) -> c_int;
    fn PyBuffer_Release(view: *mut PyBuffer);
}

const PYBUF_SIMPLE: c_int = 0; // contiguous bytes, no format or shape
const PYBUF_WRITABLE: c_int = 1; // the same, and written to (a numpy array made for the result)

/// A held buffer export; released on drop (with the GIL: only built and dropped while held).
pub struct View {
    raw: Box<PyBuffer>,
}

// The bytes are read (never written) on other threads while the export pins them.
unsafe impl Send for View {}
unsafe impl Sync for View {}

impl View {
    pub fn new(obj: &Bound<'_, PyAny>) -> PyResult<View> {
        View::with_flags(obj, PYBUF_SIMPLE)
    }

    /// A writable export (a read-only buffer raises BufferError).
    pub fn writable(obj: &Bound<'_, PyAny>) -> PyResult<View> {
        View::with_flags(obj, PYBUF_WRITABLE)
    }

    fn with_flags(obj: &Bound<'_, PyAny>, flags: c_int) -> PyResult<View> {
        let mut raw = Box::new(PyBuffer {
            buf: std::ptr::null_mut(),
            obj: std::ptr::null_mut(),
            len: 0,
            itemsize: 0,
            readonly: 0,
            ndim: 0,
            format: std::ptr::null_mut(),
            shape: std::ptr::null_mut(),
            strides: std::ptr::null_mut(),
            suboffsets: std::ptr::null_mut(),
            internal: std::ptr::null_mut(),
        });
        // SAFETY: obj is a live object (we hold the GIL); raw is a zeroed Py_buffer.
        if unsafe { PyObject_GetBuffer(obj.as_ptr(), &mut *raw, flags) } != 0 {
            return Err(PyErr::take(obj.py()).unwrap_or_else(|| PyTypeError::new_err("not a contiguous buffer")));
        }
        Ok(View { raw })
    }

    pub fn bytes(&self) -> &[u8] {
        if self.raw.len == 0 || self.raw.buf.is_null() {
            return &[];
        }
        // SAFETY: the export keeps buf..buf+len alive and unresized until released.
        unsafe { std::slice::from_raw_parts(self.raw.buf as *const u8, self.raw.len as usize) }
    }

    /// The bytes to write (only of a `writable` view; one `&mut` at a time by the borrow).
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        if self.raw.len == 0 || self.raw.buf.is_null() || self.raw.readonly != 0 {
            return &mut [];
        }
        // SAFETY: a writable export of buf..buf+len, pinned until released.
        unsafe { std::slice::from_raw_parts_mut(self.raw.buf as *mut u8, self.raw.len as usize) }
    }
}

impl Drop for View {
    fn drop(&mut self) {
        // SAFETY: a view taken by PyObject_GetBuffer, released once; callers hold the GIL.
        unsafe { PyBuffer_Release(&mut *self.raw) }
    }
}


/// Integer types of which every bit pattern is a value, so that a buffer's bytes may be read as them.
///
/// # Safety
/// Implement only for plain integers (no padding, no invalid values).
pub(crate) unsafe trait Plain: Copy {
    const NAME: &'static str;
}
// SAFETY: plain integers.
unsafe impl Plain for i64 {
    const NAME: &'static str = "int64";
}
// SAFETY: plain integers.
unsafe impl Plain for i32 {
    const NAME: &'static str = "int32";
}

fn misaligned<T: Plain>(who: &str, what: &str) -> PyErr {
    PyValueError::new_err(format!("{who}: {what}: not an aligned {} array", T::NAME))
}

/// The values of a C-contiguous, aligned buffer as `T`; `who` names the caller in the error.
pub(crate) fn values<'a, T: Plain>(b: &'a [u8], who: &str, what: &str) -> PyResult<&'a [T]> {
    // SAFETY: every bit pattern is a T (`Plain`); align_to leaves any unaligned bytes outside `mid`.
    let (pre, mid, post) = unsafe { b.align_to::<T>() };
    if !pre.is_empty() || !post.is_empty() {
        return Err(misaligned::<T>(who, what));
    }
    Ok(mid)
}

/// `values` of a writable buffer.
pub(crate) fn values_mut<'a, T: Plain>(b: &'a mut [u8], who: &str, what: &str) -> PyResult<&'a mut [T]> {
    // SAFETY: as in `values`; the view is writable and no other slice of it is alive.
    let (pre, mid, post) = unsafe { b.align_to_mut::<T>() };
    if !pre.is_empty() || !post.is_empty() {
        return Err(misaligned::<T>(who, what));
    }
    Ok(mid)
}

/// int64 values of a C-contiguous, aligned buffer; `who` names the caller in the error.
pub(crate) fn i64s<'a>(b: &'a [u8], who: &str, what: &str) -> PyResult<&'a [i64]> {
    values(b, who, what)
}

/// `i64s` of a writable buffer.
pub(crate) fn i64s_mut<'a>(b: &'a mut [u8], who: &str, what: &str) -> PyResult<&'a mut [i64]> {
    values_mut(b, who, what)
}

/// int32 values of a C-contiguous, aligned buffer (the graph's indexes); `who` names the caller.
pub(crate) fn i32s<'a>(b: &'a [u8], who: &str, what: &str) -> PyResult<&'a [i32]> {
    values(b, who, what)
}

/// `i32s` of a writable buffer.
pub(crate) fn i32s_mut<'a>(b: &'a mut [u8], who: &str, what: &str) -> PyResult<&'a mut [i32]> {
    values_mut(b, who, what)
}

/// Whether two buffers share no byte (an output must not alias an input).
fn disjoint(a: &[u8], b: &[u8]) -> bool {
    let (a0, b0) = (a.as_ptr() as usize, b.as_ptr() as usize);
    a.is_empty() || b.is_empty() || a0 + a.len() <= b0 || b0 + b.len() <= a0
}

/// Whether each of `outs` shares no byte with any of `ins` nor with another of `outs`: the
/// outputs are written while the inputs are read.
pub(crate) fn outputs_apart<'a>(outs: &[View], ins: impl IntoIterator<Item = &'a View> + Clone) -> bool {
    outs.iter().enumerate().all(|(i, o)| {
        ins.clone().into_iter().all(|b| disjoint(o.bytes(), b.bytes()))
            && outs.iter().skip(i + 1).all(|p| disjoint(o.bytes(), p.bytes()))
    })
}
