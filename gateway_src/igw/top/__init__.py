"""``igw top``: a live terminal view of one running gateway, built from its ``/metrics`` and ``/readyz``.

:mod:`igw.top.view` turns two successive scrapes into rows (pure: rates and quantiles from counter and
histogram deltas), :mod:`igw.top.source` fetches the pages over HTTP, :mod:`igw.top.app` draws them
with textual and refreshes every interval.
"""
