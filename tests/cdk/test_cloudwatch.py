"""CloudWatch in the CDK app: the observability add-on with its agent role, and the dashboards and
alarms over the EMF metrics, each naming only metrics the emitters write (their own tables)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from igw.addon import chart, pins
from igw.gateway.emf_metrics import (
    CLUSTER_DIMENSION,
    DEFAULT_NAMESPACE,
    GATEWAY_METRICS,
    HEARTBEAT_METRICS,
    HEARTBEAT_RESULTS,
    MODEL_DIMENSION,
    MODEL_METRICS,
    POOL_DIMENSION,
    POOL_METRICS,
    REASON_DIMENSION,
    RESULT_DIMENSION,
    SCOPE_BUSY,
    SEARCH_REFUSAL_METRICS,
    UPSTREAM_NON_ANSWER_METRICS,
    UPSTREAM_REDIRECT_METRICS,
    USAGE_UNREAD_CLIENT_GONE,
    USAGE_UNREAD_METRICS,
)
from igw.gateway.emf_sink import AgentEndpoint
from igw.global_router.emf_metrics import DEFAULT_FLEET_NAMESPACE, FLEET_METRICS
from tests.cdk.support import EXAMPLES, Synthesized, inference_kubernetes_inputs


def example(name: str) -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load((EXAMPLES / name).read_text())
    return document


TIER1 = {
    **{name: (MODEL_DIMENSION,) for name, _ in MODEL_METRICS},
    **{name: (POOL_DIMENSION,) for name, _ in POOL_METRICS},
    **{name: (CLUSTER_DIMENSION, RESULT_DIMENSION) for name, _ in HEARTBEAT_METRICS},
    **{name: () for name, _ in GATEWAY_METRICS},
    **{name: (MODEL_DIMENSION, REASON_DIMENSION) for name, _ in USAGE_UNREAD_METRICS},
    **{name: (MODEL_DIMENSION,) for name, _ in UPSTREAM_REDIRECT_METRICS},
    **{name: (MODEL_DIMENSION, REASON_DIMENSION) for name, _ in UPSTREAM_NON_ANSWER_METRICS},
    **{name: (REASON_DIMENSION,) for name, _ in SEARCH_REFUSAL_METRICS},
}
"""Metric name -> its dimension set, as the gateway's emitter writes them."""
TIER2 = {m.name: tuple(d for _, d in m.dimensions) for m in FLEET_METRICS}
SEARCH = re.compile(
    r"SEARCH\('\{\"(?P<ns>[^\"]+)\"(?:,(?P<dims>[^}]*))?\} MetricName=\"(?P<name>\w+)\"', '(?P<stat>\w+)'"
)
"""A dashboard line's ``SEARCH``: ``{"namespace",Dim,...}``, or ``{"namespace"}`` for the metrics
without dimensions (``UsageMisnamed``), which that schema matches and no other."""
INSIGHTS = re.compile(r"SELECT SUM\((?P<name>\w+)\) FROM SCHEMA\(\"(?P<ns>[^\"]+)\"(?:, (?P<dims>[^)]*))?\)")
"""An alarm's Metrics Insights query; ``SCHEMA("namespace")`` alone for a metric without dimensions."""


