"""The invalid corpus (``cases.py``): exact failing paths, CEL agreeing with Python on each."""

from __future__ import annotations

import pytest

from igw.config.validate import validate_document

from .cases import CASES, Case, base_document
from .cel_harness import cel_failures, disagreements


def test_corpus_is_large_and_ids_are_unique() -> None:
    assert len(CASES) >= 40
    assert len({c.id for c in CASES}) == len(CASES)


def test_base_document_is_valid() -> None:
    assert validate_document(base_document()) == []
    assert cel_failures(base_document()) == set()


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_case_fails_exactly_where_expected(case: Case) -> None:
    problems = validate_document(case.document())
    assert {(p.path, p.rule) for p in problems} == case.expected
    assert all(p.message for p in problems)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_cel_agrees_with_python(case: Case) -> None:
    assert disagreements(case.document()) == []


def test_cross_field_cases_are_caught_by_cel_itself() -> None:
    """Agreement must not be vacuous: each rule case really fails in CEL."""
    rule_cases = [c for c in CASES if any(not rule.startswith("schema.") for _, rule in c.expected)]
    assert len(rule_cases) >= 10
    for case in rule_cases:
        if any(rule == "jwt-provider-single-object" for _, rule in case.expected):
            continue  # a type error: the API server never reaches CEL
        cel_ids = {rule_id for rule_id, _ in cel_failures(case.document())}
        expected_ids = {rule for _, rule in case.expected if not rule.startswith("schema.")}
        assert expected_ids <= cel_ids, case.id


def test_unknown_field_message_names_the_field() -> None:
    doc = base_document()
    doc["spec"]["foo"] = 1
    assert [str(p) for p in validate_document(doc)] == ['spec.foo: unknown field "spec.foo"']


def test_duplicate_model_name_message_points_at_the_first() -> None:
    doc = base_document()
    doc["spec"]["schedulers"][1]["modelName"] = doc["spec"]["schedulers"][0]["modelName"]
    (problem,) = validate_document(doc)
    assert str(problem).startswith("spec.schedulers[1].modelName: duplicates spec.schedulers[0].modelName")


def test_provider_list_gets_a_clear_error() -> None:
    doc = base_document()
    doc["spec"]["auth"]["jwt"]["provider"] = [doc["spec"]["auth"]["jwt"]["provider"]]
    (problem,) = validate_document(doc)
    assert problem.path == "spec.auth.jwt.provider"
    assert "one provider object, not a list" in problem.message


def test_non_object_document() -> None:
    (problem,) = validate_document(["not", "a", "mapping"])  # type: ignore[arg-type]
    assert problem.rule == "schema.type"
    assert problem.path == ""


def test_a_token_cap_beyond_the_header_limit_names_both_fields_and_the_fix() -> None:
    """``maxTokenBytes: 32768`` was accepted and changed nothing: the listener answered 431 to every
    Authorization header over ``maxHeaderBytes`` (16384) first. Raising both, it is accepted (CEL too)."""
    doc = base_document()
    doc["spec"]["extensions"] = {"authorization": {"maxTokenBytes": 32768}}
    (problem,) = validate_document(doc)
    assert problem.path == "spec.extensions.authorization.maxTokenBytes"
    assert "serverLimits.maxHeaderBytes of at least 32788, got 16384 (its default)" in problem.message
    assert "tokens over 16364 bytes never reach the token check" in problem.message
    doc["spec"]["extensions"]["serverLimits"] = {"maxHeaderBytes": 32788}
    assert validate_document(doc) == []
    assert cel_failures(doc) == set()
    # with spec.auth the default cap is in force even without the authorization extension (before
    # session s42 this passed); without spec.auth no token is read: the listener's own business
    del doc["spec"]["extensions"]["authorization"]
    doc["spec"]["extensions"]["serverLimits"] = {"maxHeaderBytes": 4096}
    (problem,) = validate_document(doc)
    assert "8192 (its default) needs" in problem.message
    assert {rule for rule, _ in cel_failures(doc)} == {"token-fits-header-limit"}
    del doc["spec"]["auth"]
    assert validate_document(doc) == []
    assert cel_failures(doc) == set()
