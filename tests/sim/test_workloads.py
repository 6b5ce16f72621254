"""Workload generators: arrival statistics, length profiles against published quantiles, traces."""

from __future__ import annotations

import json
import random
import statistics
from pathlib import Path

import pytest

from igw.sim import workloads as w
from igw.sim.request import SimRequest
from igw.sim.tokens import CHARS_PER_TOKEN, count_tokens


def _gaps(times: list[float]) -> list[float]:
    return [b - a for a, b in zip([0.0, *times], times, strict=False)]


def _cv(xs: list[float]) -> float:
    return statistics.pstdev(xs) / statistics.fmean(xs)


def test_poisson_rate_and_cv() -> None:
    it = w.poisson_arrivals(rate=10, rng=random.Random(1))
    times = [next(it) for _ in range(20_000)]
    assert times[-1] / len(times) == pytest.approx(0.1, rel=0.03)
    assert _cv(_gaps(times)) == pytest.approx(1.0, rel=0.05)


@pytest.mark.parametrize("cv", [0.5, 3.0, 8.0])
def test_gamma_has_the_stated_cv(cv: float) -> None:
    it = w.gamma_arrivals(rate=5, cv=cv, rng=random.Random(2))
    gaps = _gaps([next(it) for _ in range(40_000)])
    assert statistics.fmean(gaps) == pytest.approx(0.2, rel=0.1)
    assert _cv(gaps) == pytest.approx(cv, rel=0.12)


def test_on_off_is_burstier_than_poisson() -> None:
    it = w.on_off_arrivals(rate=2, burst_rate=60, mean_on_s=2, mean_off_s=20, rng=random.Random(3))
    times = [next(it) for _ in range(20_000)]
    counts: dict[int, int] = {}
    for t in times:
        counts[int(t)] = counts.get(int(t), 0) + 1
    per_s = [counts.get(s, 0) for s in range(int(times[-1]))]
    dispersion = statistics.pvariance(per_s) / statistics.fmean(per_s)
    assert dispersion > 5  # Poisson would be ~1


@pytest.mark.parametrize(
    ("profile", "p50_in", "p90_in", "p50_out", "p90_out"),
    [("azure-conv", 1020, 2735, 129, 424), ("azure-code", 1469, 5188, 13, 55)],
)
def test_azure_profiles_reproduce_published_quantiles(
    profile: str, p50_in: int, p90_in: int, p50_out: int, p90_out: int
) -> None:
    prompt, output = w.length_profile(profile)
    rng = random.Random(4)
    ins = sorted(prompt.sample(rng) for _ in range(20_000))
    outs = sorted(output.sample(rng) for _ in range(20_000))
    assert ins[10_000] == pytest.approx(p50_in, rel=0.08)
    assert ins[18_000] == pytest.approx(p90_in, rel=0.05)
    assert outs[10_000] == pytest.approx(p50_out, rel=0.1)
    assert outs[18_000] == pytest.approx(p90_out, rel=0.05)


def test_sharegpt_means_near_published() -> None:
    prompt, output = w.length_profile("sharegpt")
    rng = random.Random(5)
    assert statistics.fmean(prompt.sample(rng) for _ in range(40_000)) == pytest.approx(230, rel=0.1)
    assert statistics.fmean(output.sample(rng) for _ in range(40_000)) == pytest.approx(203, rel=0.1)
    with pytest.raises(w.WorkloadError, match="known"):
        w.length_profile("nope")


def test_synthetic_text_matches_token_counts_and_is_deterministic() -> None:
    def make(seed: int) -> list[SimRequest]:
        rng = random.Random(seed)
        return w.take(
            w.synthetic(
                count=50,
                arrivals=w.poisson_arrivals(rate=1, rng=rng),
                prompt_lengths=w.SHAREGPT_INPUT,
                output_lengths=w.SHAREGPT_OUTPUT,
                model="m",
                rng=rng,
            ),
            50,
        )

    a, b = make(1), make(1)
    assert a == b
    assert a != make(2)
    assert all(count_tokens(r.prompt_text) == r.prompt_tokens for r in a)
    assert len({r.prompt_text[:64] for r in a}) == 50


