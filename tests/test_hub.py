"""Sharing a run on the Hugging Face Hub, offline: a stand-in for the Hub on the loopback receives the upload of a
short real run, and serves it back to --evaluate; a failed upload keeps the run and names its retry; a repository
that does not exist is one line. And --run-dir's bad paths, found meanwhile.

huggingface_hub reads HF_ENDPOINT when it is imported, so the stand-in is reached by the script in a subprocess.
"""

import base64
import hashlib
import json
import os
import re
import shlex
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import yaml

from tests.support import HOPPER, MODEL_NAME, REPO, run_script

TOKEN = "hf_standin"
REPO_NAME = "Hopper-v4-ppo_continuous_envpool_jax-seed1"


class StandInHub(ThreadingHTTPServer):
    """The endpoints of the Hub that create_repo, create_commit (regular uploads, no LFS or Xet), model_info and
    hf_hub_download use, over repositories kept in memory. Writes need the token; reads are public."""

    def __init__(self):
        super().__init__(("127.0.0.1", 0), StandInHandler)
        self.repos = {}  # repo id -> {"files": {path: bytes}, "sha": commit id}
        self.commits = []  # (repo id, summary, {path: bytes}) of each commit received
        self.validated = []  # the README.md contents posted to /api/validate-yaml

    @property
    def endpoint(self):
        return f"http://127.0.0.1:{self.server_address[1]}"


class StandInHandler(BaseHTTPRequestHandler):
    server: StandInHub

    def log_message(self, *args):  # quiet: pytest shows the test's own output
        pass

    def reply(self, status, body=b"", headers=None, send_body=True):
        body = json.dumps(body).encode() if isinstance(body, dict) else body
        self.send_response(status)
        for key, value in {"Content-Length": str(len(body)), **(headers or {})}.items():
            self.send_header(key, value)
        self.end_headers()
        if send_body:
            self.wfile.write(body)

    def not_found(self, code="RepoNotFound"):  # huggingface_hub tells the errors apart by X-Error-Code
        self.reply(404, {"error": code}, {"X-Error-Code": code, "Content-Type": "application/json"})

    def body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("Content-Length", 0)))

    def do_POST(self):
        hub, data = self.server, self.body()
        if self.headers.get("Authorization") != f"Bearer {TOKEN}":
            return self.reply(401, {"error": "Invalid credentials"}, {"Content-Type": "application/json"})
        if self.path == "/api/repos/create":
            request = json.loads(data)
            name = f"{request['organization']}/{request['name']}"
            if name in hub.repos:
                return self.reply(
                    409, {"error": "You already created this model repo", "url": f"{hub.endpoint}/{name}"}
                )
            hub.repos[name] = {"files": {}, "sha": "0" * 40}
            return self.reply(200, {"url": f"{hub.endpoint}/{name}"})
        if self.path == "/api/validate-yaml":
            hub.validated.append(json.loads(data)["content"])
            return self.reply(200, {})
        match = re.fullmatch(r"/api/models/([^/]+/[^/]+)/(preupload|commit)/main", self.path)
        if not match or match[1] not in hub.repos:
            return self.not_found()
        name, action = match.groups()
        if action == "preupload":  # every file the regular way: in the commit's own body
            files = json.loads(data)["files"]
            return self.reply(
                200, {"files": [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False} for f in files]}
            )
        lines = [json.loads(line) for line in data.splitlines()]
        assert lines[0]["key"] == "header" and all(line["key"] == "file" for line in lines[1:])
        files = {line["value"]["path"]: base64.b64decode(line["value"]["content"]) for line in lines[1:]}
        hub.commits.append((name, lines[0]["value"]["summary"], files))
        repo = hub.repos[name]
        repo["files"].update(files)
        repo["sha"] = hashlib.sha1(repo["sha"].encode() + data).hexdigest()
        self.reply(
            200,
            {
                "commitUrl": f"{hub.endpoint}/{name}/commit/{repo['sha']}",
                "commitOid": repo["sha"],
                "pullRequestUrl": None,
            },
        )

    def do_GET(self, send_body=True):
        hub = self.server
        if match := re.fullmatch(r"/api/models/([^/]+/[^/]+)", self.path):
            if match[1] not in hub.repos:
                return self.not_found()
            repo = hub.repos[match[1]]
            siblings = [{"rfilename": path} for path in repo["files"]]
            return self.reply(200, {"id": match[1], "sha": repo["sha"], "siblings": siblings})
        match = re.fullmatch(r"/([^/]+/[^/]+)/resolve/main/(.+)", self.path)
        if not match or match[1] not in hub.repos:
            return self.not_found()
        repo = hub.repos[match[1]]
        if match[2] not in repo["files"]:
            return self.not_found("EntryNotFound")
        content = repo["files"][match[2]]
        headers = {"ETag": f'"{hashlib.sha1(content).hexdigest()}"', "X-Repo-Commit": repo["sha"]}
        self.reply(200, content, headers, send_body)

    def do_HEAD(self):
        self.do_GET(send_body=False)


