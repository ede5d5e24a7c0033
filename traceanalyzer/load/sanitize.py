"""Checks on the decoded tables before the Trace is built: each oddity a broken writer leaves
is fixed the one documented way and counted in a warning (docs/readme/damaged.md).

- exact duplicates (same values in every field the tool reads) are dropped;
- a `dur` running past the end of the trace is clipped to it: an event "runs past the end"
  when it ends later than the last event start by more than the whole span of starts (and by
  more than 1 s), i.e. its `dur` alone is longer than the trace (a known ROCm artefact);
  the end of the trace is the latest end among the other events;
- timed events without `dur` last zero (counted); without `ph` are read by their category;
- CPU events that overlap an earlier one on their thread without nesting inside it are kept
  as they are (busy time is taken from unions, so nothing counts twice); the health check
  `crossing_cpu_events` (`analyses.health`) counts them, with the one interval sweep;
- events of categories the tool does not know are ignored, counted by category.

Negative durations and events without a readable `ts` are counted by `build.build_trace`.
Zero durations are normal in Kineto traces (short events rounded to whole microseconds) and are
kept without a warning.
"""

from __future__ import annotations

from collections import Counter

import polars as pl

TIMED = ("op", "python", "runtime", "gpu", "sync", "gpu_annotation")
# Categories of the `other` table that Kineto writes and the tool has no use for.
KNOWN_IGNORED = {"Trace", "overhead", "cpu_instant_event", "Activity Buffer Request", "python_function", None}
_PAST_END_FLOOR_NS = 1_000_000_000
_TS_LIMIT_NS = 1 << 62  # ~146 years of nanoseconds: beyond it a ts is garbage, not a time


def _names(counter: Counter, top: int = 5) -> str:
    items = counter.most_common()
    shown = ", ".join(f"{k} ({v:,})" for k, v in items[:top])
    return shown + (f" and {len(items) - top} more" if len(items) > top else "")


def sanitize(tables: dict[str, pl.DataFrame], counts: Counter) -> tuple[dict[str, pl.DataFrame], list[str]]:
    """The tables with damaged events repaired or dropped, and the warnings that say so."""
    tables = dict(tables)
    warnings: list[str] = []

    no_ph = sum(n for (_cat, ph), n in counts.items() if ph is None)
    if no_ph:
        warnings.append(f"{no_ph:,} events have no ph; they were read by their category")

    # Implausible times: beyond ~146 years of nanoseconds nothing is a time any more.
    wild = 0
    for kind in TIMED:
        df = tables[kind]
        bad = pl.col("ts_ns").abs() >= _TS_LIMIT_NS
        n = _count(df, bad) if _beyond(df, "ts_ns", -_TS_LIMIT_NS, _TS_LIMIT_NS) else 0
        if n:
            wild += n
            tables[kind] = df.with_columns(ts_ns=pl.when(bad).then(None).otherwise(pl.col("ts_ns")))
    if wild:
        warnings.append(f"{wild:,} events have a ts too large to be a time; they count as without ts")

    dups = 0
    for kind in TIMED:
        df = tables[kind]
        if df.height > 1 and _may_have_duplicates(df) and df.is_duplicated().any():
            kept = df.unique(maintain_order=True)
            dups += df.height - kept.height
            tables[kind] = kept
    if dups:
        warnings.append(f"dropped {dups:,} exact duplicate events")

    no_dur = sum(
        # every ts read: the null durs' count, kept with the column (no query); else one pass
        tables[k]["dur_ns"].null_count()
        if not tables[k]["ts_ns"].null_count()
        else tables[k].select((pl.col("ts_ns").is_not_null() & pl.col("dur_ns").is_null()).sum()).item()
        for k in TIMED
        if tables[k]["dur_ns"].null_count()  # kept with the column: no pass over it when 0
    )
    if no_dur:
        warnings.append(f"{no_dur:,} events without dur were given zero duration")

    tables, clipped = _clip_past_end(tables)
    if clipped:
        warnings.append(
            f"clipped {clipped:,} events whose dur runs past the end of the trace (dur longer than the whole trace)"
        )

    other = tables["other"]
    if other.height:
        unknown = other.filter(
            ~pl.col("cat").is_in([c for c in KNOWN_IGNORED if c is not None]).fill_null(False)
            & ~(pl.col("cat").is_null() & pl.col("ph").is_in(["i", "I", "R", "n"]).fill_null(False))
        )
        if unknown.height:
            by_cat = Counter(
                dict(unknown.group_by("cat").len().select(pl.col("cat").fill_null("(no category)"), "len").iter_rows())
            )
            warnings.append(f"ignored {unknown.height:,} events of categories the tool does not know: {_names(by_cat)}")
    return tables, warnings


