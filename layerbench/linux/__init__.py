"""The operating system's adapters: running host tools, reading /proc, mounts, control groups
and mount namespaces. Nothing here knows about plans, stacks or runs."""
