"""Where made checkpoints live, and how an entry is trusted: by verifying it.

    $MOE_HARNESS_CACHE_DIR (else ~/.cache/moe-harness)/checkpoints/<producer>-<versions>/<scheme>/
      <model hash>                     symlink -> the current version (replaced atomically)
      <model hash>@<digest>-<nonce>/   one version: the producer's files, made.json, make.log,
                                       manifest.json (size and sha256 of every other file)
      <model hash>.lock                one make of this entry at a time (flock, exclusive)

A version is built in a temporary folder, its manifest written last, renamed
into place, and only then does the link move to it: nothing half-made is ever
reachable. `<digest>` is the first 16 hex digits of the manifest's own sha256,
so a damaged manifest is caught too. A reader verifies a version before use
(every file of the manifest present with its size and sha256, no other file)
and holds a shared flock on its `.readers` file for the rest of its process;
a make replacing the entry deletes an old version only when it gets that lock
exclusively, so a version being read is never deleted (a later make removes it).

Verification cost: sizes, mtimes and inodes are read on every use; every
file is hashed in full the first time a process uses a version and again
whenever one of those changed (the tiny model's checkpoints are 0.4-0.5 MB:
about 1 ms of hashing each; docs/checkpoints.md has the measurement).
An entry from before manifests (a folder, not a link) is never trusted: it
is made again.
"""
from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import secrets
import shutil
from pathlib import Path

MARKER = "made.json"
MANIFEST = "manifest.json"
READERS = ".readers"
LOG = "make.log"
_NOT_IN_MANIFEST = (MANIFEST, READERS)
_CHUNK = 1 << 20

_held: dict = {}        # version folder -> fd of its shared reader lock, held for the process' lifetime
_verified: dict = {}    # version folder -> stat signature of its files when this process hashed them


class CacheDamaged(Exception):
    """An entry that fails verification; the message names the file and what differs."""


def cache_root() -> Path:
    env = os.environ.get("MOE_HARNESS_CACHE_DIR")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "moe-harness"


def checkpoint_dir(producer: str, version: str, scheme: str, model_hash: str) -> Path:
    """The entry's link (not a version folder: resolve it with `current`)."""
    return cache_root() / "checkpoints" / f"{producer}-{version}" / scheme / model_hash


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _files(folder: Path) -> list:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*")
                  if (p.is_file() or p.is_symlink()) and p.relative_to(folder).as_posix() not in _NOT_IN_MANIFEST)


