"""The guest's pieces that need no guest: module order, modinfo parsing, the initramfs format."""

import gzip
from pathlib import Path

import pytest

from layerbench.core.errors import SetupError
from layerbench.guest import kernel
from layerbench.guest.kernel import _Cpio, _depends


def test_depends_reads_the_modinfo_string() -> None:
    module = b"\x7fELF...\0license=GPL\0depends=jbd2,mbcache,crc16\0vermagic=6.12\0"
    assert _depends(module) == ["jbd2", "mbcache", "crc16"]
    assert _depends(b"\0depends=\0") == []
    assert _depends(b"no modinfo at all") == []


def test_cpio_is_newc_with_aligned_entries_and_a_trailer() -> None:
    archive = _Cpio()
    archive.add_dir("bin")
    archive.add_file("init", b"#!/bin/sh\n", 0o755)
    archive.add_symlink("bin/sh", "busybox")
    data = archive.finish()
    names = []
    offset = 0
    while offset < len(data):
        assert data[offset : offset + 6] == b"070701"
        fields = [int(data[offset + 6 + 8 * i : offset + 14 + 8 * i], 16) for i in range(13)]
        size, name_size = fields[6], fields[11]
        name_start = offset + 110
        names.append(data[name_start : name_start + name_size - 1].decode())
        body = name_start + name_size + (-(name_start + name_size) % 4)
        offset = body + size + (-(body + size) % 4)
    assert names == ["bin", "init", "bin/sh", "TRAILER!!!"]
    assert offset == len(data)


def test_module_order_puts_dependencies_first() -> None:
    cached = sorted(kernel.cache_dir().glob("*/tree/lib/modules/*"))
    if not cached:
        pytest.skip(f"no guest kernel unpacked in {kernel.cache_dir()} yet (a vm run fetches it)")
    modules_dir: Path = cached[-1]
    order = [kernel._module_name(p) for p in kernel.module_order(modules_dir)]
    for name in ("virtio_blk", "ext4", "9p", "9pnet_virtio"):
        assert name in order
    assert order.index("jbd2") < order.index("ext4")
    assert order.index("9pnet") < order.index("9pnet_virtio") < order.index("9p")
    assert len(order) == len(set(order))


def test_initramfs_holds_busybox_init_and_modules() -> None:
    built = sorted(kernel.cache_dir().glob("*/initramfs-*.cpio.gz"))
    if not built:
        pytest.skip(f"no initramfs built in {kernel.cache_dir()} yet (a vm run builds it)")
    data = gzip.decompress(built[-1].read_bytes())
    for name in (b"bin/busybox", b"init", b"modules/ext4.ko", b"modules/9p.ko", b"modules.order"):
        assert name + b"\0" in data


def test_paths_under_the_guests_own_tmpfs_are_hidden_from_it(tmp_path: Path) -> None:
    from layerbench.guest.machine import hidden_in_guest

    assert hidden_in_guest(["/tmp/clone", "/run/venv/lib", "/usr/lib/python3", "/var/tmp/x"]) == [
        "/tmp/clone",
        "/run/venv/lib",
    ]
    # The init script mounts exactly these over the host's root in the guest.
    script = Path(kernel.__file__).read_text()
    assert "mount -t tmpfs tmp /newroot/tmp" in script and "mount -t tmpfs run /newroot/run" in script


def test_the_guest_loads_every_kernel_module_a_layer_kind_needs() -> None:
    """A layer above a vm layer is built on the guest's kernel, which has only what its init
    loads: each module a layer kind names is among them, and the guest's kernel has it."""
    from layerbench.stacks.base import load_kinds

    needed = {module for kind in load_kinds().values() for module in kind.kernel_modules}
    assert needed and needed <= set(kernel.WANTED_MODULES)
    cached = sorted(kernel.cache_dir().glob("*/tree/lib/modules/*"))
    if cached:  # the guest's kernel is fetched by a vm run; module_order raises for a missing one
        order = {kernel._module_name(p) for p in kernel.module_order(cached[-1])}
        assert needed <= order | kernel._builtin(cached[-1])


