"""deploy/: the systemd unit passes `systemd-analyze verify`, the compose file passes Debian's
docker-compose validation, and the wheel the Dockerfile's steps build runs `geode serve --demo`.

What these cannot check (no Docker engine, no systemd as PID 1 here): building and running the
image, the unit's sandbox with a real bubblewrap call, replicas sharing the workspace volume.
"""

from __future__ import annotations

import configparser
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import tomllib
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from sqlalchemy.engine import make_url

from geode.cli.app import EXIT_STORE_UNAVAILABLE

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"


def _need(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{tool} is not installed under CI=true (.ci/apt-packages.txt)")
        pytest.skip(f"{tool} is not installed")
    return path


def _unit() -> configparser.RawConfigParser:
    unit = configparser.RawConfigParser(strict=False, interpolation=None)
    unit.optionxform = str  # type: ignore[assignment,method-assign]  # keys are case-sensitive
    unit.read(DEPLOY / "geode.service")
    return unit


# -- systemd -------------------------------------------------------------------------------------


def test_the_unit_passes_systemd_analyze_verify(tmp_path: Path) -> None:
    analyze = _need("systemd-analyze")
    # A root with the distribution's units (verify loads the unit's dependencies) and an
    # executable where ExecStart points, so verify checks our unit, not this machine's layout.
    units = next((p for p in (Path("/usr/lib/systemd/system"), Path("/lib/systemd/system"))
                  if p.is_dir()), None)
    assert units is not None, "no systemd unit directory on this machine"
    root = tmp_path / "root"
    shutil.copytree(units, root / "usr/lib/systemd/system", symlinks=True)
    (root / "etc/systemd/system").mkdir(parents=True)
    shutil.copy(DEPLOY / "geode.service", root / "etc/systemd/system/geode.service")
    exe = shlex.split(_unit()["Service"]["ExecStart"])[0]
    stub = root / exe.lstrip("/")
    stub.parent.mkdir(parents=True)
    stub.write_text("#!/bin/sh\n")
    stub.chmod(0o755)
    done = subprocess.run([analyze, "verify", f"--root={root}", "geode.service"],
                          capture_output=True, text=True, timeout=60, check=False)
    # verify exits 0 on a value it cannot parse ("..., ignoring"): any output is a finding
    assert done.returncode == 0 and not (done.stdout + done.stderr).strip(), (
        done.stdout + done.stderr)


def test_the_unit_lets_bubblewrap_work_and_restarts_after_a_store_outage() -> None:
    service = _unit()["Service"]
    assert "AF_NETLINK" in service["RestrictAddressFamilies"].split()
    assert service["Restart"] == "on-failure"
    prevent = service["RestartPreventExitStatus"].split()
    assert "2" in prevent  # a configuration error: restarting cannot fix it
    assert str(EXIT_STORE_UNAVAILABLE) not in prevent


def _slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def test_the_units_documentation_link_is_a_page_and_anchor_of_the_docs() -> None:
    doc = _unit()["Unit"]["Documentation"]
    page, _, anchor = doc.partition("/blob/main/")[2].partition("#")
    text = (REPO / page).read_text(encoding="utf-8")
    headings = re.findall(r"^#{1,6} (.+)$", re.sub(r"```.*?```", "", text, flags=re.S), re.M)
    assert anchor in {_slug(h) for h in headings}, doc


def test_install_instructions_name_what_exists() -> None:
    # no `pip install geode-agent` from an index (none has it): from source, pinned
    for path in (DEPLOY / "geode.service", REPO / "README.md",
                 *sorted((REPO / "docs").rglob("*.md"))):
        text = path.read_text(encoding="utf-8")
        assert not re.search(r"pip install (-U )?geode-agent\b", text), path
    unit = (DEPLOY / "geode.service").read_text()
    assert "-c /opt/geode-src/constraints.txt" in unit


# -- compose -------------------------------------------------------------------------------------


def _compose_dir(tmp_path: Path) -> Path:
    """deploy/ as an operator prepares it (README): plus .env and the password file."""
    d = tmp_path / "repo" / "deploy"
    shutil.copytree(DEPLOY, d)
    (d / ".env").write_text("ANTHROPIC_API_KEY=sk-ant-placeholder\n")
    (d / "pg_password").write_text("placeholder")
    return d


def test_the_compose_file_validates(tmp_path: Path) -> None:
    compose = _need("docker-compose")
    d = _compose_dir(tmp_path)
    done = subprocess.run([compose, "-f", "compose.yaml", "config", "-q"], cwd=d,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    # the validator does reject what is wrong (a misspelt key), so the pass above means something
    broken = (d / "compose.yaml").read_text().replace("restart: unless-stopped",
                                                      "restrat: unless-stopped", 1)
    (d / "broken.yaml").write_text(broken)
    bad = subprocess.run([compose, "-f", "broken.yaml", "config", "-q"], cwd=d,
                         capture_output=True, text=True, timeout=60, check=False)
    assert bad.returncode != 0 and "restrat" in bad.stderr


def test_compose_publishes_health_shares_the_workspace_and_keeps_the_password_in_one_file() -> None:
    spec = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    geode, db = spec["services"]["geode"], spec["services"]["db"]
    assert geode["restart"] == db["restart"] == "unless-stopped"
    env = geode["environment"]
    assert env["GEODE_HEALTH_HOST"] == "0.0.0.0"
    port_var = env["GEODE_HEALTH_PORT"]  # one variable sets the port the container and the map use
    assert any(p.endswith(f":{port_var}") for p in geode["ports"]), geode["ports"]
    assert "geode.daemon.healthcheck" in geode["healthcheck"]["test"]
    # the one password: the secret file, read by PostgreSQL and by GEODE's password_file
    assert "GEODE_STORE__URL" not in env
    assert "pg_password" in geode["secrets"] and "pg_password" in db["secrets"]
    config = tomllib.loads((DEPLOY / "config.toml").read_text())
    assert config["store"]["password_file"] == "/run/secrets/pg_password"
    url = make_url(config["store"]["url"])
    assert url.host == "db" and url.password is None, "the URL must not carry a password"
    # replicas share the workspace volume (a taken-over thread finds its files)
    assert "workspace:/var/lib/geode/workspace" in geode["volumes"]
    assert "workspaces:/var/lib/geode/workspaces" in geode["volumes"]  # the bindings' own
    assert {"workspace", "workspaces"} <= set(spec["volumes"])
    assert geode["deploy"]["replicas"] >= 2
    # Compose v1 ignores `deploy`: the file says to scale with --scale, and the published health
    # ports are a range with room for the replicas it names
    assert "--scale geode=2" in (DEPLOY / "compose.yaml").read_text()
    low, high = (int(p) for p in geode["ports"][0].split(":")[1].split("-"))
    assert high - low + 1 >= geode["deploy"]["replicas"]
    assert "container_name" not in geode  # a fixed name cannot be scaled


def test_the_docker_build_context_leaves_out_venvs_secrets_and_the_repository() -> None:
    ignored = {line.strip() for line in (REPO / ".dockerignore").read_text().splitlines()
               if line.strip() and not line.startswith("#")}
    assert {".git", ".venv", "**/.env", "deploy/pg_password", "**/__pycache__"} <= ignored
    # nothing the Dockerfile copies is ignored
    for sources, _ in _dockerfile_copies():
        assert not set(sources) & ignored, sources


# -- the wheel, as the Dockerfile builds it --------------------------------------------------------


def test_the_computer_use_variant_installs_what_the_computer_tool_drives() -> None:
    text = (DEPLOY / "Dockerfile").read_text()
    assert "ARG COMPUTER_USE=0" in text
    guarded = text.split('if [ "$COMPUTER_USE" = "1" ]; then', 1)[1].split("fi", 1)[0]
    # geode.tools.builtin.desktop runs xdotool and ImageMagick's import on an X display
    assert {"xvfb", "xdotool", "imagemagick"} <= {w.strip(";\\") for w in guarded.split()}


def _dockerfile_copies() -> list[tuple[list[str], str]]:
    copies = []
    for line in (DEPLOY / "Dockerfile").read_text().splitlines():
        parts = line.split()
        if parts[:1] == ["COPY"] and not any(p.startswith("--") for p in parts):
            copies.append((parts[1:-1], parts[-1]))
    return copies


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def scratch() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="gd-wheel-", dir="/tmp"))  # short: the socket path
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_wheel_built_from_the_dockerfiles_files_serves_in_a_fresh_venv(scratch: Path) -> None:
    # 1. the build context the Dockerfile's COPY lines make (symlinks kept, as docker does)
    src = scratch / "src"
    for sources, dest in _dockerfile_copies():
        for name in sources:
            target = src / dest / name if dest.endswith("/") else src / dest
            origin = REPO / name
            if origin.is_dir():
                shutil.copytree(origin, target, symlinks=True,
                                ignore=shutil.ignore_patterns("__pycache__"))
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(origin, target)
    # 2. `pip install .` builds a wheel with the PEP 517 backend; here without network
    #    (the backend from this environment instead of an isolated download)
    backend = tomllib.loads((src / "pyproject.toml").read_text())["build-system"]["build-backend"]
    dist = scratch / "dist"
    dist.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("GEODE_")}
    subprocess.run([sys.executable, "-c",
                    f"import {backend} as b, sys; b.build_wheel(sys.argv[1])", str(dist)],
                   cwd=src, env=env, capture_output=True, text=True, timeout=180, check=True)
    (wheel,) = dist.glob("geode_agent-*.whl")
    # 3. a fresh venv with the wheel; its dependencies come from this test environment (a path
    #    entry, not a site dir: this environment's editable GEODE is not loaded there)
    venv = scratch / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120, env=env)
    py = venv / "bin" / "python"
    subprocess.run([py, "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                    "--disable-pip-version-check", str(wheel)],
                   env=env, check=True, timeout=120, capture_output=True)
    site = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          env=env, capture_output=True, text=True, check=True).stdout.strip()
    deps = subprocess.run([sys.executable, "-c",
                           "import site, sysconfig; print('\\n'.join(dict.fromkeys("
                           "[sysconfig.get_paths()['purelib'], *site.getsitepackages()])))"],
                          env=env, capture_output=True, text=True, check=True).stdout
    Path(site, "_test_dependencies.pth").write_text(deps)
    # 4. geode init (package data), then geode serve --demo, then /readyz and the healthcheck
    home, cwd = scratch / "home", scratch / "cwd"
    cwd.mkdir()
    port = _free_port()
    run_env = {**env, "GEODE_HOME": str(home), "GEODE_HEALTH_PORT": str(port)}
    where = subprocess.run([py, "-c", "import geode; print(geode.__file__)"], cwd=cwd,
                           env=run_env, capture_output=True, text=True, check=True).stdout
    assert where.startswith(str(venv)), where  # the wheel's code, not the checkout's
    init = subprocess.run([venv / "bin" / "geode", "init"], cwd=cwd, env=run_env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    assert init.returncode == 0, init.stderr
    assert (home / "config.toml").read_text() == (REPO / "config/config.example.toml").read_text()
    log = scratch / "serve.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([venv / "bin" / "geode", "serve", "--demo"], cwd=cwd,
                                env=run_env, stdout=out, stderr=subprocess.STDOUT)
    try:
        body = _wait_ready(port, proc, log)
        assert body["ready"] is True, body
        check = subprocess.run([py, "-m", "geode.daemon.healthcheck", "/readyz"], cwd=cwd,
                               env=run_env, capture_output=True, text=True, timeout=60)
        assert check.returncode == 0, check.stderr
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0, log.read_text()


def _wait_ready(port: int, proc: subprocess.Popen[bytes], log: Path) -> dict[str, object]:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"geode serve exited {proc.returncode}:\n{log.read_text()}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as r:
                return dict(json.loads(r.read()))
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"no /readyz answer:\n{log.read_text()}")