def test_shared_prefix_groups() -> None:
    rng = random.Random(6)
    reqs = list(
        w.shared_prefix(
            groups=4,
            prompts_per_group=8,
            system_prompt_len=512,
            question_len=32,
            output_len=16,
            arrivals=w.poisson_arrivals(rate=5, rng=rng),
            model="m",
            rng=rng,
        )
    )
    assert len(reqs) == 32
    by_group: dict[str | None, set[str]] = {}
    for r in reqs:
        assert r.prompt_tokens == 544 == count_tokens(r.prompt_text)
        assert r.output_tokens == 16
        by_group.setdefault(r.group, set()).add(r.prompt_text[: 512 * 4])
    assert len(by_group) == 4
    assert all(len(v) == 1 for v in by_group.values())
    zipf = list(
        w.shared_prefix(
            groups=8,
            prompts_per_group=50,
            system_prompt_len=16,
            question_len=4,
            output_len=1,
            arrivals=w.poisson_arrivals(rate=5, rng=rng),
            model="m",
            rng=rng,
            zipf_alpha=1.2,
        )
    )
    counts = [sum(1 for r in zipf if r.group == f"group-{g}") for g in range(8)]
    assert counts[0] > 3 * counts[7]


def test_lora_mix_weights() -> None:
    rng = random.Random(7)
    base = w.synthetic(
        count=4000,
        arrivals=w.poisson_arrivals(rate=1, rng=rng),
        prompt_lengths=w.FixedLength(8),
        output_lengths=w.FixedLength(1),
        model="base",
        rng=rng,
    )
    mixed = list(w.with_lora_mix(base, adapters={"a": 1.0, "b": 3.0}, base_weight=0.0, rng=rng))
    share_b = sum(1 for r in mixed if r.adapter == "b") / len(mixed)
    assert share_b == pytest.approx(0.75, abs=0.03)
    assert all(r.model == r.adapter for r in mixed)
    with pytest.raises(w.WorkloadError):
        list(w.with_lora_mix(iter([mixed[0]]), adapters={"a": -1}, base_weight=1, rng=rng))


