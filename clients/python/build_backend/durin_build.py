"""An in-tree PEP 517 build backend for the `durin` client, standard library
only, so `pip install ./clients/python` works offline: the build needs
nothing from a package index (pyproject.toml: `requires = []`).

It builds a pure-Python wheel (src/durin/** plus .dist-info with METADATA,
WHEEL, RECORD) and an sdist (the files of this directory that the wheel is
built from). The name, version and Python requirement come from the
[project] table of pyproject.toml, read with a minimal parser of its
`key = "string"` lines (tomllib is not there before Python 3.11).
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import re
import tarfile
import time
import zipfile
from typing import Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "durin"
SDIST_FILES = ["pyproject.toml", "README.md"]
SDIST_DIRS = ["build_backend", "src"]


def _project() -> Dict[str, str]:
    """The string values of pyproject.toml's [project] table."""
    values: Dict[str, str] = {}
    section = None
    with open(os.path.join(HERE, "pyproject.toml"), encoding="utf-8") as file:
        for line in file:
            line = line.strip()
            header = re.match(r"^\[([^\]]+)\]$", line)
            if header:
                section = header.group(1).strip()
                continue
            pair = re.match(r'^([A-Za-z0-9_-]+)\s*=\s*"([^"]*)"\s*(#.*)?$', line)
            if section == "project" and pair:
                values[pair.group(1)] = pair.group(2)
    for required in ("name", "version"):
        if required not in values:
            raise RuntimeError("pyproject.toml [project] has no %s" % required)
    return values


def _dist_name(project: Dict[str, str]) -> str:
    return re.sub(r"[-_.]+", "_", project["name"]).lower()


def _metadata(project: Dict[str, str]) -> str:
    lines = [
        "Metadata-Version: 2.1",
        "Name: " + project["name"],
        "Version: " + project["version"],
    ]
    if "description" in project:
        lines.append("Summary: " + project["description"])
    if "requires-python" in project:
        lines.append("Requires-Python: " + project["requires-python"])
    lines.append("Description-Content-Type: text/markdown")
    readme = os.path.join(HERE, "README.md")
    body = ""
    if os.path.exists(readme):
        with open(readme, encoding="utf-8") as file:
            body = file.read()
    return "\n".join(lines) + "\n\n" + body


def _package_files() -> List[Tuple[str, str]]:
    """(path on disk, path in the wheel) of every file of the package."""
    root = os.path.join(HERE, "src")
    found = []
    for directory, subdirectories, files in os.walk(os.path.join(root, PACKAGE)):
        subdirectories[:] = sorted(d for d in subdirectories if d != "__pycache__")
        for name in sorted(files):
            if name.endswith((".pyc", ".pyo")):
                continue
            path = os.path.join(directory, name)
            found.append((path, os.path.relpath(path, root).replace(os.sep, "/")))
    return found


def _record_line(arcname: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return "%s,sha256=%s,%d" % (arcname, digest.decode("ascii"), len(data))


def _write_wheel(directory: str, extra: Optional[List[Tuple[str, bytes]]],
                 with_package: bool) -> str:
    project = _project()
    name = _dist_name(project)
    version = project["version"]
    dist_info = "%s-%s.dist-info" % (name, version)
    filename = "%s-%s-py3-none-any.whl" % (name, version)
    entries: List[Tuple[str, bytes]] = []
    if with_package:
        for path, arcname in _package_files():
            with open(path, "rb") as file:
                entries.append((arcname, file.read()))
    entries.extend(extra or [])
    entries.append((dist_info + "/METADATA", _metadata(project).encode("utf-8")))
    entries.append((dist_info + "/WHEEL", (
        "Wheel-Version: 1.0\nGenerator: durin_build\nRoot-Is-Purelib: true\n"
        "Tag: py3-none-any\n").encode("ascii")))
    entries.append((dist_info + "/top_level.txt", (PACKAGE + "\n").encode("ascii")))
    record = [_record_line(arcname, data) for arcname, data in entries]
    record.append(dist_info + "/RECORD,,")
    entries.append((dist_info + "/RECORD", ("\n".join(record) + "\n").encode("utf-8")))
    os.makedirs(directory, exist_ok=True)
    stamp = time.gmtime(int(os.environ.get("SOURCE_DATE_EPOCH", "315532800")))[:6]
    with zipfile.ZipFile(os.path.join(directory, filename), "w",
                         compression=zipfile.ZIP_DEFLATED) as wheel:
        for arcname, data in entries:
            info = zipfile.ZipInfo(arcname, date_time=stamp)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            wheel.writestr(info, data)
    return filename


# ---- PEP 517

def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    project = _project()
    dist_info = "%s-%s.dist-info" % (_dist_name(project), project["version"])
    target = os.path.join(metadata_directory, dist_info)
    os.makedirs(target, exist_ok=True)
    with open(os.path.join(target, "METADATA"), "w", encoding="utf-8") as file:
        file.write(_metadata(project))
    return dist_info


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return _write_wheel(wheel_directory, None, with_package=True)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    """PEP 660: a wheel whose .pth file puts this checkout's src/ on sys.path."""
    pth = (os.path.join(HERE, "src") + "\n").encode("utf-8")
    return _write_wheel(wheel_directory, [("_durin_editable.pth", pth)],
                        with_package=False)


def build_sdist(sdist_directory, config_settings=None):
    project = _project()
    base = "%s-%s" % (_dist_name(project), project["version"])
    filename = base + ".tar.gz"
    os.makedirs(sdist_directory, exist_ok=True)
    paths = [name for name in SDIST_FILES if os.path.exists(os.path.join(HERE, name))]
    for top in SDIST_DIRS:
        for directory, subdirectories, files in os.walk(os.path.join(HERE, top)):
            subdirectories[:] = sorted(d for d in subdirectories if d != "__pycache__")
            for name in sorted(files):
                if not name.endswith((".pyc", ".pyo")):
                    paths.append(os.path.relpath(os.path.join(directory, name), HERE))
    with tarfile.open(os.path.join(sdist_directory, filename), "w:gz",
                      format=tarfile.PAX_FORMAT) as archive:
        for path in paths:
            archive.add(os.path.join(HERE, path), arcname=base + "/" + path.replace(os.sep, "/"),
                        recursive=False)
        info = _metadata(project).encode("utf-8")
        entry = tarfile.TarInfo(base + "/PKG-INFO")
        entry.size = len(info)
        entry.mtime = int(time.time())
        entry.mode = 0o644
        archive.addfile(entry, io.BytesIO(info))
    return filename
