"""A size-limited filesystem for the offload dir, so a full disk (ENOSPC) can be made for real.

Role in the data flow: the harness mounts it at <out>/offload before the pool
starts and gives that path to the pool as `offload_dir`; the `enospc` fault
fills the free space with one ballast file and clears it by deleting that file.

Kinds:
  loop   an ext4 image file (sparse) mounted through a loop device: a real
         block filesystem on the local disk, O_DIRECT works (needs root)
  tmpfs  a tmpfs of the given size (needs root; RAM-backed, O_DIRECT may not work)
  dir    a plain directory: the disk is far too big to fill, so `enospc` is
         reported as not injectable
  auto   loop, else tmpfs, else dir
"""
import os
import shutil
import subprocess

BALLAST = ".stress-ballast"


class OffloadFs:
    def __init__(self, path, kind, image=None):
        self.path = path
        self.kind = kind
        self.image = image
        self.filled = False

    @property
    def can_fill(self):
        return self.kind in ("loop", "tmpfs")

    def free_bytes(self):
        st = os.statvfs(self.path)
        return st.f_bavail * st.f_frsize

    def fill(self):
        """Take all free space with a ballast file; returns its size in bytes."""
        ballast = os.path.join(self.path, BALLAST)
        fd = os.open(ballast, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            try:
                os.posix_fallocate(fd, 0, max(self.free_bytes(), 4096))
            except OSError:
                pass                      # ENOSPC for the last blocks, or no fallocate: top off below
            os.lseek(fd, 0, os.SEEK_END)
            chunk = b"\0" * 4096
            while True:
                try:
                    os.write(fd, chunk)
                except OSError:
                    break
        finally:
            os.close(fd)
        self.filled = True
        return os.path.getsize(ballast)

    def clear(self):
        try:
            os.unlink(os.path.join(self.path, BALLAST))
        except FileNotFoundError:
            pass
        self.filled = False

    def close(self):
        self.clear()
        if self.kind in ("loop", "tmpfs"):
            subprocess.run(["umount", "-l", self.path], check=False, capture_output=True)
        if self.image:
            try:
                os.unlink(self.image)
            except OSError:
                pass


def make_offload_fs(path, kind="auto", size_bytes=256 * 1024 ** 2, log=print):
    """Create and mount the offload filesystem at `path` (an empty or new directory)."""
    os.makedirs(path, exist_ok=True)
    order = {"auto": ["loop", "tmpfs", "dir"], "loop": ["loop"], "tmpfs": ["tmpfs"], "dir": ["dir"]}[kind]
    errors = []
    for k in order:
        try:
            return _mount(path, k, size_bytes)
        except (OSError, subprocess.CalledProcessError) as exc:
            errors.append(f"{k}: {getattr(exc, 'stderr', b'') or exc}")
    raise OSError(f"cannot create the offload filesystem at {path}: " + "; ".join(map(str, errors)))


def _mount(path, kind, size_bytes):
    if kind == "dir":
        return OffloadFs(path, "dir")
    if os.geteuid() != 0:
        raise OSError(f"mounting a {kind} needs root")
    if kind == "tmpfs":
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={int(size_bytes)}", "tmpfs", path],
                       check=True, capture_output=True)
        return OffloadFs(path, "tmpfs")
    image = os.path.join(os.path.dirname(os.path.abspath(path)), os.path.basename(path) + ".ext4")
    with open(image, "wb") as f:
        f.truncate(int(size_bytes))
    try:
        subprocess.run([shutil.which("mkfs.ext4") or "mkfs.ext4", "-q", "-F", "-m", "0", image],
                       check=True, capture_output=True)
        subprocess.run(["mount", "-o", "loop", image, path], check=True, capture_output=True)
    except BaseException:
        os.unlink(image)
        raise
    return OffloadFs(path, "loop", image=image)
