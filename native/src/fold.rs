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

/// The time a layer union covers inside each slice of a block (`out`, one per slice from
/// `from`), as `layers::covered_in` counts it; the merge position carried to the next block.
trait Cover {
    fn cover(&mut self, th: &[i64], a: &[i64], b: &[i64], from: usize, out: &mut [i64]);
}

/// One coverage index on the clock (`ThreadClock.index_arrays`) and its merge position.
struct Index<'a> {
    key: &'a [i64],
    th: &'a [i64],
    start: &'a [i64],
    end: &'a [i64],
    before: &'a [i64],
    span: i64,
    lo: i64,
    j: usize,
    to_start: i64,
}

impl Cover for Index<'_> {
    fn cover(&mut self, th: &[i64], a: &[i64], b: &[i64], from: usize, out: &mut [i64]) {
        let (key, ith, start, end, before) = (self.key, self.th, self.start, self.end, self.before);
        let (span, lo) = (self.span, self.lo);
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

/// One union as `layer_coverage.cumulative_unions` keeps it, on its bands' axis: intervals
/// [t, te) with the time covered before each (`before`), sorted by t, each thread's in a band of
/// its own; per thread number its rows and its band's shift (a time t is t + off on the axis).
/// Measured there, no keyed copy of the index is made (`ThreadClock.index_arrays`: five arrays
/// per union, 20 ms at 311 MB); a shift changes no difference of times.
struct Banded<'a> {
    t: &'a [i64],
    te: &'a [i64],
    before: &'a [i64],
    rows: Vec<(usize, usize, i64)>,
    at: (usize, usize, i64),
    j: usize,
    to_start: i64,
}

impl Banded<'_> {
    /// The time covered up to x on the current thread (rows lo..hi, shift off): the last of its
    /// intervals starting at or before x (queries come in time order: j only moves on).
    #[inline(always)]
    fn until(&self, x: i64, j: &mut usize, (lo, hi, off): (usize, usize, i64)) -> i64 {
        let (t, te, before) = (self.t, self.te, self.before);
        let q = x.wrapping_add(off);
        while *j < hi && t[*j] <= q {
            *j += 1;
        }
        if *j > lo {
            let p = *j - 1;
            before[p].wrapping_add(q.min(te[p])).wrapping_sub(t[p])
        } else {
            0
        }
    }
}

impl Cover for Banded<'_> {
    fn cover(&mut self, th: &[i64], a: &[i64], b: &[i64], from: usize, out: &mut [i64]) {
        let (mut at, mut j, mut to_start) = (self.at, self.j, self.to_start);
        for (o, i) in out.iter_mut().zip(from..) {
            if i == 0 || th[i] != th[i - 1] {
                at = usize::try_from(th[i]).ok().and_then(|k| self.rows.get(k).copied()).unwrap_or((0, 0, 0));
                j = at.0;
                to_start = self.until(a[i], &mut j, at);
            }
            let to_end = self.until(b[i], &mut j, at);
            *o = to_end.wrapping_sub(to_start).max(0);
            to_start = to_end;
        }
        (self.at, self.j, self.to_start) = (at, j, to_start);
    }
}

fn as_bytes<'py>(py: Python<'py>, v: &[i64]) -> Bound<'py, PyBytes> {
    // SAFETY: an i64 slice is plain bytes, 8 per value.
    let b = unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, std::mem::size_of_val(v)) };
    PyBytes::new(py, b)
}

/// The slices (thread numbers `th`, [a, b)) and the outputs of a fold, checked.
struct Slices<'a> {
    th: &'a [i64],
    a: &'a [i64],
    b: &'a [i64],
}