@pytest.fixture
def hub():
    server = StandInHub()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def hub_env(tmp_path, endpoint, token=TOKEN) -> dict:
    """The environment of a process that reaches `endpoint` as the Hub, with a cache and no stored token of its own."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("HF_")}
    env |= {"HF_ENDPOINT": endpoint, "HF_HUB_DISABLE_XET": "1", "HF_HOME": str(tmp_path / "hf")}
    env |= {"HF_HUB_DISABLE_TELEMETRY": "1"}
    if token:
        env["HF_TOKEN"] = token
    return env


def train_and_upload(tmp_path, env, *cli_args):
    return run_script(
        *HOPPER, "--total-timesteps", "2048", "--upload-model", "--hf-entity", "me", "--eval-episodes", "2",
        "--run-dir", tmp_path / "runs" / "hopper", *cli_args, cwd=tmp_path, env=env,
    )  # fmt: skip


def retry_upload(retry: list[str], cwd, env):
    """The retry command as printed, with this interpreter for its `python`."""
    return subprocess.run([sys.executable, *retry[1:]], cwd=cwd, env=env, capture_output=True, text=True, check=False)


def evaluation_line(stdout: str) -> str:
    (line,) = [line for line in stdout.splitlines() if line.startswith("eval/episodic_return")]
    return line


def test_a_finished_run_is_uploaded_in_one_commit_and_evaluates_from_the_hub_as_from_its_file(hub, tmp_path):
    env = hub_env(tmp_path, hub.endpoint)
    result = train_and_upload(tmp_path, env, "--capture-video")
    assert result.returncode == 0, result.stderr
    run_dir = tmp_path / "runs" / "hopper"
    assert result.stderr.strip() == f"uploaded to {hub.endpoint}/me/{REPO_NAME}"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "ok" and summary["model"] == str(run_dir / MODEL_NAME)  # --save-model implied

    ((name, _, files),) = hub.commits
    (events,) = [path.name for path in run_dir.glob("events.out.tfevents.*")]
    expected = {MODEL_NAME, events, "summary.json", "ppo_continuous_envpool_jax.py", "hub.py", "pyproject.toml"}
    assert name == f"me/{REPO_NAME}" and set(files) == expected | {"uv.lock", "README.md", "replay.mp4"}
    assert files["replay.mp4"] == (tmp_path / "videos" / "hopper" / "eval.mp4").read_bytes()
    for path in expected - {"ppo_continuous_envpool_jax.py", "hub.py", "pyproject.toml"}:
        assert files[path] == (run_dir / path).read_bytes(), path
    for path in ("ppo_continuous_envpool_jax.py", "hub.py", "pyproject.toml", "uv.lock"):
        assert files[path] == (REPO / path).read_bytes(), path

    # The card's metadata, against the final evaluation the run printed (one decimal) and kept in summary.json.
    card = files["README.md"].decode()
    assert hub.validated == [card]
    metadata = yaml.safe_load(card.split("---\n")[1])
    (model,) = metadata["model-index"]
    (result_entry,) = model["results"]
    assert result_entry["task"]["type"] == "reinforcement-learning"
    assert result_entry["dataset"]["name"] == result_entry["dataset"]["type"] == "Hopper-v4"
    (metric,) = result_entry["metrics"]
    assert metric["type"] == "mean_reward"
    mean, std = map(float, metric["value"].split(" +/- "))
    printed_mean, printed_std = map(
        float, re.search(r"(\S+) \+- (\S+) over 2", evaluation_line(result.stdout)).groups()
    )
    assert (mean, std) == (pytest.approx(printed_mean, abs=0.051), pytest.approx(printed_std, abs=0.051))
    last_eval = summary["last_eval"]
    assert metric["value"] == f"{last_eval['return']:.2f} +/- {last_eval['return_std']:.2f}"
    assert f"--evaluate me/{REPO_NAME}" in card and shlex.join(summary["command"]) in card

    # Downloaded through the stand-in, the model plays the episodes of the local file.
    from_hub = run_script("--evaluate", f"me/{REPO_NAME}", "--eval-episodes", "3", cwd=tmp_path, env=env)
    assert from_hub.returncode == 0, from_hub.stderr
    local = run_script("--evaluate", run_dir / MODEL_NAME, "--eval-episodes", "3", cwd=tmp_path, env=env)
    assert evaluation_line(from_hub.stdout) == evaluation_line(local.stdout)
    cached = list((tmp_path / "hf" / "hub").glob(f"models--me--{REPO_NAME}/snapshots/*/{MODEL_NAME}"))
    assert [path.read_bytes() for path in cached] == [(run_dir / MODEL_NAME).read_bytes()]
    # Evaluating uploads nothing: the flag is refused there, in one line.
    refused = run_script("--evaluate", run_dir, "--upload-model", "--hf-entity", "me", cwd=tmp_path, env=env)
    assert (refused.returncode, refused.stderr.strip()) == (
        1,
        "error: --upload-model uploads a training run; it excludes --evaluate",
    )


def test_resuming_a_repository_trains_on_in_a_run_directory_of_its_own(hub, tmp_path):
    env = hub_env(tmp_path, hub.endpoint)
    assert train_and_upload(tmp_path, env).returncode == 0
    resume = ["--resume", f"me/{REPO_NAME}", "--total-timesteps", "2560", "--no-upload-model"]
    result = run_script(*resume, cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr
    summary = json.loads((tmp_path / "runs" / REPO_NAME / "summary.json").read_text())
    assert (summary["status"], summary["global_step"]) == ("ok", 2560) and not result.stderr
    # A second download would overwrite the model trained on.
    again = run_script(*resume, cwd=tmp_path, env=env)
    assert (again.returncode, again.stderr.strip()) == (
        1,
        f"error: runs/{REPO_NAME} exists (an earlier --resume me/{REPO_NAME}); continue it with --resume runs/{REPO_NAME}",
    )


def test_an_upload_without_a_token_keeps_the_run_ok_and_names_the_command_that_retries_it(hub, tmp_path):
    result = train_and_upload(tmp_path, hub_env(tmp_path, hub.endpoint, token=None))
    run_dir = tmp_path / "runs" / "hopper"
    assert result.returncode == 0 and (run_dir / MODEL_NAME).exists()
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "ok"
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("upload to the Hub failed (") and not hub.commits
    retry = shlex.split(line.split("retry with: ")[1])
    assert retry[0] == "python" and retry[2:] == ["upload", str(run_dir), "--hf-entity", "me"]

    # Where the Hub cannot be reached, the retry fails in one line; with the token and the Hub, it uploads.
    again = retry_upload(retry, tmp_path, hub_env(tmp_path, "http://127.0.0.1:9"))
    (line,) = again.stderr.strip().splitlines()
    assert again.returncode == 1 and line.startswith("error: upload to the Hub failed: ") and not hub.commits
    again = retry_upload(retry, tmp_path, hub_env(tmp_path, hub.endpoint))
    assert (again.returncode, again.stdout.strip()) == (0, f"uploaded to {hub.endpoint}/me/{REPO_NAME}")
    ((name, _, files),) = hub.commits
    assert name == f"me/{REPO_NAME}" and files[MODEL_NAME] == (run_dir / MODEL_NAME).read_bytes()


@pytest.mark.parametrize("flag", ["--evaluate", "--resume"])
def test_a_repository_that_does_not_exist_is_one_line(hub, tmp_path, flag):
    result = run_script(flag, "me/no-such-repo", cwd=tmp_path, env=hub_env(tmp_path, hub.endpoint))
    (line,) = result.stderr.strip().splitlines()
    assert result.returncode == 1
    assert line.startswith("error: me/no-such-repo is no local path, and no model could be downloaded from the Hub")


def test_a_repository_without_a_model_of_this_script_is_one_line(hub, tmp_path):
    hub.repos["me/other"] = {"files": {"README.md": b"# another model\n"}, "sha": "1" * 40}
    result = run_script("--evaluate", "me/other", cwd=tmp_path, env=hub_env(tmp_path, hub.endpoint))
    assert (result.returncode, result.stderr.strip()) == (
        1,
        "error: the Hub repository me/other holds no .model file of ppo_continuous_envpool_jax.py",
    )


def test_upload_model_needs_an_entity(tmp_path):
    result = run_script("--upload-model", cwd=tmp_path)
    assert (result.returncode, result.stderr.strip()) == (
        1,
        "error: --upload-model needs --hf-entity (the Hub user or organisation to upload to)",
    )


@pytest.mark.parametrize(
    "run_dir, reason", [("a_file", "File exists"), ("/proc/x/run", "No such file or directory")], ids=["file", "proc"]
)
def test_a_run_dir_that_cannot_be_a_directory_is_one_line(tmp_path, run_dir, reason):
    (tmp_path / "a_file").write_text("not a directory\n")
    result = run_script("--run-dir", run_dir, cwd=tmp_path)
    assert (result.returncode, result.stderr.strip()) == (
        1,
        f"error: --run-dir {run_dir} cannot be a run directory: {reason}",
    )
    assert (tmp_path / "a_file").read_text() == "not a directory\n"
