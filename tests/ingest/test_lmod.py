"""Lmod listings -> ModuleSnapshot: every format, defaults, version order, sniffing."""

from __future__ import annotations

import json
import shutil
import stat
from pathlib import Path

import pytest

from hpcmem.ingest.lmod import (
    ModuleInfo,
    lmod_version_key,
    live_modules,
    parse_avail,
    parse_software_page_json,
    parse_spider_json,
    parse_terse_avail,
    read_modules,
    sort_versions,
)
from hpcmem.kb.errors import InputError

CAT = shutil.which("cat")  # resolved before the tests empty PATH
ENV = Path(__file__).resolve().parents[2] / "data" / "samples" / "env"
REAL = ENV / "real-slurm" / "lmod"
FORMATS = ENV / "formats" / "lmod"


def read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def summary(snapshot) -> dict[str, tuple]:
    return {name: (m.versions, m.default, m.marked_default) for name, m in snapshot.items()}


# ---------------------------------------------------------------------------
# Version order


@pytest.mark.parametrize(
    "lower, higher",
    [
        ("9.3.0", "10.1.0"),  # gcc/9.3.0 < gcc/10.1.0
        ("11.8", "12.4"),  # cuda/11.8 < cuda/12.4
        ("5.9", "5.10"),
        ("1.4-dbg", "1.4"),  # a word after '-' is a pre-release for Lmod
        ("2.0rc1", "2.0"),
        ("2.0", "2.0-1"),  # '-N' is a patch level
        ("2.0-1", "2.0.1"),
        ("2.0dev", "2.0a1"),
        ("local", "1.1"),  # words sort below numbers
        (".3.13.0a4", "3.11.7"),  # a hidden (leading dot) version counts from 0
        ("8.9.2-cuda11", "8.9.7-cuda12"),
    ],
)
def test_lmod_version_order(lower, higher):
    assert lmod_version_key(lower) < lmod_version_key(higher)
    assert sort_versions([higher, lower]) == (lower, higher)


def test_trailing_zeros_do_not_change_the_key():
    assert lmod_version_key("2.4") == lmod_version_key("2.4.0") == "000000002.000000004.*zfinal"
    assert sort_versions(["2.4.0", "2.4", "2.4"]) == ("2.4", "2.4.0")  # ties: by text


@pytest.mark.parametrize(
    "version, pv",
    [  # pV values printed by Lmod itself (its regression-test dbT output)
        ("1.0", "000000001.*zfinal"),
        ("11.0", "000000011.*zfinal"),
        ("2.6.12", "000000002.000000006.000000012.*zfinal"),
        (".2.0", "000000000.000000002.*zfinal"),
        (".pkginfo", "*pkginfo.*zfinal"),
    ],
)
def test_version_key_is_lmods_pv(version, pv):
    assert lmod_version_key(version) == pv


def test_version_key_matches_every_pv_of_the_real_spider_output():
    checked = 0
    for name in ("spider-json.json", "spider-json.v2.json"):
        for records in json.loads(read(REAL / name)).values():
            for record in records.values():
                assert lmod_version_key(record["Version"]) == record["pV"]
                checked += 1
    for name in ("spider-jsonSoftwarePage.json", "spider-jsonSoftwarePage.v2.json"):
        for package in json.loads(read(REAL / name)):
            for version in package["versions"]:
                assert lmod_version_key(version["versionName"]) == version["canonicalVersionString"]
                checked += 1
    assert checked == 16


def test_natural_sort_of_a_whole_list():
    assert sort_versions(["10.1.0", "9.3.0", "12.2.0", "9.3.0", "11.4.0"]) == (
        "9.3.0",
        "10.1.0",
        "11.4.0",
        "12.2.0",
    )


# ---------------------------------------------------------------------------
# Real Lmod 8.6 output, trees v1 and v2

V1 = {
    "cuda": (("11.8", "12.4"), "12.4", False),
    "gcc": (("12.2.0", "13.1.0"), "13.1.0", False),
}
V2_SPIDER = {
    "cuda": (("12.4",), "12.4", False),
    "gcc": (("12.2.0", "13.1.0", "14.1.0"), "12.2.0", True),
}


