"""The verdict on a trace's GPU idle time: the cause to lead with and advice that fits.

- The verdict speaks of the steady state: the start-up (see `analyses.startup`) is set aside
  and said so.
- A cause the registry marks `leads=False` never leads (`kernel_spacing`: the device's own
  spacing between kernels already queued). How the leading cause's detail is told is the
  registry's `detail` (what the GPU waited on, the call, or the culprit op).
- Advice must fit the trace: at `busy_enough` GPU busy or more there is little idle to recover,
  and no fusion or CUDA-graph advice is given.
- `gpu_wait` says what the GPU waited on and, when another thread of the process sat in a
  blocking call meanwhile, which thread, call and op, with that call's time per step.
- A GPU whose busy time is mostly collectives that no compute hid (`exposed_comm_us` at least
  half of its busy time in the window) is communication-bound: it looks busy, but the headline
  says so rather than "little idle time is left to recover".
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from traceanalyzer.analyses.gaps import GapsResult
from traceanalyzer.causes import BY_ID, NOT_A_HEADLINE, hint
from traceanalyzer.patterns import COMPILED_FRAME, COMPILED_OP, TRITON_KERNEL
from traceanalyzer.trace import Trace
from traceanalyzer.units import display_us

BUSY_ENOUGH = 0.9
__all__ = ["BUSY_ENOUGH", "NOT_A_HEADLINE", "Verdict", "advice_for", "compiled_model", "verdict"]
# Launch overhead in a model already compiled: fusion is done; CUDA graphs remove the rest.
COMPILED_LAUNCH_HINT = (
    "the model is already compiled: launch overhead remains between its kernels; capture them in CUDA graphs "
    '(mode="reduce-overhead" where the model is compiled, or torch.cuda.CUDAGraph) or batch more work per launch'
)


def compiled_model(trace: Trace) -> bool:
    """Whether the model ran compiled (torch.compile): a `Torch-Compiled Region` or compiled
    autograd function, Dynamo/AOT/Inductor Python frames, or Inductor's `triton_*` kernels."""
    return bool(
        trace.ops["name"].str.contains(COMPILED_OP).any()
        or (trace.python.height and trace.python["name"].str.contains(COMPILED_FRAME).any())
        or trace.gpu["name"].str.contains(TRITON_KERNEL).any()
    )


@dataclass(frozen=True)
class Verdict:
    """What to say first about a trace's GPU idle time."""

    busy_share: float | None  # steady state
    window_us: float  # steady-state window time
    idle_us: float  # steady-state idle time
    top_cause: str | None
    top_share: float | None  # of steady idle
    advice: str
    detail: str | None  # what the top cause came down to (a call, a wait, a blocked thread)
    startup_window_us: float
    startup_idle_us: float
    exposed_comm_us: float = 0.0  # collective time no compute hid, over the whole analysed window
    comm_window_us: float = 0.0  # that window (start-up included: the communication table's)
    communication_bound: bool = False  # exposed communication holds half the GPU's busy time or more

    def sentence(self, where: str) -> str:
        """The verdict in one line; `where` says what the window is (`over the profiled steps`)."""
        if self.busy_share is None:
            return self.advice
        parts = [f"GPU busy {self.busy_share:.1%} of {self.window_us / 1000:,.1f} ms ({where})"]
        if self.communication_bound:
            parts.append(
                f"communication-bound: {self.exposed_comm_us / 1000:,.1f} ms of the {self.comm_window_us / 1000:,.1f} "
                "ms analysed ran collectives with no compute "
                "beside them; overlap communication with compute (DDP bucket_cap_mb, FSDP prefetch, async "
                "collectives) or find the rank the others wait for"
            )
        if self.startup_window_us:
            parts.append(
                f"start-up set aside: the first {self.startup_window_us / 1000:,.1f} ms "
                f"({self.startup_idle_us / 1000:,.1f} ms idle in one-time initialisation)"
            )
        head = f"idle {self.idle_us / 1000:,.1f} ms"
        if self.top_cause:
            head += f", mostly {self.top_cause} ({self.top_share:.0%})"
        parts.append(head + f": {self.advice}" + (f"; {self.detail}" if self.detail else ""))
        return "; ".join(parts)


def _top(df: pl.DataFrame, by: str, *keys: str) -> dict | None:
    df = df.filter(pl.all_horizontal(pl.col(k).is_not_null() for k in keys))
    if df.is_empty():
        return None
    return (
        df.group_by(*keys)
        .agg(pl.col(by).sum())
        .sort([by, *keys], descending=[True] + [False] * len(keys))
        .row(0, named=True)
    )


