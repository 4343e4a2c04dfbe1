"""A PEP 517 build backend for the dcp package, standard library only (pip needs no index).

The wheel holds the dcp package and the libdcp.so of the repository it is built from
(build/lib/, made with `make lib` first when missing; $DCP_LIB names another library to
bundle). The version is libdcp's (include/dcp.h). The wheel is tagged for this platform
because it carries a shared library.
"""
import base64
import hashlib
import io
import os
import re
import subprocess
import sysconfig
import tarfile
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
NAME = "dcp"


def _version():
    with open(os.path.join(REPO, "include", "dcp.h")) as f:
        text = f.read()
    parts = [re.search(r"#define DCP_VERSION_%s (\d+)" % p, text).group(1)
             for p in ("MAJOR", "MINOR", "PATCH")]
    return ".".join(parts)


def _library():
    """The libdcp.so to bundle: $DCP_LIB, else the repository's (built here if missing)."""
    path = os.environ.get("DCP_LIB")
    if path:
        if not os.path.exists(path):
            raise RuntimeError("dcp_build: $DCP_LIB = %s does not exist" % path)
        return os.path.realpath(path)
    path = os.path.join(REPO, "build", "lib", "libdcp.so")
    if not os.path.exists(path):
        print("dcp_build: %s is missing: make -C %s lib" % (path, REPO))
        subprocess.run(["make", "-C", REPO, "lib"], check=True)
    return os.path.realpath(path)


def _tag():
    plat = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    return "py3-none-" + plat


def _metadata(version):
    return ("Metadata-Version: 2.1\nName: %s\nVersion: %s\n"
            "Summary: Dynamic context-parallel attention (libdcp) from Python and PyTorch\n"
            "Requires-Python: >=3.8\n" % (NAME, version))


def _files(version):
    """(archive name, bytes) of everything in the wheel but RECORD."""
    out = []
    pkg = os.path.join(HERE, NAME)
    for fn in sorted(os.listdir(pkg)):
        if fn.endswith(".py"):
            with open(os.path.join(pkg, fn), "rb") as f:
                out.append(("%s/%s" % (NAME, fn), f.read()))
    with open(_library(), "rb") as f:
        out.append(("%s/lib/libdcp.so" % NAME, f.read()))
    info = "%s-%s.dist-info" % (NAME, version)
    wheel = ("Wheel-Version: 1.0\nGenerator: dcp_build\nRoot-Is-Purelib: false\nTag: %s\n"
             % _tag())
    out.append(("%s/METADATA" % info, _metadata(version).encode()))
    out.append(("%s/WHEEL" % info, wheel.encode()))
    return out, info


def _record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "%s,sha256=%s,%d" % (name, digest, len(data))


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    version = _version()
    files, info = _files(version)
    name = "%s-%s-%s.whl" % (NAME, version, _tag())
    record = [_record_line(n, d) for n, d in files] + ["%s/RECORD,," % info]
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w",
                         zipfile.ZIP_DEFLATED) as z:
        for n, d in files:
            zi = zipfile.ZipInfo(n, date_time=(2020, 1, 1, 0, 0, 0))
            zi.external_attr = (0o755 if n.endswith(".so") else 0o644) << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(zi, d)
        z.writestr("%s/RECORD" % info, "\n".join(record) + "\n")
    return name


def build_sdist(sdist_directory, config_settings=None):
    """The Python sources alone (the library comes from the repository at wheel time)."""
    version = _version()
    base = "%s-%s" % (NAME, version)
    name = base + ".tar.gz"
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz") as t:
        for rel in ["pyproject.toml", "dcp_build.py"] + [
                os.path.join(NAME, f) for f in sorted(os.listdir(os.path.join(HERE, NAME)))
                if f.endswith(".py")]:
            t.add(os.path.join(HERE, rel), arcname=os.path.join(base, rel))
        pkg_info = _metadata(version).encode()
        ti = tarfile.TarInfo(os.path.join(base, "PKG-INFO"))
        ti.size = len(pkg_info)
        t.addfile(ti, io.BytesIO(pkg_info))
    return name