/// The inputs and outputs both folds share, read and checked: the slices, `which` and `work`
/// against `unions` distinct unions.
fn slices_of<'a>(ins: &'a [View], outs: &[View], unions: usize, which: &[usize], work: &[bool]) -> PyResult<Slices<'a>> {
    let (th, a, b) = (i64s(ins[0].bytes(), "th")?, i64s(ins[1].bytes(), "a")?, i64s(ins[2].bytes(), "b")?);
    let n = th.len();
    if a.len() != n || b.len() != n || outs.iter().any(|o| o.bytes().len() != n) {
        return Err(err("th, a, b, code, busy, empty, full and count need one value per slice"));
    }
    if work.len() != which.len() || which.len() > 100 || which.iter().any(|&d| d >= unions) {
        return Err(err("which and work need one value per layer, each a union's"));
    }
    Ok(Slices { th, a, b })
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
    let (ins, mut outs) = fold_views([th, a, b], &unions, [code, busy, empty, full, count])?;
    if !unions.len().is_multiple_of(5) || span <= 0 {
        return Err(err("five arrays per union, span > 0"));
    }
    let s = slices_of(&ins, &outs, unions.len() / 5, &which, &work)?;
    let mut ix = Vec::with_capacity(unions.len() / 5);
    for d in 0..unions.len() / 5 {
        let v = |k: usize, name: &str| i64s(ins[3 + 5 * d + k].bytes(), name);
        let one = Index { key: v(0, "ikey")?, th: v(1, "ith")?, start: v(2, "istart")?, end: v(3, "iend")?, before: v(4, "ibefore")?, span, lo, j: 0, to_start: 0 };
        let m = one.key.len();
        if [one.th.len(), one.start.len(), one.end.len(), one.before.len()].iter().any(|&l| l != m) {
            return Err(err("ikey, ith, istart, iend and ibefore need one value per interval"));
        }
        if !crate::walk::ascending(one.key, false) {
            return Err(err("ikey must be sorted"));
        }
        ix.push(one);
    }
    // the queries in merge order: a thread's first slice's start, then every slice's end
    if !crate::layers::in_key_order(s.th, s.a, s.b, span, lo) {
        return Err(err("the slices must be in key order"));
    }
    let parts = folded(py, &mut ix, &s, &which, &work, &mut outs);
    Ok(parts.0.iter().zip(&parts.1).map(|(x, y)| (as_bytes(py, x), as_bytes(py, y))).collect())
}

/// `fold_slices` with the unions on their bands' axis, as `layer_coverage.cumulative_unions`
/// keeps them: three arrays each (t, te, before: sorted by t), flat; `band_of[th]` the band of
/// thread number th (-1: none), band k holding the times [lo, lo + span) as [k x span, (k + 1)
/// x span). No keyed copy of any union is made; every output is `fold_slices`'s.
#[pyfunction]
#[pyo3(signature = (th, a, b, band_of, span, lo, unions, which, work, code, busy, empty, full, count))]
#[allow(clippy::too_many_arguments)]
pub fn fold_bands<'py>(
    py: Python<'py>,
    th: &Bound<'py, PyAny>,
    a: &Bound<'py, PyAny>,
    b: &Bound<'py, PyAny>,
    band_of: Vec<i64>,
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
    let (ins, mut outs) = fold_views([th, a, b], &unions, [code, busy, empty, full, count])?;
    if !unions.len().is_multiple_of(3) || span <= 0 {
        return Err(err("three arrays per union, span > 0"));
    }
    let s = slices_of(&ins, &outs, unions.len() / 3, &which, &work)?;
    let mut ix = Vec::with_capacity(unions.len() / 3);
    for d in 0..unions.len() / 3 {
        let v = |k: usize, name: &str| i64s(ins[3 + 3 * d + k].bytes(), name);
        let (t, te, before) = (v(0, "t")?, v(1, "te")?, v(2, "before")?);
        if te.len() != t.len() || before.len() != t.len() {
            return Err(err("t, te and before need one value per interval"));
        }
        if !crate::walk::ascending(t, false) {
            return Err(err("t must be sorted"));
        }
        // each thread's rows: those of its band, and its band's shift
        let mut rows = Vec::with_capacity(band_of.len());
        for &k in &band_of {
            if k < 0 {
                rows.push((0, 0, 0));
                continue;
            }
            let (start, stop) = match (k.checked_mul(span), (k + 1).checked_mul(span)) {
                (Some(x), Some(y)) => (x, y),
                _ => return Err(err("a band beyond int64")),
            };
            let (r0, r1) = (t.partition_point(|&x| x < start), t.partition_point(|&x| x < stop));
            rows.push((r0, r1, start.wrapping_sub(lo)));
        }
        ix.push(Banded { t, te, before, rows, at: (0, 0, 0), j: 0, to_start: 0 });
    }
    // the queries in merge order (`layers::in_key_order` on the threads' own times): each
    // thread's slices together, threads ascending, a thread's first start, then every end
    let (th, a, b) = (s.th, s.a, s.b);
    let ordered = (0..th.len()).fold(true, |ok, i| {
        ok & if i == 0 || th[i] != th[i - 1] { (i == 0 || th[i] > th[i - 1]) & (b[i] >= a[i]) } else { b[i] >= b[i - 1] }
    });
    if !ordered {
        return Err(err("the slices must be in key order"));
    }
    let parts = folded(py, &mut ix, &s, &which, &work, &mut outs);
    Ok(parts.0.iter().zip(&parts.1).map(|(x, y)| (as_bytes(py, x), as_bytes(py, y))).collect())
}