def _detail(cause: str, g: pl.DataFrame, steps: int) -> str | None:
    per = "per step" if steps > 1 else "in all"
    how = BY_ID[cause].detail if cause in BY_ID else "culprit"
    if how == "waited_on":
        kind = g.with_columns(what=pl.col("waited_on").str.replace(r"\s*\(.*$", ""))
        top = _top(kind, "duration_us", "what")
        text = f"the GPU waited on {top['what']}" if top else None
        b = g.filter(pl.col("blocked_thread").is_not_null()).select("blocked_thread").unnest("blocked_thread")
        if b.height:
            calls = b.unique("call_id").with_columns(pl.col("range").fill_null(""))
            who = _top(calls, "call_us", "tid", "api", "op", "range")
            if who:
                where = who["op"] + (f" in {who['range']}" if who["range"] else "")
                text = (text + "; " if text else "") + (
                    f"meanwhile thread {who['tid']} sat in {who['api']} ({where}), "
                    f"{who['call_us'] / steps / 1000:,.1f} ms {per}"
                )
        return text
    if how == "call":
        top = _top(g, "duration_us", "call_api")
        if top or cause != "slow_launch":
            return f"in {top['call_api']} ({top['duration_us'] / 1000:,.1f} ms of idle)" if top else None
        # A slow launch whose op, not its call, took the time names the op.
    top = _top(g, "duration_us", "op") or _top(g, "duration_us", "python_frame")
    if not top:
        return None
    name = top.get("op") or top.get("python_frame")
    return f"most from {name} ({top['duration_us'] / 1000:,.1f} ms)"


def advice_for(cause: str, busy_share: float | None, with_stack: bool, compiled: bool = False) -> str:
    """The advice for a cause, fitted to the trace (`compiled`: the model ran under torch.compile)."""
    if busy_share is not None and busy_share >= BUSY_ENOUGH:
        return f"the GPU is {busy_share:.0%} busy: little idle time is left to recover on the CPU side"
    if cause == "launch_latency" and compiled:
        return COMPILED_LAUNCH_HINT
    return hint(cause, with_stack)


def verdict(
    gaps: GapsResult, steps: int = 1, with_stack: bool = False, compiled: bool = False, exposed_comm_us: float = 0.0
) -> Verdict:
    """The verdict on `gaps` (steady state; `steps` to give figures per step; `compiled`: the
    model ran compiled, see `compiled_model`; `exposed_comm_us`: collective time no compute hid,
    from `communication`)."""
    if not gaps.has_gpu_work:
        return Verdict(None, 0.0, 0.0, None, None, gaps.note or "no GPU work", None, 0.0, 0.0)
    by = gaps.steady_idle_by_cause.filter(~pl.col("cause").is_in(NOT_A_HEADLINE))
    busy = gaps.steady_busy_share
    idle = gaps.steady_idle_us()
    if by.is_empty() or not idle:
        advice = (
            "its idle time is the device's own spacing between kernels already queued: nothing to recover on the CPU"
            if idle
            else "no idle time"
        )
        return Verdict(
            busy,
            gaps.steady_window_us,
            idle,
            None,
            None,
            advice,
            None,
            gaps.startup_window_us,
            gaps.startup_idle_us,
            *_comm(gaps, exposed_comm_us),
        )
    top = by.row(0, named=True)
    cause = top["cause"]
    return Verdict(
        busy,
        gaps.steady_window_us,
        idle,
        cause,
        top["idle_us"] / idle,
        advice_for(cause, busy, with_stack, compiled),
        _detail(cause, _steady_gaps_of(gaps, cause), steps),
        gaps.startup_window_us,
        gaps.startup_idle_us,
        *_comm(gaps, exposed_comm_us),
    )


def _steady_gaps_of(gaps: GapsResult, cause: str) -> pl.DataFrame:
    """The steady-state gaps of one cause in µs: picked from the ns table first, so that only
    they are converted (the display view of every gap was ~18 MB at 1 GB, and kept)."""
    picked = gaps.all_gaps_ns.filter((pl.col("phase") == "steady") & (pl.col("cause") == cause))
    return display_us(picked, gaps.origin_ns)


def _comm(gaps: GapsResult, exposed_us: float) -> tuple[float, float, bool]:
    """(exposed_comm_us, its window, communication-bound): exposed communication against the GPU
    busy time of the same whole window (the communication table counts start-up too)."""
    busy = (gaps.busy_share or 0.0) * gaps.window_us
    return exposed_us, gaps.window_us, busy > 0 and exposed_us * 2 >= busy