def test_replay_jsonl_and_azure_csv(tmp_path: Path) -> None:
    jsonl = tmp_path / "t.jsonl"
    jsonl.write_text(
        "\n".join(
            json.dumps(r)
            for r in (
                {"timestamp": 100.0, "input_tokens": 10, "output_tokens": 5},
                {"timestamp": 101.0, "prompt": "abcd" * 7, "output_tokens": 2, "adapter": "sql"},
            )
        ),
        encoding="utf-8",
    )
    reqs = list(w.replay(jsonl, model="m", rng=random.Random(0), speedup=2.0))
    assert [r.arrival for r in reqs] == [0.0, 0.5]
    assert reqs[0].prompt_tokens == 10 == count_tokens(reqs[0].prompt_text)
    assert reqs[1].prompt_tokens == 7
    assert reqs[1].adapter == "sql"
    assert reqs[1].model == "sql"
    csv_path = tmp_path / "AzureLLMInferenceTrace_conv.csv"
    csv_path.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:15:46.6805900,374,44\n"
        "2023-11-16 18:15:50.9951690,396,109\n",
        encoding="utf-8",
    )
    reqs = list(w.replay(csv_path, model="m", rng=random.Random(0)))
    assert reqs[1].arrival == pytest.approx(4.314579, abs=1e-5)
    assert reqs[1].output_tokens == 109


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ('{"timestamp": 1, "output_tokens": 3}\n', "t.jsonl:1: missing prompt length"),
        (
            '{"timestamp": 1, "input_tokens": "x", "output_tokens": 3}\n',
            "t.jsonl:1: prompt length must be an integer",
        ),
        ("not json\n", "t.jsonl:1: invalid JSON"),
        (
            '{"timestamp": 5, "input_tokens": 1, "output_tokens": 1}\n'
            '{"timestamp": 4, "input_tokens": 1, "output_tokens": 1}\n',
            "t.jsonl:2: arrival time goes backwards",
        ),
        (
            '{"time": "yesterday", "input_tokens": 1, "output_tokens": 1}\n',
            "neither seconds nor ISO-8601",
        ),
        (
            '{"time": 1, "input_tokens": 1, "output_tokens": 0}\n',
            "output length must be from 1 to 10,000,000, got 0",
        ),
        (
            '{"time": 1, "input_tokens": 9, "output_tokens": 1, "prefix_group": "g"}\n',
            "t.jsonl:1: prefix_tokens is required on the first row of group 'g'",
        ),
        (
            '{"time": 1, "input_tokens": 9, "output_tokens": 1, "prefix_group": "g", "prefix_tokens": 4}\n'
            '{"time": 2, "input_tokens": 9, "output_tokens": 1, "prefix_group": "g", "prefix_tokens": 5}\n',
            "t.jsonl:2: prefix_tokens 5 differs from 4",
        ),
        (
            '{"time": 1, "input_tokens": 3, "output_tokens": 1, "prefix_group": "g", "prefix_tokens": 4}\n',
            "t.jsonl:1: prefix_tokens 4 exceeds the prompt length 3",
        ),
        (
            '{"time": 1, "input_tokens": 9, "output_tokens": 1, "prefix_tokens": 4}\n',
            "t.jsonl:1: prefix_tokens needs a prefix_group",
        ),
        (
            '{"time": 1, "input_tokens": 9, "output_tokens": 1, "prefix_group": "a", "shared_prompt_id": "b",'
            ' "prefix_tokens": 2}\n',
            "t.jsonl:1: give prefix_group or shared_prompt_id, not both",
        ),
        (
            '{"time": 1, "input_tokens": 9, "output_tokens": 1, "priority": "high"}\n',
            "priority must be an",
        ),
        (
            '{"time": 1, "input_tokens": 9, "output_tokens": 1}\n'
            '{"time": NaN, "input_tokens": 9, "output_tokens": 1}\n',
            "t.jsonl:2: arrival time must be a finite number of seconds, got nan",
        ),
        (
            '{"time": "inf", "input_tokens": 9, "output_tokens": 1}\n',
            "t.jsonl:1: arrival time must be a finite",
        ),
        (
            '{"time": 1, "input_tokens": 1e12, "output_tokens": 1}\n',
            "t.jsonl:1: prompt length must be from 1 to 10,000,000, got 1000000000000",
        ),
    ],
)
def test_replay_errors_name_file_and_line(tmp_path: Path, content: str, needle: str) -> None:
    p = tmp_path / "t.jsonl"
    p.write_text(content, encoding="utf-8")
    with pytest.raises(w.WorkloadError, match=needle):
        list(w.replay(p, model="m", rng=random.Random(0)))


def test_bad_parameters_are_named() -> None:
    with pytest.raises(w.WorkloadError, match="rate"):
        next(w.poisson_arrivals(rate=0, rng=random.Random(0)))
    with pytest.raises(w.WorkloadError, match="cv"):
        next(w.gamma_arrivals(rate=1, cv=-1, rng=random.Random(0)))
    with pytest.raises(w.WorkloadError, match=r"\.jsonl or \.csv"):
        list(w.replay("trace.txt", model="m", rng=random.Random(0)))


