"""Build the corpus of ordinary lines that a redactor must pass through unchanged.

    venv/bin/python build_ordinary.py   # writes ordinary.jsonl (here, in /tmp only)

Sources (read-only; nothing is written in the repository, Loghub text stays in the scratch directory):
  nine          the nine false positives of issue 32 (written here, as items; the BEGIN-
                header one is two lines so that eating the next line shows)
  hpc           ordinary HPC job-log lines with risky words (token, key, secret, password,
                hashes, ids, digests) that are not secrets, written for this study
  corpus        every line of data/corpus/raw/*.instances.jsonl texts (real pasted errors)
  samples       every line of data/samples/logs/*.out|*.err but slurm-4410744.out (the
                sample that holds fake secrets on purpose)
  loghub        the Content column of the eight Loghub 2k samples (16,000 messages)
Each item: {"source", "text"}; multi-line items are kept whole (they test line eating).
"""
from __future__ import annotations

import csv
import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
MAIN = Path(__file__).resolve().parents[3]  # the repository (bench/experiments/secrets/ is three below)
LOGHUB = MAIN.parent / "shared" / "bench" / "loghub"  # ../shared: read there, never copied

NINE = [
    "  File \"/home/alice/proj/ckpt.py\", line 31, in save\n"
    "    s3.upload_file(Filename=path, Bucket='ml-ckpt', Key='ckpt/epoch7/model.pt')",
    "INFO datasets.arrow_dataset: Loading cached processed dataset, cache_key=3f9a2c7e1b4d8a6f0c2e5b7d9a1f3c5e",
    "distributed.worker - WARNING - Compute Failed Key: ('getitem-8f3e2a1b9c7d4e6f5a0b1c2d3e4f5a6b', 12) "
    "Function: execute_task",
    "public_key: ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGq3n8Kj2Lw0r9sXz1yTqVb4mN6pH5cR2dF8eW7uA3iO alice@login01",
    "  File \"/home/alice/proj/agent/llm.py\", line 12, in <module>\n"
    "    client = OpenAI(api_key=settings.openai_api_key)",
    "+ mysql --password -h db01 -u alice results < schema.sql",
    "+ psql --no-password --host pg01 -U alice -d jobs -f load.sql",
    "INFO:    Converting OCI blobs to SIF format: docker://ubuntu:22.04@sha256:"
    "b492494d8e0113c4ad3fe4528a4b5ff89faa5331f7d52c5c138196f69ce176a6",
    "ValueError: Could not deserialize key data. The data may be in an incorrect format, expected "
    "'-----BEGIN RSA PRIVATE KEY-----'\nTraceback (most recent call last):",
]

