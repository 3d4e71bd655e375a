"""``make integration`` runs two pytest-xdist workers with ``--dist loadscope``; ``tests/conftest.py`` makes a
Kubernetes version the scope of every test that runs on it, so one worker holds one version's control plane."""

from __future__ import annotations

from tests.conftest import integration_scope


def test_every_test_on_a_kubernetes_version_is_scoped_to_that_version() -> None:
    assert integration_scope("tests/integration/test_k8s_cache.py::test_a_pod[v1.37.2]") == "k8s-v1.37.2"
    assert integration_scope("tests/integration/test_k8s_deploy.py::test_dry_run[v1.35.4-extender]") == "k8s-v1.35.4"
    assert integration_scope("tests/integration/test_k8s_helm.py::test_helm[scheduler-v1.37.2]") == "k8s-v1.37.2"


def test_other_tests_keep_their_module() -> None:
    assert integration_scope("tests/web/test_dashboard.py::test_login") == "tests/web/test_dashboard.py"
    assert integration_scope("tests/integration/test_k8s_helm.py::test_template[1.35]") == (
        "tests/integration/test_k8s_helm.py")
    assert integration_scope("tests/test_spec.py::test_errors[nodePools\\[0\\]-v2.10]") == "tests/test_spec.py"
    assert integration_scope("tests/test_spec.py::TestX::test_y") == "tests/test_spec.py"
