"""Building an API client (kubeconfig file or in-cluster service account) and small call helpers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, config
from kubernetes.client import ApiClient, ApiException

from gpucluster import inputfile


class KubeConfigError(ValueError):
    """The kubeconfig cannot be loaded; the message says which file and why."""


def api_client(kubeconfig: str | Path | None = None, pool_size: int = 32) -> ApiClient:
    """An ``ApiClient`` from ``kubeconfig``, or from the pod's service account when ``None``."""
    cfg = client.Configuration()
    try:
        if kubeconfig is None:
            config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
        else:
            path = Path(kubeconfig)
            try:  # size, encoding and nesting checked before the client's own loader reads it
                doc = inputfile.load_yaml(path)
            except inputfile.InputFileError as exc:
                raise KubeConfigError(f"kubeconfig {exc}") from None
            if not isinstance(doc, dict):
                raise KubeConfigError(f"{path}: not a kubeconfig: expected a mapping with clusters, users, contexts")
            config.load_kube_config(config_file=str(path), client_configuration=cfg)  # type: ignore[no-untyped-call]
    except config.ConfigException as exc:
        raise KubeConfigError(f"{kubeconfig or 'in-cluster config'}: {exc}") from None
    except yaml.YAMLError as exc:
        raise KubeConfigError(f"{kubeconfig}: not a kubeconfig (YAML): {exc}".replace("\n", " ")) from None
    except (TypeError, KeyError, AttributeError, ValueError) as exc:  # a field of the wrong type
        raise KubeConfigError(f"{kubeconfig}: not a valid kubeconfig: {type(exc).__name__}: {exc}") from None
    cfg.connection_pool_maxsize = pool_size
    return ApiClient(cfg)


def raw_list(call: Any, **kwargs: Any) -> dict[str, Any]:
    """Call a ``list_*`` method and return the JSON body as a dict (camelCase, like the watch events)."""
    resp = call(_preload_content=False, **kwargs)
    try:
        body: dict[str, Any] = json.loads(resp.data)
    finally:
        resp.release_conn()
    return body


def raw_get(call: Any, *args: Any) -> dict[str, Any]:
    resp = call(*args, _preload_content=False)
    try:
        body: dict[str, Any] = json.loads(resp.data)
    finally:
        resp.release_conn()
    return body


def discard(resp: Any) -> None:
    """Read what is left of a ``_preload_content=False`` response, then give its connection back to the pool.
    Released unread, the connection looks dropped to urllib3 (its socket is readable) and is closed when next
    taken from the pool: every call would then pay a new TCP connection and TLS handshake, here and in the
    API server."""
    try:
        resp.drain_conn()
    finally:
        resp.release_conn()


def is_status(exc: ApiException, code: int) -> bool:
    return getattr(exc, "status", None) == code


__all__ = ["ApiClient", "ApiException", "KubeConfigError", "api_client", "discard", "is_status", "raw_get",
           "raw_list"]
