"""The routing benchmark: policies, scenarios, capacity sweep, DES and live runners, statistics, reports.

``igw bench SCENARIO`` (see ``igw.cli.bench``) and ``igw demo`` (``igw.cli.demo``) are the commands;
this package holds everything they use so that the same code serves the discrete-event mode (virtual
time, full scale) and the live mode (real HTTP on loopback, reduced scale).
"""
