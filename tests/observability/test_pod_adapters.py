"""Per-pod LoRA residency as the gateway last scraped it: a real gateway in front of a loopback
model server that publishes ``vllm:lora_requests_info`` (read for schedulers that can receive adapter
requests)."""

from __future__ import annotations

from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from tests.gateway.fake_model_server import FakeModelServer, running
from tests.gateway.support import config_doc, scheduler


async def test_per_pod_lora_residency_is_exported_as_scraped(gateway: Any) -> None:
    pod = FakeModelServer("lora", running_adapters="sql,chat", waiting_adapters="math", max_lora=4)
    async with (
        running(pod) as (a,),
        gateway(config_doc([scheduler("p", "m", loraAdapters=["sql"])]), {"p": [a.key]}) as gw,
    ):
        text = await (await gw.http.get(gw.url + "/metrics")).text()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    resident = {
        (s.labels["adapter"], s.labels["state"])
        for s in families["igw_endpoint_lora_adapter"].samples
        if s.labels["endpoint"] == a.key and s.value == 1.0
    }
    assert resident == {("sql", "running"), ("chat", "running"), ("math", "waiting")}
    (slots,) = families["igw_endpoint_max_lora"].samples
    assert (slots.labels["endpoint"], slots.value) == (a.key, 4.0)
