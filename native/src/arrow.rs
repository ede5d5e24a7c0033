//! The Arrow C data interface, written out by hand (the `arrow` crate would double the build
//! time): an `ArrowColumn` owns one finished column's buffers and hands them to polars through
//! the Arrow PyCapsule protocol (`__arrow_c_array__`), which moves the buffers, never copies
//! them: polars keeps the Rust allocation and frees it through `release` when the Series dies.
//!
//! Only the layouts the decoder makes: int64, float64 and uint32 with an optional validity
//! bitmap, and large strings (int64 offsets) for a dictionary of distinct values.
//! See <https://arrow.apache.org/docs/format/CDataInterface.html>.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyCapsule;
use std::ffi::{c_char, c_void, CStr, CString};
use std::ptr::null_mut;

/// `struct ArrowSchema`.
#[repr(C)]
pub struct FfiSchema {
    format: *const c_char,
    name: *const c_char,
    metadata: *const c_char,
    flags: i64,
    n_children: i64,
    children: *mut *mut FfiSchema,
    dictionary: *mut FfiSchema,
    release: Option<unsafe extern "C" fn(*mut FfiSchema)>,
    private_data: *mut c_void,
}

/// `struct ArrowArray`.
#[repr(C)]
pub struct FfiArray {
    length: i64,
    null_count: i64,
    offset: i64,
    n_buffers: i64,
    n_children: i64,
    buffers: *mut *const c_void,
    children: *mut *mut FfiArray,
    dictionary: *mut FfiArray,
    release: Option<unsafe extern "C" fn(*mut FfiArray)>,
    private_data: *mut c_void,
}

// Moved into a capsule and read by whoever holds the GIL; the pointers are owned by the struct.
unsafe impl Send for FfiSchema {}
unsafe impl Send for FfiArray {}

/// A capsule's struct not taken by a consumer is released with the capsule (the protocol's rule:
/// a consumer that moves it out sets `release` to null).
impl Drop for FfiSchema {
    fn drop(&mut self) {
        if let Some(release) = self.release {
            // SAFETY: a live struct made by `schema` below, released once.
            unsafe { release(self) }
        }
    }
}

impl Drop for FfiArray {
    fn drop(&mut self) {
        if let Some(release) = self.release {
            // SAFETY: a live struct made by `ArrowColumn::array` below, released once.
            unsafe { release(self) }
        }
    }
}

const NULLABLE: i64 = 2; // ARROW_FLAG_NULLABLE

/// One buffer of an array, owned.
pub enum Buf {
    Bits(Vec<u8>),
    I64(Vec<i64>),
    F64(Vec<f64>),
    U32(Vec<u32>),
    U8(Vec<u8>),
}

impl Buf {
    fn ptr(&self) -> *const c_void {
        match self {
            Buf::Bits(v) | Buf::U8(v) => v.as_ptr().cast(),
            Buf::I64(v) => v.as_ptr().cast(),
            Buf::F64(v) => v.as_ptr().cast(),
            Buf::U32(v) => v.as_ptr().cast(),
        }
    }
}

/// What `release` frees: the buffers and the table of their addresses.
struct ArrayPrivate {
    _bufs: Vec<Option<Buf>>,
    ptrs: Vec<*const c_void>,
}

unsafe extern "C" fn release_array(a: *mut FfiArray) {
    if a.is_null() {
        return;
    }
    // SAFETY: called once per struct, by its holder; private_data is ours (a Box).
    let a = unsafe { &mut *a };
    if !a.private_data.is_null() {
        drop(unsafe { Box::from_raw(a.private_data as *mut ArrayPrivate) });
    }
    a.private_data = null_mut();
    a.release = None;
}

struct SchemaPrivate {
    _format: CString,
    _name: CString,
}

unsafe extern "C" fn release_schema(s: *mut FfiSchema) {
    if s.is_null() {
        return;
    }
    // SAFETY: as for the array.
    let s = unsafe { &mut *s };
    if !s.private_data.is_null() {
        drop(unsafe { Box::from_raw(s.private_data as *mut SchemaPrivate) });
    }
    s.private_data = null_mut();
    s.release = None;
}