@pytest.mark.parametrize(
    "name, parser",
    [
        ("module-t-avail.txt", parse_terse_avail),
        ("module-avail.txt", parse_avail),
        ("spider-json.json", parse_spider_json),
        ("spider-jsonSoftwarePage.json", parse_software_page_json),
    ],
)
def test_real_tree_v1_every_format(name, parser):
    snapshot = parser(read(REAL / name))
    assert summary(snapshot) == V1
    assert snapshot["gcc"] == ModuleInfo("gcc", ("12.2.0", "13.1.0"), "13.1.0", False)


@pytest.mark.parametrize(
    "name, parser",
    [
        ("spider-json.v2.json", parse_spider_json),
        ("spider-jsonSoftwarePage.v2.json", parse_software_page_json),
    ],
)
def test_real_tree_v2_spider_sees_the_modulerc_default(name, parser):
    assert summary(parser(read(REAL / name))) == V2_SPIDER


def test_real_tree_v2_terse_avail_cannot_see_the_marked_default():
    # Lmod 8.6 prints no marker in `-t avail`: the listing only allows the guess
    # "highest version", which is wrong here. live_modules prefers spider-json for this.
    snapshot = parse_terse_avail(read(REAL / "module-t-avail.v2.txt"))
    assert snapshot["gcc"].versions == ("12.2.0", "13.1.0", "14.1.0")
    assert (snapshot["gcc"].default, snapshot["gcc"].marked_default) == ("14.1.0", False)
    assert snapshot["cuda"].versions == ("12.4",)


def test_real_avail_shows_D_on_implicit_defaults_so_they_stay_unmarked():
    text = read(REAL / "module-avail.txt")
    assert "gcc/13.1.0 (D)" in text  # tree v1 has no .modulerc at all
    assert parse_avail(text)["gcc"].marked_default is False


@pytest.mark.parametrize(
    "name",
    ["module-t-avail.txt", "module-avail.txt", "spider-json.json", "spider-jsonSoftwarePage.json"],
)
def test_real_debian_lmod_word_versions(name):
    # Debian's lmod 8.6.19 package tree: versions are words. Lmod itself prints
    # `Core/settarg (D)`, which only the word order '*lmod' < '*settarg' explains.
    snapshot = read_modules(read(ENV / "real-debian-lmod" / name))
    assert summary(snapshot) == {"Core": (("lmod", "settarg"), "settarg", False)}


# ---------------------------------------------------------------------------
# The fictional cluster: every format of one month says the same


@pytest.mark.parametrize("month", ["2026-10", "2026-11"])
def test_cluster_formats_agree_on_versions(month):
    directory = ENV / f"cluster-{month}"
    spider = parse_spider_json(read(directory / "spider-json.json"))
    terse = parse_terse_avail(read(directory / "module-t-avail.txt"))
    avail = parse_avail(read(directory / "module-avail.txt"))
    assert len(spider) == 12
    for name in spider:
        assert terse[name].versions == avail[name].versions == spider[name].versions
        assert avail[name].default == spider[name].default


def test_cluster_october_values():
    snapshot = parse_spider_json(read(ENV / "cluster-2026-10" / "spider-json.json"))
    assert snapshot["cuda"] == ModuleInfo("cuda", ("11.8", "12.1", "12.4"), "12.4", False)
    assert snapshot["gcc"] == ModuleInfo("gcc", ("11.4.0", "12.2.0", "13.2.0"), "12.2.0", True)
    assert snapshot["openmpi"] == ModuleInfo("openmpi", ("4.1.5", "4.1.6"), "4.1.6", False)
    assert snapshot["cudnn"].versions == ("8.9.2-cuda11", "8.9.7-cuda12")
    assert snapshot["miniforge3"].versions == ("23.11.0",)
    assert "12.6-beta" not in str(snapshot["cuda"].versions)  # hidden


def test_cluster_hidden_module_only_with_include_hidden():
    snapshot = parse_spider_json(
        read(ENV / "cluster-2026-10" / "spider-json.json"), include_hidden=True
    )
    assert snapshot["cuda"].versions == (".12.6-beta", "11.8", "12.1", "12.4")
    assert snapshot["cuda"].default == "12.4"


