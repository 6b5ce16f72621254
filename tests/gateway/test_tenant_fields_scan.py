"""``engine_fields`` on every request's body: the usual body (none of the refused fields, no
``vllm_xargs``) is answered without a look-up per table field; bodies that name fields still get them
all, in the table's order."""

from __future__ import annotations

from igw.gateway.tenant_fields import TENANT_REFUSED_FIELDS, XARGS_FIELD, engine_fields


class CountingBody(dict[str, object]):
    """A parsed body that counts the keys looked up one by one."""

    looked_up: int = 0

    def get(self, key: str, default: object = None) -> object:
        self.looked_up += 1
        return super().get(key, default)


def test_a_body_without_engine_fields_is_not_scanned_field_by_field() -> None:
    body = CountingBody(model="m", prompt="hi", max_tokens=3, stream=True)
    assert engine_fields(body) == ()
    assert body.looked_up == 0  # one comparison of its keys, not one get per table field
    assert len(TENANT_REFUSED_FIELDS) > 1


def test_bodies_naming_fields_still_get_them_in_the_tables_order() -> None:
    names = list(TENANT_REFUSED_FIELDS)
    body = {"model": "m", names[-1]: 1, names[0]: "x", names[1]: None}
    assert engine_fields(body) == (names[0], names[-1])  # a null asks for nothing
    xargs = {"model": "m", XARGS_FIELD: {"kv_transfer_params": {}, "other": 1}}
    assert engine_fields(xargs) == (f"{XARGS_FIELD}.kv_transfer_params",)
    assert engine_fields({"model": "m", XARGS_FIELD: None}) == ()
