"""The package as a team installs it: a wheel in a fresh virtualenv, a two-line definitions file of the team's own,
the nightly materialised from there; and `run` never reads a workspace.yaml of the folder it is started in."""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from engram_pipelines.demo.loader import load_demo
from engram_pipelines.store import open_store
from tests.support.memories import AS_OF
from tests.support.paths import REPO

TEAM_DEFINITIONS = """\
import dagster as dg
from engram_pipelines.orchestration import engram_definitions

defs = engram_definitions(store=dg.EnvVar("ENGRAM_STORE_URL"), warehouse=dg.EnvVar("ENGRAM_WAREHOUSE"))
"""

MATERIALISE = f"""\
import dagster as dg, engram_pipelines, team_definitions
job = team_definitions.defs.resolve_job_def("nightly")
result = job.execute_in_process(partition_key="{AS_OF.isoformat()}", instance=dg.DagsterInstance.ephemeral())
print(engram_pipelines.__file__)
print(result.success)
"""


def _build_wheel(out: Path) -> Path:
    """Built from a copy of the sources: setuptools writes build/ and egg-info beside what it builds."""
    source = out.parent / "source"
    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copytree(REPO / "engram_pipelines", source / "engram_pipelines", ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    build = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"]
    subprocess.run([*build, "-w", str(out), str(source)], check=True, capture_output=True)
    (wheel,) = out.glob("engram_pipelines-*.whl")
    return wheel


def _fresh_venv(where: Path, wheel: Path) -> Path:
    """A new virtualenv with the wheel installed. Its dependencies come from this environment's site-packages as
    a plain path (that directory's own .pth files, among them the repository's editable install, stay out)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    python = where / "bin" / "python"
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-q", str(wheel)],
        check=True,
        capture_output=True,
    )
    target = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    (target / "dependencies.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    return python


@pytest.mark.slow
def test_a_team_installs_the_wheel_and_materialises_the_nightly_from_its_own_definitions(tmp_path):
    wheel = _build_wheel(tmp_path / "dist")
    tops = {name.split("/")[0] for name in zipfile.ZipFile(wheel).namelist()}
    assert {t for t in tops if not t.endswith(".dist-info")} == {
        "engram_pipelines"
    }  # no generic top-level name
    python = _fresh_venv(tmp_path / "venv", wheel)

    team = tmp_path / "team"
    team.mkdir()
    (team / "team_definitions.py").write_text(TEAM_DEFINITIONS)
    url = f"sqlite:///{tmp_path}/memories.db"
    with open_store(url, migrate=True) as store:
        load_demo(store, size=500, seed=3, as_of=AS_OF)
    env = {
        **{k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "ENGRAM_CONFIG")},
        "ENGRAM_STORE_URL": url,
        "ENGRAM_WAREHOUSE": str(tmp_path / "warehouse"),
    }
    done = subprocess.run(
        [str(python), "-c", MATERIALISE], cwd=team, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    installed_at, success = done.stdout.strip().splitlines()[-2:]
    assert Path(installed_at).is_relative_to(tmp_path / "venv")  # the wheel's copy, not the repository's
    assert success == "True"
    assert (tmp_path / "warehouse" / "change_sets").is_dir()


def test_run_never_loads_a_workspace_of_the_folder_it_starts_in(tmp_path):
    """`run` imported whatever workspace.yaml the current folder had (another team's code)."""
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    (folder / "workspace.yaml").write_text("load_from:\n  - python_module: not_ours\n")
    (folder / "not_ours.py").write_text("raise SystemExit('another team\\'s code was imported')\n")
    url = f"sqlite:///{tmp_path}/engram.db"
    args = [sys.executable, "-m", "engram_pipelines.cli"]
    subprocess.run([*args, "init", "--store", url], check=True, capture_output=True, cwd=folder)
    done = subprocess.run(
        [*args, "run", "--store", url, "--warehouse", str(tmp_path / "wh"), "--json"],
        capture_output=True,
        text=True,
        cwd=folder,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout)["success"]