def _count(df: pl.DataFrame, cond: pl.Expr) -> int:
    """Rows where `cond` holds, counted without copying them (`df.filter(cond).height` copies
    every column of the matching rows; on a 1 GB trace these checks added ~300 MB)."""
    return int(df.select(cond.fill_null(False).sum()).item()) if df.height else 0


def _beyond(df: pl.DataFrame, col: str, low: int, high: int) -> bool:
    """Whether some value of `col` may lie at or outside (low, high), from its min and max: an
    aggregation allocates nothing, while the row-wise checks they spare make a temporary column
    per expression (+30 MB of RSS together on a 311 MB trace's multi-chunk tables)."""
    lo, hi = _range(df, col) if df.height else (None, None)
    return lo is not None and (lo <= low or hi >= high)


# Below this many rows a column's range is read by Series calls, not a frame query (~40 µs to plan
# and run whatever its size; 12 of them a small rank), as `analyses.intervals.SMALL_ROWS`.
SMALL_ROWS = 1 << 16


def _range(df: pl.DataFrame, col: str) -> tuple:
    """(min, max) of a column."""
    if df.height < SMALL_ROWS:
        s = df.get_column(col)
        return s.min(), s.max()
    return df.select(lo=pl.col(col).min(), hi=pl.col(col).max()).row(0)


def _may_have_duplicates(df: pl.DataFrame) -> bool:
    """Whether rows may repeat, from one 64-bit hash per row: equal rows hash equal, so when no
    hash repeats there is no duplicate, and the costly check (a group-by over every column,
    hundreds of MB on a 1 GB trace) is skipped. A hash collision only costs that check.
    Counted with `n_unique`: `is_duplicated` builds a per-row mask through a partitioned hash
    table (+27 MB for the 306,540 ops of a 311 MB trace, against 0.3 MB)."""
    hashes = df.hash_rows()
    return hashes.n_unique() < hashes.len()


def _clip_stats(df: pl.DataFrame) -> tuple:
    """(first start, last start, longest dur) of a table: Series calls when it is small."""
    if df.height < SMALL_ROWS:
        ts = df.get_column("ts_ns")
        return ts.min(), ts.max(), df.get_column("dur_ns").max()
    return df.select(lo=pl.col("ts_ns").min(), hi=pl.col("ts_ns").max(), dur=pl.col("dur_ns").max()).row(0)


def _clip_past_end(tables: dict[str, pl.DataFrame]) -> tuple[dict[str, pl.DataFrame], int]:
    timed = [k for k in TIMED if tables[k].height]
    stats = {k: _clip_stats(tables[k]) for k in timed}
    los = [v[0] for v in stats.values() if v[0] is not None]
    if not los:
        return tables, 0
    lo, hi = min(los), max(v[1] for v in stats.values() if v[1] is not None)
    limit = hi + max(hi - lo, _PAST_END_FLOOR_NS)
    # Compare in float64: ts + dur may not fit int64 when dur is garbage.
    past = (pl.col("ts_ns").cast(pl.Float64) + pl.col("dur_ns").cast(pl.Float64)) > float(limit)
    # No row of a table runs past the limit when its largest start and largest dur do not
    # (float addition is monotonic): the row-wise pass, and the end of the trace it needs, only
    # where one may.
    maybe = [k for k in timed if stats[k][1] is not None and stats[k][2] is not None]
    counts = {
        k: _count(tables[k], past.fill_null(False))
        for k in maybe
        if float(stats[k][1]) + float(stats[k][2]) > float(limit)
    }
    if not any(counts.values()):
        return tables, 0
    ends = [
        tables[k].select(
            e=(pl.col("ts_ns") + pl.col("dur_ns").clip(0))
            .filter(pl.col("dur_ns").is_not_null() & ~past.fill_null(False))
            .max()
        )
        for k in timed
    ]
    end = max([hi] + [int(x) for x in pl.concat(ends)["e"].drop_nulls().to_list()])
    clipped = 0
    for k, n in counts.items():
        if n:
            clipped += n
            tables[k] = tables[k].with_columns(
                dur_ns=pl.when(past.fill_null(False))
                .then((pl.lit(end, pl.Int64) - pl.col("ts_ns")).clip(0))
                .otherwise(pl.col("dur_ns"))
            )
    return tables, clipped
