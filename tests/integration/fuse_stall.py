"""A FUSE filesystem that stops answering: what a rank could pass ddpd as its push segment.

    fuse_stall.py MOUNTPOINT SPARED_PID

Serves one file, /segment, of 4096 bytes. Once anyone looks up /stall (a stat that fails),
every later getattr, statfs and flush of a process other than SPARED_PID (the test, which
must be able to end) waits for good: a process that fstat()s, fstatfs()s or close()s a
descriptor of /segment waits until this process dies and the mount goes (only SIGKILL
ends its own wait). Prints "mounted" once the filesystem answers, and "PID waits in OP"
as each such wait begins."""
import errno
import stat
import sys
import threading
import time

from fusepy import FUSE, FuseOSError, Operations, fuse_get_context

stalled = threading.Event()
spared = int(sys.argv[2])


def stall(op):
    pid = fuse_get_context()[2]
    if stalled.is_set() and pid != spared:
        print("%d waits in %s" % (pid, op), flush=True)
        time.sleep(1 << 30)


class Stall(Operations):
    def getattr(self, path, fh=None):
        if path == "/":
            return dict(st_mode=stat.S_IFDIR | 0o755, st_nlink=2)
        if path == "/segment":
            stall("getattr")
            return dict(st_mode=stat.S_IFREG | 0o666, st_nlink=1, st_size=4096)
        if path == "/stall":
            stalled.set()
        raise FuseOSError(errno.ENOENT)

    def readdir(self, path, fh):
        return [".", "..", "segment"]

    def open(self, path, flags):
        return 0

    def statfs(self, path):
        stall("statfs")
        return dict(f_bsize=4096, f_blocks=1, f_bavail=1)

    def flush(self, path, fh):
        stall("flush")
        return 0

    def init(self, path):
        print("mounted", flush=True)


FUSE(Stall(), sys.argv[1], foreground=True, nothreads=False, attr_timeout=0, entry_timeout=0)