def test_cluster_avail_marks_default_only_below_the_highest_version():
    october = parse_avail(read(ENV / "cluster-2026-10" / "module-avail.txt"))
    november = parse_avail(read(ENV / "cluster-2026-11" / "module-avail.txt"))
    # October: (D) on gcc/12.2.0 while 13.2.0 exists: must be marked.
    assert (october["gcc"].default, october["gcc"].marked_default) == ("12.2.0", True)
    # November marks 13.2.0, the highest: `module avail` cannot tell it from implicit.
    assert (november["gcc"].default, november["gcc"].marked_default) == ("13.2.0", False)
    assert november["openmpi"] == ModuleInfo("openmpi", ("4.1.5", "4.1.6", "5.0.3"), "5.0.3", False)
    assert "cuda/11.8" not in read(ENV / "cluster-2026-11" / "module-avail.txt")


# ---------------------------------------------------------------------------
# Own format samples


def test_terse_with_hidden_extensions_and_nvv_names():
    text = read(FORMATS / "terse-avail-show-hidden-extensions.txt")
    assert summary(parse_terse_avail(text)) == {
        "StdEnv": ((), None, False),
        "bio/samtools": (("1.17", "1.19.2"), "1.19.2", False),
        "fftw": (("3.3.10",), "3.3.10", False),
        "gcc": (("9.5.0", "10.5.0", "12.3.0", "13.2.0"), "13.2.0", False),
        "openmpi": (("4.1.6",), "4.1.6", False),
        "py-numpy-bundle": (("2024a",), "2024a", False),
        "python": (("3.11.7",), "3.11.7", False),
    }
    hidden = parse_terse_avail(text, include_hidden=True)
    assert hidden[".sys/lustre"].versions == ("2.15",)
    assert hidden["python"].versions == (".3.13.0a4", "3.11.7")
    assert "numpy" not in hidden  # '#    numpy/1.26.4' is an extension, not a module


def test_avail_with_aliases_extensions_and_loaded_markers():
    snapshot = parse_avail(read(FORMATS / "avail-aliases-extensions-loaded.txt"))
    assert sorted(snapshot) == [
        "StdEnv",
        "bio/samtools",
        "fftw",
        "gcc",
        "openmpi",
        "py-numpy-bundle",
        "python",
    ]  # no alias (ml-stack, old-gcc), no extension (numpy, scipy)
    assert snapshot["gcc"] == ModuleInfo(
        "gcc", ("9.5.0", "10.5.0", "12.3.0", "13.2.0"), "12.3.0", True
    )
    assert snapshot["bio/samtools"] == ModuleInfo(
        "bio/samtools", ("1.17", "1.19.2"), "1.19.2", False
    )
    assert snapshot["StdEnv"] == ModuleInfo("StdEnv", (), None, False)


def test_spider_json_hierarchy_merges_parents_and_reads_marks():
    text = read(FORMATS / "spider-json-hierarchy.json")
    assert summary(parse_spider_json(text)) == {
        "StdEnv": ((), None, False),
        "gcc": (("12.3.0", "13.2.0"), "12.3.0", True),
        "openmpi": (("4.1.6", "5.0.3"), "5.0.3", False),  # 4.1.6 under two gcc: once
        "python": (("3.11.7",), "3.11.7", False),
    }
    assert parse_spider_json(text, include_hidden=True)["python"].versions == (
        ".3.13.0a4",
        "3.11.7",
    )


def test_software_page_marked_hidden_and_implicit():
    text = read(FORMATS / "software-page.json")
    assert summary(parse_software_page_json(text)) == {
        "fftw": (("3.3.10",), "3.3.10", False),
        "julia": (("1.9.4", "1.10.2"), "1.9.4", True),
        "openmpi": (("4.1.6", "5.0.3"), "5.0.3", False),
    }


# ---------------------------------------------------------------------------
# Inline text modelled on Lmod's own regression-test output

PLAIN_HEADER_AVAIL = """\
/opt/mf/Compiler/gnu/12
   fftw/3.3.9         fftw/3.3.10 (D)    hdf5/1.14.3
   fftw/3.3.9-omp     hdf5/1.12.2
/opt/mf/Core
   Base                 local/1.1          local/1.4    tools/local
   git/2.39.1           local/1.3   (D)    noweb/2.11b
   git/2.43.0    (L)    local/local        ucc/14.0.2
  Where:
   D:  Default Module
   L:  Module is loaded
If the avail list is too long consider trying:
"module --default avail" or "ml -d av" to just list the default modules.
"""


