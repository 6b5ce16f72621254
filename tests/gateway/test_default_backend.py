"""``spec.bbr.defaultBackend`` over real loopback HTTP: unmatched models go there when it is set."""

from __future__ import annotations

import socket
from typing import Any

import yaml

from igw.gateway.model_router import NO_MATCH_MESSAGE
from tests.gateway.fake_model_server import FakeModelServer, running
from tests.gateway.support import config_doc, scheduler, wait_for


def doc(default_backend: dict[str, Any] | None) -> dict[str, Any]:
    bbr = {"defaultBackend": default_backend} if default_backend is not None else {}
    return config_doc([scheduler("llama", "llama")], bbr=bbr)


async def test_without_default_backend_unmatched_models_get_404(gateway: Any) -> None:
    async with running(FakeModelServer("a")) as (a,), gateway(doc(None), {"llama": [a.key]}) as gw:
        for body in ({"model": "mystery", "prompt": "x"}, {"prompt": "x"}):
            resp = await gw.post("/v1/completions", body)
            assert resp.status == 404
            assert (await resp.json())["error"]["message"] == NO_MATCH_MESSAGE
        assert a.received == []


async def test_unmatched_models_go_to_the_default_backend_from_the_endpoints_file(gateway: Any) -> None:
    async with (
        running(
            FakeModelServer("llama"), FakeModelServer("fb1"), FakeModelServer("fb2", tokens=3)
        ) as servers,
    ):
        llama, fb1, fb2 = servers
        cfg = doc({"name": "fallback-svc", "port": 1})  # the file's addresses win over name:port
        async with gateway(cfg, {"llama": [llama.key]}, services={"fallback-svc": [fb1.key, fb2.key]}) as gw:
            # a known model is still scheduled onto its pool
            resp = await gw.post("/v1/completions", {"model": "llama", "prompt": "x"})
            assert (await resp.json())["server"] == "llama"
            # unknown model, spoofed gateway headers: forwarded byte for byte, headers replaced
            raw = b'{"model": "mystery",  "prompt": "x"}'
            spoof = {"X-Gateway-Model-Name": "evil", "X-Gateway-Base-Model-Name": "evil"}
            r1 = await gw.post("/v1/completions", raw, headers={**spoof, "Content-Type": "application/json"})
            assert r1.status == 200
            # no model at all: BBR passes it through, the default route takes it (round-robin: fb2)
            r2 = await gw.post("/v1/completions", {"prompt": "x", "stream": True})
            assert r2.status == 200
            assert (await r2.read()).endswith(b"data: [DONE]\n\n")
            assert (await r1.json())["server"] == "fb1"
            sent = fb1.received[-1]
            assert sent.body == raw
            assert [v for k, v in sent.headers.items() if k.lower() == "x-gateway-model-name"] == ["mystery"]
            assert not [k for k in sent.headers if k.lower() == "x-gateway-base-model-name"]
            assert len(fb2.received) == 1
            assert not [k for k in fb2.received[0].headers if k.lower() == "x-gateway-model-name"]
            assert len(llama.received) == 1
            text = await (await gw.http.get(gw.url + "/metrics")).text()
            assert 'igw_requests_total{code="200",model="(unknown)",requested_model="(unknown)"} 2.0' in text


async def test_default_backend_by_host_name_and_502_when_it_is_down(gateway: Any) -> None:
    async with running(FakeModelServer("a"), FakeModelServer("svc")) as (a, svc):
        # no "services" entry: the name is a host name (in-cluster: name.<namespace>.svc)
        cfg = doc({"name": "localhost", "port": svc.port})
        async with gateway(cfg, {"llama": [a.key]}) as gw:
            resp = await gw.post("/v1/chat/completions", {"model": "other", "messages": []})
            assert resp.status == 200
            assert (await resp.json())["server"] == "svc"
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed_port = sock.getsockname()[1]
    async with running(FakeModelServer("a")) as (a,):
        cfg = doc({"name": "dead-svc"})
        async with gateway(
            cfg, {"llama": [a.key]}, services={"dead-svc": [f"127.0.0.1:{closed_port}"]}
        ) as gw:
            resp = await gw.post("/v1/completions", {"model": "other", "prompt": "x"})
            assert resp.status == 502
            assert "default backend" in (await resp.json())["error"]["message"]


async def test_hot_reload_adds_and_removes_the_default_backend(gateway: Any) -> None:
    async with running(FakeModelServer("a"), FakeModelServer("fb")) as (a, fb):
        services = {"fallback-svc": [fb.key]}
        async with gateway(doc(None), {"llama": [a.key]}, services=services, reload=True) as gw:
            assert (await gw.post("/v1/completions", {"model": "other", "prompt": "x"})).status == 404
            gw.config_path.write_text(yaml.safe_dump(doc({"name": "fallback-svc"})))
            await wait_for(
                lambda: gw.state.runtime.config.bbr.default_backend is not None, what="reload applied"
            )
            resp = await gw.post("/v1/completions", {"model": "other", "prompt": "x"})
            assert (await resp.json())["server"] == "fb"
            gw.config_path.write_text(yaml.safe_dump(doc(None)))
            await wait_for(lambda: gw.state.runtime.config.bbr.default_backend is None, what="removed")
            assert (await gw.post("/v1/completions", {"model": "other", "prompt": "x"})).status == 404
            assert len(fb.received) == 1


async def test_a_model_name_with_a_line_break_is_refused_and_never_written_into_a_request_head(
    gateway: Any,
) -> None:
    """Found by probing (session s34): the default backend takes any model name, which the gateway
    writes into the ``X-Gateway-Model-Name`` header; a name holding ``\\r\\n`` wrote fields and a whole
    second request (``GET /admin``) into the pooled connection to the default backend. Now a 400
    naming ``model``, and nothing reaches any backend."""
    async with running(FakeModelServer("llama"), FakeModelServer("fb")) as (llama, fb):
        cfg = doc({"name": "fallback-svc", "port": 1})
        async with gateway(cfg, {"llama": [llama.key]}, services={"fallback-svc": [fb.key]}) as gw:
            smuggled = "x\r\nContent-Length: 0\r\n\r\nGET /admin HTTP/1.1\r\nHost: evil\r\n\r\n"
            for model in (smuggled, "x\nX-Injected: 1", "x\x00y", "tab\tname", "del\x7f"):
                resp = await gw.post("/v1/completions", {"model": model, "prompt": "p"})
                assert resp.status == 400, model
                error = (await resp.json())["error"]
                assert error["param"] == "model"
                assert error["message"] == "'model' must not contain control characters"
            assert fb.received == []
            assert llama.received == []
            # names in any script still go through, byte for byte
            resp = await gw.post("/v1/completions", {"model": "ünïcode-模型/lora", "prompt": "p"})
            assert resp.status == 200
            sent = fb.received[-1].headers
            assert [v for k, v in sent.items() if k.lower() == "x-gateway-model-name"] == [
                "ünïcode-模型/lora"
            ]
