"""Sharing runs of ppo_continuous_envpool_jax.py on the Hugging Face Hub, as CleanRL's cleanrl_utils/huggingface.py.

The script imports this module only where a Hub flag or a Hub repository id is given, so that the script copied
alone still trains. `--upload-model` pushes a finished run in one commit; `--evaluate OWNER/REPO` and `--resume
OWNER/REPO` download its model. An upload that failed is retried without training again:

    python hub.py upload RUN_DIR --hf-entity NAME

The Hub's address is huggingface_hub's: HF_ENDPOINT, read when it is imported; the token is its own (HF_TOKEN or
`hf auth login`).
"""

import argparse
import glob
import json
import os
import shlex
import sys

import flax.serialization
import huggingface_hub
from huggingface_hub import CommitOperationAdd, HfApi, hf_hub_download, metadata_eval_result
from huggingface_hub.errors import HFValidationError
from huggingface_hub.utils import disable_progress_bars, validate_repo_id, yaml_dump

HERE = os.path.dirname(os.path.abspath(__file__))
# What reproduces a run beside its command line: the script, this module, and the exact versions of every package.
REPRODUCTION = ("ppo_continuous_envpool_jax.py", "hub.py", "pyproject.toml", "uv.lock")

# A model is a few hundred KiB: a progress bar would only add lines to stderr.
disable_progress_bars()


def repo_id(hf_entity: str, env_id: str, exp_name: str, seed: int) -> str:
    """CleanRL's repository name, `{hf_entity}/{env_id}-{exp_name}-seed{seed}`, with the '/' of a family's id
    (MetaWorld/Reach-v3) made a '-': a Hub repository id has one '/'."""
    return f"{hf_entity}/{env_id.replace('/', '-')}-{exp_name}-seed{seed}"


def check_args(args) -> str | None:
    """What is wrong with the script's --upload-model, as one line, or None: checked before training."""
    if args.evaluate:
        return "--upload-model uploads a training run; it excludes --evaluate"
    if not args.hf_entity:
        return "--upload-model needs --hf-entity (the Hub user or organisation to upload to)"
    name = repo_id(args.hf_entity, args.env_id, args.exp_name, args.seed)
    try:
        validate_repo_id(name)
    except HFValidationError as error:
        return f"--upload-model: {name} is no Hub repository id: {first_line(error)}"
    return None


def first_line(error: BaseException) -> str:
    """huggingface_hub's messages run over several lines (the URL, the request id): their first says what failed."""
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__


# ---------------------------------------------------------------------------------------------------
# Upload: one commit of the model, its logs and evaluation, the files that reproduce it, and its card.
# ---------------------------------------------------------------------------------------------------


def finished_run(run_dir: str) -> tuple[dict, str]:
    """The summary and model file of a run that ended ok with its model kept and its final evaluation."""
    with open(os.path.join(run_dir, "summary.json")) as f:
        summary = json.load(f)
    model = summary["model"] and os.path.join(run_dir, os.path.basename(summary["model"]))
    last_eval = summary["last_eval"] or {}
    if summary["status"] != "ok" or not model or not os.path.exists(model) or "return_std" not in last_eval:
        raise ValueError(f"{run_dir} holds no run that ended ok with its model and final evaluation (--save-model)")
    return summary, model


def model_card(summary: dict, args: dict, name: str) -> str:
    """README.md: the final evaluation as `model-index` metadata (the Hub ranks it on the task's leaderboard),
    then how to load the model, how the run was made, its hyperparameters and versions."""
    env_id, last_eval = summary["env_id"], summary["last_eval"]
    mean_reward = f"{last_eval['return']:.2f} +/- {last_eval['return_std']:.2f}"
    metadata = {
        "tags": [env_id, "reinforcement-learning", "deep-reinforcement-learning", "custom-implementation", "jax"],
        "library_name": "ppo-continuous-envpool-jax",
        **metadata_eval_result(
            model_pretty_name=name.split("/")[1],
            task_pretty_name="reinforcement-learning",
            task_id="reinforcement-learning",
            metrics_pretty_name="mean_reward",
            metrics_id="mean_reward",
            metrics_value=mean_reward,
            dataset_pretty_name=env_id,
            dataset_id=env_id,
        ),
    }
    versions = {**summary["versions"], "huggingface_hub": huggingface_hub.__version__}
    rows = "\n".join(f"| {key} | {value} |" for key, value in args.items())
    return f"""---
{yaml_dump(metadata, sort_keys=False)}---

# PPO on {env_id}

A policy trained by `ppo_continuous_envpool_jax.py` (PPO for continuous control with EnvPool's MuJoCo step
compiled into JAX), seed {summary["seed"]}, {summary["global_step"]} environment steps.

Final evaluation ({args["eval_episodes"]} episodes, the mean action): **{mean_reward}**.

## Load and evaluate it

With the files of this repository (`uv sync` installs the locked versions of `uv.lock`):

```bash
python ppo_continuous_envpool_jax.py --evaluate {name}
```

`--capture-video` adds a video; `--resume {name} --total-timesteps N` trains it on.

## How it was made

```bash
python {shlex.join(summary["command"])}
```

The run's TensorBoard events, its `summary.json` and, where recorded, the evaluation's video `replay.mp4` are
beside the model.

| hyperparameter | value |
|---|---|
{rows}

Versions: {", ".join(f"{key} {value}" for key, value in versions.items())}.
"""


