"""The Session of a rank's row in directory mode (`multirank.rank_result`)."""

from __future__ import annotations

from traceanalyzer.session import Session


class RankSession(Session):
    """A lean Session: a rank's row keeps the rules' rule, severity and message (`findings.evaluate`
    with `estimate=False, full=False`) and the health checks, so the analyses leave out the tables
    nothing there reads (`reprs.Unread` stands in their place: reading one raises). On a DLRM rank
    that is ~10 ms of ~100. Never given a store: its results are not the whole results."""

    lean = True

    def __init__(self, trace, options=None, comm_args=None) -> None:  # noqa: ANN001 (as Session's)
        super().__init__(trace, options, comm_args=comm_args)
