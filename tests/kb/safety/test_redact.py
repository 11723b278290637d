"""Secret redaction: every supported kind, what must stay, idempotence, the sample log.

Every credential below is fake. They are assembled from pieces so that no complete
token-shaped string sits in the source (secret scanners and push protection would
otherwise flag the test file itself).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hpcmem.kb.safety.redact import KINDS, redact, redact_text

SAMPLES = Path(__file__).resolve().parents[3] / "data" / "samples" / "logs"

B62 = "aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3zA5bC7dE9fG1hJ3kL5mN7pQ9rS1tU3vW5xY7zA9"
UPPER = "Z7XQ2LMN4PRS8TUV"

AWS_ID = "AK" + "IA" + UPPER
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCY" + "EXAMPLEKEY"
GCP = "AI" + "za" + "SyD-Fake_k3y" + B62[:23]
AZURE_KEY = B62[:40] + "Q2xvdWRLZXk" + "r/FAKE" + B62[40:64] + "=="
GHP = "gh" + "p_" + B62[:36]
GHO = "gh" + "o_" + B62[1:37]
GHS = "gh" + "s_" + B62[2:38]
GITHUB_PAT = "github" + "_pat_" + "11ABCDEFG0" + B62[:12] + "_" + B62[5:64]
GLPAT = "gl" + "pat-" + "xY3zA5bC7dE9fG1hJ3kL"
HF = "hf" + "_" + "FAKEqZxWvYtRsPoNmLkJiHgFeDcBaQwErT"
OPENAI = "sk" + "-proj-" + B62[:48] + "-_" + B62[10:30]
OPENAI_LEGACY = "sk" + "-" + B62[3:51]
ANTHROPIC = "sk" + "-ant-api03-" + B62[:70] + B62[:23] + "AA"
SLACK = "xo" + "xb-" + "2048163264128-4096819216384-" + B62[:24]
SLACK_HOOK_PATH = "services/" + "T0FAKE0001/B0FAKE0002/" + "X" * 24
STRIPE = "sk" + "_live_" + B62[7:31]
JWT = ("ey" + "JhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9" + "." + "ey" + "JzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkZha2UifQ"
       + "." + "SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c")
OPAQUE = "tok_" + B62[:30]
WANDB = "3f786850e387550fdab836ed7e6dc881de23001b"  # 40 hex, same shape as a git SHA
NVAPI = "nv" + "api-" + B62[:64]
DOCKER_PAT = "dckr" + "_pat_" + B62[5:32]
GROQ = "gs" + "k_" + B62[:52]
XAI = "xa" + "i-" + B62[:72] + B62[3:11]
TSKEY = "tskey" + "-auth-" + "kFAKE7CNTRL" + "-" + B62[10:40]

PEM_BODY = "\n".join(B62[i : i + 64] for i in range(0, 64 * 3, 8))[:600]
RSA_BLOCK = "-----BEGIN RSA " + "PRIVATE KEY-----\n" + PEM_BODY + "\n-----END RSA " + "PRIVATE KEY-----"
SSH_BLOCK = "-----BEGIN OPENSSH " + "PRIVATE KEY-----\n" + PEM_BODY + "\n-----END OPENSSH " + "PRIVATE KEY-----"

# (kind, text with the secret, the secret, text that must survive around it)
POSITIVE = [
    ("aws_access_key_id", f"export AWS_ACCESS_KEY_ID={AWS_ID}", AWS_ID, "export AWS_ACCESS_KEY_ID="),
    ("aws_secret_key", f"aws_secret_access_key = {AWS_SECRET}", AWS_SECRET, "aws_secret_access_key = "),
    ("gcp_api_key", f"maps request failed: https://maps.googleapis.com/x?key={GCP}&z=3", GCP, "&z=3"),
    ("azure_key", f"DefaultEndpointsProtocol=https;AccountName=labdata;AccountKey={AZURE_KEY};"
     "EndpointSuffix=core.windows.net", AZURE_KEY, "AccountName=labdata;AccountKey="),
    ("azure_key", "GET https://labdata.blob.core.windows.net/runs/a.tar?sv=2022-11-02&sp=r&sig="
     + "FAKEsIg%2B" + B62[:30] + "%3D 403", "FAKEsIg%2B" + B62[:30] + "%3D", " 403"),
    ("github_token", f"remote: token {GHP} has expired", GHP, "remote: token "),
    ("github_token", f"GH_TOKEN={GHO}", GHO, "GH_TOKEN="),
    ("github_token", f"using installation token {GHS} for lab/repo", GHS, " for lab/repo"),
    ("github_token", f"gh auth login --with-token <<< {GITHUB_PAT}", GITHUB_PAT, "gh auth login"),
    ("gitlab_token", f"git push https://oauth2@gitlab.example.org/x.git -o token {GLPAT}", GLPAT, "-o token "),
    ("huggingface_token", f"huggingface-cli login --token {HF} --add-to-git-credential", HF,
     " --add-to-git-credential"),
    ("openai_key", f"openai.AuthenticationError: Incorrect API key provided: {OPENAI}.", OPENAI,
     "Incorrect API key provided: "),
    ("openai_key", f"OPENAI_API_KEY={OPENAI_LEGACY}", OPENAI_LEGACY, "OPENAI_API_KEY="),
    ("anthropic_key", f"client = Anthropic(api_key=\"{ANTHROPIC}\")", ANTHROPIC, "client = Anthropic("),
    ("slack_token", f"slack notify failed (token={SLACK}): invalid_auth", SLACK, "): invalid_auth"),
    ("slack_webhook", f"POST https://hooks.slack.com/{SLACK_HOOK_PATH} -> 404", SLACK_HOOK_PATH,
     "https://hooks.slack.com/"),
    ("stripe_key", f"stripe.api_key = '{STRIPE}'", STRIPE, "stripe.api_key = '"),
    ("nvidia_key", f"openai.OpenAI(base_url=NIM_URL, api_key='{NVAPI}')", NVAPI, "base_url=NIM_URL"),
    ("docker_token", f"+ echo {DOCKER_PAT} | docker login -u alice --password-stdin", DOCKER_PAT,
     " | docker login -u alice --password-stdin"),
    ("groq_key", f"groq.AuthenticationError: Invalid API Key {GROQ} (401)", GROQ, " (401)"),
    ("xai_key", f"client = OpenAI(base_url=XAI_URL, api_key='{XAI}')", XAI, "base_url=XAI_URL"),
    ("tailscale_key", f"+ tailscale up --authkey={TSKEY} --hostname=gpu017", TSKEY, " --hostname=gpu017"),
    ("presigned_url", "HTTP 403 for https://b.s3.amazonaws.com/m.pt?X-Amz-Expires=3600&X-Amz-Signature="
     + B62[:64] + "&x=1", B62[:64], "&x=1"),
    ("jwt", f"Authorization: Bearer {JWT}", JWT, "Authorization: Bearer "),
    ("bearer_token", f"curl -sf -H 'Authorization: Bearer {OPAQUE}' https://api.example.org/v1/runs",
     OPAQUE, "https://api.example.org/v1/runs"),
    ("bearer_token", f"headers={{'authorization': 'token {OPAQUE}'}}", OPAQUE, "headers="),
    ("cli_password", "mysqldump -u etl --password Tr0ub4dor3 runs > runs.sql", "Tr0ub4dor3", " runs > runs.sql"),
    ("cli_password", "python load.py --db-password=Tr0ub4dor3 --host db01", "Tr0ub4dor3", " --host db01"),
    ("cli_password", "mysql -u root -p'S3cr3t!x' -h db01 -P 3306 metrics", "S3cr3t!x", "-h db01 -P 3306"),
    ("cli_password", "mysql -uroot -pS3cr3tx metrics < dump.sql", "S3cr3tx", " metrics < dump.sql"),
    ("cli_password", "sshpass -p 'c0rrect horse' scp run.tar dtn01:/archive/", "c0rrect horse", "scp run.tar"),
    ("cli_password", "curl -fsS -u alice:Sw0rdf1sh https://data.example.org/x.tar", "Sw0rdf1sh",
     "https://data.example.org/x.tar"),
    ("cli_token", f"python upload.py --hf-token {HF[3:]} --repo lab/model", HF[3:], " --repo lab/model"),
    ("secret_assignment", "PGPASSWORD=hunter2 psql -h db01 -U etl runs", "hunter2", " psql -h db01"),
    ("secret_assignment", "MYSQL_PWD=hunter2", "hunter2", "MYSQL_PWD="),
    ("secret_assignment", f"export WANDB_API_KEY={WANDB}", WANDB, "export WANDB_API_KEY="),
    ("secret_assignment", "API_KEY: abcd1234efgh5678", "abcd1234efgh5678", "API_KEY: "),
    ("secret_assignment", '{"user": "etl", "password": "hunter2", "port": 5432}', "hunter2", '"port": 5432}'),
    ("secret_assignment", "db_password = 'pa ss w0rd'", "pa ss w0rd", "db_password = '"),
    ("secret_assignment", f"Namespace(lr=0.001, client_secret='{B62[:20]}', seed=1)", B62[:20], ", seed=1)"),
    ("secret_assignment", f"config: {{'apiKey': '{B62[2:26]}'}}", B62[2:26], "'apiKey': '"),
    ("url_credentials", "fatal: unable to access 'https://alice:s3cretpw@git.example.org/lab/x.git/'",
     "s3cretpw", "https://alice:"),
    ("url_credentials", "sqlalchemy: postgresql://etl:pg_Pa55-w0rd@db01:5432/runs refused", "pg_Pa55-w0rd",
     "@db01:5432/runs refused"),
    ("private_key", f"key material follows\n{RSA_BLOCK}\nend of dump", PEM_BODY, "end of dump"),
    ("private_key", f"{SSH_BLOCK}\n", PEM_BODY, ""),
    # An excerpt cut before the END line must still lose the key body.
    ("private_key", "-----BEGIN " + "PRIVATE KEY-----\n" + PEM_BODY[:200] + "\n", PEM_BODY[:200], ""),
]


@pytest.mark.parametrize(("kind", "text", "secret", "kept"), POSITIVE,
                         ids=[f"{p[0]}-{i}" for i, p in enumerate(POSITIVE)])
def test_each_kind_is_redacted_and_context_kept(kind: str, text: str, secret: str, kept: str) -> None:
    assert secret in text  # the case really carries the secret
    result = redact(text)
    assert secret not in result.text
    assert f"[REDACTED:{kind}]" in result.text
    assert result.kinds == (kind,)
    assert result.count == 1
    assert kept in result.text
    assert redact_text(text) == result.text


@pytest.mark.parametrize(("kind", "text", "secret", "kept"), POSITIVE,
                         ids=[f"{p[0]}-{i}" for i, p in enumerate(POSITIVE)])
def test_redacting_twice_is_stable(kind: str, text: str, secret: str, kept: str) -> None:
    once = redact(text)
    twice = redact(once.text)
    assert twice.text == once.text
    assert twice.count == 0
    assert twice.kinds == ()


def test_every_kind_has_a_positive_case() -> None:
    assert {p[0] for p in POSITIVE} == set(KINDS)


NEGATIVE = [
    "commit 3f786850e387550fdab836ed7e6dc881de23001b (HEAD -> main)",  # a git SHA is not a secret
    "run id 123e4567-e89b-12d3-a456-426614174000 started",
    "image sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    "#SBATCH --mem=4G --cpus-per-task=8",
    "sbatch -p gpu --time=01:00:00 --gres=gpu:a100:1 train.sh",
    "mysql -h db01 -P 3306 -u etl metrics",
    "ssh -p 2222 alice@login01",
    "rsync --password-file=/etc/rsyncd.secrets -a src/ dtn01::archive/",
    "password_file=/etc/slurm/db.passwd",
    "SSH_KEY=~/.ssh/id_ed25519 PWD=/home/alice/jobs OLDPWD=/home/alice",
    "max_new_tokens=512 eos_token_id=2 TOKENIZERS_PARALLELISM=false sort_key=name",
    "pad_token: <pad>  token_type: bearer  num_key_value_heads: 8",
    "KeyError: 'missing_key_0'",
    "ERROR 1045 (28000): Access denied for user 'etl'@'10.1.4.17' (using password: YES)",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.53 GiB.",
    "from huggingface_hub import hf_hub_download; hf_hub_download(repo_id='gpt2')",
    "pip install scikit-learn==1.5.2 task-spooler disk-usage",
    "git clone https://github.com/lab/repo.git && git remote add up git@github.com:lab/repo.git",
    "token=None password: null PASSWORD=$DB_PASS api_key: ${API_KEY} secret=<set me>",
    "Enter password:",
    "Authorization: Bearer <token>",
    "The bearer of this message",
    "slurmstepd: error: *** JOB 1 ON localhost CANCELLED AT 2026-11-30T00:05:46 DUE TO TIME LIMIT ***",
    "/home/alice/.ssh/id_rsa.pub  /etc/ssl/private/",
    "curl -u alice https://data.example.org/x.tar",
]


@pytest.mark.parametrize("text", NEGATIVE)
def test_ordinary_text_is_left_alone(text: str) -> None:
    result = redact(text)
    assert result.text == text
    assert result.count == 0
    assert result.kinds == ()


def test_several_secrets_in_one_line_are_counted() -> None:
    text = f"AWS_ACCESS_KEY_ID={AWS_ID} AWS_SECRET_ACCESS_KEY={AWS_SECRET} HF_TOKEN={HF}"
    result = redact(text)
    assert result.count == 3
    assert result.kinds == ("aws_access_key_id", "huggingface_token", "aws_secret_key")  # rule order
    assert result.text == ("AWS_ACCESS_KEY_ID=[REDACTED:aws_access_key_id] "
                           "AWS_SECRET_ACCESS_KEY=[REDACTED:aws_secret_key] HF_TOKEN=[REDACTED:huggingface_token]")


# The fake secrets written into data/samples/logs/slurm-4410744.out.
SAMPLE_SECRETS = [
    "hf" + "_FAKEqZxWvYtRsPoNmLkJiHgFeDcBaQwErT",
    "sk" + "-proj-FAKE3xAmpl3K3y-n0tR3al_9dQ2mVt7LpWz4RbYc8NhGs1JkU6e",
    "AK" + "IAIOSFODNN7EXAMPLE",
    "wJalrXUtnFEMI/K7MDENG/bPxRfiCY" + "EXAMPLEKEY",
    "gh" + "p_FAKE0nly4T3sts0000xYz9Q8w7E6r5T4y3U2",
    "pg_Pa55" + "-w0rd",
    "Tr0ub4" + "dor&3",
]


def test_the_secrets_sample_log_is_fully_redacted() -> None:
    text = (SAMPLES / "slurm-4410744.out").read_text()
    for secret in SAMPLE_SECRETS:
        assert secret in text
    result = redact(text)
    for secret in SAMPLE_SECRETS:
        assert secret not in result.text
    assert set(result.kinds) >= {"huggingface_token", "openai_key", "aws_access_key_id", "aws_secret_key",
                                 "url_credentials", "cli_password"}
    # The log stays readable: the failure itself is untouched.
    assert "returned non-zero exit status 2." in result.text
    assert "ERROR 1045 (28000): Access denied for user 'etl'@'10.1.4.17' (using password: YES)" in result.text
    assert redact(result.text).count == 0


def test_clean_log_text_passes_through_unchanged() -> None:
    for name in ("slurm-4410231.out", "ddp-4410388.err", "build-4410715.out", "oom-4.out"):
        text = (SAMPLES / name).read_text()
        assert redact_text(text) == text, name


def test_long_text_with_a_key_block_across_piece_boundaries() -> None:
    # Long texts are redacted in ~4 KiB pieces; a key block must not be split by them.
    filler = "".join(f"step {i} loss=0.{i:04d} lr=3e-4\n" for i in range(150))  # ~4.4 KB
    text = (filler[:4000] + "\n" + RSA_BLOCK + "\n" + filler + f"export HF_TOKEN={HF}\n" + filler
            + f"AWS_ACCESS_KEY_ID={AWS_ID}\n")
    assert len(text) > 3 * 4096
    result = redact(text)
    for secret in (PEM_BODY[:64], PEM_BODY[-64:], HF, AWS_ID):
        assert secret not in result.text
    assert result.count == 3
    assert result.kinds == ("private_key", "aws_access_key_id", "huggingface_token")  # rule order
    assert result.text.count("\n") == text.count("\n") - RSA_BLOCK.count("\n")
    assert redact(result.text).count == 0
    assert redact_text(text) == result.text
