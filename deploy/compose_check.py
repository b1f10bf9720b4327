#!/usr/bin/env python3
"""End-to-end check of the docker-compose deployment (run by deploy/compose-check.sh).

Standard library only; talks to the deployment through docker-compose and the published
API port on 127.0.0.1. Steps: build, up, health, teams, uploads (inline 201 and
worker-ingested 202), analyses and a replay on a worker, the dashboard in headless
Chromium, scale-out to three workers with step-range parts on two or more of them and
results (analyses, an advisor sweep in parts) equal to a one-worker run, a worker killed mid-job, a Postgres restart, backup
and restore into a fresh deployment, down -v. Any failure exits non-zero.

Environment: CHECK_PROJECT and CHECK_PORT (the deployment), CHECK_PROJECT_B and
CHECK_PORT_B (the restored one), CHECK_WORKDIR (backups, logs).
"""

from __future__ import annotations

import gzip
import json
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FILES = ["-f", str(ROOT / "docker-compose.yml"), "-f", str(ROOT / "deploy" / "compose-check.yml")]
PROJECT, PORT = os.environ["CHECK_PROJECT"], int(os.environ["CHECK_PORT"])
PROJECT_B, PORT_B = os.environ["CHECK_PROJECT_B"], int(os.environ["CHECK_PORT_B"])
WORK = Path(os.environ.get("CHECK_WORKDIR") or tempfile.mkdtemp(prefix="rlvr-compose-check-"))
PART_SAMPLES = 20_000  # the big trace (204,800 samples) is analysed in 11 parts
# One clock with compose-check.sh (its start time, in seconds since the epoch).
T0 = time.monotonic() - (time.time() - float(os.environ.get("CHECK_T0") or time.time()))


class CheckFailed(Exception):
    pass


def log(msg: str) -> None:
    print(f"[compose-check {time.monotonic() - T0:5.0f}s] {msg}", flush=True)


class step:
    def __init__(self, title: str) -> None:
        self.title = title

    def __enter__(self):
        self.t = time.monotonic()
        log(f"--> {self.title}")
        return self

    def __exit__(self, exc_type, exc, tb):
        took = time.monotonic() - self.t
        log(f"{'ok  ' if exc is None else 'FAIL'} {self.title} ({took:.1f}s)")
        TIMINGS.append((self.title, took, exc is None))
        return False


TIMINGS: list[tuple[str, float, bool]] = []


def check(cond: object, msg: str) -> None:
    if not cond:
        raise CheckFailed(msg)


# -- docker-compose ----------------------------------------------------------------------


def dc(
    *args: str,
    project: str = PROJECT,
    port: int = PORT,
    part_samples: int | None = None,
    stdin: bytes | None = None,
    check_rc: bool = True,
    timeout: float = 600,
) -> subprocess.CompletedProcess:
    env = {**os.environ, "RLVR_PORT": str(port)}
    if part_samples is not None:
        env["CHECK_PART_SAMPLES"] = str(part_samples)
    cmd = ["docker-compose", "-p", project, *FILES, *args]
    r = subprocess.run(cmd, input=stdin, capture_output=True, env=env, timeout=timeout, cwd=ROOT)
    if check_rc and r.returncode != 0:
        raise CheckFailed(
            f"{' '.join(cmd[3 + len(FILES) :])} failed ({r.returncode}):\n"
            f"{r.stdout.decode(errors='replace')[-3000:]}\n{r.stderr.decode(errors='replace')[-3000:]}"
        )
    return r


def worker_containers(project: str = PROJECT) -> list[str]:
    return dc("ps", "-q", "worker", project=project).stdout.decode().split()


def docker(*args: str) -> str:
    r = subprocess.run(["docker", *args], capture_output=True, timeout=300)
    if r.returncode != 0:
        raise CheckFailed(f"docker {' '.join(args)}: {r.stderr.decode(errors='replace')}")
    return r.stdout.decode(errors="replace") + r.stderr.decode(errors="replace")


# -- HTTP --------------------------------------------------------------------------------


