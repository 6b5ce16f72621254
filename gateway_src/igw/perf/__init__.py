"""Component benchmarks behind ``igw perf NAME``: tooling, never imported by the product core.

Each benchmark measures one of our own components and prints ratios against a baseline measured in
the same run (the routing-policy benchmark on the simulated fleet is :mod:`igw.bench`):

* :mod:`igw.perf.gateway` - ``igw perf gateway``: gateway overhead against a near-free backend
  (:mod:`igw.perf.gateway_backend`), micro timings (:mod:`igw.perf.gateway_micro`) and closed-loop
  load against peer routers (:mod:`igw.perf.gateway_load`).
* :mod:`igw.perf.auth` - ``igw perf auth``: the request guard's cost per token shape.
* :mod:`igw.perf.des` - ``igw perf des``: discrete-event simulator speed.
* :mod:`igw.perf.checks` - ``igw perf checks``: pre-flight/audit check throughput.
* :mod:`igw.perf.soak` - ``igw perf soak``: endurance of ``igw serve`` at 80 % and 150 % load (lost
  requests, RSS and descriptor growth).
"""