def upload(run_dir: str, hf_entity: str) -> str:
    """Push a finished run to `{hf_entity}/{env_id}-{exp_name}-seed{seed}` in one commit; returns its URL."""
    summary, model = finished_run(run_dir)
    with open(model, "rb") as f:
        args = json.loads(flax.serialization.msgpack_restore(f.read())["args"])
    name = repo_id(hf_entity, summary["env_id"], summary["exp_name"], summary["seed"])
    files = {os.path.basename(model): model, "summary.json": os.path.join(run_dir, "summary.json")}
    for events in sorted(glob.glob(os.path.join(glob.escape(run_dir), "events.out.tfevents.*"))):
        files[os.path.basename(events)] = events
    # Where the script records it, relative to the directory it ran in; CleanRL's and SB3's name on the Hub.
    video = os.path.join("videos", os.path.basename(os.path.abspath(run_dir)), "eval.mp4")
    if os.path.exists(video):
        files["replay.mp4"] = video
    for file in REPRODUCTION:  # a copy of the script alone has no lock file: what is there travels
        if os.path.exists(os.path.join(HERE, file)):
            files[file] = os.path.join(HERE, file)
    operations = [CommitOperationAdd(path_in_repo=path, path_or_fileobj=local) for path, local in files.items()]
    operations.append(CommitOperationAdd("README.md", model_card(summary, args, name).encode()))
    api = HfApi()
    api.create_repo(name, exist_ok=True)
    message = f"{summary['exp_name']} on {summary['env_id']}, seed {summary['seed']}, {summary['global_step']} steps"
    api.create_commit(name, operations, commit_message=message)
    return f"{api.endpoint}/{name}"


def upload_finished_run(run_dir: str, hf_entity: str):
    """The script's upload at the end of a run that ended ok: whatever fails (no token, no network, the Hub), the
    run stays ok with its model kept, and one line on stderr gives the command that retries the upload."""
    try:
        url = upload(run_dir, hf_entity)
    except Exception as error:  # noqa: BLE001 (whatever failed, the run is kept and the retry named)
        here = os.path.relpath(os.path.join(HERE, "hub.py"))
        here = os.path.join(HERE, "hub.py") if here.startswith("..") else here
        retry = shlex.join(["python", here, "upload", run_dir, "--hf-entity", hf_entity])
        print(
            f"upload to the Hub failed ({first_line(error)}); the model is kept; retry with: {retry}", file=sys.stderr
        )
    else:
        print(f"uploaded to {url}", file=sys.stderr)


# ---------------------------------------------------------------------------------------------------
# Download: a repository id in place of a model path.
# ---------------------------------------------------------------------------------------------------


def download_model(name: str, resume: bool) -> str:
    """The .model file of the Hub repository `name`, downloaded: to the Hub's cache to evaluate it, to the new run
    directory runs/{repo name}/ to resume it (a resumed run writes its logs and checkpoints beside its model)."""
    api = HfApi()
    try:
        models = [sibling.rfilename for sibling in api.model_info(name).siblings or []]
        models = [file for file in models if file.endswith(".model") and "/" not in file]
        if len(models) != 1:
            found = "no .model file" if not models else f"{len(models)} .model files"
            sys.exit(f"error: the Hub repository {name} holds {found} of ppo_continuous_envpool_jax.py")
        local_dir = os.path.join("runs", name.split("/")[1]) if resume else None
        if local_dir and os.path.exists(local_dir):  # a second download would overwrite what the first has trained
            sys.exit(f"error: {local_dir} exists (an earlier --resume {name}); continue it with --resume {local_dir}")
        return hf_hub_download(name, models[0], local_dir=local_dir)
    except Exception as error:  # noqa: BLE001 (no such repository, no network, a refused token)
        sys.exit(f"error: {name} is no local path, and no model could be downloaded from the Hub: {first_line(error)}")


def main():
    parser = argparse.ArgumentParser(description="Upload a finished run of ppo_continuous_envpool_jax.py.")
    commands = parser.add_subparsers(dest="command", required=True)
    upload_parser = commands.add_parser("upload", help="push a run directory that ended ok with --save-model")
    upload_parser.add_argument("run_dir", help="the run directory (run from the directory the run was started in)")
    upload_parser.add_argument("--hf-entity", required=True, help="the Hub user or organisation to upload to")
    cli = parser.parse_args()
    try:
        print(f"uploaded to {upload(cli.run_dir, cli.hf_entity)}")
    except Exception as error:  # noqa: BLE001 (one line, as the script's bad input)
        sys.exit(f"error: upload to the Hub failed: {first_line(error)}")


if __name__ == "__main__":
    main()
