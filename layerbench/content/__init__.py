"""What workloads and worlds are made of: source archives (built-in trees, Debian packages,
the user's tarballs), the cache they are kept in, the worlds (a toolchain) and the chroot
laid out over a stack."""
