"""Where a fleet's Ray processes may listen: on the address given to `host head --bind` or
`host join --bind`, nowhere else.

Ray 2.60 gives its gRPC servers (GCS, raylet, object manager, every worker) no bind address:
they listen on the wildcard, every interface of the machine, whatever --node-ip-address
says. So each `ray start` runs in a cgroup of its own (cgroup v2, under `layerbench-fleet/`)
with two BPF programs attached to its bind() calls (BPF_CGROUP_INET4_BIND and INET6_BIND):
a wildcard bind becomes a bind to the address, a bind to any other address is refused
(EPERM). Every process Ray starts there (its workers included) inherits the cgroup.

After the start, `listeners` reads the listening sockets of the cgroup's processes
(/proc/net/tcp and tcp6, matched by socket inode under /proc/PID/fd) so the command can
verify what the kernel enforces and refuse, stopping exactly those processes, if any
listens elsewhere."""

import contextlib
import ctypes
import errno
import ipaddress
import os
import signal
import struct
import time
from dataclasses import dataclass
from pathlib import Path

from layerbench.core.errors import UserError

PARENT = "layerbench-fleet"

_SYS_BPF = 321  # x86_64
_BPF_PROG_LOAD = 5
_BPF_PROG_ATTACH = 8
_PROG_TYPE_CGROUP_SOCK_ADDR = 18
_ATTACH_INET4_BIND = 8
_ATTACH_INET6_BIND = 9
# struct bpf_sock_addr: user_family, user_ip4, user_ip6[4], ...
_USER_IP4 = 4
_USER_IP6 = 8


class _Program:
    """A few eBPF instructions with forward jumps to labels (enough for a bind filter)."""

    def __init__(self) -> None:
        self.code: list[tuple[int, int, int, int | str, int]] = []
        self.labels: dict[str, int] = {}

    def emit(self, op: int, dst: int = 0, src: int = 0, off: int | str = 0, imm: int = 0) -> None:
        self.code.append((op, dst, src, off, imm))

    def label(self, name: str) -> None:
        self.labels[name] = len(self.code)

    def load_word(self, register: int, offset: int) -> None:
        self.emit(0x61, register, 1, offset)  # LDX | MEM | W: register = *(u32 *)(ctx + offset)

    def store_word(self, offset: int, value: int) -> None:
        self.emit(0x62, 1, 0, offset, value)  # ST | MEM | W: *(u32 *)(ctx + offset) = value

    def jump_if(self, register: int, value: int, target: str, *, equal: bool = True) -> None:
        # JMP32: compares the low 32 bits; a 64-bit compare would sign-extend the immediate.
        self.emit(0x16 if equal else 0x56, register, 0, target, value)

    def finish(self, verdict: int) -> None:
        self.emit(0xB7, 0, 0, 0, verdict)  # r0 = verdict (1: allow, 0: EPERM)
        self.emit(0x95)  # exit

    def bytecode(self) -> bytes:
        out = b""
        for index, (op, dst, src, off, imm) in enumerate(self.code):
            jump = self.labels[off] - index - 1 if isinstance(off, str) else off
            out += struct.pack("<BBhi", op, (src << 4) | dst, jump, _signed(imm))
        return out


def _signed(value: int) -> int:
    return value - (1 << 32) if value >= 1 << 31 else value


