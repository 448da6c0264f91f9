"""Running part of a trial inside a qemu guest: its kernel, initramfs, machine and agent."""
