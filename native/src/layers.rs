//! The CPU layers inside each slice of the dependency graph (`traceanalyzer.analyses.slice_kinds`,
//! whose numpy loop is the fallback and the reference): the time a layer's coverage index covers
//! inside each slice (`covered_in`: one merge of the slices' boundary keys with the index's start
//! keys; `fold.rs` merges every layer's at once and folds them into the slices' kinds).

use crate::buffer::{self, View};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

fn err(what: &str) -> PyErr {
    PyValueError::new_err(format!("layers: {what}"))
}

fn i64s<'a>(b: &'a [u8], what: &str) -> PyResult<&'a [i64]> {
    buffer::i64s(b, "layers", what)
}

fn i64s_mut<'a>(b: &'a mut [u8], what: &str) -> PyResult<&'a mut [i64]> {
    buffer::i64s_mut(b, "layers", what)
}

/// Per slice (thread numbers `th`, [a, b), in key order: by thread, then time, each thread's
/// slices contiguous), the time a coverage index covers inside it, as
/// `graph_nodes.coverages` counts it: the covered time up to b less that up to a (`covered_until`'s
/// count, up to a slice's start the one up to the previous slice's end on its thread), at least
/// 0. One merge of the slices' boundary keys (thread x span + t - lo) with the index's sorted
/// start keys.
#[pyfunction]
#[pyo3(signature = (th, a, b, span, lo, ikey, ith, istart, iend, ibefore, out))]
#[allow(clippy::too_many_arguments)]
pub fn covered_in(
    py: Python<'_>,
    th: &Bound<'_, PyAny>,
    a: &Bound<'_, PyAny>,
    b: &Bound<'_, PyAny>,
    span: i64,
    lo: i64,
    ikey: &Bound<'_, PyAny>,
    ith: &Bound<'_, PyAny>,
    istart: &Bound<'_, PyAny>,
    iend: &Bound<'_, PyAny>,
    ibefore: &Bound<'_, PyAny>,
    out: &Bound<'_, PyAny>,
) -> PyResult<()> {
    let views = [th, a, b, ikey, ith, istart, iend, ibefore].iter().map(|o| View::new(o)).collect::<PyResult<Vec<View>>>()?;
    let names = ["th", "a", "b", "ikey", "ith", "istart", "iend", "ibefore"];
    let mut v: Vec<&[i64]> = Vec::with_capacity(views.len());
    for (view, name) in views.iter().zip(names) {
        v.push(i64s(view.bytes(), name)?);
    }
    let (th, a, b, ikey, ith, istart, iend, ibefore) = (v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]);
    let mut out_view = View::writable(out)?;
    if !buffer::outputs_apart(std::slice::from_ref(&out_view), views.iter()) {
        return Err(err("out shares memory with an input"));
    }
    let out = i64s_mut(out_view.bytes_mut(), "out")?;
    let n = th.len();
    if a.len() != n || b.len() != n || out.len() != n {
        return Err(err("th, a, b and out need one value per slice"));
    }
    let m = ikey.len();
    if ith.len() != m || istart.len() != m || iend.len() != m || ibefore.len() != m || span <= 0 {
        return Err(err("ikey, ith, istart, iend and ibefore need one value per interval, span > 0"));
    }
    if !in_key_order(th, a, b, span, lo) {
        return Err(err("the slices must be in key order"));
    }
    let key = |i: usize, t: i64| th[i].wrapping_mul(span).wrapping_add(t.wrapping_sub(lo));
    if !crate::walk::ascending(ikey, false) {
        return Err(err("ikey must be sorted"));
    }
    py.allow_threads(|| {
        let mut j = 0usize;
        // the query's thread is its slice's (no division of its key)
        let mut until = |q: i64, t: i64, thread: i64| -> i64 {
            while j < m && ikey[j] <= q {
                j += 1;
            }
            if j > 0 && ith[j - 1] == thread {
                let p = j - 1;
                ibefore[p].wrapping_add(t.min(iend[p])).wrapping_sub(istart[p])
            } else {
                0
            }
        };
        let mut to_start = 0i64;
        for i in 0..n {
            if i == 0 || th[i] != th[i - 1] {
                to_start = until(key(i, a[i]), a[i], th[i]);
            }
            let to_end = until(key(i, b[i]), b[i], th[i]);
            out[i] = to_end.wrapping_sub(to_start).max(0);
            to_start = to_end;
        }
    });
    Ok(())
}

/// Whether the slices (thread numbers `th`, [a, b)) are in the merge order both layer passes
/// read them in: by key (thread x span + t - lo), a thread's first slice's start, then every
/// slice's end. Shared with `fold::fold_slices`.
pub(crate) fn in_key_order(th: &[i64], a: &[i64], b: &[i64], span: i64, lo: i64) -> bool {
    let key = |i: usize, t: i64| th[i].wrapping_mul(span).wrapping_add(t.wrapping_sub(lo));
    let mut last = i64::MIN;
    for i in 0..th.len() {
        if i == 0 || th[i] != th[i - 1] {
            if key(i, a[i]) < last {
                return false;
            }
            last = key(i, a[i]);
        }
        if key(i, b[i]) < last {
            return false;
        }
        last = key(i, b[i]);
    }
    true
}
