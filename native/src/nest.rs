//! The nesting of intervals on their thread (`traceanalyzer.links.nest`, whose numpy version
//! `_nest_small` and polars version are the fallback and the reference): each thread's rows in
//! (start, end descending, id) order; a row's depth is its place on the thread, less the
//! intervals of the thread ended by its start (an end at the start counts), plus the
//! zero-length rows from it to the end of its block of equal starts, never below 0; its parent
//! is the last row one level up (in that order) starting at or before it. Here the order is a
//! permutation of u32 positions, bucketed by thread and sorted per thread, and each thread's
//! ends one sorted copy: ~16 bytes a row besides the outputs, where the polars version's
//! sorted key columns, ranks and as-of joins held ~120 (a 1 GB trace's 1 M ops: +129 MB).

use crate::buffer::{self, View};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use crate::threads::by_thread;

fn err(what: &str) -> PyErr {
    PyValueError::new_err(format!("nest: {what}"))
}

/// Fill `depth` (int32) and `parent` (int64: the parent's row, -1 at top level) for rows of
/// (`g0`, `g1`: the thread), `ts`, `end`, `ids` (int64 each, no null). False (nothing decided,
/// the outputs partly written) where two rows of a thread have the same start, end and id:
/// their order is the reference's own.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
pub fn nest(
    py: Python<'_>,
    g0: &Bound<'_, PyAny>,
    g1: &Bound<'_, PyAny>,
    ts: &Bound<'_, PyAny>,
    end: &Bound<'_, PyAny>,
    ids: &Bound<'_, PyAny>,
    depth: &Bound<'_, PyAny>,
    parent: &Bound<'_, PyAny>,
) -> PyResult<bool> {
    let ins = [g0, g1, ts, end, ids].iter().map(|o| View::new(o)).collect::<PyResult<Vec<View>>>()?;
    let mut outs = [View::writable(depth)?, View::writable(parent)?];
    if !buffer::outputs_apart(&outs, ins.iter()) {
        return Err(err("an output shares memory with an input or the other output"));
    }
    let mut v: Vec<&[i64]> = Vec::with_capacity(5);
    for (view, name) in ins.iter().zip(["g0", "g1", "ts", "end", "ids"]) {
        v.push(buffer::i64s(view.bytes(), "nest", name)?);
    }
    let [depth_view, parent_view] = &mut outs;
    let depth = buffer::i32s_mut(depth_view.bytes_mut(), "nest", "depth")?;
    let parent = buffer::i64s_mut(parent_view.bytes_mut(), "nest", "parent")?;
    let n = v[2].len();
    if v.iter().any(|c| c.len() != n) || depth.len() != n || parent.len() != n {
        return Err(err("g0, g1, ts, end, ids, depth and parent need one value per row"));
    }
    if n >= u32::MAX as usize {
        return Err(err("more rows than u32 positions"));
    }
    let (g0, g1, ts, end, ids) = (v[0], v[1], v[2], v[3], v[4]);
    Ok(py.allow_threads(|| nest_rows(g0, g1, ts, end, ids, depth, parent)))
}

fn nest_rows(g0: &[i64], g1: &[i64], ts: &[i64], end: &[i64], ids: &[i64], depth: &mut [i32], parent: &mut [i64]) -> bool {
    let (mut order, start) = by_thread(g0, g1);
    let threads = start.len() - 1;
    let mut ends: Vec<i64> = Vec::new();
    let mut last_at: Vec<i64> = Vec::new(); // per level: the last row seen at it (-1: none)
    for t in 0..threads {
        let mine = &mut order[start[t]..start[t + 1]];
        mine.sort_unstable_by(|&a, &b| {
            let (a, b) = (a as usize, b as usize);
            ts[a].cmp(&ts[b]).then(end[b].cmp(&end[a])).then(ids[a].cmp(&ids[b]))
        });
        let same = |a: u32, b: u32| {
            let (a, b) = (a as usize, b as usize);
            ts[a] == ts[b] && end[a] == end[b] && ids[a] == ids[b]
        };
        if mine.windows(2).any(|w| same(w[0], w[1])) {
            return false;
        }
        ends.clear();
        ends.extend(mine.iter().map(|&r| end[r as usize]));
        ends.sort_unstable();
        last_at.clear();
        let m = mine.len();
        let mut a = 0;
        while a < m {
            // the block of rows starting at one instant: [a, b)
            let s = ts[mine[a] as usize];
            let mut b = a + 1;
            while b < m && ts[mine[b] as usize] == s {
                b += 1;
            }
            let ended = ends.partition_point(|&e| e <= s) as i64;
            let mut zeros = 0i64; // zero-length rows from this one to the end of the block
            for k in (a..b).rev() {
                let r = mine[k] as usize;
                zeros += (end[r] == ts[r]) as i64;
                depth[r] = (k as i64 - ended + zeros).max(0) as i32;
            }
            // the block's rows are candidates for each other's parent (their starts are equal)
            for &r in &mine[a..b] {
                let d = depth[r as usize] as usize;
                if last_at.len() <= d {
                    last_at.resize(d + 1, -1);
                }
                last_at[d] = r as i64;
            }
            for &r in &mine[a..b] {
                let d = depth[r as usize] as usize;
                parent[r as usize] = if d > 0 { last_at[d - 1] } else { -1 };
            }
            a = b;
        }
    }
    true
}