def test_avail_with_plain_path_headers():
    snapshot = parse_avail(PLAIN_HEADER_AVAIL)
    assert snapshot["local"] == ModuleInfo("local", ("local", "1.1", "1.3", "1.4"), "1.3", True)
    assert snapshot["fftw"] == ModuleInfo("fftw", ("3.3.9-omp", "3.3.9", "3.3.10"), "3.3.10", False)
    assert snapshot["git"].versions == ("2.39.1", "2.43.0")
    assert snapshot["Base"].versions == ()
    assert snapshot["tools"].versions == ("local",)
    assert "D:" not in snapshot and "D" not in snapshot  # legend lines are not modules


def test_avail_global_aliases_section_is_skipped():
    text = "Global Aliases\n   conda2 -> (N/A)    py -> python/3.11\n/opt/mf/Core\n   python/3.11\n"
    assert summary(parse_avail(text)) == {"python": (("3.11",), "3.11", False)}


def test_avail_hidden_marker():
    text = "/opt/mf/Core\n   .base/bar/1.4 (H)    bar/1.4-dbg    bar/1.4 (D)    hidden/.1.0 (H)\n"
    assert sorted(parse_avail(text)) == ["bar"]
    assert sorted(parse_avail(text, include_hidden=True)) == [".base/bar", "bar", "hidden"]


def test_terse_markers_blank_lines_and_environment_modules_style():
    text = """\
/opt/mf/Core:

gcc/
gcc/9.3.0(default)
gcc/10.1.0
intel/
intel/19.1(default:loaded)
intel/2021.4 (L)
cuda/11.8 (D)
cuda/12.4
python/3.11 <H>
"""
    snapshot = parse_terse_avail(text)
    assert snapshot["gcc"] == ModuleInfo("gcc", ("9.3.0", "10.1.0"), "9.3.0", True)
    assert snapshot["intel"] == ModuleInfo("intel", ("19.1", "2021.4"), "19.1", True)
    assert snapshot["cuda"] == ModuleInfo("cuda", ("11.8", "12.4"), "11.8", True)
    assert "python" not in snapshot


def test_terse_skips_lmod_warnings_and_notices():
    text = """\
Lmod Warning: Unable to load module because of error when evaluating modulefile: <unknown>
 /opt/mf/Core/smake/.modulerc.lua: Unreadable or Empty or non-existent file
     Please check the modulefile and especially if there is a line number specified in the above message
The following have been reloaded with a version change:
  1) intel/15.0.2 => intel/15.0.1
 /opt/mf/Core:
emacs/
emacs/28.2
smake/
smake/8.16.0
"""
    assert summary(read_modules(text)) == {
        "emacs": (("28.2",), "28.2", False),
        "smake": (("8.16.0",), "8.16.0", False),
    }


def test_lmod_error_is_an_input_error():
    text = (
        "Lmod has detected the following error: module avail is not possible. "
        "MODULEPATH is not set or not set with valid paths.\n"
    )
    with pytest.raises(InputError, match="MODULEPATH is not set"):
        read_modules(text)
    with pytest.raises(InputError, match="MODULEPATH is not set"):
        parse_terse_avail(text)


# ---------------------------------------------------------------------------
# Sniffing


@pytest.mark.parametrize(
    "path, source",
    [
        (REAL / "module-t-avail.txt", "terse-avail"),
        (REAL / "module-t-avail.v2.txt", "terse-avail"),
        (REAL / "module-avail.txt", "avail"),
        (REAL / "spider-json.json", "spider-json"),
        (REAL / "spider-jsonSoftwarePage.v2.json", "software-page"),
        (ENV / "cluster-2026-11" / "module-avail.txt", "avail"),
        (ENV / "cluster-2026-11" / "module-t-avail.txt", "terse-avail"),
        (FORMATS / "terse-avail-show-hidden-extensions.txt", "terse-avail"),
        (FORMATS / "avail-aliases-extensions-loaded.txt", "avail"),
        (FORMATS / "spider-json-hierarchy.json", "spider-json"),
        (FORMATS / "software-page.json", "software-page"),
    ],
)
def test_read_modules_sniffs_the_format(path, source):
    text = read(path)
    snapshot = read_modules(text)
    assert snapshot.source == source
    parser = {
        "terse-avail": parse_terse_avail,
        "avail": parse_avail,
        "spider-json": parse_spider_json,
        "software-page": parse_software_page_json,
    }[source]
    assert dict(snapshot) == dict(parser(text))


