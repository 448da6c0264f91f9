"""Where layerbench keeps what it makes or downloads once for every run (packed built-in
trees, Debian sources, guest kernels): outside any scratch root."""

import os
from pathlib import Path

CACHE_DIR = Path(os.environ.get("LAYERBENCH_CACHE", "/var/cache/layerbench"))
