"""Benchmark and endurance tooling (``igw perf ...``); never imported by the product packages."""
