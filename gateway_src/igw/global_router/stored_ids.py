"""Which stored-response ids a cluster's answer may teach the router (its response memory).

Why: the router remembers which cluster stores a Responses API response by the id the cluster's
answer names (:attr:`igw.global_router.server.GlobalRouter.responses`), so a continuation
(``previous_response_id``) and a retrieval, deletion or cancel go there. A cluster's gateway relays
its pod's answer unchanged, and believes the pod's id only when it is the one the gateway minted
(:func:`igw.gateway.response_ids.believed`), but the body the router reads is still the pod's. Until
session s40 the router believed any id: a compromised pod (or cluster) that learnt another tenant's
response id named it in its answer to any request, and the router then sent that tenant's
retrievals and continuations of the response to it, never again to the cluster storing it. A search
was as credulous: a cluster answering 200 to a retrieval of an id it does not hold was remembered as
its holder, whoever had asked.

The rule (:func:`believed`): an id of the shape a gateway mints
(:mod:`igw.gateway.response_ids`) is believed only when it was minted for the caller's scope as
this router computes it (:func:`igw.gateway.guards.caller_scope` of the principal the router
verified, the same function a cluster's gateway applies to its own). An id of another shape is not
bound to anyone (an engine that ignores ``request_id``, a response made at a pod directly) and is
believed as before, as a cluster's gateway believes it.

What the router cannot know is the scope the *cluster's* gateway computed: the two tiers have their
own ``spec.auth`` and ``authorization`` settings. They agree when both verify the caller's token with
the same ``tenantClaim`` (the router forwarding it: ``forwardAuthorization: true``). When they do
not - a router without ``spec.auth`` (every caller is scope ``""`` here), clusters without
authentication (every id minted for ``""`` there), another ``tenantClaim`` - the ids the clusters mint
are of no scope the router computes, so it remembers none of them and finds each response by a
search (a 404 from each cluster asked before the one that stores it). That costs round trips, never a
wrong answer; believing an id the router cannot tie to the caller is what let one tenant steer
another's requests, so the router does not.
"""

from __future__ import annotations

from igw.gateway.guards import Principal, caller_scope
from igw.gateway.response_ids import minted_for


def believed(response_id: str | None, principal: Principal) -> str | None:
    """``response_id``, named by a cluster's answer to ``principal``'s request (or asked for by it),
    when the router may remember it (the module docstring); else ``None``."""
    if response_id is None or minted_for(response_id, caller_scope(principal)) is False:
        return None
    return response_id