def of_type(template: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [r["Properties"] for r in template["Resources"].values() if r["Type"] == kind]


def math_alarm(template: dict[str, Any], name: str) -> dict[str, Any]:
    """The one alarm whose metric math reads the series of the metric ``name``."""
    (alarm,) = [
        a
        for a in of_type(template, "AWS::CloudWatch::Alarm")
        if len(a.get("Metrics", [])) > 1
        and {q["MetricStat"]["Metric"]["MetricName"] for q in a["Metrics"] if "MetricStat" in q} == {name}
    ]
    return alarm


def flat(value: Any) -> str:
    """A ``Fn::Join`` dashboard body as text (references become ``<ref>``)."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and "Fn::Join" in value:
        return "".join(flat(part) for part in value["Fn::Join"][1])
    return "<ref>"


def searches(template: dict[str, Any], *, with_statistic: bool = False) -> list[Any]:
    """``(namespace, dimensions, metric)`` of every SEARCH widget line (with its statistic last)."""
    (dashboard,) = of_type(template, "AWS::CloudWatch::Dashboard")
    body = json.loads(flat(dashboard["DashboardBody"]).replace("<ref>", "us-west-2"))
    found = []
    for widget in body["widgets"]:
        for line in widget["properties"].get("metrics", []):
            for entry in line:
                if isinstance(entry, dict) and "expression" in entry:
                    m = SEARCH.search(entry["expression"])
                    assert m, entry["expression"]
                    dims = tuple(m["dims"].split(",")) if m["dims"] is not None else ()
                    entry_found = (m["ns"], dims, m["name"])
                    found.append((*entry_found, m["stat"]) if with_statistic else entry_found)
    return found


def test_the_observability_addon_runs_with_the_agent_role_through_pod_identity(
    synthesized: Synthesized,
) -> None:
    platform = synthesized.templates["platform"]
    (addon,) = [
        a
        for a in of_type(platform, "AWS::EKS::Addon")
        if a["AddonName"] == pins.CLOUDWATCH_OBSERVABILITY_ADDON
    ]
    assert addon["AddonVersion"] == pins.CLOUDWATCH_OBSERVABILITY_VERSION
    assert "ServiceAccountRoleArn" not in addon
    (association,) = addon["PodIdentityAssociations"]
    assert association["ServiceAccount"] == pins.CLOUDWATCH_AGENT_SERVICE_ACCOUNT
    role_id = association["RoleArn"]["Fn::GetAtt"][0]
    role = platform["Resources"][role_id]["Properties"]
    assert [flat(arn) for arn in role["ManagedPolicyArns"]] == [
        "arn:<ref>:iam::aws:policy/CloudWatchAgentServerPolicy"
    ]
    (statement,) = role["AssumeRolePolicyDocument"]["Statement"]
    assert statement["Principal"] == {"Service": "pods.eks.amazonaws.com"}


@pytest.mark.parametrize("which", ["synthesized", "variant"])
def test_the_agent_listens_for_emf_and_keeps_container_insights(
    which: str, request: pytest.FixtureRequest
) -> None:
    from cdk.constructs.cloudwatch_observability import EMF_PORT

    platform = request.getfixturevalue(which).templates["platform"]
    (addon,) = [
        a
        for a in of_type(platform, "AWS::EKS::Addon")
        if a["AddonName"] == pins.CLOUDWATCH_OBSERVABILITY_ADDON
    ]
    collected = json.loads(addon["ConfigurationValues"])["agent"]["config"]["logs"]["metrics_collected"]
    assert collected["emf"] == {}  # the listener on TCP and UDP 25888 (the agent's default port)
    assert collected["kubernetes"] == {"enhanced_container_insights": True}
    assert EMF_PORT == 25888


def test_with_irsa_the_agent_role_trusts_only_its_service_account(variant: Synthesized) -> None:
    platform = variant.templates["platform"]
    (addon,) = [
        a
        for a in of_type(platform, "AWS::EKS::Addon")
        if a["AddonName"] == pins.CLOUDWATCH_OBSERVABILITY_ADDON
    ]
    assert "PodIdentityAssociations" not in addon
    role = platform["Resources"][addon["ServiceAccountRoleArn"]["Fn::GetAtt"][0]]["Properties"]
    (statement,) = role["AssumeRolePolicyDocument"]["Statement"]
    assert statement["Action"] == "sts:AssumeRoleWithWebIdentity"
    conditions_id = statement["Condition"]["StringEquals"]["Fn::GetAtt"][0]
    conditions = flat(platform["Resources"][conditions_id]["Properties"]["Value"])
    subject = f"system:serviceaccount:{pins.CLOUDWATCH_NAMESPACE}:{pins.CLOUDWATCH_AGENT_SERVICE_ACCOUNT}"
    assert f':sub":"{subject}"' in conditions


def test_an_addon_the_cluster_already_runs_is_not_created_again(tmp_path: Path) -> None:
    from cdk import config
    from cdk.app_builder import build_app

    document = example("existing-cluster.yaml")
    document["existingCluster"]["installedAddons"] = [
        *document["existingCluster"].get("installedAddons", []),
        pins.CLOUDWATCH_OBSERVABILITY_ADDON,
    ]
    built = build_app(config.parse(document), outdir=tmp_path)
    assert built.platform is not None
    platform = built.app.synth().get_stack_artifact(built.platform.artifact_id).template
    names = [a["AddonName"] for a in of_type(platform, "AWS::EKS::Addon")]
    assert names  # the other add-ons are still there
    assert pins.CLOUDWATCH_OBSERVABILITY_ADDON not in names


def test_gateway_dashboard_draws_every_emitted_metric_and_nothing_else(synthesized: Synthesized) -> None:
    found = searches(synthesized.templates["inference"])
    assert sorted((name, dims) for _, dims, name in found) == sorted(TIER1.items())
    assert {ns for ns, _, _ in found} == {DEFAULT_NAMESPACE}


def test_dashboard_names_carry_the_region(synthesized: Synthesized) -> None:
    """Found by probing (session s38): CloudWatch dashboard names are global to the account, not to a
    region, and the gateway's was ``<clusterName>-inference-gateway``: tier-1 clusters of one name in
    two regions (the global router's set-up) shared one dashboard, the second stack overwriting the
    first's and either stack's deletion removing it. The fleet dashboard test checks the router's."""
    (dashboard,) = of_type(synthesized.templates["inference"], "AWS::CloudWatch::Dashboard")
    assert dashboard["DashboardName"] == "igw-inference-us-west-2-inference-gateway"


def test_replicas_documents_add_up_only_where_they_are_shares_of_traffic(synthesized: Synthesized) -> None:
    """Each gateway replica writes its own documents: requests add up, latency quantiles take the
    worst replica, percentages average, and the pool's ready pods (alike on every replica) their
    maximum: a sum counted every pod once per replica."""
    stats = {
        name: stat for _, _, name, stat in searches(synthesized.templates["inference"], with_statistic=True)
    }
    assert stats == {
        "Requests": "Sum",
        "ErrorRate": "Average",
        "LatencyP99": "Maximum",
        "TtftP99": "Maximum",
        "KvCacheAverage": "Average",
        "ReadyPods": "Maximum",
        "EjectedPods": "Maximum",
        "Retries": "Sum",  # each replica's (and worker's) own retries
        "HeartbeatWrites": "Sum",  # each replica's own writes (since session s44)
        "HeartbeatPrunes": "Sum",  # each replica's own prunes (since session s45)
        "UsageMisnamed": "Sum",
        "RateLimitHoldsRefused": "Sum",  # each replica's own buckets (since session s45)
        "AnswerUsageUnread": "Sum",
        "UpstreamRedirects": "Sum",  # each replica's own attempts (since session s46)
        "UpstreamNonAnswers": "Sum",  # each replica's own attempts (since session s50)
        "ResponseSearchesRefused": "Sum",  # each replica's own refusals (since session s47)
    }


def test_gateway_alarms_per_configured_model_and_pool_watch_emitted_metrics(synthesized: Synthesized) -> None:
    alarms = of_type(synthesized.templates["inference"], "AWS::CloudWatch::Alarm")
    schedulers = example("deployment.yaml")["inference"]["gatewayConfig"]["spec"]["schedulers"]
    watched = set()
    math = [a for a in alarms if "Metrics" in a and len(a["Metrics"]) > 1]
    assert sorted(
        {q["MetricStat"]["Metric"]["MetricName"] for q in a["Metrics"] if "MetricStat" in q}.pop()
        for a in math
    ) == ["HeartbeatPrunes", "HeartbeatWrites"]
    alarms = [
        a
        for a in alarms
        if "Metrics" not in a and a.get("Dimensions") and a["MetricName"] != "ResponseSearchesRefused"
    ]  # per model or pool (the refused searches' alarm reads its one fixed series)
    for alarm in alarms:
        assert alarm["Namespace"] == DEFAULT_NAMESPACE
        (dimension,) = alarm["Dimensions"]
        assert TIER1[alarm["MetricName"]] == (dimension["Name"],), alarm
        assert alarm["Period"] == 60
        watched.add((alarm["MetricName"], dimension["Value"]))
    models = {s["modelName"] for s in schedulers}
    pools = {s["name"] for s in schedulers}
    assert watched == (
        {("ErrorRate", m) for m in models}
        | {("TtftP99", m) for m in models}
        | {("KvCacheAverage", p) for p in pools}
        | {("EjectedPods", p) for p in pools}
    )
    statistics = {a["MetricName"]: a["Statistic"] for a in alarms}
    assert statistics["EjectedPods"] == "Maximum"  # a pool's state: the worst replica, not a sum


def test_aws_managed_addon_gets_no_gateway_dashboard(variant: Synthesized) -> None:
    assert of_type(variant.templates["inference"], "AWS::CloudWatch::Dashboard") == []
    assert of_type(variant.templates["inference"], "AWS::CloudWatch::Alarm") == []


def test_fleet_dashboard_and_alarms_name_only_what_the_router_emits(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    import aws_cdk as cdk

    from cdk.app_builder import feature_flags
    from cdk.global_router_config import EXAMPLE_FILE, load
    from cdk.stacks.global_router_stack import build_global_router_stack

    app = cdk.App(outdir=str(tmp_path_factory.mktemp("fleet-cdk.out")), context=feature_flags())
    stack = build_global_router_stack(app, load(EXAMPLE_FILE), apply_nag=False)
    template = app.synth().get_stack_artifact(stack.artifact_id).template
    (dashboard,) = of_type(template, "AWS::CloudWatch::Dashboard")
    assert dashboard["DashboardName"] == "IgwGlobalRouter-us-east-1-fleet"  # names are account-wide
    found = searches(template)
    assert sorted((name, dims) for _, dims, name in found) == sorted(TIER2.items())
    assert {ns for ns, _, _ in found} == {DEFAULT_FLEET_NAMESPACE}
    queries = []
    fixed = [a for a in of_type(template, "AWS::CloudWatch::Alarm") if "Metrics" not in a]
    assert [(a["Namespace"], a["MetricName"]) for a in fixed] == [
        (DEFAULT_FLEET_NAMESPACE, "ResponseSearchesRefused")  # since session s47
    ]
    for alarm in of_type(template, "AWS::CloudWatch::Alarm"):
        if "Metrics" not in alarm:
            continue
        (query,) = alarm["Metrics"]
        m = INSIGHTS.fullmatch(query["Expression"])
        assert m, query["Expression"]
        assert m["ns"] == DEFAULT_FLEET_NAMESPACE
        assert tuple(m["dims"].split(", ") if m["dims"] else ()) == TIER2[m["name"]]
        queries.append(m["name"])
    # HeartbeatSourceOutages since session s44 (before, not in the EMF documents at all);
    # AnswerUsageUnread and UsageMisnamed since session s45 (before, drawn but watched by no alarm)
    assert sorted(queries) == [
        "AnswerUsageUnread",
        "FailoverEvents",
        "HeartbeatSourceOutages",
        "RateLimitHits",
        "RateLimitHoldsRefused",  # since session s45 (before, on /metrics only)
        "UpstreamAuthRefused",  # since session s47 (before, on /metrics only)
        "UpstreamNonAnswers",  # since session s50 (before, on /metrics only)
        "UpstreamRedirects",  # since session s46 (before, on /metrics only)
        "UsageMisnamed",
    ]
    any_count = {
        m["name"]: (a["Threshold"], a["ComparisonOperator"], a["EvaluationPeriods"])
        for a in of_type(template, "AWS::CloudWatch::Alarm")
        if "Metrics" in a and (m := INSIGHTS.fullmatch(a["Metrics"][0]["Expression"]))
    }
    for name in (
        "AnswerUsageUnread",
        "UsageMisnamed",
        "RateLimitHoldsRefused",
        "UpstreamRedirects",
        "UpstreamNonAnswers",
        "UpstreamAuthRefused",
    ):
        assert any_count[name] == (1, "GreaterThanOrEqualToThreshold", 1)


def test_an_alarm_on_a_metric_no_emitter_writes_fails_synthesis() -> None:
    from cdk.constructs.metric_dashboards import emitted

    assert emitted("TtftP99", MODEL_METRICS) == ("TtftP99", "Milliseconds")
    with pytest.raises(ValueError, match="no emitter writes the CloudWatch metric 'TtftP95'"):
        emitted("TtftP95", MODEL_METRICS)


def test_the_deployed_gateway_sends_emf_to_the_addons_agent(gateway_mode: Synthesized) -> None:
    from cdk.constructs.cloudwatch_observability import EMF_PORT

    _, helm = inference_kubernetes_inputs(gateway_mode.templates["inference"])
    assert helm["Values"]["gateway"]["cloudWatch"]["enabled"] is True
    rendered = chart.render(helm["Values"], release=helm["Release"], namespace=helm["Namespace"])
    (deployment,) = [o for o in rendered if o["kind"] == "Deployment"]
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--emf-interval") + 1] == "60"
    endpoint = AgentEndpoint.parse(args[args.index("--emf-endpoint") + 1])
    assert endpoint.host == f"cloudwatch-agent.{pins.CLOUDWATCH_NAMESPACE}"  # the add-on's agent Service
    assert endpoint.port == EMF_PORT


def test_the_deployed_operator_gives_its_gateway_pods_the_addons_agent(synthesized: Synthesized) -> None:
    from cdk.constructs.cloudwatch_observability import EMF_PORT

    _, helm = inference_kubernetes_inputs(synthesized.templates["inference"])
    assert helm["Values"]["mode"] == "operator"
    rendered = chart.render(helm["Values"], release=helm["Release"], namespace=helm["Namespace"])
    (deployment,) = [o for o in rendered if o["kind"] == "Deployment"]
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[0] == "operator"
    assert args[args.index("--gateway-emf-interval") + 1] == "60"
    endpoint = AgentEndpoint.parse(args[args.index("--gateway-emf-endpoint") + 1])
    assert (endpoint.host, endpoint.port) == (f"cloudwatch-agent.{pins.CLOUDWATCH_NAMESPACE}", EMF_PORT)


def test_an_alarm_keeps_its_logical_id_when_models_are_added_beside_it() -> None:
    """Before session s38 alarm ids were positions: adding a model before others moved every later
    alarm (its CloudWatch alarm, state and history) to another model's metric in place."""
    import aws_cdk as cdk

    from cdk.constructs.metric_dashboards import GatewayMetricsDashboard

    def alarms(models: list[str], pools: list[str]) -> dict[str, str]:
        """logical id -> the alarm's description (which names its model or pool)."""
        stack = cdk.Stack(cdk.App(), "S")
        GatewayMetricsDashboard(
            stack, "M", dashboard_name="d", models=models, pools=pools, heartbeat_cluster="c"
        )
        resources = stack.resolve(cdk.assertions.Template.from_stack(stack).to_json())["Resources"]
        return {
            logical: r["Properties"]["AlarmDescription"]
            for logical, r in resources.items()
            if r["Type"] == "AWS::CloudWatch::Alarm"
        }

    before = alarms(["meta-llama/Llama-3.1-8B-Instruct", "qwen"], ["llama"])
    after = alarms(["aaa/first", "meta-llama/Llama-3.1-8B-Instruct", "qwen"], ["a-pool", "llama"])
    # two per model, two per pool, the failed heartbeat writes and prunes, the unread and the
    # misnamed usage, the refused holds, the refused redirects (since session s46), the searches
    # refused for a scope held to its share (since session s47), the refused non-answers (since s50)
    assert len(before) == 14
    assert len(after) == 18
    assert {k: v for k, v in after.items() if k in before} == before


def heartbeat_alarm_value(
    alarm: dict[str, Any], writes: dict[str, float], *, cluster: str = "igw-inference"
) -> float | None:
    """The failed-writes alarm's value for one minute of ``writes`` (result -> the sum of the
    replicas' ``HeartbeatWrites``; a result absent wrote no document): its metric math evaluated
    with its own ids (``FILL(id, 0)``, ``IF(condition, value)`` without an else: no value)."""
    (expression,) = [q for q in alarm["Metrics"] if "Expression" in q]
    ids = {}
    for q in alarm["Metrics"]:
        if "MetricStat" in q:
            stat = q["MetricStat"]
            assert (stat["Metric"]["Namespace"], stat["Metric"]["MetricName"]) == (
                DEFAULT_NAMESPACE,
                "HeartbeatWrites",
            )
            assert (stat["Stat"], stat["Period"]) == ("Sum", 60)  # the replicas' writes add up
            dimensions = {d["Name"]: d["Value"] for d in stat["Metric"]["Dimensions"]}
            assert dimensions.keys() == {CLUSTER_DIMENSION, RESULT_DIMENSION}
            assert dimensions[CLUSTER_DIMENSION] == cluster  # this cluster's writes alone
            ids[q["Id"]] = dimensions[RESULT_DIMENSION]
    assert sorted(ids.values()) == sorted(HEARTBEAT_RESULTS)  # every result the publisher counts
    text = re.sub(r"FILL\((\w+), 0\)", lambda m: repr(writes.get(ids[m[1]], 0.0)), expression["Expression"])
    m = re.fullmatch(r"IF\((?P<condition>.+?) > 0, (?P<value>.+)\)", text)
    assert m, expression["Expression"]
    if not eval(m["condition"]):  # numbers and + - * / only, substituted above
        return None
    value: float = eval(m["value"])
    return value


def test_the_gateway_alarms_on_the_share_of_heartbeat_writes_that_failed(synthesized: Synthesized) -> None:
    """Since session s44 (``HeartbeatWrites{Result}`` in the EMF documents): the share of the
    cluster's heartbeat writes that did not succeed, as the Prometheus rule
    ``IgwHeartbeatWritesFailing`` has it: over 10%, every minute for 5. A result writes no document
    in a minute it did not move, so a minute of failures alone is 100%, not missing; a minute
    without writes (no heartbeat configured) is no value, and no value is not a breach."""
    alarm = math_alarm(synthesized.templates["inference"], "HeartbeatWrites")
    assert (alarm["Threshold"], alarm["ComparisonOperator"]) == (10, "GreaterThanThreshold")
    assert (alarm["EvaluationPeriods"], alarm["DatapointsToAlarm"]) == (5, 5)
    assert alarm["TreatMissingData"] == "notBreaching"
    assert heartbeat_alarm_value(alarm, {"ok": 54, "unreachable": 6}) == pytest.approx(10)
    assert heartbeat_alarm_value(alarm, {"ok": 50, "refused": 5, "unreachable": 5}) == pytest.approx(
        100 * 10 / 60
    )
    assert heartbeat_alarm_value(alarm, {"unreachable": 60}) == 100  # no ok document that minute
    assert heartbeat_alarm_value(alarm, {"ok": 120}) == 0
    assert heartbeat_alarm_value(alarm, {}) is None


def test_the_gateway_alarms_on_any_unread_or_misnamed_usage(synthesized: Synthesized) -> None:
    """Since session s45: ``AnswerUsageUnread`` (by ``Model``, ``Reason``) and ``UsageMisnamed`` (no
    dimensions) reached CloudWatch since s44 but no alarm watched them, only the dashboard and the
    PrometheusRule ``IgwAnswerUsageUnread``. Any count in a minute fires, as that rule's does: the
    unread usage summed over every model and reason by a Metrics Insights query (the models and
    reasons that report, not a list), the misnamed usage on its one series."""
    alarms = of_type(synthesized.templates["inference"], "AWS::CloudWatch::Alarm")
    queries = [
        (m, a)
        for a in alarms
        if len(a.get("Metrics", [])) == 1
        and (
            m := re.fullmatch(
                r"SELECT SUM\((\w+)\) FROM SCHEMA\(\"([^\"]+)\", ([^)]*)\)(?: WHERE (\w+) != '(\w+)')?",
                a["Metrics"][0]["Expression"],
            )
        )
    ]
    ((query, unread),) = [(m, a) for m, a in queries if m[1] == "AnswerUsageUnread"]
    assert (query[1], query[2], tuple(query[3].split(", "))) == (
        "AnswerUsageUnread",
        DEFAULT_NAMESPACE,
        TIER1["AnswerUsageUnread"],
    )
    # a client leaving a compressed answer mid-way is counted (since s45), not a pod compressing
    assert (query[4], query[5]) == (REASON_DIMENSION, USAGE_UNREAD_CLIENT_GONE)
    (misnamed,) = [a for a in alarms if a.get("MetricName") == "UsageMisnamed"]
    assert (misnamed["Namespace"], misnamed.get("Dimensions", []), misnamed["Statistic"]) == (
        DEFAULT_NAMESPACE,
        [],
        "Sum",  # every replica's own retrievals
    )
    for alarm in (unread, misnamed):
        assert (alarm["Threshold"], alarm["ComparisonOperator"]) == (1, "GreaterThanOrEqualToThreshold")
        assert (alarm["EvaluationPeriods"], alarm["DatapointsToAlarm"]) == (1, 1)
        assert alarm["TreatMissingData"] == "notBreaching"  # no document: nothing went unread


def test_the_gateway_alarms_on_any_refused_redirect(synthesized: Synthesized) -> None:
    """Since session s46: a pod's redirect (3xx, refused with a 502) reaches CloudWatch as
    ``UpstreamRedirects`` by ``Model``, and any count in a minute, summed over every model that
    reports (a Metrics Insights query, not a list of models), fires, as the PrometheusRule
    ``IgwUpstreamRedirects`` does."""
    alarms = of_type(synthesized.templates["inference"], "AWS::CloudWatch::Alarm")
    (alarm,) = [
        a
        for a in alarms
        if len(a.get("Metrics", [])) == 1
        and (m := INSIGHTS.fullmatch(a["Metrics"][0]["Expression"]))
        and m["name"] == "UpstreamRedirects"
    ]
    m = INSIGHTS.fullmatch(alarm["Metrics"][0]["Expression"])
    assert m is not None
    assert (m["ns"], tuple(m["dims"].split(", "))) == (DEFAULT_NAMESPACE, TIER1["UpstreamRedirects"])
    assert (alarm["Threshold"], alarm["ComparisonOperator"]) == (1, "GreaterThanOrEqualToThreshold")
    assert (alarm["EvaluationPeriods"], alarm["DatapointsToAlarm"]) == (1, 1)
    assert alarm["TreatMissingData"] == "notBreaching"


def test_the_gateway_alarms_on_any_refused_non_answer(synthesized: Synthesized) -> None:
    """Since session s50: a pod's answer that cannot be one (204/205/304, an empty or non-JSON
    success to an inference POST, refused with a 502) reaches CloudWatch as ``UpstreamNonAnswers`` by
    ``Model``, ``Reason``, and any count in a minute, summed over every model and reason that reports
    (a Metrics Insights query), fires, as the PrometheusRule ``IgwUpstreamNonAnswers`` does."""
    alarms = of_type(synthesized.templates["inference"], "AWS::CloudWatch::Alarm")
    (alarm,) = [
        a
        for a in alarms
        if len(a.get("Metrics", [])) == 1
        and (m := INSIGHTS.fullmatch(a["Metrics"][0]["Expression"]))
        and m["name"] == "UpstreamNonAnswers"
    ]
    m = INSIGHTS.fullmatch(alarm["Metrics"][0]["Expression"])
    assert m is not None
    assert (m["ns"], tuple(m["dims"].split(", "))) == (DEFAULT_NAMESPACE, TIER1["UpstreamNonAnswers"])
    assert TIER1["UpstreamNonAnswers"] == (MODEL_DIMENSION, REASON_DIMENSION)
    assert (alarm["Threshold"], alarm["ComparisonOperator"]) == (1, "GreaterThanOrEqualToThreshold")
    assert (alarm["EvaluationPeriods"], alarm["DatapointsToAlarm"]) == (1, 1)
    assert alarm["TreatMissingData"] == "notBreaching"


def _scope_busy_alarm(template: dict[str, Any]) -> dict[str, Any]:
    (alarm,) = [
        a
        for a in of_type(template, "AWS::CloudWatch::Alarm")
        if a.get("MetricName") == "ResponseSearchesRefused"
    ]
    return alarm


def test_both_tiers_alarm_on_a_caller_scope_held_to_its_share_of_the_searches(
    synthesized: Synthesized, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Since session s47 the searches for stored responses refused because the caller scope held its
    share reach CloudWatch at both tiers (``ResponseSearchesRefused`` by ``Reason``), and 20 or more
    in 15 minutes, every replica's summed, fire an alarm on the one ``scope_busy`` series, as the
    PrometheusRules ``IgwSearchesScopeBusy`` and ``IgwGlobalSearchesScopeBusy`` do."""
    import aws_cdk as cdk

    from cdk.app_builder import feature_flags
    from cdk.global_router_config import EXAMPLE_FILE, load
    from cdk.stacks.global_router_stack import build_global_router_stack
    from igw.gateway.response_search import SEARCH_REFUSAL_REASONS

    assert SCOPE_BUSY in SEARCH_REFUSAL_REASONS  # the reason both tiers' counters write
    app = cdk.App(outdir=str(tmp_path_factory.mktemp("fleet-busy-cdk.out")), context=feature_flags())
    stack = build_global_router_stack(app, load(EXAMPLE_FILE), apply_nag=False)
    fleet = app.synth().get_stack_artifact(stack.artifact_id).template
    for template, namespace in (
        (synthesized.templates["inference"], DEFAULT_NAMESPACE),
        (fleet, DEFAULT_FLEET_NAMESPACE),
    ):
        alarm = _scope_busy_alarm(template)
        assert (alarm["Namespace"], alarm["Dimensions"]) == (
            namespace,
            [{"Name": REASON_DIMENSION, "Value": SCOPE_BUSY}],
        )
        assert (alarm["Statistic"], alarm["Period"]) == ("Sum", 900)
        assert (alarm["Threshold"], alarm["ComparisonOperator"]) == (20, "GreaterThanOrEqualToThreshold")
        assert (alarm["EvaluationPeriods"], alarm["DatapointsToAlarm"]) == (1, 1)
        assert alarm["TreatMissingData"] == "notBreaching"


def test_the_gateway_alarms_on_refused_holds_and_on_prunes_failing_for_a_quarter_hour(
    synthesized: Synthesized,
) -> None:
    """Since session s45 (both counters in the EMF documents): any hold the local buckets refused in
    a minute fires, as the PrometheusRule ``IgwRatelimitHoldsRefused`` does (a tenant stays charged a
    whole bound); the cluster's prunes of stale heartbeat fields fire when some failed (unreachable
    or refused, its own cluster's series, each result filled with 0) every minute for 15 minutes: the
    heartbeats are written, so only a sustained failure - an ACL without ``HDEL`` - asks for action."""
    template = synthesized.templates["inference"]
    alarms = of_type(template, "AWS::CloudWatch::Alarm")
    (refused,) = [a for a in alarms if a.get("MetricName") == "RateLimitHoldsRefused"]
    assert (refused["Namespace"], refused.get("Dimensions", []), refused["Statistic"]) == (
        DEFAULT_NAMESPACE,
        [],
        "Sum",
    )
    assert (refused["Threshold"], refused["ComparisonOperator"]) == (1, "GreaterThanOrEqualToThreshold")
    assert (refused["EvaluationPeriods"], refused["DatapointsToAlarm"]) == (1, 1)
    prunes = math_alarm(template, "HeartbeatPrunes")
    assert (prunes["Threshold"], prunes["ComparisonOperator"]) == (1, "GreaterThanOrEqualToThreshold")
    assert (prunes["EvaluationPeriods"], prunes["DatapointsToAlarm"]) == (15, 15)
    assert prunes["TreatMissingData"] == "notBreaching"
    (expression,) = [q for q in prunes["Metrics"] if "Expression" in q]
    ids = {}
    for q in prunes["Metrics"]:
        if "MetricStat" in q:
            dimensions = {d["Name"]: d["Value"] for d in q["MetricStat"]["Metric"]["Dimensions"]}
            assert dimensions[CLUSTER_DIMENSION] == "igw-inference"
            assert q["MetricStat"]["Stat"] == "Sum"
            ids[q["Id"]] = dimensions[RESULT_DIMENSION]
    assert sorted(ids.values()) == sorted(r for r in HEARTBEAT_RESULTS if r != "ok")

    def value(prunes: dict[str, float]) -> float:
        text = re.sub(
            r"FILL\((\w+), 0\)", lambda m: repr(prunes.get(ids[m[1]], 0.0)), expression["Expression"]
        )
        assert re.fullmatch(r"[0-9.+ ]+", text), text
        result: float = eval(text)  # numbers and + only, checked above
        return result

    assert value({"refused": 6}) == 6
    assert value({"unreachable": 2, "refused": 1}) == 3
    assert value({}) == 0  # the ok prunes are not counted


def test_the_heartbeat_alarm_reads_the_cluster_its_gateway_config_names(tmp_path: Path) -> None:
    """Since session s45 the failed-writes alarm reads its own cluster's series: ``HeartbeatWrites``
    had ``Result`` alone, and the clusters of one account and region wrote the same series, so one
    cluster failing every write among nine healthy ones of like traffic summed to 10%, which the
    alarm's "above 10%" never reached (and the healthy clusters' alarms fired with it when it did).
    The cluster is the one ``spec.extensions.globalHeartbeat`` names (the gateway's EMF documents
    carry it); without heartbeats, the stack's cluster name."""
    from cdk import config
    from cdk.app_builder import build_app

    document = example("deployment.yaml")
    spec = document["inference"]["gatewayConfig"]["spec"]
    spec.setdefault("extensions", {})["globalHeartbeat"] = {
        "cluster": "us-west-2-a",
        "region": "us-west-2",
        "redis": {"url": "rediss://redis.example.internal:6379/0"},
        "ttl": "90s",
    }
    built = build_app(config.parse(document), outdir=tmp_path)
    template = built.app.synth().get_stack_artifact(built.inference.artifact_id).template
    alarm = math_alarm(template, "HeartbeatWrites")
    # one failing cluster among nine healthy ones: its own writes, all failed
    assert heartbeat_alarm_value(alarm, {"unreachable": 60}, cluster="us-west-2-a") == 100
    # the failed-prunes alarm's period follows the extension's TTL (since session s46): a prune at
    # most every 91 s, so two-minute periods, eight of them
    prunes = math_alarm(template, "HeartbeatPrunes")
    assert {q["MetricStat"]["Period"] for q in prunes["Metrics"] if "MetricStat" in q} == {120}
    assert (prunes["EvaluationPeriods"], prunes["DatapointsToAlarm"]) == (8, 8)


@pytest.mark.parametrize("ttl_s", [10.0, 59.0, 60.0, 90.0, 300.0])
def test_the_failed_prunes_alarm_has_a_prune_in_every_period_whatever_the_ttl(ttl_s: float) -> None:
    """Until session s46 the failed-prunes alarm asked for a failure in each of 15 one-minute periods:
    with a heartbeat TTL of a minute or more (a prune once a TTL) some minutes held no prune, read 0,
    and the alarm never fired however long every prune failed. Its period now follows the
    gateway's own prune cadence (``HeartbeatSettings.prune_every_s``): with every prune failing,
    spaced as far apart as they may be and whatever the phase of the one-minute EMF documents,
    every period of the evaluation holds a failure, and the evaluation spans at least 15 minutes."""
    import aws_cdk as cdk

    from cdk.constructs.metric_dashboards import GatewayMetricsDashboard
    from igw.gateway.heartbeat import HeartbeatSettings

    every = HeartbeatSettings.from_mapping(
        {"cluster": "c", "region": "r", "ttl": f"{ttl_s:g}s"}
    ).prune_every_s
    stack = cdk.Stack(cdk.App(), "S")
    GatewayMetricsDashboard(
        stack,
        "M",
        dashboard_name="d",
        models=[],
        pools=[],
        heartbeat_cluster="c",
        heartbeat_prune_every_s=every,
    )
    template = stack.resolve(cdk.assertions.Template.from_stack(stack).to_json())
    alarm = math_alarm(template, "HeartbeatPrunes")
    (period,) = {q["MetricStat"]["Period"] for q in alarm["Metrics"] if "MetricStat" in q}
    assert period % 60 == 0
    assert alarm["DatapointsToAlarm"] == alarm["EvaluationPeriods"]
    assert 15 * 60 <= alarm["EvaluationPeriods"] * period < 15 * 60 + period
    for phase in range(0, 60, 7):  # when in the minute the replica's EMF documents go out
        prunes = [k * every for k in range(int(3600 // every) + 1)]  # all failing, as far apart as may be
        # a document counts the prunes since the one before it, stamped with its own time
        documents = [phase + 60 * j for j in range(1, 61)]
        counted = {d: sum(1 for p in prunes if d - 60 < p <= d) for d in documents}
        periods = {d // period for d in documents}
        for bucket in sorted(periods)[1:-1]:  # the whole periods
            assert sum(n for d, n in counted.items() if d // period == bucket) >= 1, (phase, bucket)
