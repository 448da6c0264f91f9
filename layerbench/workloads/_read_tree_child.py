"""The timed child of the read-tree workload; standalone so it starts fast (python -S).

argv: ROOT MODE READERS. It walks ROOT (never following symbolic links), lstat'ing every
entry; with MODE "read" it also reads every regular file to its end. With READERS > 1 the
top-level entries are dealt round-robin to that many threads (reads release the GIL).
Prints "ENTRIES BYTES ERRORS" on stdout's last line; an entry it cannot read counts as an
error (sshfs refuses some readlinks), it does not stop the walk."""

import os
import sys
import threading

_CHUNK = 1 << 20


def walk(paths: list[str], read: bool, totals: list[int]) -> None:
    entries = size = errors = 0
    stack = list(paths)
    while stack:
        path = stack.pop()
        try:
            info = os.lstat(path)
            entries += 1
            if os.path.isdir(path) and not os.path.islink(path):
                stack.extend(entry.path for entry in os.scandir(path))
            elif read and (info.st_mode & 0o170000) == 0o100000:
                with open(path, "rb", buffering=0) as handle:
                    while chunk := handle.read(_CHUNK):
                        size += len(chunk)
        except OSError:
            errors += 1
    totals.extend((entries, size, errors))


def main() -> None:
    root, mode, readers = sys.argv[1], sys.argv[2], int(sys.argv[3])
    top = sorted(entry.path for entry in os.scandir(root))
    shares = [top[i::readers] for i in range(readers)]
    results: list[list[int]] = [[] for _ in shares]
    threads = [
        threading.Thread(target=walk, args=(share, mode == "read", results[i]))
        for i, share in enumerate(shares)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    entries = sum(r[0] for r in results if r) + 1  # the root itself
    size = sum(r[1] for r in results if r)
    errors = sum(r[2] for r in results if r)
    print(entries, size, errors)


if __name__ == "__main__":
    main()
