"""The plugin surface: SGLang's backend registry, its entry-point loader, its hook targets."""

from __future__ import annotations

import pkgutil
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from sglang.srt.mem_cache.registry import (
    TreeCacheBuildContext,
    create_tree_cache,
    registered_radix_cache_backends,
)
from sglang.srt.plugins import GENERAL_PLUGINS_GROUP, load_plugins_by_group
from sglang.srt.server_args import ServerArgs, set_global_server_args_for_scheduler
from sglang.test.kits.unified_radix_cache.config import CacheConfig
from sglang.test.kits.unified_radix_cache.fixtures import build_fixture

from penelope_sglang import hooks, plugin
from penelope_sglang.radix_cache import PenelopeRadixCache

ENTRY_POINT = "penelope = penelope_sglang.plugin:register"


def test_register_adds_the_backend_once() -> None:
    plugin.register()
    plugin.register()
    assert registered_radix_cache_backends().count("penelope") == 1


def test_radix_cache_backend_penelope_builds_the_penelope_cache() -> None:
    plugin.register()
    cfg = CacheConfig(page_size=4, kv_size=64)
    _, _, _ = build_fixture(cfg)  # sets SGLang's global server args for the pools
    params = build_fixture(cfg)[0].cache_init_params
    server_args = ServerArgs(model_path="dummy", page_size=4, radix_cache_backend="penelope")
    set_global_server_args_for_scheduler(server_args)
    ctx = TreeCacheBuildContext(
        server_args=server_args,
        params=replace(params),
        is_hybrid_swa=False,
        is_hybrid_ssm=False,
        enable_hierarchical_cache=False,
        disable_radix_cache=False,
        tp_worker=None,
        model_config=None,
        tp_size=1,
        tp_rank=0,
        tp_group=None,
    )
    cache = create_tree_cache(ctx)
    assert isinstance(cache, PenelopeRadixCache) and cache.holes_enabled


def test_sglang_finds_the_plugin_through_its_entry_point(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dist = tmp_path / "penelope_plugin_probe-0.0.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: penelope-plugin-probe\nVersion: 0.0.0\n"
    )
    (dist / "entry_points.txt").write_text(f"[{GENERAL_PLUGINS_GROUP}]\n{ENTRY_POINT}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("SGLANG_PLUGINS", raising=False)
    found = load_plugins_by_group(GENERAL_PLUGINS_GROUP)
    func, dist_name = found["penelope"]
    # Where this project is installed (an editable install leaves penelope.egg-info in
    # the checkout), its own distribution declares the same entry point and may win.
    assert func is plugin.register and dist_name in ("penelope-plugin-probe", "penelope")


@pytest.mark.parametrize("target", [t for t, _ in hooks.HOOKS])
def test_every_hook_target_exists_in_this_sglang(target: str) -> None:
    owner, name = target.rsplit(".", 1)
    assert callable(getattr(pkgutil.resolve_name(owner), name))


def test_importing_the_package_does_not_import_sglang() -> None:
    import subprocess

    code = (
        "import sys, penelope_sglang, penelope_sglang.shelf, "
        "penelope_sglang.policy, penelope_sglang.refill, "
        "penelope_sglang.results; "
        "assert 'sglang' not in sys.modules, 'sglang was imported'"
    )
    root = Path(__file__).resolve().parents[2]
    subprocess.run([sys.executable, "-c", code], cwd=root, check=True)