def test_replay_prefix_groups_adapters_and_priorities(tmp_path: Path) -> None:
    p = tmp_path / "t.jsonl"
    rows = [
        '{"time": 0, "input_tokens": 300, "output_tokens": 5, "prefix_group": "sys-a", "prefix_tokens": 256}',
        '{"time": 1, "input_tokens": 280, "output_tokens": 5, "prefix_group": "sys-a", "priority": -1}',
        '{"time": 2, "input_tokens": 300, "output_tokens": 5, "shared_prompt_id": 7, "prefix_tokens": 128}',
        '{"time": 3, "input_tokens": 300, "output_tokens": 5, "adapter": "sql-lora", "priority": 2}',
    ]
    p.write_text("\n".join(rows), encoding="utf-8")
    a1, a2, b, lora = w.replay(p, model="m", rng=random.Random(0))
    shared = a1.prompt_text[: 256 * CHARS_PER_TOKEN]
    assert a2.prompt_text.startswith(shared)
    assert a1.prompt_text[256 * CHARS_PER_TOKEN :] != a2.prompt_text[256 * CHARS_PER_TOKEN :]
    assert not b.prompt_text.startswith(shared[: 16 * CHARS_PER_TOKEN])
    assert [count_tokens(r.prompt_text) for r in (a1, a2, b, lora)] == [300, 280, 300, 300]
    assert (a1.group, a2.group, b.group, lora.group) == ("sys-a", "sys-a", "7", None)
    assert (a1.priority, a2.priority, lora.priority) == (0, -1, 2)
    assert (lora.adapter, lora.model) == ("sql-lora", "sql-lora")


def test_integral_float_lengths_from_spreadsheets_are_read_as_integers(tmp_path: Path) -> None:
    p = tmp_path / "t.jsonl"
    p.write_text('{"time": 0, "input_tokens": 12.0, "output_tokens": 3.0}\n', encoding="utf-8")
    [request] = w.replay(p, model="m", rng=random.Random(0))
    assert (request.prompt_tokens, request.output_tokens) == (12, 3)


def test_replay_csv_cell_over_field_limit_is_a_path_named_error(tmp_path: Path) -> None:
    # a prompt cell over the csv module's 128 KiB field limit ended `igw sim run --trace` in a
    # `_csv.Error` traceback; it is a WorkloadError naming the file and row
    trace = tmp_path / "long.csv"
    trace.write_text(
        "timestamp,prompt_tokens,output_tokens\n0,10,10\n1,10," + "9" * 200_000 + "\n", encoding="utf-8"
    )
    with pytest.raises(w.WorkloadError, match=r"long\.csv:3: not a readable CSV row: field larger"):
        list(w.replay(trace, model="m", rng=random.Random(0)))


def test_replay_refuses_a_jsonl_line_over_the_limit_naming_it(tmp_path: Path) -> None:
    """A whole JSONL line was read and parsed whatever its length (a 1 GiB line took several GiB before
    its request was refused as too long); a line over ``MAX_TRACE_LINE_CHARS`` is refused by number."""
    trace = tmp_path / "huge.jsonl"
    first = json.dumps({"arrival": 0, "prompt_tokens": 5, "output_tokens": 5})
    huge = json.dumps({"arrival": 1, "output_tokens": 5, "prompt": "x" * w.MAX_TRACE_LINE_CHARS})
    trace.write_text(f"{first}\n{huge}\n", encoding="utf-8")
    replayed = w.replay(trace, model="m", rng=random.Random(0))
    assert next(replayed).prompt_tokens == 5  # the rows before it are read as before
    with pytest.raises(w.WorkloadError, match=r"huge\.jsonl:2: line longer than 16,777,216 characters"):
        next(replayed)


@pytest.mark.parametrize("cv", [1e-300, 1e160])
def test_gamma_arrivals_refuse_a_cv_whose_shape_is_not_a_number(cv: float) -> None:
    """The library's own guard, now that ``igw sim run --cv`` refuses these while parsing: cv² or
    1/cv² underflowing to 0 ended in a ZeroDivisionError traceback (before session s43)."""
    with pytest.raises(w.WorkloadError, match="gives no usable gamma inter-arrivals"):
        next(w.gamma_arrivals(rate=10.0, cv=cv, rng=random.Random(0)))