def http(
    method: str,
    path: str,
    key: str | None = None,
    body: dict | None = None,
    files: list[tuple[str, bytes]] | None = None,
    port: int = PORT,
    raw: bool = False,
):
    headers = {"X-API-Key": key} if key else {}
    data = None
    if body is not None:
        data, headers["Content-Type"] = json.dumps(body).encode(), "application/json"
    if files is not None:
        boundary = uuid.uuid4().hex
        parts = []
        for name, content in files:
            parts.append(
                f'--{boundary}\r\nContent-Disposition: form-data; name="files"; filename="{name}"\r\n'
                f"Content-Type: application/octet-stream\r\n\r\n".encode()
                + content
                + b"\r\n"
            )
        data = b"".join(parts) + f"--{boundary}--\r\n".encode()
        headers["Content-Type"] = f"multipart/form-data; boundary={boundary}"
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            payload = resp.read()
            status = resp.status
    except urllib.error.HTTPError as exc:
        payload, status = exc.read(), exc.code
    if raw:
        return status, payload
    try:
        return status, json.loads(payload) if payload else None
    except ValueError:
        return status, payload.decode(errors="replace")


def wait_health(port: int, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if http("GET", "/api/v1/health", port=port)[0] == 200:
                return
        except OSError:
            pass
        time.sleep(1)
    raise CheckFailed(f"the API on port {port} did not become healthy in {timeout:.0f}s")


def wait_job(key: str, job_id: int, timeout: float = 240, port: int = PORT) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status, job = http("GET", f"/api/v1/jobs/{job_id}", key, port=port)
        check(status == 200, f"GET job {job_id}: {status} {job}")
        if job["status"] in ("succeeded", "failed"):
            check(job["status"] == "succeeded", f"job {job_id} ({job['kind']}) failed: {job['error']}")
            return job
        time.sleep(0.5)
    raise CheckFailed(f"job {job_id} not finished after {timeout:.0f}s: {job}")


def latest_analysis(key: str, trace_id: int, kind: str, port: int = PORT) -> dict:
    deadline = time.monotonic() + 60
    while True:
        status, job = http("GET", f"/api/v1/traces/{trace_id}/analyses/{kind}", key, port=port)
        if status == 200:
            return wait_job(key, job["id"], port=port)
        check(time.monotonic() < deadline, f"no {kind} analysis for trace {trace_id}: {status} {job}")
        time.sleep(0.5)


def advise(key: str, trace_id: int) -> dict:
    """The advisor's sweep of the trace (8 H100s, two running-sequence limits: 20 rollout
    layouts, so 20 parts), finished, and run in parts."""
    body = {"trace_id": trace_id, "gpu": "h100", "n_gpus": 8, "model": "qwen2.5-7b", "concurrency": [128, 512]}
    status, job = http("POST", "/api/v1/advice", key, body=body)
    check(status == 202, f"POST /advice: {status} {job}")
    job = wait_job(key, job["id"])
    check(job["result"].get("parts", 0) >= 2, f"the advice sweep was not split: {job['result'].get('parts')}")
    return job


def upload(key: str, name: str, content: bytes, expect: int) -> dict:
    status, body = http("POST", "/api/v1/traces", key, files=[(name, content)])
    check(status == expect, f"upload {name} ({len(content)} bytes): expected {expect}, got {status}: {body}")
    return body


# -- trace files (native JSON lines) -----------------------------------------------------


def native_trace(steps: int, groups: int, n: int, seed: int) -> bytes:
    rng = random.Random(seed)
    lines = []
    for step_ in range(steps):
        for g in range(groups):
            prompt = rng.randint(50, 600)
            task = "math" if g % 3 else "code"
            for s in range(n):
                resp = min(8192, int(rng.lognormvariate(6.5, 1.0)))
                lines.append(
                    json.dumps(
                        {
                            "step": step_,
                            "group_idx": g,
                            "sample_idx": s,
                            "prompt_len": prompt,
                            "response_len": resp,
                            "dp_rank": (g * n + s) % 4,
                            "task": task,
                            "truncated": resp == 8192,
                        },
                        separators=(",", ":"),
                    )
                )
    return ("\n".join(lines) + "\n").encode()


def strip_run_details(result: dict) -> dict:
    return {k: v for k, v in result.items() if k not in ("parts", "part_workers")}


def close(a, b, path: str = "") -> str | None:
    """None when equal (floats to 1e-9 relative), else where they differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return f"{path}: keys {sorted(a.keys() ^ b.keys())}"
        return next((d for k in a if (d := close(a[k], b[k], f"{path}.{k}"))), None)
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{path}: lengths {len(a)} != {len(b)}"
        return next((d for i, (x, y) in enumerate(zip(a, b)) if (d := close(x, y, f"{path}[{i}]"))), None)
    if isinstance(a, float) or isinstance(b, float):
        ok = a is not None and b is not None and math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)
        return None if ok else f"{path}: {a} != {b}"
    return None if a == b else f"{path}: {a!r} != {b!r}"


def chromium_dom(url: str) -> str:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    check(browser, "chromium is not installed")
    profile = tempfile.mkdtemp(prefix="chromium-", dir=WORK)
    cmd = [
        browser,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--disable-quic",
        f"--user-data-dir={profile}",
        "--virtual-time-budget=15000",
        "--dump-dom",
        url,
    ]
    r = subprocess.run(cmd, capture_output=True, timeout=120)
    check(r.returncode == 0, f"chromium failed: {r.stderr.decode(errors='replace')[-2000:]}")
    return r.stdout.decode(errors="replace")


# -- the check ---------------------------------------------------------------------------


def main() -> None:
    WORK.mkdir(parents=True, exist_ok=True)
    suffix = uuid.uuid4().hex[:6]
    small = native_trace(4, 4, 4, seed=1)
    medium = native_trace(10, 16, 8, seed=2)
    big = gzip.compress(native_trace(40, 640, 8, seed=3), 6)
    check(len(small) < 65536 < len(medium), "trace sizes vs the inline limit")

    with step("build the image (docker-compose build)"):
        dc("build", timeout=1200)
    with step("up: postgres, redis, migrate, api, one worker; API healthy"):
        dc("up", "-d", "--scale", "worker=1", part_samples=10**9)
        wait_health(PORT)
        ps = dc("ps").stdout.decode()
        log("services:\n" + ps)
    with step("image: regular install, non-root"):
        who = (
            dc(
                "exec",
                "-T",
                "api",
                "sh",
                "-c",
                "id -u; python -c 'import backend.store.migrate as m; "
                'print(m.alembic_config().get_main_option("script_location"))\'; pip show rlvr-explorer | '
                "grep -i '^editable' || true; test -d /data/queue && echo queue-dir || true",
            )
            .stdout.decode()
            .split()
        )
        check(who[0] != "0", f"the API runs as root: {who}")
        check("site-packages/migrations" in who[1], f"migrations not from the installed package: {who}")
        check("Editable" not in who and "queue-dir" not in who, f"editable install or /data/queue with Redis: {who}")
    with step("create teams (docker-compose exec api rlvr-explorer create-team)"):
        key_a = dc("exec", "-T", "api", "rlvr-explorer", "create-team", f"check-a-{suffix}").stdout.decode().split()[-1]
        key_b = dc("exec", "-T", "api", "rlvr-explorer", "create-team", f"check-b-{suffix}").stdout.decode().split()[-1]
        check(http("GET", "/api/v1/me", key_a)[0] == 200, "the new key is not accepted")
    with step("upload: small inline (201), above the inline limit (202, worker ingests -> ready)"):
        t_small = upload(key_a, "small.jsonl", small, 201)
        check(t_small["status"] == "ready", t_small)
        accepted = upload(key_a, "medium.jsonl", medium, 202)
        wait_job(key_a, accepted["job"]["id"])
        medium_id = accepted["trace"]["id"]
        status, trace = http("GET", f"/api/v1/traces/{medium_id}", key_a)
        check(trace["status"] == "ready" and trace["n_samples"] == 10 * 16 * 8, trace)
    with step("analyses and a replay run on the worker"):
        analyses = {k: latest_analysis(key_a, medium_id, k) for k in ("lengths", "longtail", "imbalance")}
        status, sim = http(
            "POST",
            "/api/v1/simulations",
            key_a,
            body={"trace_id": medium_id, "cluster": {"n_gpus": 16}, "policy": "sync", "compare_policy": "one_step_off"},
        )
        check(status in (200, 202), f"POST /simulations: {status} {sim}")
        sim = wait_job(key_a, sim["id"])
        status, chrome = http("GET", f"/api/v1/simulations/{sim['id']}/chrome-trace", key_a, raw=True)
        check(status == 200 and len(chrome) > 100, f"chrome trace: {status}")
        log(f"analyses {sorted(analyses)}; replay job {sim['id']} succeeded")
        advice_one = advise(key_a, medium_id)
        log(f"advice job {advice_one['id']}: {advice_one['result']['parts']} parts on one worker")
    with step("dashboard rendered in headless Chromium through the published port"):
        dom = chromium_dom(f"http://127.0.0.1:{PORT}/")
        check("Sign in" in dom and "API key" in dom, f"no sign-in content in the page:\n{dom[:2000]}")
    with step("one worker, parts off: team B's 204,800-sample trace and its analyses"):
        accepted = upload(key_b, "big.jsonl.gz", big, 202)
        wait_job(key_b, accepted["job"]["id"])
        single = {k: latest_analysis(key_b, accepted["trace"]["id"], k) for k in ("lengths", "longtail", "imbalance")}
        check(all("parts" not in j["result"] for j in single.values()), "the one-worker run was split")
    with step(f"scale out: --scale worker=3, part threshold {PART_SAMPLES} samples"):
        dc("up", "-d", "--scale", "worker=3", part_samples=PART_SAMPLES)
        check(len(worker_containers()) == 3, "not three workers")
        time.sleep(3)  # the workers connect to the broker
    with step("a worker killed mid-job (SIGKILL) is replaced and the job still finishes"):
        # the worker that takes this job is the one whose log gains an ingest task
        # (earlier steps' ingests are in the logs already)
        seen = {cid: docker("logs", cid).count("workers.tasks.ingest_upload[") for cid in worker_containers()}
        accepted = upload(key_a, "big.jsonl.gz", big, 202)
        job_id, big_id = accepted["job"]["id"], accepted["trace"]["id"]
        deadline, victim = time.monotonic() + 60, None
        while victim is None:
            check(time.monotonic() < deadline, "no worker picked up the ingest job")
            for cid in worker_containers():
                if docker("logs", cid).count("workers.tasks.ingest_upload[") > seen.get(cid, 0):
                    victim = cid
            time.sleep(0.2)
        # received is not yet running: kill once the job row says the worker started it
        before = http("GET", f"/api/v1/jobs/{job_id}", key_a)[1]
        while before["status"] == "queued" and time.monotonic() < deadline:
            time.sleep(0.05)
            before = http("GET", f"/api/v1/jobs/{job_id}", key_a)[1]
        check(before["status"] == "running", f"the job was {before['status']} when the worker was to be killed")
        docker("kill", victim)
        log(
            f"killed worker {victim[:12]} while job {job_id} was {before['status']} "
            "(its restart policy or the scale brings a worker back)"
        )
        dc("up", "-d", "--scale", "worker=3", "--no-recreate", part_samples=PART_SAMPLES)
        job = wait_job(key_a, job_id, timeout=180)
        check(job["attempts"] >= 2, f"the job was not redelivered: attempts {job['attempts']}")
        log(f"job {job_id} finished on attempt {job['attempts']}; workers now {len(worker_containers())}")
    with step("parts spread over workers; results (analyses, an advice sweep) equal the one-worker run"):
        spread = {}
        for kind, one in single.items():
            job = latest_analysis(key_a, big_id, kind)
            workers = job["result"].get("part_workers") or []
            check(
                job["result"].get("parts", 0) >= 2 and len(workers) == job["result"]["parts"] and all(workers),
                f"{kind}: not run in parts: {job['result'].get('parts')} {workers}",
            )
            spread[kind] = {w: workers.count(w) for w in sorted(set(workers))}
            diff = close(strip_run_details(job["result"]), strip_run_details(one["result"]))
            check(diff is None, f"{kind}: parted result differs from the one-worker result at {diff}")
            exact = json.dumps(strip_run_details(job["result"]), sort_keys=True) == json.dumps(
                strip_run_details(one["result"]), sort_keys=True
            )
            log(
                f"{kind}: {job['result']['parts']} parts on {spread[kind]}; equal to one worker "
                f"({'byte for byte' if exact else 'within 1e-9'})"
            )
        hosts = set().union(*spread.values())
        check(len(hosts) >= 2, f"all parts ran on one worker: {spread}")
        # an identical request reuses its job: the one-worker sweep goes, then the same again
        check(http("DELETE", f"/api/v1/jobs/{advice_one['id']}", key_a)[0] == 204, "the advice job was not deleted")
        advice_three = advise(key_a, medium_id)
        workers = advice_three["result"]["part_workers"]
        diff = close(strip_run_details(advice_three["result"]), strip_run_details(advice_one["result"]))
        check(diff is None, f"advice: the sweep over three workers differs from one worker's at {diff}")
        hosts_of = {w: workers.count(w) for w in sorted(set(workers))}
        log(f"advice: {len(workers)} parts on {hosts_of}; equal to one worker")
    with step("Postgres restart: data intact, workers and API carry on"):
        status, listed = http("GET", "/api/v1/traces", key_a)
        dc("restart", "postgres")
        deadline = time.monotonic() + 60
        while dc("exec", "-T", "postgres", "pg_isready", "-U", "rlvr", "-d", "rlvr", check_rc=False).returncode:
            check(time.monotonic() < deadline, "postgres did not come back")
            time.sleep(1)
        for _ in range(10):  # the API's pool reconnects (pre-ping)
            status, again = http("GET", "/api/v1/traces", key_a)
            if status == 200:
                break
            time.sleep(1)
        check(status == 200 and again["total"] == listed["total"], f"traces after restart: {status} {again}")
        status, job = http(
            "POST",
            f"/api/v1/traces/{medium_id}/analyses",
            key_a,
            body={"kind": "longtail", "params": {"tail_fraction": 0.2}},
        )
        check(status == 202, f"new analysis after restart: {status} {job}")
        wait_job(key_a, job["id"])
        check(
            http("GET", f"/api/v1/jobs/{analyses['lengths']['id']}", key_a)[1]["result"]
            == analyses["lengths"]["result"],
            "an analysis result changed across the restart",
        )
    backup = WORK / "backup"
    with step("backup: pg_dump of the database + the data volume"):
        backup.mkdir(exist_ok=True)
        dump = dc("exec", "-T", "postgres", "pg_dump", "-U", "rlvr", "-d", "rlvr", "--format=custom").stdout
        (backup / "rlvr.dump").write_bytes(dump)
        dc(
            "run",
            "--rm",
            "--no-deps",
            "-T",
            "-u",
            "root",
            "-v",
            f"{backup}:/backup",
            "api",
            "tar",
            "-C",
            "/data",
            "-czf",
            "/backup/data.tar.gz",
            ".",
        )
        log(f"backup: database {len(dump) / 1e6:.1f} MB, data {(backup / 'data.tar.gz').stat().st_size / 1e3:.0f} kB")
    with step("restore into a fresh deployment (another project) and check it"):
        dc("up", "-d", "postgres", "redis", project=PROJECT_B, port=PORT_B)
        deadline = time.monotonic() + 90
        while dc(
            "exec",
            "-T",
            "postgres",
            "pg_isready",
            "-U",
            "rlvr",
            "-d",
            "rlvr",
            project=PROJECT_B,
            port=PORT_B,
            check_rc=False,
        ).returncode:
            check(time.monotonic() < deadline, "the fresh postgres did not start")
            time.sleep(1)
        time.sleep(1)
        dc(
            "exec",
            "-T",
            "postgres",
            "pg_restore",
            "-U",
            "rlvr",
            "-d",
            "rlvr",
            "--no-owner",
            "--exit-on-error",
            project=PROJECT_B,
            port=PORT_B,
            stdin=dump,
        )
        dc(
            "run",
            "--rm",
            "--no-deps",
            "-T",
            "-u",
            "root",
            "-v",
            f"{backup}:/backup",
            "api",
            "sh",
            "-c",
            "tar -C /data -xzf /backup/data.tar.gz && chown -R rlvr:rlvr /data",
            project=PROJECT_B,
            port=PORT_B,
        )
        dc("up", "-d", "--scale", "worker=1", project=PROJECT_B, port=PORT_B)
        wait_health(PORT_B)
        status, restored = http("GET", "/api/v1/traces", key_a, port=PORT_B)
        check(status == 200 and restored["total"] == listed["total"], f"restored traces: {status} {restored}")
        job = http("GET", f"/api/v1/jobs/{analyses['lengths']['id']}", key_a, port=PORT_B)[1]
        check(job["result"] == analyses["lengths"]["result"], "restored analysis result differs")
        dc(
            "exec",
            "-T",
            "api",
            "test",
            "-s",
            f"/data/simulations/{sim['id']}/chrome_trace_a.json.gz",
            project=PROJECT_B,
            port=PORT_B,
        )
        status, job = http(
            "POST",
            f"/api/v1/traces/{medium_id}/analyses",
            key_a,
            port=PORT_B,
            body={"kind": "longtail", "params": {"tail_fraction": 0.3}},
        )
        check(status == 202, f"new analysis on the restored deployment: {status} {job}")
        wait_job(key_a, job["id"], port=PORT_B)
    with step("down -v (both deployments)"):
        for project, port in ((PROJECT_B, PORT_B), (PROJECT, PORT)):
            dc("down", "-v", "--remove-orphans", project=project, port=port)


def dump_logs() -> None:
    for project, port in ((PROJECT, PORT), (PROJECT_B, PORT_B)):
        r = dc("logs", "--no-color", "--tail", "40", project=project, port=port, check_rc=False)
        out = r.stdout.decode(errors="replace")
        if out.strip():
            (WORK / f"{project}.log").write_text(out)
            print(f"---- last log lines of {project} ----\n{out[-6000:]}", flush=True)


if __name__ == "__main__":
    try:
        main()
    except Exception as exc:
        log(f"FAILED: {type(exc).__name__}: {exc}")
        dump_logs()
        sys.exit(1)
    log("all steps passed; timings: " + ", ".join(f"{t} {s:.0f}s" for t, s, _ in TIMINGS))
