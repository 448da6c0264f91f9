"""The timed child of the metadata workload; standalone so it starts fast (python -S)."""

import os
import sys


def main() -> None:
    root, files, size, per_dir, phases = sys.argv[1:6]
    below = sys.argv[6:]  # the file systems under root's, synced after it
    count, size_bytes, per_dir_n = int(files), int(size), int(per_dir)
    payload = b"\xa5" * size_bytes
    paths = [os.path.join(root, f"d{i // per_dir_n:05d}", f"f{i:07d}") for i in range(count)]
    steps = phases.split(",")
    if "create" in steps:
        for d in range(-(-count // per_dir_n)):
            os.makedirs(os.path.join(root, f"d{d:05d}"))
        for path in paths:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            os.write(fd, payload)
            os.close(fd)
    if "stat" in steps:
        for path in paths:
            os.stat(path)
    if "read" in steps:
        for path in paths:
            with open(path, "rb") as handle:
                handle.read()
    if "delete" in steps:
        for path in paths:
            os.unlink(path)
    # syncfs(2) makes each file system's data durable, as `sync -f` does.
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    for path in [root, *below]:
        fd = os.open(path, os.O_RDONLY)
        if libc.syncfs(fd) != 0:
            raise OSError(ctypes.get_errno(), f"syncfs {path}")
        os.close(fd)


if __name__ == "__main__":
    main()
