//! Every CPU layer of the dependency graph folded into its slices in one pass
//! (`traceanalyzer.analyses.slice_kinds._fold_native`, whose numpy loop `_fold_numpy` is the
//! reference): per slice the time each cumulative layer union covers (`layers::covered_in`'s
//! count, one merge per union, all at once), each layer's own time, the kind (the first layer of
//! the largest time), whether a work layer covers any of it, whether no layer does, and the
//! layer times as `graph_table.LayerFold` keeps them (the layer covering all of a slice, how many
//! have time in it, the times of the others). No array of a layer's times is made: at 311 MB the
//! per-layer calls (`covered_in`, and a fold of each layer) and numpy between them held four int64 arrays of
//! a million slices and cost ~0.15 s.

use crate::buffer::{self, View};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

fn err(what: &str) -> PyErr {
    PyValueError::new_err(format!("fold_slices: {what}"))
}

fn i64s<'a>(b: &'a [u8], what: &str) -> PyResult<&'a [i64]> {
    buffer::i64s(b, "fold_slices", what)
}

/// One coverage index on the clock (`ThreadClock.index_arrays`) and its merge position.
struct Index<'a> {
    key: &'a [i64],
    th: &'a [i64],
    start: &'a [i64],
    end: &'a [i64],
    before: &'a [i64],
    j: usize,
    to_start: i64,
}

impl Index<'_> {
    /// The time covered inside slices from..to (`out`, one per slice), as `layers::covered_in`
    /// counts it: the position and the time up to the last slice's end carried to the next call.
    #[allow(clippy::too_many_arguments)]
    fn cover(&mut self, th: &[i64], a: &[i64], b: &[i64], span: i64, lo: i64, from: usize, out: &mut [i64]) {
        let (key, ith, start, end, before) = (self.key, self.th, self.start, self.end, self.before);
        let (mut j, mut to_start) = (self.j, self.to_start);
        // the time covered up to t (key q) on `thread`: the last interval starting at or before
        // q, if on the thread (queries come in key order: the position only moves on)
        let mut until = |t: i64, thread: i64| -> i64 {
            let q = thread.wrapping_mul(span).wrapping_add(t.wrapping_sub(lo));
            while j < key.len() && key[j] <= q {
                j += 1;
            }
            if j > 0 && ith[j - 1] == thread {
                before[j - 1].wrapping_add(t.min(end[j - 1])).wrapping_sub(start[j - 1])
            } else {
                0
            }
        };
        for (o, i) in out.iter_mut().zip(from..) {
            if i == 0 || th[i] != th[i - 1] {
                to_start = until(a[i], th[i]);
            }
            let to_end = until(b[i], th[i]);
            *o = to_end.wrapping_sub(to_start).max(0);
            to_start = to_end;
        }
        self.j = j;
        self.to_start = to_start;
    }
}

fn as_bytes<'py>(py: Python<'py>, v: &[i64]) -> Bound<'py, PyBytes> {
    // SAFETY: an i64 slice is plain bytes, 8 per value.
    let b = unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, std::mem::size_of_val(v)) };
    PyBytes::new(py, b)
}

