"""IGW-AU103: cert-manager Certificates are Ready, unexpired, renewing on time and not about to expire."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

from igw.checks.framework import CheckContext, FunctionCheck, Reporter
from igw.checks.inventory import Missing, need
from igw.checks.k8s import ref
from igw.checks.model import CheckMeta, Command, Result, Severity
from igw.config.certificate_renewal import RENEWAL_GRACE, parse_time

META = CheckMeta(
    id="IGW-AU103",
    title="Certificates Ready and not close to expiry",
    command=Command.AUDIT,
    category="tls",
    severity=Severity.HIGH,
    description="A Certificate that is not Ready, expired, stuck in renewal or expiring within the warning "
    "window breaks TLS for every client.",
    remediation="kubectl describe certificate NAME; fix the Issuer (DNS/HTTP solver, IAM) and check "
    "cert-manager logs; renewal should happen at 2/3 of the lifetime.",
)


def _run(ctx: CheckContext, r: Reporter) -> Iterator[Result]:
    certificates = need(ctx.inventory.kube.of("Certificate"))
    now = ctx.clock()
    warn = timedelta(days=ctx.options.certificate_warn_days)
    for cert in certificates:
        status = cert.get("status")
        if not isinstance(status, dict):
            yield r.skip(ref(cert), Missing("no status (manifest source or not yet reconciled)"))
            continue
        ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
        not_after = parse_time(status.get("notAfter"))
        renewal = parse_time(status.get("renewalTime"))
        if not_after is not None and not_after <= now:
            yield r.fail(ref(cert), f"expired at {status['notAfter']}", severity=Severity.CRITICAL)
        elif ready is None or ready.get("status") != "True":
            reason = (ready or {}).get("message") or (ready or {}).get("reason") or "no Ready condition"
            yield r.fail(ref(cert), f"not Ready: {reason}")
        elif renewal is not None and now > renewal + RENEWAL_GRACE:
            yield r.fail(ref(cert), f"renewal overdue since {status['renewalTime']}")
        elif not_after is not None and not_after - now < warn:
            days = (not_after - now).total_seconds() / 86400
            yield r.warn(
                ref(cert), f"expires in {days:.1f} days ({status['notAfter']})", severity=Severity.MEDIUM
            )
        elif not_after is None:
            yield r.warn(ref(cert), "Ready but no notAfter in status", severity=Severity.LOW)
        else:
            yield r.passed(ref(cert), f"Ready, valid until {status['notAfter']}")


CHECK = FunctionCheck(META, _run)
