"""Reading alerts back from a real Prometheus (``/api/v1/alerts``) so remediation can act on them in the
Kubernetes mode exactly as it does on the embedded evaluator's alerts."""

from __future__ import annotations

import datetime as dt
from typing import Any

import httpx

from gpucluster.monitoring.rules import Alert


class PrometheusError(RuntimeError):
    """Prometheus answered with an error or something we cannot read."""


def _ts(text: str) -> float:
    try:
        return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


def parse_alerts(body: dict[str, Any]) -> list[Alert]:
    """``/api/v1/alerts`` response -> alerts (labels keep Prometheus' ``instance`` / ``job``)."""
    if body.get("status") != "success":
        raise PrometheusError(f"alerts query failed: {body.get('error', body)}")
    out = []
    for a in body.get("data", {}).get("alerts", []):
        labels = {str(k): str(v) for k, v in a.get("labels", {}).items()}
        try:
            value = float(a.get("value", "nan"))
        except (TypeError, ValueError):
            value = float("nan")
        out.append(Alert(
            name=labels.get("alertname", ""),
            labels=labels,
            annotations={str(k): str(v) for k, v in a.get("annotations", {}).items()},
            state=str(a.get("state", "")),
            active_since=_ts(str(a.get("activeAt", ""))),
            value=value,
        ))
    return out


def fetch_alerts(base_url: str, client: httpx.Client | None = None, timeout: float = 5.0) -> list[Alert]:
    """Active alerts (pending and firing) of the Prometheus at ``base_url``."""
    c = client or httpx.Client(timeout=timeout)
    try:
        r = c.get(f"{base_url.rstrip('/')}/api/v1/alerts")
        r.raise_for_status()
        return parse_alerts(r.json())
    except httpx.HTTPError as exc:
        raise PrometheusError(f"{base_url}: {exc}") from exc
    finally:
        if client is None:
            c.close()