def test_plain_path_header_avail_is_sniffed_as_avail():
    assert read_modules(PLAIN_HEADER_AVAIL).source == "avail"


def test_terse_without_directory_lines_is_sniffed_as_terse():
    assert read_modules("git/1.6.3.1\ngit/1.7.4\n").source == "terse-avail"


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "empty module listing"),
        ("   \n\n", "empty module listing"),
        ("JobID|State\n1|COMPLETED has spaces\n", "not a line of `module -t avail`"),
        ("{not json", "not spider-json JSON"),
        ('["gcc"]', "without a package name"),
        ('{"gcc": {"/x/gcc/1.lua": {"Version": "1"}}}', "has no fullName"),
        ("No module(s) or extension(s) found!\n", "not a line"),
        ("/opt/mf/Core:\n", "no modules in the terse-avail listing"),
    ],
)
def test_read_modules_rejects(text, message):
    with pytest.raises(InputError, match=message):
        read_modules(text)


# ---------------------------------------------------------------------------
# live_modules runs the real commands; these stand-ins play Lmod's part


def make_script(directory: Path, name: str, body: str) -> Path:
    path = directory / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture
def no_lmod(monkeypatch, tmp_path):
    for var in ("LMOD_DIR", "LMOD_CMD", "MODULEPATH"):
        monkeypatch.delenv(var, raising=False)
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    return empty


def test_live_modules_prefers_spider_json(no_lmod, monkeypatch, tmp_path):
    lmod_dir = tmp_path / "libexec"
    lmod_dir.mkdir()
    sample = REAL / "spider-json.v2.json"
    args_file = tmp_path / "args"
    make_script(lmod_dir, "spider", f'echo "$@" > "{args_file}"\n{CAT} "{sample}"\n')
    monkeypatch.setenv("LMOD_DIR", str(lmod_dir))
    monkeypatch.setenv("MODULEPATH", "/opt/hpcmem-test/modules-v2")
    snapshot = live_modules()
    assert snapshot.source == "spider-json"
    assert summary(snapshot) == V2_SPIDER
    assert args_file.read_text().split() == ["-o", "spider-json", "/opt/hpcmem-test/modules-v2"]


def test_live_modules_lmod_cmd_reads_stderr(no_lmod, monkeypatch, tmp_path):
    sample = REAL / "module-t-avail.txt"
    cmd = make_script(tmp_path, "lmod", f'echo "export LMOD_SHELL=1;"\n{CAT} "{sample}" >&2\n')
    monkeypatch.setenv("LMOD_CMD", str(cmd))
    snapshot = live_modules()
    assert snapshot.source == "terse-avail"
    assert summary(snapshot) == V1


def test_live_modules_failure_keeps_lmods_message(no_lmod, monkeypatch, tmp_path):
    lmod_dir = tmp_path / "libexec"
    lmod_dir.mkdir()
    make_script(lmod_dir, "spider", 'echo "spider: cannot read /nope" >&2\nexit 1\n')
    monkeypatch.setenv("LMOD_DIR", str(lmod_dir))
    monkeypatch.setenv("MODULEPATH", "/nope")
    with pytest.raises(InputError, match="cannot read /nope"):
        live_modules()


def test_live_modules_without_lmod_or_bash(no_lmod):
    with pytest.raises(InputError, match="Lmod not found"):
        live_modules()


def test_live_modules_login_shell_without_module(no_lmod):
    make_script(no_lmod, "bash", 'echo "bash: line 1: module: command not found" >&2\nexit 127\n')
    with pytest.raises(InputError, match="no `module` command"):
        live_modules()


def test_live_modules_login_shell_with_module(no_lmod):
    sample = REAL / "module-t-avail.v2.txt"
    make_script(no_lmod, "bash", f'[ "$1" = "-lc" ] || exit 2\n{CAT} "{sample}" >&2\n')
    assert live_modules()["gcc"].versions == ("12.2.0", "13.1.0", "14.1.0")


def test_module_info_dict_round_trip():
    info = ModuleInfo("gcc", ("12.2.0", "13.1.0"), "12.2.0", True)
    assert ModuleInfo.from_dict(json.loads(json.dumps(info.to_dict()))) == info
    with pytest.raises(InputError):
        ModuleInfo.from_dict({"name": "gcc"})