fn schema(format: &str, name: &str) -> FfiSchema {
    let format = CString::new(format).expect("format");
    let name = CString::new(name).unwrap_or_default();
    let (f, n) = (format.as_ptr(), name.as_ptr());
    FfiSchema {
        format: f,
        name: n,
        metadata: std::ptr::null(),
        flags: NULLABLE,
        n_children: 0,
        children: null_mut(),
        dictionary: null_mut(),
        release: Some(release_schema),
        private_data: Box::into_raw(Box::new(SchemaPrivate { _format: format, _name: name })).cast(),
    }
}

/// One column, exported once: `__arrow_c_array__` moves its buffers out.
#[pyclass(module = "traceanalyzer._native")]
pub struct ArrowColumn {
    name: String,
    format: &'static str,
    length: usize,
    null_count: usize,
    /// The layout's buffers in Arrow's order (None: an absent validity bitmap).
    bufs: Option<Vec<Option<Buf>>>,
}

impl ArrowColumn {
    /// int64 (`l`), float64 (`g`), uint32 (`I`) values with an optional validity bitmap.
    pub fn primitive(name: &str, values: Buf, length: usize, validity: Option<Vec<u8>>, null_count: usize) -> Self {
        let format = match values {
            Buf::I64(_) => "l",
            Buf::F64(_) => "g",
            Buf::U32(_) => "I",
            _ => unreachable!("not a primitive buffer"),
        };
        let validity = validity.filter(|_| null_count > 0).map(Buf::Bits);
        ArrowColumn { name: name.into(), format, length, null_count, bufs: Some(vec![validity, Some(values)]) }
    }

    /// Large UTF-8 strings (`U`): int64 offsets (length + 1 of them) into `data`.
    pub fn strings(name: &str, offsets: Vec<i64>, data: Vec<u8>, validity: Option<Vec<u8>>, null_count: usize) -> Self {
        let length = offsets.len() - 1;
        let validity = validity.filter(|_| null_count > 0).map(Buf::Bits);
        let bufs = vec![validity, Some(Buf::I64(offsets)), Some(Buf::U8(data))];
        ArrowColumn { name: name.into(), format: "U", length, null_count, bufs: Some(bufs) }
    }

    fn array(&mut self) -> PyResult<FfiArray> {
        let bufs = self.bufs.take().ok_or_else(|| PyValueError::new_err("column already exported"))?;
        let ptrs: Vec<*const c_void> = bufs.iter().map(|b| b.as_ref().map_or(std::ptr::null(), Buf::ptr)).collect();
        let mut private = Box::new(ArrayPrivate { _bufs: bufs, ptrs });
        let n_buffers = private.ptrs.len() as i64;
        let buffers = private.ptrs.as_mut_ptr();
        Ok(FfiArray {
            length: self.length as i64,
            null_count: self.null_count as i64,
            offset: 0,
            n_buffers,
            n_children: 0,
            buffers,
            children: null_mut(),
            dictionary: null_mut(),
            release: Some(release_array),
            private_data: Box::into_raw(private).cast(),
        })
    }
}

const SCHEMA_NAME: &CStr = c"arrow_schema";
const ARRAY_NAME: &CStr = c"arrow_array";

#[pymethods]
impl ArrowColumn {
    /// The Arrow PyCapsule protocol: (schema capsule, array capsule). Once only: the buffers move.
    #[pyo3(signature = (requested_schema=None))]
    fn __arrow_c_array__<'py>(
        &mut self,
        py: Python<'py>,
        requested_schema: Option<Bound<'py, PyAny>>,
    ) -> PyResult<(Bound<'py, PyCapsule>, Bound<'py, PyCapsule>)> {
        let _ = requested_schema; // the one layout there is
        let array = self.array()?;
        let schema = PyCapsule::new_with_destructor(py, schema(self.format, &self.name), Some(SCHEMA_NAME.into()), |s, _| drop(s))?;
        let array = PyCapsule::new_with_destructor(py, array, Some(ARRAY_NAME.into()), |a, _| drop(a))?;
        Ok((schema, array))
    }

    /// The column's type as an Arrow schema capsule.
    fn __arrow_c_schema__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyCapsule>> {
        PyCapsule::new_with_destructor(py, schema(self.format, &self.name), Some(SCHEMA_NAME.into()), |s, _| drop(s))
    }
}
