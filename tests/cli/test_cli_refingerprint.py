"""`hpcmem db refingerprint` and `db upgrade` after a rules change, as an admin runs them (real
processes): the site rules file comes from config (HPCMEM_RULES_FILE = signatures.rules_file)."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema

from tests.cli.helpers import run_hpcmem
from tests.conftest import REPO, SAMPLES
from tests.kb.store.test_refingerprint import SITE_RULES

SCHEMA = json.loads((REPO / "schemas" / "recall.schema.json").read_text())
LOG = SAMPLES / "logs" / "slurm-4410502.out"


def recall(env: dict[str, str]) -> tuple[list[str], str]:
    result = run_hpcmem("recall", "-", "--no-model", "--json", input=LOG.read_text(), env=env)
    assert result.returncode in (0, 1), result.stderr
    data = json.loads(result.stdout)
    jsonschema.validate(data, SCHEMA)
    return [m["found_by"] for m in data["matches"] if m["match_kind"] == "exact"], result.stderr


def refingerprint(env: dict[str, str], *args: str) -> dict:
    result = run_hpcmem("db", "refingerprint", "--json", *args, env=env)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_refingerprint_restores_exact_recall_after_a_site_rules_change(tmp_path: Path):
    done = run_hpcmem("record", "--error-file", str(LOG), "--cause", "atoms left the box",
                      "--fix", "use a smaller timestep", "--json")
    assert done.returncode == 0, done.stderr
    assert recall({}) == (["exact"], "")
    rules = tmp_path / "rules.toml"
    rules.write_text(SITE_RULES)
    env = {"HPCMEM_RULES_FILE": str(rules)}

    found, stderr = recall(env)
    assert found == []
    assert len(stderr.splitlines()) == 1 and "`hpcmem db refingerprint`" in stderr

    dry = refingerprint(env, "--dry-run")
    assert dry["dry_run"] and dry["changed"] and dry["lessons_changed"] == 1
    assert recall(env)[0] == []  # a dry run wrote nothing
    report = refingerprint(env)
    assert report["changed"] and report["lessons_changed"] == 1 and report["digest"] != report["digest_before"]
    assert recall(env) == (["exact"], "")
    assert refingerprint(env)["changed"] is False

    upgrade = run_hpcmem("db", "upgrade", env=env)
    assert upgrade.returncode == 0 and "fingerprints follow the current failure rules" in upgrade.stderr
    # Back to the built-in rules: `db upgrade` is the admin's step, and it refingerprints.
    upgrade = run_hpcmem("db", "upgrade")
    assert upgrade.returncode == 0, upgrade.stderr
    assert "running `hpcmem db refingerprint`" in upgrade.stderr and "changed 1/1 lessons" in upgrade.stderr
    assert recall({}) == (["exact"], "")


def test_a_bad_rules_file_is_a_one_line_error_and_changes_nothing(tmp_path: Path):
    assert run_hpcmem("record", "--error-file", str(LOG), "--cause", "c", "--fix", "f").returncode == 0
    bad = tmp_path / "rules.toml"
    bad.write_text("[[rule]]\nname = 'x'\npatterns = ['(']\n")
    result = run_hpcmem("db", "refingerprint", env={"HPCMEM_RULES_FILE": str(bad)})
    assert result.returncode == 2 and result.stderr.startswith("Error: ") and "bad regex" in result.stderr
    assert "Traceback" not in result.stderr
    assert refingerprint({})["changed"] is False  # the store was not touched
    missing = run_hpcmem("db", "refingerprint", "--scope", "lab:nope")
    assert missing.returncode == 2 and missing.stderr.startswith("Error: ")


def test_fingerprint_command_follows_the_site_rules_file(tmp_path: Path):
    from tests.kb.store.test_refingerprint import ATOMS_A

    rules = tmp_path / "rules.toml"
    rules.write_text(SITE_RULES)
    plain = run_hpcmem("fingerprint", input=ATOMS_A + "\n")
    site = run_hpcmem("fingerprint", input=ATOMS_A + "\n", env={"HPCMEM_RULES_FILE": str(rules)})
    assert plain.returncode == site.returncode == 0, (plain.stderr, site.stderr)
    assert json.loads(plain.stdout)["category"] != "lammps_lost_atoms"
    assert json.loads(site.stdout)["category"] == "lammps_lost_atoms"