def write_manifest(folder: Path) -> str:
    """Record size and sha256 of every file of `folder`; returns the manifest's digest."""
    files = {}
    for rel in _files(folder):
        p = folder / rel
        if p.is_symlink() or not p.is_file():
            raise CacheDamaged(f"{p}: a regular file in a cache entry, got a link or special file")
        files[rel] = {"size": p.stat().st_size, "sha256": sha256_file(p)}
    data = (json.dumps({"files": files}, indent=1, sort_keys=True) + "\n").encode()
    with open(folder / MANIFEST, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    (folder / READERS).touch()
    return hashlib.sha256(data).hexdigest()[:16]


def _signature(version: Path) -> tuple:
    out = []
    for rel in _files(version) + [MANIFEST]:
        try:
            st = (version / rel).stat()
        except OSError:
            return None  # verify() says what is wrong
        out.append((rel, st.st_size, st.st_mtime_ns, st.st_ino))
    return tuple(out)


def verify(version: Path) -> None:
    """CacheDamaged naming the first file that is missing, extra, of another
    size or another sha256 (sizes of all files are checked before any hash).
    Files are hashed again whenever their size, mtime or inode changed since
    this process last hashed them."""
    version = Path(version)
    sig = _signature(version)
    if sig is not None and _verified.get(version) == sig:
        return
    mpath = version / MANIFEST
    try:
        raw = mpath.read_bytes()
        files = json.loads(raw)["files"]
        if not isinstance(files, dict):
            raise TypeError("files is not an object")
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise CacheDamaged(f"{mpath}: a readable manifest ({type(e).__name__}: {e})") from None
    digest = version.name.rpartition("@")[2].split("-")[0]
    if hashlib.sha256(raw).hexdigest()[:16] != digest:
        raise CacheDamaged(f"{mpath}: sha256 starting {digest} (the version's name), got another")
    have = set(_files(version))
    for rel in sorted(set(files) | have):
        if rel not in files:
            raise CacheDamaged(f"{version / rel}: no such file in the manifest (an extra file)")
        if rel not in have:
            raise CacheDamaged(f"{version / rel}: in the manifest, missing from the folder")
        size = (version / rel).stat().st_size
        if size != files[rel].get("size"):
            raise CacheDamaged(f"{version / rel}: size {files[rel].get('size')} as the manifest says, got {size}")
    for rel in sorted(files):
        if sha256_file(version / rel) != files[rel].get("sha256"):
            raise CacheDamaged(f"{version / rel}: sha256 as the manifest says, got another")
    _verified[version] = _signature(version)


def _hold(version: Path) -> bool:
    """Take (and keep) the shared reader lock of `version`; False when it is gone."""
    if version in _held:
        return True
    try:
        fd = os.open(version / READERS, os.O_RDONLY)
    except FileNotFoundError:
        return False
    fcntl.flock(fd, fcntl.LOCK_SH)
    if not (version / MANIFEST).exists():  # retired between resolving and locking
        os.close(fd)
        return False
    _held[version] = fd
    return True


def _release(version: Path) -> None:
    fd = _held.pop(version, None)
    if fd is not None:
        os.close(fd)
    _verified.pop(version, None)


def current(link: Path) -> Path | None:
    """The verified version the entry's link points at, its reader lock held;
    None when there is no entry (or only one from before manifests).
    CacheDamaged when the version fails verification."""
    for _ in range(8):  # a make may retire the version between our resolve and lock
        if not link.is_symlink():
            return None
        version = link.parent / os.readlink(link)
        if not version.is_dir():
            return None
        if _hold(version):
            try:
                verify(version)
            except CacheDamaged:
                _release(version)  # so the make that replaces it can retire it
                raise
            return version
    return None


def publish(work: Path, link: Path) -> Path:
    """Move the complete folder `work` into place as a new version and point
    the link at it; returns the version (its reader lock held)."""
    digest = write_manifest(work)
    version = link.parent / f"{link.name}@{digest}-{secrets.token_hex(3)}"
    work.rename(version)
    tmp = link.parent / f".{link.name}.link-{secrets.token_hex(4)}"
    os.symlink(version.name, tmp)
    try:
        os.replace(tmp, link)
    except OSError as e:
        if e.errno not in (errno.EISDIR, errno.ENOTEMPTY, errno.EEXIST):
            os.unlink(tmp)
            raise
        # an entry from before manifests: a real folder where the link goes
        legacy = link.parent / f".{link.name}.legacy-{secrets.token_hex(4)}"
        link.rename(legacy)
        os.replace(tmp, link)
        shutil.rmtree(legacy, ignore_errors=True)
    _hold(version)
    _verified[version] = _signature(version)
    return version


def retire_old(link: Path, keep: Path | None) -> list:
    """Delete every other version of the entry that no process is reading,
    and stale temporary folders of killed makes (the caller holds the make
    lock, so none is in progress); returns the versions kept because in use."""
    in_use = []
    for p in sorted(link.parent.glob(f"{link.name}@*")):
        if p == keep or not p.is_dir() or keep is None:
            continue
        try:
            fd = os.open(p / READERS, os.O_RDONLY)
        except FileNotFoundError:
            fd = None
        try:
            if fd is not None:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    in_use.append(p)
                    continue
            trash = link.parent / f".{p.name}.trash-{secrets.token_hex(4)}"
            p.rename(trash)
            shutil.rmtree(trash, ignore_errors=True)
        finally:
            if fd is not None:
                os.close(fd)
    for p in link.parent.glob(f".{link.name}*"):
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)
        elif p.name.startswith(f".{link.name}-tmp-") or p.name.startswith(f".{link.name}.link-"):
            p.unlink(missing_ok=True)
    return in_use


def temp_dir(link: Path) -> Path:
    """A fresh temporary folder next to the entry (same filesystem: the rename is atomic)."""
    p = link.parent / f".{link.name}-tmp-{secrets.token_hex(4)}"
    p.mkdir(parents=True)
    return p
