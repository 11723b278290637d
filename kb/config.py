"""Layered configuration: which stores exist, where caches live, which model to load.

Scopes, lowest to highest precedence:

1. ``builtin``  - the defaults below
2. ``site``     - ``/etc/hpcmem/config.toml`` (``HPCMEM_SITE_CONFIG`` moves it)
3. ``user``     - ``$XDG_CONFIG_HOME/hpcmem/config.toml`` (under ``$HPCMEM_HOME/config`` when set)
4. ``file``     - the file named by ``HPCMEM_CONFIG``
5. ``env``      - ``HPCMEM_*`` variables (table ``ENV_KEYS``)
6. ``cli``      - command-line flags

Merge rule (one pure function, ``merge``): tables merge key by key, recursively; scalars
and arrays replace what a lower scope set. Lab stores are a table keyed by lab name, so a
user file can add a lab without repeating the site's labs. ``HPCMEM_DISABLE_LOCAL_CONFIG=1``
ignores the site and user files (CI, tests).

Every value remembers the scope (and file) that set it, for ``hpcmem config show``.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpcmem.kb.errors import ConfigError

SITE_CONFIG = "/etc/hpcmem/config.toml"
# Where Slurm's own configuration is looked for when SLURM_CONF does not say (Debian's
# packages use /etc/slurm; older ones /etc/slurm-llnl).
SLURM_CONF_PLACES = ("/etc/slurm/slurm.conf", "/etc/slurm-llnl/slurm.conf")

# Known keys and their types; anything else in a file is a typo worth reporting.
SCHEMA: dict[str, Any] = {
    "cluster": {"name": str},
    "stores": {
        "user": {"url": str, "schema": str, "journal_mode": str},
        # leads: the users who approve in the lab (required to approve in a SQLite lab store)
        "labs": {"*": {"url": str, "schema": str, "journal_mode": str, "leads": list}},
        "cluster": {"url": str, "schema": str, "journal_mode": str},
    },
    "model": {"path": str, "name": str, "sha256": str, "onnx_dir": str, "encoder": str},
    "index": {"dir": str, "flat_max": int},
    "spool": {"dir": str, "group": str},
    "epilog": {"budget_seconds": float},
    "recall": {"match_probability": float, "drain_budget_seconds": float, "connect_timeout_seconds": float},
    "revalidate": {"unconfirmed_days": int},
    "signatures": {"rules_file": str},
}

# HPCMEM_* environment variables and the config key each sets.
ENV_KEYS: dict[str, tuple[str, ...]] = {
    "HPCMEM_CLUSTER": ("cluster", "name"),
    "HPCMEM_USER_STORE": ("stores", "user", "url"),
    "HPCMEM_CLUSTER_STORE": ("stores", "cluster", "url"),
    "HPCMEM_MODEL_DIR": ("model", "path"),
    "HPCMEM_ONNX_DIR": ("model", "onnx_dir"),
    "HPCMEM_ENCODER": ("model", "encoder"),
    "HPCMEM_INDEX_DIR": ("index", "dir"),
    "HPCMEM_SPOOL": ("spool", "dir"),
    "HPCMEM_SPOOL_GROUP": ("spool", "group"),
    "HPCMEM_EPILOG_BUDGET": ("epilog", "budget_seconds"),
    "HPCMEM_RULES_FILE": ("signatures", "rules_file"),
}
# HPCMEM_LAB_STORES="name=url,name2=url2" adds lab stores (a list does not fit one key).
LAB_STORES_ENV = "HPCMEM_LAB_STORES"


@dataclass(frozen=True)
class Dirs:
    """Per-user directories; ``HPCMEM_HOME`` relocates all of them (tests, demos)."""

    data: Path
    config: Path
    cache: Path

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> "Dirs":
        env = os.environ if environ is None else environ
        home = env.get("HPCMEM_HOME")
        if home:
            root = Path(home).expanduser()
            return cls(root / "data", root / "config", root / "cache")
        import platformdirs  # only needed when HPCMEM_HOME is not set

        return cls(
            Path(platformdirs.user_data_dir("hpcmem", appauthor=False)),
            Path(platformdirs.user_config_dir("hpcmem", appauthor=False)),
            Path(platformdirs.user_cache_dir("hpcmem", appauthor=False)),
        )


def builtin_defaults(dirs: Dirs, environ: dict[str, str] | None = None) -> dict[str, Any]:
    env = os.environ if environ is None else environ
    return {
        # inside a job Slurm names the cluster; elsewhere slurm.conf may (load_config)
        "cluster": {"name": env.get("SLURM_CLUSTER_NAME") or "local"},
        "stores": {"user": {"url": f"sqlite:///{dirs.data / 'user.db'}"}, "labs": {}},
        "model": {"path": "", "name": "all-MiniLM-L6-v2", "onnx_dir": "", "encoder": "auto"},
        "index": {"dir": str(dirs.cache / "index"), "flat_max": 20_000},
        "spool": {"dir": str(dirs.data / "spool")},
        "epilog": {"budget_seconds": 2.0},
        # a lab or cluster server that is down costs recall at most this, once (libpq's minimum is 2 s)
        # recall.match_probability is unset: the threshold fitted with the scorer applies
        "recall": {"drain_budget_seconds": 0.2, "connect_timeout_seconds": 2.0},
        "revalidate": {"unconfirmed_days": 180},
        # a site's own failure rules (categories.toml's layout), used besides the built-in ones
        "signatures": {"rules_file": ""},
    }


def merge(low: dict[str, Any], high: dict[str, Any]) -> dict[str, Any]:
    """Merge two config trees: tables recursively, scalars and arrays replace."""
    out = dict(low)
    for key, value in high.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


# Settings that must be probabilities, in (0, 1].
PROBABILITIES = {"recall.match_probability"}
# Keys that once existed, and what took their place.
REPLACED = {"recall.abstain_below": "recall.match_probability (a calibrated probability; unset = the fitted threshold)"}


def validate(tree: dict[str, Any], origin: str, schema: dict[str, Any] = SCHEMA, prefix: str = "") -> None:
    """Reject unknown keys and wrong types, naming the file and the key."""
    for key, value in tree.items():
        spec = schema.get(key, schema.get("*"))
        dotted = f"{prefix}{key}"
        if dotted in REPLACED:
            raise ConfigError(f"{origin}: '{dotted}' is no longer read; use {REPLACED[dotted]}")
        if spec is None:
            raise ConfigError(f"{origin}: unknown key '{dotted}'")
        if isinstance(spec, dict):
            if not isinstance(value, dict):
                raise ConfigError(f"{origin}: '{dotted}' must be a table")
            validate(value, origin, spec, dotted + ".")
        elif spec is list:  # of user names
            if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
                raise ConfigError(f"{origin}: '{dotted}' must be a list of user names")
        elif spec is float:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ConfigError(f"{origin}: '{dotted}' must be a number")
            if dotted in PROBABILITIES and not 0 < value <= 1:
                raise ConfigError(f"{origin}: '{dotted}' must be a probability above 0 and at most 1")
        elif not isinstance(value, spec) or isinstance(value, bool) and spec is not bool:
            raise ConfigError(f"{origin}: '{dotted}' must be of type {spec.__name__}")


def read_toml(path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as fh:
            tree = tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None
    except UnicodeDecodeError as exc:  # tomllib decodes strictly; TOML files are UTF-8
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start}): TOML files are UTF-8") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
    validate(tree, str(path))
    return tree


def _set(tree: dict[str, Any], keys: tuple[str, ...], value: Any) -> None:
    for key in keys[:-1]:
        tree = tree.setdefault(key, {})
    tree[keys[-1]] = value


def env_layer(environ: dict[str, str]) -> dict[str, Any]:
    tree: dict[str, Any] = {}
    for var, keys in ENV_KEYS.items():
        if environ.get(var):
            raw = environ[var]
            value: Any = raw
            if keys == ("epilog", "budget_seconds"):
                try:
                    value = float(raw)
                except ValueError:
                    raise ConfigError(f"{var}: expected a number of seconds, got '{raw}'") from None
            _set(tree, keys, value)
    labs = environ.get(LAB_STORES_ENV, "").strip()
    for item in filter(None, (part.strip() for part in labs.split(","))):
        name, sep, url = item.partition("=")
        if not sep or not name or not url:
            raise ConfigError(f"{LAB_STORES_ENV}: expected 'name=url[,name=url]', got '{item}'")
        _set(tree, ("stores", "labs", name.strip(), "url"), url.strip())
    return tree


def slurm_cluster_name(environ: dict[str, str], *, local_files: bool = True) -> tuple[str, str] | None:
    """(ClusterName, file) from Slurm's configuration, or None.

    The file is ``SLURM_CONF`` when set, else the standard places (only with
    ``local_files``: tests switch local configuration off). Keys are case-insensitive in
    slurm.conf; ``Include`` lines are not followed (ClusterName lives in the main file).
    """
    paths = [environ["SLURM_CONF"]] if environ.get("SLURM_CONF") else (list(SLURM_CONF_PLACES) if local_files else [])
    for path in paths:
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                for line in fh:
                    key, sep, value = line.split("#", 1)[0].strip().partition("=")
                    if sep and key.strip().lower() == "clustername" and value.strip():
                        return value.strip().split()[0], path
        except OSError:
            continue
    return None


@dataclass
class Config:
    """The effective configuration plus where each leaf value came from."""

    values: dict[str, Any]
    origins: dict[str, str] = field(default_factory=dict)
    dirs: Dirs | None = None
    warnings: list[str] = field(default_factory=list)  # e.g. a cluster name Slurm disagrees with

    def get(self, dotted: str, default: Any = None) -> Any:
        node: Any = self.values
        for key in dotted.split("."):
            if not isinstance(node, dict) or key not in node:
                return default
            node = node[key]
        return node

    def flat(self) -> list[tuple[str, Any, str]]:
        """(key, value, origin) for every leaf, sorted by key."""
        rows: list[tuple[str, Any, str]] = []

        def walk(node: dict[str, Any], prefix: str) -> None:
            for key, value in sorted(node.items()):
                dotted = f"{prefix}{key}"
                if isinstance(value, dict) and value:
                    walk(value, dotted + ".")
                elif not isinstance(value, dict):
                    rows.append((dotted, value, self.origins.get(dotted, "builtin")))

        walk(self.values, "")
        return rows


def _record_origins(tree: dict[str, Any], origin: str, origins: dict[str, str], prefix: str = "") -> None:
    for key, value in tree.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict):
            _record_origins(value, origin, origins, dotted + ".")
        else:
            origins[dotted] = origin


def load_config(
    cli_overrides: dict[str, Any] | None = None,
    config_file: str | None = None,
    environ: dict[str, str] | None = None,
) -> Config:
    """Build the effective configuration from every scope."""
    env = dict(os.environ if environ is None else environ)
    dirs = Dirs.from_env(env)
    layers: list[tuple[str, dict[str, Any]]] = [("builtin", builtin_defaults(dirs, env))]

    if env.get("HPCMEM_DISABLE_LOCAL_CONFIG") not in ("1", "true", "yes"):
        site = Path(env.get("HPCMEM_SITE_CONFIG", SITE_CONFIG))
        if site.is_file():
            layers.append((f"site:{site}", read_toml(site)))
        user = dirs.config / "config.toml"
        if user.is_file():
            layers.append((f"user:{user}", read_toml(user)))
    explicit = config_file or env.get("HPCMEM_CONFIG")
    if explicit:
        path = Path(explicit).expanduser()
        if not path.is_file():
            raise ConfigError(f"config file {path} does not exist (from --config or HPCMEM_CONFIG)")
        layers.append((f"file:{path}", read_toml(path)))
    layers.append(("env", env_layer(env)))
    if cli_overrides:
        layers.append(("cli", cli_overrides))

    values: dict[str, Any] = {}
    origins: dict[str, str] = {}
    for origin, tree in layers:
        values = merge(values, tree)
        _record_origins(tree, origin, origins)
    config = Config(values=values, origins=origins, dirs=dirs)
    _cluster_name_from_slurm(config, env)
    return config


def _cluster_name_from_slurm(config: Config, env: dict[str, str]) -> None:
    """Lessons, events and sacct data are keyed by Slurm's ClusterName: use it when nothing
    else names the cluster, and say so when a configured name disagrees with it."""
    local = env.get("HPCMEM_DISABLE_LOCAL_CONFIG") not in ("1", "true", "yes")
    found = slurm_cluster_name(env, local_files=local)
    if found is None:
        return
    name, path = found
    origin = config.origins.get("cluster.name", "builtin")
    if origin == "builtin" and not env.get("SLURM_CLUSTER_NAME"):
        config.values["cluster"]["name"] = name
        config.origins["cluster.name"] = f"slurm:{path}"
    elif config.get("cluster.name") != name:
        config.warnings.append(f"cluster.name is '{config.get('cluster.name')}' ({origin}) but Slurm's "
                               f"ClusterName is '{name}' ({path}): lessons and job records will not line up")
