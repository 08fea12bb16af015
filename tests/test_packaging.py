import subprocess
import sys
import zipfile

from conftest import REPO


def test_wheel_has_one_top_level_package_with_presets(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(tmp_path), str(REPO)], check=True, cwd=tmp_path)
    (wheel,) = tmp_path.glob("adaptive_eval-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith((".dist-info", ".data"))}
    assert top == {"adaptive_eval"}
    assert "adaptive_eval/detectors/__init__.py" in names and "adaptive_eval/policies/__init__.py" in names
    assert "adaptive_eval/configs/default.yaml" in names and "adaptive_eval/configs/areal.yaml" in names
    # The real traces that tests and benchmarks use travel with the package, with their sources and licences.
    assert "adaptive_eval/traces/SOURCES.md" in names
    assert "adaptive_eval/traces/rasbt__reasoning-from-scratch__ch07_7_5_plus_kl_metrics.csv" in names
    entry = [n for n in names if n.endswith("entry_points.txt")]
    assert "adaptive-eval = adaptive_eval.cli:main" in zipfile.ZipFile(wheel).read(entry[0]).decode()


def test_bare_detectors_and_policies_refuse_import():
    for name in ("detectors", "policies"):
        proc = subprocess.run([sys.executable, "-c", f"import {name}"], cwd=REPO, capture_output=True, text=True)
        assert proc.returncode != 0 and f"adaptive_eval.{name}" in proc.stderr


def test_doctests_pass():
    import doctest
    import importlib
    import pkgutil

    import adaptive_eval

    import adaptive_eval.detectors
    import adaptive_eval.policies

    failures, tested = [], []
    # (policies and detectors live in folders of their own, package-dir in pyproject.toml: in an editable install
    # the walk of adaptive_eval's path never reached them, and five of their examples had gone stale unseen)
    for pkg in (adaptive_eval, adaptive_eval.policies, adaptive_eval.detectors):
        for mod in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
            if mod.name.endswith("__main__") or mod.name in tested:
                continue
            tested.append(mod.name)
            m = importlib.import_module(mod.name)
            res = doctest.testmod(m, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
            if res.failed:
                failures.append(mod.name)
    assert "adaptive_eval.policies._peak" in tested and "adaptive_eval.detectors._cusum" in tested
    assert not failures
