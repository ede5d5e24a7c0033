//! The order of the intervals `innermost` searches (`traceanalyzer.analyses.thread_clock.
//! _innermost_last`, whose lexsort is the fallback and the reference): sorted by start key
//! already, those that start together put innermost last: the longest first (end descending),
//! then by depth, then by id, then by position. The groups of equal keys are a few intervals
//! each, so each is sorted alone (a lexsort of four keys over every tied interval was 6-9 ms per
//! table at 311 MB).

use crate::buffer::{self, View};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

fn err(what: &str) -> PyErr {
    PyValueError::new_err(format!("innermost_ties: {what}"))
}

/// Reorder `order` (positions, int64, in place) within each run of equal `key[order[i]]`
/// (the runs must be in position order, as a stable sort by key leaves them) by end descending,
/// then `depth` (empty: none), then `ids`, then position. `key`, `end`, `depth`, `ids` are int64
/// per interval.
#[pyfunction]
#[pyo3(signature = (order, key, end, depth, ids))]
pub fn innermost_ties(
    py: Python<'_>,
    order: &Bound<'_, PyAny>,
    key: &Bound<'_, PyAny>,
    end: &Bound<'_, PyAny>,
    depth: &Bound<'_, PyAny>,
    ids: &Bound<'_, PyAny>,
) -> PyResult<()> {
    let ins = [key, end, depth, ids].iter().map(|o| View::new(o)).collect::<PyResult<Vec<View>>>()?;
    let mut out = [View::writable(order)?];
    if !buffer::outputs_apart(&out, ins.iter()) {
        return Err(err("order shares memory with an input"));
    }
    let names = ["key", "end", "depth", "ids"];
    let mut v: Vec<&[i64]> = Vec::with_capacity(4);
    for (view, name) in ins.iter().zip(names) {
        v.push(buffer::i64s(view.bytes(), "innermost_ties", name)?);
    }
    let (key, end, depth, ids) = (v[0], v[1], v[2], v[3]);
    let order = buffer::i64s_mut(out[0].bytes_mut(), "innermost_ties", "order")?;
    let n = key.len();
    if end.len() != n || ids.len() != n || (!depth.is_empty() && depth.len() != n) || order.len() != n {
        return Err(err("order, key, end, ids (and depth, if any) need one value per interval"));
    }
    if order.iter().any(|&p| p < 0 || p as usize >= n) {
        return Err(err("order must hold positions"));
    }
    py.allow_threads(|| {
        let mut i = 0;
        while i < n {
            let k = key[order[i] as usize];
            let mut j = i + 1;
            while j < n && key[order[j] as usize] == k {
                j += 1;
            }
            if j - i > 1 {
                let deep = |p: usize| if depth.is_empty() { 0 } else { depth[p] };
                order[i..j].sort_by_key(|&p| {
                    let p = p as usize;
                    (std::cmp::Reverse(end[p]), deep(p), ids[p], p)
                });
            }
            i = j;
        }
    });
    Ok(())
}