/// The fold's inputs (the slices' th, a, b, then every union's arrays) and its writable outputs
/// (code, busy, empty, full, count) as views, refused where an output shares memory with anything.
fn fold_views(slices: [&Bound<'_, PyAny>; 3], unions: &[Bound<'_, PyAny>], outs: [&Bound<'_, PyAny>; 5]) -> PyResult<(Vec<View>, Vec<View>)> {
    let ins = slices.into_iter().map(View::new).chain(unions.iter().map(View::new)).collect::<PyResult<Vec<View>>>()?;
    let outs = outs.into_iter().map(View::writable).collect::<PyResult<Vec<View>>>()?;
    if !buffer::outputs_apart(&outs, ins.iter()) {
        return Err(err("an output shares memory with another array"));
    }
    Ok((ins, outs))
}

type Parts = (Vec<Vec<i64>>, Vec<Vec<i64>>);

/// The fold itself (see `fold_slices`), a block of slices at a time: each union's times for the
/// block (a tight loop per union, in cache), then each layer's times, then the outputs a layer
/// at a time over the block (short loops without branches, rather than every layer of a slice
/// in turn with its pushes: ~370 instructions a slice). Per layer (untraced last) the slices and
/// times of its part.
fn folded<C: Cover + Send>(py: Python<'_>, ix: &mut [C], s: &Slices<'_>, which: &[usize], work: &[bool], outs: &mut [View]) -> Parts {
    let (th, a, b) = (s.th, s.a, s.b);
    let n = th.len();
    let [code_v, busy_v, empty_v, full_v, count_v] = outs else { unreachable!() };
    let (code, busy, empty) = (code_v.bytes_mut(), busy_v.bytes_mut(), empty_v.bytes_mut());
    let (full, count) = (full_v.bytes_mut(), count_v.bytes_mut());
    py.allow_threads(|| {
        let layers = which.len();
        let mut at: Vec<Vec<i64>> = vec![Vec::new(); layers + 1];
        let mut ns: Vec<Vec<i64>> = vec![Vec::new(); layers + 1];
        const BLOCK: usize = 4096;
        let mut u = vec![0i64; ix.len() * BLOCK];
        let mut t = vec![0i64; (layers + 1) * BLOCK];
        let (mut len, mut best) = (vec![0i64; BLOCK], vec![0i64; BLOCK]);
        for from in (0..n).step_by(BLOCK) {
            let to = (from + BLOCK).min(n);
            let m = to - from;
            for (d, one) in ix.iter_mut().enumerate() {
                one.cover(th, a, b, from, &mut u[d * BLOCK..d * BLOCK + m]);
            }
            let len = &mut len[..m];
            for (l, (x, y)) in len.iter_mut().zip(a[from..to].iter().zip(&b[from..to])) {
                *l = y.wrapping_sub(*x);
            }
            // layer k's time: its union's less the previous layer's, at least 0; untraced: the rest
            for k in 0..=layers {
                let out = &mut t[k * BLOCK..k * BLOCK + m];
                if k == layers && layers == 0 {
                    out.copy_from_slice(len);
                } else if k == layers {
                    let prev = &u[which[k - 1] * BLOCK..][..m];
                    for ((o, l), p) in out.iter_mut().zip(len.iter()).zip(prev) {
                        *o = l.wrapping_sub(*p).max(0);
                    }
                } else if k == 0 {
                    out.copy_from_slice(&u[which[0] * BLOCK..][..m]);
                } else {
                    let (cur, prev) = (&u[which[k] * BLOCK..][..m], &u[which[k - 1] * BLOCK..][..m]);
                    for ((o, c), p) in out.iter_mut().zip(cur).zip(prev) {
                        *o = c.wrapping_sub(*p).max(0);
                    }
                }
            }
            let (code, busy, full, count) = (&mut code[from..to], &mut busy[from..to], &mut full[from..to], &mut count[from..to]);
            let best = &mut best[..m];
            for k in 0..=layers {
                let tk = &t[k * BLOCK..][..m];
                let wk = k < layers && work[k];
                let kk = k as u8;
                for r in 0..m {
                    let x = tk[r];
                    let some = x > 0;
                    if k == 0 {
                        best[r] = x;
                        code[r] = 0;
                        busy[r] = 0;
                        count[r] = 0;
                        full[r] = u8::MAX;
                    } else if x > best[r] {
                        best[r] = x;
                        code[r] = kk;
                    }
                    busy[r] |= (wk && some) as u8;
                    count[r] += some as u8;
                    if some && x == len[r] {
                        full[r] = kk;
                    }
                }
            }
            let untraced = &t[layers * BLOCK..][..m];
            for ((e, x), l) in empty[from..to].iter_mut().zip(untraced).zip(len.iter()) {
                *e = (x == l) as u8;
            }
            // each layer's part, in slice order: a time short of its slice, or all of it where a
            // later layer also holds all of it (two layers with all of the slice)
            for k in 0..=layers {
                let tk = &t[k * BLOCK..][..m];
                let kk = k as u8;
                for r in 0..m {
                    let x = tk[r];
                    if x > 0 && (x != len[r] || kk < full[r]) {
                        at[k].push((from + r) as i64);
                        ns[k].push(x);
                    }
                }
            }
        }
        (at, ns)
    })
}