def test_a_guest_loads_only_the_modules_its_stack_asks_for_each_after_what_it_needs() -> None:
    """The boot modules are loaded from modules.order; a layer's or workload's own (dm, md,
    NFS, autofs) only when its request names them, after their dependencies and companions."""
    cached = sorted(kernel.cache_dir().glob("*/vmlinuz"))
    if not cached:
        pytest.skip("no guest kernel fetched yet (a vm run fetches it)")
    home = cached[-1].parent
    guest = kernel.GuestKernel(release=next((home / "tree/lib/modules").iterdir()).name, vmlinuz=cached[-1],
                               initramfs=home / "unused")  # fmt: skip
    assert guest.modules_on_request([]) == []
    crypt = guest.modules_on_request(["dm_mod", "dm_crypt"])
    assert {"dm_mod.ko", "dm_crypt.ko", "xts.ko", "algif_skcipher.ko"} <= set(crypt)
    assert crypt.index("dm_mod.ko") < crypt.index("dm_crypt.ko")
    assert not set(crypt) & {"ext4.ko", "9p.ko", "loop.ko"}  # loaded at boot already
    assert "autofs4.ko" in guest.modules_on_request(["autofs4"])
    with pytest.raises(SetupError, match="no module zfs"):
        guest.modules_on_request(["zfs"])


def test_a_guest_request_names_the_modules_of_the_layers_above_the_vm_and_of_the_workload() -> None:
    from layerbench.stacks.base import load_kinds
    from layerbench.workloads.base import load_kinds as load_workload_kinds

    kinds = load_kinds()
    assert {"dm_mod", "dm_crypt"} <= set(kinds["dm-crypt"].kernel_modules)
    churn = load_workload_kinds()["churn"]
    assert churn.kernel_modules_for(churn.Options(kind="churn", through="automount")) == ("autofs4",)
    assert churn.kernel_modules_for(churn.Options(kind="churn")) == ()
    script = kernel.INIT_SCRIPT
    assert script.index(". /share/boot.env") < script.index("for module in $MODULES")


def test_the_guest_agent_imports_only_the_kinds_its_request_names() -> None:
    """Under tcg an import costs some 35 times its host time: the request names the modules
    of the layer kinds above the vm layer and of the workload kind, and the agent, in a
    fresh interpreter as in the guest, imports those and no other kind's module."""
    import json
    import subprocess
    import sys

    from layerbench.executors.local import _guest_request
    from layerbench.stacks.base import BuiltStack, load_kinds
    from layerbench.workloads.base import load_kinds as load_workload_kinds

    kinds = load_kinds()
    vm = kinds["vm"](kinds["vm"].Options(kind="vm"), 1)
    rest = [kinds[kind](kinds[kind].Options(kind=kind), index) for index, kind in ((2, "bind"), (3, "nfs"))]
    write = load_workload_kinds()["stream-write"]
    request = _guest_request(
        BuiltStack(top=Path("/unused"), layers=[], parts=[vm], rest=rest),
        write(write.Options(kind="stream-write"), "w"),
    )
    assert request.kind_modules == [
        "layerbench.stacks.bind",
        "layerbench.stacks.nfs",
        "layerbench.workloads.stream_write",
    ]
    probe = (
        "import json, sys\n"
        "from layerbench.guest import agent\n"
        "from layerbench.guest.protocol import GuestRequest\n"
        "layers, workloads = agent._kinds(GuestRequest.model_validate_json(sys.argv[1]).kind_modules)\n"
        "kinds = [m for m in sys.modules if m.startswith(('layerbench.stacks.', 'layerbench.workloads.'))]\n"
        "print(json.dumps({'layers': sorted(layers), 'workloads': sorted(workloads), 'modules': kinds}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, request.model_dump_json()], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert {"bind", "nfs"} <= set(seen["layers"]) and seen["workloads"] == ["stream-write"], seen
    others = {
        "layerbench.stacks.sshfs",
        "layerbench.stacks.fuse",
        "layerbench.stacks.md_raid1",
        "layerbench.workloads.fio",
        "layerbench.workloads.build",
        "layerbench.workloads.churn",
    }
    assert not others & set(seen["modules"]), seen["modules"]