/// Fold the layers into the slices (thread numbers `th`, [a, b), in key order on a clock of
/// `span` from `lo`). `unions`: the distinct cumulative unions' index arrays, five each (ikey,
/// ith, istart, iend, ibefore, as `layers::covered_in` reads them), flat; `which[k]`: layer k's
/// union; `work[k]`: whether layer k is work. Layer k's time is its union's coverage less the
/// previous layer's union's, at least 0 (the first's as it is); the last, untraced, is the
/// slice's length less the last union's, at least 0. Writes per slice (uint8 each) `code` (the
/// first layer of the largest time), `busy` (a work layer has time in it), `empty` (the untraced
/// time is all of it), `full` (the last layer whose time is all of the slice, 255: none) and
/// `count` (how many layers have time in it). Returns per layer (untraced last) the slices and
/// times that `LayerFold.add` puts in its `part`, in slice order, as int64 bytes: those of a
/// time above zero short of the slice, and of a slice all in this layer that a later one also
/// holds all of.
#[pyfunction]
#[pyo3(signature = (th, a, b, span, lo, unions, which, work, code, busy, empty, full, count))]
#[allow(clippy::too_many_arguments)]
pub fn fold_slices<'py>(
    py: Python<'py>,
    th: &Bound<'py, PyAny>,
    a: &Bound<'py, PyAny>,
    b: &Bound<'py, PyAny>,
    span: i64,
    lo: i64,
    unions: Vec<Bound<'py, PyAny>>,
    which: Vec<usize>,
    work: Vec<bool>,
    code: &Bound<'py, PyAny>,
    busy: &Bound<'py, PyAny>,
    empty: &Bound<'py, PyAny>,
    full: &Bound<'py, PyAny>,
    count: &Bound<'py, PyAny>,
) -> PyResult<Vec<(Bound<'py, PyBytes>, Bound<'py, PyBytes>)>> {
    let ins = [th, a, b].iter().map(|o| View::new(o)).chain(unions.iter().map(View::new)).collect::<PyResult<Vec<View>>>()?;
    let mut outs = [code, busy, empty, full, count].iter().map(|o| View::writable(o)).collect::<PyResult<Vec<View>>>()?;
    if !buffer::outputs_apart(&outs, ins.iter()) {
        return Err(err("an output shares memory with another array"));
    }
    let (th, a, b) = (i64s(ins[0].bytes(), "th")?, i64s(ins[1].bytes(), "a")?, i64s(ins[2].bytes(), "b")?);
    let n = th.len();
    if a.len() != n || b.len() != n || outs.iter().any(|o| o.bytes().len() != n) {
        return Err(err("th, a, b, code, busy, empty, full and count need one value per slice"));
    }
    if !unions.len().is_multiple_of(5) || span <= 0 {
        return Err(err("five arrays per union, span > 0"));
    }
    let layers = which.len();
    if work.len() != layers || layers > 100 || which.iter().any(|&d| d >= unions.len() / 5) {
        return Err(err("which and work need one value per layer, each a union's"));
    }
    let mut ix = Vec::with_capacity(unions.len() / 5);
    for d in 0..unions.len() / 5 {
        let v = |k: usize, name: &str| i64s(ins[3 + 5 * d + k].bytes(), name);
        let one = Index { key: v(0, "ikey")?, th: v(1, "ith")?, start: v(2, "istart")?, end: v(3, "iend")?, before: v(4, "ibefore")?, j: 0, to_start: 0 };
        let m = one.key.len();
        if [one.th.len(), one.start.len(), one.end.len(), one.before.len()].iter().any(|&l| l != m) {
            return Err(err("ikey, ith, istart, iend and ibefore need one value per interval"));
        }
        if !one.key.windows(2).all(|w| w[0] <= w[1]) {
            return Err(err("ikey must be sorted"));
        }
        ix.push(one);
    }
    // the queries in merge order: a thread's first slice's start, then every slice's end
    if !crate::layers::in_key_order(th, a, b, span, lo) {
        return Err(err("the slices must be in key order"));
    }
    let [code_v, busy_v, empty_v, full_v, count_v] = &mut outs[..] else { unreachable!() };
    let (code, busy, empty) = (code_v.bytes_mut(), busy_v.bytes_mut(), empty_v.bytes_mut());
    let (full, count) = (full_v.bytes_mut(), count_v.bytes_mut());
    let parts = py.allow_threads(|| {
        // per layer (untraced last) the slices and times of its part
        let mut at: Vec<Vec<i64>> = vec![Vec::new(); layers + 1];
        let mut ns: Vec<Vec<i64>> = vec![Vec::new(); layers + 1];
        // a block of slices at a time: each union's times for the block (a tight loop per union,
        // in cache), then the block folded
        const BLOCK: usize = 4096;
        let mut u = vec![0i64; ix.len() * BLOCK];
        let col: Vec<usize> = which.iter().map(|&d| d * BLOCK).collect();
        for from in (0..n).step_by(BLOCK) {
            let to = (from + BLOCK).min(n);
            for (d, one) in ix.iter_mut().enumerate() {
                one.cover(th, a, b, span, lo, from, &mut u[d * BLOCK..d * BLOCK + to - from]);
            }
            for i in from..to {
                let len = b[i].wrapping_sub(a[i]);
                let (mut prev, mut best, mut kind, mut busy_i) = (0i64, 0i64, 0u8, false);
                let (mut whole, mut some) = (u8::MAX, 0u8);
                for k in 0..=layers {
                    let t = if k == layers {
                        if layers == 0 { len } else { len.wrapping_sub(prev).max(0) }
                    } else {
                        let uk = u[col[k] + i - from];
                        let t = if k == 0 { uk } else { uk.wrapping_sub(prev).max(0) };
                        prev = uk;
                        busy_i |= work[k] && t > 0;
                        t
                    };
                    if k == 0 {
                        best = t;
                    } else if t > best {
                        kind = k as u8;
                        best = t;
                    }
                    if t > 0 {
                        some += 1;
                        if t == len {
                            if whole != u8::MAX {
                                // two layers with all of the slice: the earlier's time to its part
                                at[whole as usize].push(i as i64);
                                ns[whole as usize].push(len);
                            }
                            whole = k as u8;
                        } else {
                            at[k].push(i as i64);
                            ns[k].push(t);
                        }
                    }
                    if k == layers {
                        empty[i] = (t == len) as u8;
                    }
                }
                code[i] = kind;
                busy[i] = busy_i as u8;
                full[i] = whole;
                count[i] = some;
            }
        }
        (at, ns)
    });
    Ok(parts.0.iter().zip(&parts.1).map(|(x, y)| (as_bytes(py, x), as_bytes(py, y))).collect())
}