def _words(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> list[int]:
    """The address as the u32 words of struct bpf_sock_addr hold it (network byte order)."""
    packed = address.packed
    return [int.from_bytes(packed[i : i + 4], "little") for i in range(0, len(packed), 4)]


def _inet4_program(bind: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bytes:
    program = _Program()
    program.load_word(2, _USER_IP4)
    if isinstance(bind, ipaddress.IPv4Address):
        (word,) = _words(bind)
        program.jump_if(2, 0, "rewrite")
        program.jump_if(2, word, "allow")
    program.finish(0)
    program.label("rewrite")
    if isinstance(bind, ipaddress.IPv4Address):
        program.store_word(_USER_IP4, _words(bind)[0])
    program.label("allow")
    program.finish(1)
    return program.bytecode()


def _inet6_program(bind: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bytes:
    # An IPv4 address is bound as ::ffff:a.b.c.d: gRPC listens on dual-stack IPv6 sockets.
    target = ipaddress.IPv6Address(f"::ffff:{bind}") if bind.version == 4 else bind
    words = _words(target)
    program = _Program()
    for index in range(4):
        program.load_word(2 + index, _USER_IP6 + 4 * index)
    for index in range(4):  # the wildcard (::): all four words zero
        program.jump_if(2 + index, 0, "not_wildcard", equal=False)
    program.emit(0x05, 0, 0, "rewrite")  # JA
    program.label("not_wildcard")
    for index, word in enumerate(words):  # exactly the address
        program.jump_if(2 + index, word, "deny", equal=False)
    program.emit(0x05, 0, 0, "allow")
    program.label("deny")
    program.finish(0)
    program.label("rewrite")
    for index, word in enumerate(words):
        program.store_word(_USER_IP6 + 4 * index, word)
    program.label("allow")
    program.finish(1)
    return program.bytecode()


def _bpf(command: int, attr: bytes) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    buffer = ctypes.create_string_buffer(attr, 128)
    result = libc.syscall(_SYS_BPF, command, buffer, len(buffer))
    if result < 0:
        number = ctypes.get_errno()
        raise OSError(number, os.strerror(number))
    return int(result)


def _load(code: bytes, attach_type: int) -> int:
    instructions = ctypes.create_string_buffer(code)
    license_ = ctypes.create_string_buffer(b"GPL")
    attr = struct.pack(
        "<IIQQIIQIIxxxxxxxxxxxxxxxxII",
        _PROG_TYPE_CGROUP_SOCK_ADDR,
        len(code) // 8,
        ctypes.addressof(instructions),
        ctypes.addressof(license_),
        0,  # log_level
        0,  # log_size
        0,  # log_buf
        0,  # kern_version
        0,  # prog_flags, then prog_name (16 bytes)
        0,  # prog_ifindex
        attach_type,  # expected_attach_type
    )
    return _bpf(_BPF_PROG_LOAD, attr)


def _attach(group: Path, program: int, attach_type: int) -> None:
    directory = os.open(group, os.O_RDONLY | os.O_DIRECTORY)
    try:
        _bpf(_BPF_PROG_ATTACH, struct.pack("<IIII", directory, program, attach_type, 0))
    finally:
        os.close(directory)


def _unified_mount() -> Path:
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        if right.split(" ", 1)[0] == "cgroup2":
            return Path(left.split()[4])
    raise UserError("the fleet needs a cgroup v2 tree (none is mounted) to keep Ray to its --bind address")


def parse_bind(bind: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    try:
        address = ipaddress.ip_address(bind)
    except ValueError:
        raise UserError(f"--bind {bind!r}: give an IP address of this machine") from None
    if address.is_unspecified:
        raise UserError(f"--bind {bind}: every interface is what the fleet must not listen on")
    return address


@dataclass(frozen=True)
class Confinement:
    """A cgroup whose processes can listen on one address only."""

    group: Path
    bind: str

    @classmethod
    def create(cls, name: str, bind: str) -> "Confinement":
        address = parse_bind(bind)
        if os.geteuid() != 0:
            raise UserError(f"--bind {bind}: keeping Ray to it takes root (a cgroup and its BPF filter)")
        group = _unified_mount() / PARENT / name
        if group.exists():
            if (group / "cgroup.procs").read_text().strip():
                raise UserError(f"a fleet's processes run here already as {name} ({group}); stop them first")
            group.rmdir()
        group.mkdir(parents=True)
        try:
            for attach_type, code in (
                (_ATTACH_INET4_BIND, _inet4_program(address)),
                (_ATTACH_INET6_BIND, _inet6_program(address)),
            ):
                program = _load(code, attach_type)
                try:  # the cgroup holds the program from here on
                    _attach(group, program, attach_type)
                finally:
                    os.close(program)
        except OSError as exc:
            group.rmdir()
            raise UserError(f"cannot keep Ray to --bind {bind}: cgroup BPF program: {exc.strerror}") from None
        return cls(group, str(address))

    def enter(self) -> None:
        """Move the calling process here (a child's preexec_fn, before it runs Ray)."""
        (self.group / "cgroup.procs").write_text("0")

    def pids(self) -> list[int]:
        with contextlib.suppress(FileNotFoundError):
            return [int(p) for p in (self.group / "cgroup.procs").read_text().split()]
        return []

    def stop(self, timeout: float = 10.0) -> None:
        """Kill every process in the group, then remove it (and the parent, once empty)."""
        deadline = time.monotonic() + timeout
        while True:
            for pid in self.pids():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            try:
                self.group.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError as exc:
                # EBUSY while a killed process is still exiting: it counts as a member until
                # it is gone; giving up at once left the group behind (a fleet test saw it).
                if exc.errno != errno.EBUSY:
                    raise
                if time.monotonic() > deadline:
                    break
            time.sleep(0.05)
        with contextlib.suppress(OSError):  # another fleet's group is still there
            self.group.parent.rmdir()


@dataclass(frozen=True)
class Listener:
    pid: int
    command: str
    address: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.address}]" if ":" in self.address else self.address
        return f"{host}:{self.port} ({self.command}, pid {self.pid})"


def _listening_sockets() -> dict[int, tuple[str, int]]:
    """Socket inode -> (address, port) of every listening TCP socket in this namespace."""
    found = {}
    for table in ("tcp", "tcp6"):
        with contextlib.suppress(FileNotFoundError):
            for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
                fields = line.split()
                if fields[3] != "0A":  # TCP_LISTEN
                    continue
                hex_address, hex_port = fields[1].split(":")
                raw = bytes.fromhex(hex_address)
                # The kernel prints each 32-bit word in host (little-endian) order.
                packed = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
                address = ipaddress.ip_address(packed)
                # a tcp6 socket bound to an IPv4 address lists it as ::ffff:a.b.c.d
                if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
                    address = address.ipv4_mapped
                found[int(fields[9])] = (str(address), int(hex_port, 16))
    return found


def listeners(pids: list[int]) -> list[Listener]:
    """The listening TCP sockets these processes hold."""
    sockets = _listening_sockets()
    found = []
    for pid in pids:
        try:
            command = Path(f"/proc/{pid}/comm").read_text().strip()
            descriptors = list(Path(f"/proc/{pid}/fd").iterdir())
        except OSError:  # gone meanwhile
            continue
        for descriptor in descriptors:
            try:
                target = os.readlink(descriptor)
            except OSError:
                continue
            if target.startswith("socket:[") and (inode := int(target[8:-1])) in sockets:
                found.append(Listener(pid, command, *sockets[inode]))
    return sorted(set(found), key=lambda listener: (listener.port, listener.pid))


def elsewhere(found: list[Listener], bind: str) -> list[Listener]:
    """Those of found that listen on any address but bind."""
    wanted = ipaddress.ip_address(bind)
    return [listener for listener in found if ipaddress.ip_address(listener.address) != wanted]


class Exposed(UserError):
    """A process of the fleet listens where it was not told to: refused, exit status 1."""

    exit_status = 1
