"""`--script FILE` and `--sbatch-args "..."`: the job's facts, for recall and record.

Both read into one context dict (``kb/jobs/request.py``); what the arguments say wins over
the script, as sbatch's command line overrides ``#SBATCH`` lines.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

SCRIPT_HELP = "The job script: its #SBATCH lines, module loads and program are the job's context."
SBATCH_ARGS_HELP = 'The sbatch options the job was (or will be) submitted with, e.g. "--mem=8G -p cpu".'
MAX_SCRIPT_BYTES = 1 << 20  # a batch script larger than this is not a script


def job_context(script: Path | None, sbatch_args: str | None) -> dict[str, Any]:
    from hpcmem.kb.errors import InputError
    from hpcmem.kb.jobs.context import merge_contexts
    from hpcmem.kb.jobs.request import from_sbatch_args, from_script
    from hpcmem.kb.safety.normalise import scrub_text

    from_file: dict[str, Any] = {}
    if script is not None:
        try:
            with open(script, "rb") as fh:
                raw = fh.read(MAX_SCRIPT_BYTES + 1)
        except OSError as exc:
            raise InputError(f"cannot read --script {script}: {exc.strerror or exc}") from None
        if len(raw) > MAX_SCRIPT_BYTES:
            raise InputError(f"--script {script} is larger than 1 MiB; give the job script")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise InputError(f"--script {script} is not a text file") from None
        from_file = from_script(scrub_text(text))
    # scrubbed before parsing: parsing cuts long values, which could leave half a token
    from_args = from_sbatch_args(scrub_text(sbatch_args)) if sbatch_args else {}
    return merge_contexts(from_args, from_file)


# What an agent may put in the MCP tools' ``context`` object besides the facts themselves.
CONTEXT_OBJECT_DOC = (
    'The job\'s context, as an object: "script" (the job script\'s text), "sbatch_args" (e.g. "--mem=8G -p cpu"), '
    '"modules" (loaded, NAME/VERSION), "job_id", and any job fact by name (partition, mem_mb, cpus, gpus, gres, '
    "time_limit_s, qos, account, max_rss_mb, conda_env, venv, python, command ...). Recall weighs it against the "
    "context each lesson was learnt in: a fix your job already has, or a lesson from another partition or GPU type, "
    "is at most related.")


def context_from_object(obj: Any) -> tuple[str | None, dict[str, Any]]:
    """(job id, facts) from an agent's ``context`` object; InputError names the bad field."""
    from hpcmem.kb.errors import InputError
    from hpcmem.kb.jobs.context import FIELDS, clean_context, merge_contexts
    from hpcmem.kb.jobs.request import from_sbatch_args, from_script

    if obj is None:
        return None, {}
    if not isinstance(obj, dict):
        raise InputError("'context' must be an object of job facts")
    extra = set(obj) - set(FIELDS) - {"script", "sbatch_args", "job_id"}
    if extra:
        raise InputError(f"unknown field(s) in 'context': {', '.join(sorted(map(str, extra)))[:200]}",
                         hint="script, sbatch_args, job_id, modules, partition, mem_mb, cpus, gpus, gres, ...")
    job_id = obj.get("job_id")
    if job_id is not None and not isinstance(job_id, (str, int)) or isinstance(job_id, bool):
        raise InputError("'context.job_id' must be a job id")
    for name in ("script", "sbatch_args"):
        if obj.get(name) is not None and not isinstance(obj[name], str):
            raise InputError(f"'context.{name}' must be text")
    if obj.get("script") and len(obj["script"]) > MAX_SCRIPT_BYTES:
        raise InputError("'context.script' is larger than 1 MiB; give the job script")
    facts = clean_context({k: v for k, v in obj.items() if k in FIELDS}, where="context")
    parsed = merge_contexts(from_sbatch_args(obj["sbatch_args"]) if obj.get("sbatch_args") else {},
                            from_script(obj["script"]) if obj.get("script") else {})
    return (str(job_id) if job_id is not None else None), merge_contexts(facts, parsed)
