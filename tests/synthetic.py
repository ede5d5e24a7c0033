"""Build small Kineto-shaped traces in tests, where the answer is known by construction.

    b = TraceBuilder()
    b.op("ProfilerStep#1", 0, 1000)
    b.kernel("k", ts=10, dur=5, launch_ts=5)
    path = b.write(tmp_path)

Times are microseconds (as in the JSON). Each kernel/copy gets its own runtime call and
correlation id; `launch_ts` places that call on the launching thread.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

PID = 100
MAIN_TID = 100


class TraceBuilder:
    def __init__(self, devices: int = 1) -> None:
        self.events: list[dict[str, Any]] = []
        self._corr = 1000
        self.metadata: dict[str, Any] = {
            "schemaVersion": 1,
            "deviceProperties": [
                {
                    "id": d,
                    "name": "Synthetic GPU",
                    "totalGlobalMem": 16 << 30,
                    "numSms": 80,
                    "computeMajor": 8,
                    "computeMinor": 0,
                }
                for d in range(devices)
            ],
        }

    def op(
        self, name: str, ts: float, dur: float, tid: int = MAIN_TID, cat: str = "cpu_op", **args: Any
    ) -> TraceBuilder:
        self.events.append(
            {"ph": "X", "cat": cat, "name": name, "pid": PID, "tid": tid, "ts": ts, "dur": dur, "args": args}
        )
        return self

    def annotation(self, name: str, ts: float, dur: float, tid: int = MAIN_TID) -> TraceBuilder:
        return self.op(name, ts, dur, tid=tid, cat="user_annotation")

    def step(self, n: int, ts: float, dur: float, tid: int = MAIN_TID) -> TraceBuilder:
        return self.annotation(f"ProfilerStep#{n}", ts, dur, tid=tid)

    def python(
        self, name: str, ts: float, dur: float, pid_: int, parent: int | None = None, tid: int = MAIN_TID
    ) -> TraceBuilder:
        self.events.append(
            {
                "ph": "X",
                "cat": "python_function",
                "name": name,
                "pid": PID,
                "tid": tid,
                "ts": ts,
                "dur": dur,
                "args": {"Python id": pid_, "Python parent id": parent},
            }
        )
        return self

    def runtime(self, name: str, ts: float, dur: float, tid: int = MAIN_TID, correlation: int | None = None) -> int:
        if correlation is None:
            self._corr += 1
            correlation = self._corr
        self.events.append(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": name,
                "pid": PID,
                "tid": tid,
                "ts": ts,
                "dur": dur,
                "args": {"correlation": correlation},
            }
        )
        return correlation

    def _gpu(
        self,
        cat: str,
        name: str,
        ts: float,
        dur: float,
        launch_ts: float | None,
        launch_dur: float,
        api: str,
        stream: int,
        device: int,
        tid: int,
        extra: dict[str, Any],
    ) -> int:
        if launch_ts is not None:
            corr = self.runtime(api, launch_ts, launch_dur, tid=tid)
        else:
            self._corr += 1
            corr = self._corr
        self.events.append(
            {
                "ph": "X",
                "cat": cat,
                "name": name,
                "pid": device,
                "tid": stream,
                "ts": ts,
                "dur": dur,
                "args": {"device": device, "stream": stream, "correlation": corr, **extra},
            }
        )
        return corr

    def kernel(
        self,
        name: str,
        ts: float,
        dur: float,
        launch_ts: float | None = None,
        launch_dur: float = 5,
        stream: int = 7,
        device: int = 0,
        tid: int = MAIN_TID,
    ) -> int:
        return self._gpu("kernel", name, ts, dur, launch_ts, launch_dur, "cudaLaunchKernel", stream, device, tid, {})

    def memcpy(
        self,
        kind: str,
        ts: float,
        dur: float,
        nbytes: int,
        launch_ts: float | None = None,
        launch_dur: float = 5,
        api: str = "cudaMemcpyAsync",
        stream: int = 7,
        device: int = 0,
        tid: int = MAIN_TID,
    ) -> int:
        """kind like 'HtoD (Pageable -> Device)'."""
        return self._gpu(
            "gpu_memcpy", f"Memcpy {kind}", ts, dur, launch_ts, launch_dur, api, stream, device, tid, {"bytes": nbytes}
        )

    def memset(
        self,
        ts: float,
        dur: float,
        launch_ts: float | None = None,
        stream: int = 7,
        device: int = 0,
        tid: int = MAIN_TID,
    ) -> int:
        return self._gpu(
            "gpu_memset",
            "Memset (Device)",
            ts,
            dur,
            launch_ts,
            5,
            "cudaMemsetAsync",
            stream,
            device,
            tid,
            {"bytes": 1024},
        )

    def document(self) -> dict[str, Any]:
        return {**self.metadata, "traceEvents": self.events}

    def write(self, directory: Path, name: str = "synthetic.json") -> Path:
        path = Path(directory) / name
        path.write_text(json.dumps(self.document()))
        return path


def write_events(directory: Path, events: list[dict[str, Any]], name: str = "t.json") -> Path:
    """A trace of exactly these events, for tests that spell every event out."""
    path = Path(directory) / name
    path.write_text(
        json.dumps({"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "G"}], "traceEvents": events})
    )
    return path


def x_event(
    cat: str, name: str, ts: float, dur: float, pid: int = PID, tid: int = MAIN_TID, **args: Any
) -> dict[str, Any]:
    """One complete ("X") event."""
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}