HPC = [
    "export TOKENIZERS_PARALLELISM=false",
    "generation_config: max_new_tokens=512 eos_token_id=2 pad_token_id=0",
    "+ sbatch -p gpu --mem=64G --gres=gpu:a100:2 --time=04:00:00 train.sh",
    "+ ssh-keygen -t ed25519 -f /home/alice/.ssh/id_ed25519 -N ''",
    "export SSH_KEY=~/.ssh/id_ed25519",
    "+ python train.py --password-file /etc/hpcmem/db.pass --host pg01",
    "Token is valid (permission: read).",
    "Your token has been saved to /home/alice/.cache/huggingface/token",
    "wandb: Appending key for api.wandb.ai to your netrc file: /home/alice/.netrc",
    "Failed password for invalid user admin from 10.1.2.3 port 52314 ssh2",
    "pam_unix(sshd:auth): authentication failure; logname= uid=0 euid=0 tty=ssh ruser= rhost=10.1.2.3",
    "passwd: Authentication token manipulation error",
    "HEAD is now at 3f2a9c1d8e7b6a5f4e3d2c1b0a9f8e7d6c5b4a39 fix dataloader seed",
    "commit 9fceb02d0ae598e95dc970b74767f19372d61af8",
    "sha256sum: model.safetensors: 7d865e959b2466918c9863afca942d0fb89d7c9ac0c99bafc3749504ded97730",
    "run id: 0b7f3c2e-9a41-4d5e-8c6b-1f2e3d4c5b6a (wandb offline)",
    "slurmstepd: error: *** JOB 8812345 ON gpu017 CANCELLED AT 2026-11-12T09:15:00 DUE TO TIME LIMIT ***",
    "srun: error: gpu017: task 3: Out Of Memory",
    "Lmod has detected the following error: The following module(s) are unknown: \"cuda/11.9\"",
    "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: train.py FAILED",
    "KeyError: 'model.layers.31.self_attn.k_proj.weight'",
    "RuntimeError: Error(s) in loading state_dict for LlamaForCausalLM: Missing key(s) in state_dict: \"lm_head.weight\"",
    "sort_key=name secret_santa=false token_type=bearer",
    "export MYSQL_PWD_FILE=/run/secrets/mysql",
    "+ git push origin main  # remote: Enter passphrase for key '/home/alice/.ssh/id_ed25519':",
    "docker pull nvcr.io/nvidia/pytorch:24.01-py3@sha256:2fbd2a9e1bc3a8c3a21a0cbfd7b4b8c6e1d2f3a4b5c6d7e8f9a0b1c2d3e4f5a6",
    "ImportError: /lib64/libstdc++.so.6: version `GLIBCXX_3.4.29' not found",
    "NCCL WARN Cuda failure 'out of memory' rank 3 busId 41000 commHash 0x5b3c0c8f1d2e4a67",
    "Using cache key 8d4c6f0e2b1a9c7d5e3f for compiled kernel",
    "AWS_DEFAULT_REGION=us-east-1 AWS_PROFILE=research",
    "client_id=vision-lab scope=read:jobs redirect_uri=https://portal.example.org/callback",
    "ssh: connect to host login01 port 22: Connection refused; Host key verification failed.",
    "jwt decode failed: Signature has expired (exp=1731400000)",
    "+ singularity exec --nv docker://pytorch/pytorch:2.1.0-cuda12.1-cudnn8-runtime python -c 'import torch'",
    "OSError: [Errno 28] No space left on device: '/scratch/alice/cache/datasets/downloads/5b1c9e2f0d'",
    "Total tokens: 1048576  tokens/s: 35210.4  key_padding_mask: None",
    "[rank0]: ValueError: password authentication failed for user \"alice\"",
    "psql: error: connection to server at \"pg01\" (10.0.0.5), port 5432 failed: fPE_AUTH password authentication failed",
    "KUBECONFIG=/home/alice/.kube/config kubectl get pods -n vision",
    "secretName: db-credentials  # mounted at /run/secrets",
    "-----BEGIN CERTIFICATE-----",
    "gpg: key 4A3B2C1D0E9F8A7B: public key \"Alice <alice@example.org>\" imported",
]


def main() -> None:
    items: list[dict] = []
    items += [{"source": "nine", "text": t} for t in NINE]
    items += [{"source": "hpc", "text": t} for t in HPC]
    for path in sorted((MAIN / "data/corpus/raw").glob("*.instances.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            for t in json.loads(line)["text"].splitlines():
                if t.strip():
                    items.append({"source": "corpus", "text": t})
    for path in sorted((MAIN / "data/samples/logs").glob("*")):
        if path.suffix in (".out", ".err") and path.name != "slurm-4410744.out":  # that one is the secrets sample
            for t in path.read_text(encoding="utf-8", errors="replace").splitlines():
                if t.strip():
                    items.append({"source": "samples", "text": t})
    for path in sorted(LOGHUB.glob("*/*_2k.log_structured_corrected.csv")):
        with open(path, newline="", encoding="utf-8") as fh:
            for row in csv.DictReader(fh):
                items.append({"source": "loghub", "text": row["Content"]})
    with open(HERE / "ordinary.jsonl", "w", encoding="utf-8") as fh:
        for it in items:
            fh.write(json.dumps(it) + "\n")
    from collections import Counter
    print(Counter(it["source"] for it in items))


if __name__ == "__main__":
    main()
