"""BPF programs from source in the repository: built with Debian's clang, loaded and attached with libbpf.

`build` compiles a `.bpf.c` file against this kernel's BTF (vmlinux.h made by
bpftool) into a cache keyed by the source, the defines and the kernel, so a
program is built once per machine and never committed prebuilt. `BpfObject`
loads it through libbpf (libbpf1, called with ctypes: the well-kept library
does the ELF parsing, CO-RE relocation and attachment; this file only passes
pointers), attaches every program, and owns them: `close()` detaches and
frees, and since nothing is pinned, a process that dies takes its programs and
maps with it, so a crash leaves nothing in the kernel. `RingBuffer` reads a
BPF ring buffer map through libbpf, with an epoll descriptor to wait on.

Only what the testbed's programs use is bound.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import hashlib
import logging
import mmap
import os
import shutil
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path

from topos.inputs import open_output

from .netns import in_netns

log = logging.getLogger(__name__)

CACHE = Path(os.environ.get("HPNLAB_BPF_CACHE", "/var/cache/hpnlab/bpf"))
VMLINUX_BTF = Path("/sys/kernel/btf/vmlinux")
TOOLS = ("clang", "bpftool")


class BpfUnavailable(RuntimeError):
    """This machine cannot build or load the program; the message says why and what to install or use."""


def missing_tools() -> list[str]:
    """What `build` needs and this machine lacks (empty when it can build)."""
    out = [t for t in TOOLS if shutil.which(t) is None]
    if not VMLINUX_BTF.exists():
        out.append(f"{VMLINUX_BTF} (a kernel with BTF)")
    if ctypes.util.find_library("bpf") is None:
        out.append("libbpf1")
    return out


def _kernel_id() -> str:
    """Changes with the kernel: its release and its BTF's size tell kernels apart (vmlinux.h comes from it)."""
    st = VMLINUX_BTF.stat()
    return f"{os.uname().release}-{st.st_size}"


def build(source: Path, defines: dict[str, int | str]) -> Path:
    """The object file of `source` with `defines`, compiled now or found in the cache."""
    if missing := missing_tools():
        raise BpfUnavailable(f"cannot build BPF programs: missing {', '.join(missing)} "
                             "(fix: apt-get install clang llvm libbpf-dev libbpf1 bpftool, or run make bootstrap)")
    flags = [f"-D{k}={v}" for k, v in sorted(defines.items())]
    headers = [h.read_text() for h in sorted(source.parent.glob("*.h"))]  # what `#include "..."` may take in
    key = hashlib.sha256("\0".join([source.read_text(), *headers, *flags, _kernel_id()]).encode()).hexdigest()[:16]
    out = CACHE / key / (source.name.removesuffix(".c") + ".o")
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    vmlinux = out.parent / "vmlinux.h"
    with open_output(vmlinux, "vmlinux.h") as f:
        _run(["bpftool", "btf", "dump", "file", str(VMLINUX_BTF), "format", "c"], stdout=f)
    tmp = out.with_suffix(".tmp")
    _run(["clang", "-O2", "-g", "-target", "bpf", "-mcpu=v3", f"-D__TARGET_ARCH_{_arch()}", *flags,
          "-I", str(out.parent), "-c", str(source), "-o", str(tmp)])
    tmp.replace(out)  # a build cut short never leaves a half-written object behind under the final name
    log.info("built %s -> %s", source.name, out)
    return out


def _arch() -> str:
    return {"x86_64": "x86", "aarch64": "arm64"}.get(os.uname().machine, os.uname().machine)


def _run(cmd: list[str], stdout=subprocess.PIPE) -> None:
    done = subprocess.run(cmd, stdout=stdout, stderr=subprocess.PIPE, text=True, check=False)
    if done.returncode:
        raise BpfUnavailable(f"{cmd[0]} failed ({done.returncode}): {done.stderr.strip()[-600:]}")


_lib_handle: ctypes.CDLL | None = None


def _lib() -> ctypes.CDLL:
    """libbpf with the signatures used here (a wrong restype would truncate a pointer to 32 bits)."""
    global _lib_handle
    if _lib_handle is not None:
        return _lib_handle
    name = ctypes.util.find_library("bpf")
    if name is None:
        raise BpfUnavailable("libbpf is not installed (fix: apt-get install libbpf1)")
    lib = ctypes.CDLL(name, use_errno=True)
    p, i, u32 = ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32
    for fn, res, args in (("bpf_object__open_file", p, [ctypes.c_char_p, p]), ("bpf_object__load", i, [p]),
                          ("bpf_object__close", None, [p]), ("bpf_object__find_map_by_name", p, [p, ctypes.c_char_p]),
                          ("bpf_object__next_program", p, [p, p]), ("bpf_program__name", ctypes.c_char_p, [p]),
                          ("bpf_program__attach", p, [p]), ("bpf_link__destroy", i, [p]),
                          ("bpf_map__fd", i, [p]), ("bpf_map__set_max_entries", i, [p, u32]),
                          ("bpf_map_update_elem", i, [i, p, p, ctypes.c_uint64]),
                          ("bpf_map_lookup_elem", i, [i, p, p]),
                          ("ring_buffer__new", p, [i, p, p, p]), ("ring_buffer__free", None, [p]),
                          ("ring_buffer__consume", i, [p]), ("ring_buffer__epoll_fd", i, [p]),
                          ("bpf_object__find_program_by_name", p, [p, ctypes.c_char_p]),
                          ("bpf_program__fd", i, [p]),
                          ("bpf_tc_hook_create", i, [p]), ("bpf_tc_hook_destroy", i, [p]),
                          ("bpf_tc_attach", i, [p, p]), ("bpf_tc_detach", i, [p, p]), ("bpf_program__type", i, [p]),
                          ("bpf_map__set_map_flags", i, [p, u32]), ("bpf_map__attach_struct_ops", p, [p]),
                          ("bpf_link_create", i, [i, i, i, p]), ("libbpf_major_version", u32, []),
                          ("bpf_obj_get_info_by_fd", i, [i, p, p]), ("bpf_map_get_fd_by_id", i, [u32]),
                          ("libbpf_minor_version", u32, []), ("bpf_prog_query", i, [i, i, u32, p, p, p])):
        f = getattr(lib, fn)
        f.restype, f.argtypes = res, args
    _lib_handle = lib
    return lib


def _check(ok: bool, what: str) -> None:
    if not ok:
        err = ctypes.get_errno()
        raise BpfUnavailable(f"{what}: {os.strerror(err)} (errno {errno.errorcode.get(err, err)})")


class _TcHook(ctypes.Structure):  # struct bpf_tc_hook
    _fields_ = [("sz", ctypes.c_size_t), ("ifindex", ctypes.c_int), ("attach_point", ctypes.c_int),
                ("parent", ctypes.c_uint32)]


class _TcOpts(ctypes.Structure):  # struct bpf_tc_opts
    _fields_ = [("sz", ctypes.c_size_t), ("prog_fd", ctypes.c_int), ("flags", ctypes.c_uint32),
                ("prog_id", ctypes.c_uint32), ("handle", ctypes.c_uint32), ("priority", ctypes.c_uint32)]


TC_EGRESS, TC_BOTH = 1 << 1, (1 << 0) | (1 << 1)  # enum bpf_tc_attach_point
# The clsact qdiscs this process made, by (namespace inode, ifindex): how many of its filters each holds. Two
# objects may put programs on one interface (ECN marking and a lossy link on a switch port): the first makes
# the clsact, each detaches only its own filter, the last one out removes the clsact. A clsact this process did
# not make is not ours: attaching there is refused.
_CLSACT: dict[tuple[int, int], int] = {}
_CLSACT_LOCK = threading.Lock()
PROG_STRUCT_OPS, ATTACH_STRUCT_OPS, F_LINK = 27, 44, 1 << 13  # the kernel's enum and flag values (uapi bpf.h)
ATTACH_TCX_EGRESS = 47  # enum bpf_attach_type (Linux 6.6): a tc program on a link owned by a file descriptor
ATTACH_XDP = 37  # enum bpf_attach_type (Linux 5.9): an XDP program on a link owned by a file descriptor


class BpfObject:
    """A built object loaded, and every program in it attached except the `tc` ones (attach_tc puts those on
    an interface); maps resized before loading."""

    def __init__(self, path: Path, max_entries: dict[str, int] | None = None, tc: tuple[str, ...] = (),
                 struct_ops: tuple[str, ...] = ()):
        """struct_ops: maps (a TCP congestion control) registered with the kernel through a link of ours, so
        that closing it, or the process dying, unregisters them (bpftool's register would outlive us)."""
        self._lib = _lib()
        self._links: list[int] = []
        self._filters: list[tuple] = []  # (clsact key, netns, hook, filter) of each program attached by this
        self._fds: list[int] = []  # link descriptors: registered struct_ops, tc programs on tcx
        self._obj = self._lib.bpf_object__open_file(str(path).encode(), None)
        _check(bool(self._obj), f"opening {path}")
        try:
            for name, n in (max_entries or {}).items():
                _check(self._lib.bpf_map__set_max_entries(self._map(name), n) == 0, f"sizing map {name}")
            for name in struct_ops:
                _check(self._lib.bpf_map__set_map_flags(self._map(name), F_LINK) == 0, f"flagging {name}")
            _check(self._lib.bpf_object__load(self._obj) == 0, f"loading {path.name} (root and a kernel with "
                                                               "kprobes and BPF needed)")
            prog = None
            while prog := self._lib.bpf_object__next_program(self._obj, prog):
                if (self._lib.bpf_program__name(prog).decode() in tc
                        or self._lib.bpf_program__type(prog) == PROG_STRUCT_OPS):
                    continue
                link = self._lib.bpf_program__attach(prog)
                _check(bool(link), f"attaching {self._lib.bpf_program__name(prog).decode()}")
                self._links.append(link)
            for name in struct_ops:
                self._register(name)
        except BaseException:
            self.close()
            raise

    def _register(self, name: str) -> None:
        """The struct_ops map (flagged BPF_F_LINK) registered through a link: libbpf 1.2 and later make that link
        in bpf_map__attach_struct_ops; 1.1 (Debian 12) only writes the map, which the kernel then holds ready
        but unregistered, and the link is made here. Either way closing the link unregisters it."""
        m = self._map(name)
        libbpf_link = self._lib.bpf_map__attach_struct_ops(m)
        _check(bool(libbpf_link), f"registering {name}")
        self._links.append(libbpf_link)
        if (self._lib.libbpf_major_version(), self._lib.libbpf_minor_version()) < (1, 2):
            fd = self._lib.bpf_link_create(self._lib.bpf_map__fd(m), 0, ATTACH_STRUCT_OPS, None)
            _check(fd >= 0, f"registering {name}")
            self._fds.append(fd)

    def _map(self, name: str) -> int:
        m = self._lib.bpf_object__find_map_by_name(self._obj, name.encode())
        if not m:
            raise KeyError(f"no map {name!r} in the BPF object")
        return m

    def map_fd(self, name: str) -> int:
        return self._lib.bpf_map__fd(self._map(name))

    def update(self, name: str, key: bytes, value: bytes) -> None:
        _check(self._lib.bpf_map_update_elem(self.map_fd(name), key, value, 0) == 0, f"updating map {name}")

    def lookup(self, name: str, key: bytes, size: int) -> bytes:
        out = ctypes.create_string_buffer(size)
        _check(self._lib.bpf_map_lookup_elem(self.map_fd(name), key, out) == 0, f"reading map {name}")
        return out.raw

    def mmap(self, name: str) -> mmap.mmap:
        """An array map made with BPF_F_MMAPABLE, shared with the kernel: reads see its writes at once."""
        return mmap_fd(self.map_fd(name))

    def map_id(self, name: str) -> int:
        """The kernel's id of a map: another process (root) opens it by this while the map lives."""
        return map_info(self.map_fd(name)).id

    def attach_tc(self, program: str, ifindex: int, netns: str | None = None, tcx: bool = True) -> None:
        """The `tc` program at the egress of interface `ifindex` of namespace `netns` (None: this thread's),
        before its qdisc: on a tcx link (Linux 6.6 and later) whose descriptor this process holds, so that
        `close()` or the process's death, kill -9 included, takes it off; on older kernels on a clsact qdisc this
        process made (`_CLSACT`), which `close()` removes and, after a kill -9, `hpnlab clean` (an interface
        already gone is fine). `tcx=False`: on clsact everywhere (a program that needs TC_ACT_STOLEN)."""
        prog = self._lib.bpf_object__find_program_by_name(self._obj, program.encode())
        if not prog:
            raise KeyError(f"no program {program!r} in the BPF object")
        if tcx:
            fd = in_netns(netns, lambda: self._lib.bpf_link_create(self._lib.bpf_program__fd(prog), ifindex,
                                                                   ATTACH_TCX_EGRESS, None))
            if fd >= 0:
                self._fds.append(fd)
                return
            if -fd != errno.EINVAL:  # EINVAL: no tcx in this kernel (an attach type it does not know)
                raise BpfUnavailable(f"attaching {program} on interface {ifindex}: {os.strerror(-fd)}")
        self._attach_clsact(prog, program, ifindex, netns)

    def attach_xdp(self, program: str, ifindex: int, netns: str | None = None) -> None:
        """The `xdp` program on the receive side of interface `ifindex` of namespace `netns`, on a link whose
        descriptor this process holds: `close()` or the process's death takes it off (native mode where the
        driver has it, veth does)."""
        prog = self._lib.bpf_object__find_program_by_name(self._obj, program.encode())
        if not prog:
            raise KeyError(f"no program {program!r} in the BPF object")
        fd = in_netns(netns, lambda: self._lib.bpf_link_create(self._lib.bpf_program__fd(prog), ifindex,
                                                               ATTACH_XDP, None))
        if fd < 0:
            raise BpfUnavailable(f"attaching {program} (XDP) on interface {ifindex}: {os.strerror(-fd)}")
        self._fds.append(fd)

    def _attach_clsact(self, prog: int, program: str, ifindex: int, netns: str | None) -> None:
        """attach_tc on a kernel without tcx: a filter on a clsact qdisc this process made."""
        hook = _TcHook(ctypes.sizeof(_TcHook), ifindex, TC_EGRESS, 0)
        opts = _TcOpts(ctypes.sizeof(_TcOpts), self._lib.bpf_program__fd(prog), 0, 0, 0, 0)
        key = (os.stat(netns or "/proc/thread-self/ns/net").st_ino, ifindex)

        def attach() -> None:
            if key not in _CLSACT:  # an existing clsact is not ours: refused (EEXIST)
                _check(self._lib.bpf_tc_hook_create(ctypes.byref(hook)) == 0, f"making clsact on {ifindex}")
                _CLSACT[key] = 0
            _CLSACT[key] += 1
            self._filters.append((key, netns, hook, opts))  # the kernel fills in the filter's handle and priority
            _check(self._lib.bpf_tc_attach(ctypes.byref(hook), ctypes.byref(opts)) == 0,
                   f"attaching {program} on interface {ifindex}")

        with _CLSACT_LOCK:
            in_netns(netns, attach)

    def _detach(self, key: tuple[int, int], netns: str | None, hook: _TcHook, opts: _TcOpts) -> None:
        """One filter of ours off its clsact; the clsact too when no other filter of ours is left on it. In a
        namespace already gone, both went with it: only the count is kept right."""

        def detach() -> None:
            if opts.handle:
                self._lib.bpf_tc_detach(ctypes.byref(hook), ctypes.byref(
                    _TcOpts(ctypes.sizeof(_TcOpts), 0, 0, 0, opts.handle, opts.priority)))
            if key not in _CLSACT:
                self._lib.bpf_tc_hook_destroy(ctypes.byref(_TcHook(ctypes.sizeof(_TcHook), hook.ifindex, TC_BOTH, 0)))

        with _CLSACT_LOCK:
            _CLSACT[key] = _CLSACT.get(key, 1) - 1
            if _CLSACT[key] <= 0:
                del _CLSACT[key]
            if netns is None or os.path.exists(netns):
                in_netns(netns, detach)

    def close(self) -> None:
        for fd in self._fds:
            os.close(fd)
        self._fds.clear()
        for key, netns, hook, opts in reversed(self._filters):
            self._detach(key, netns, hook, opts)
        self._filters.clear()
        for link in self._links:
            self._lib.bpf_link__destroy(link)
        self._links.clear()
        if self._obj:
            self._lib.bpf_object__close(self._obj)
            self._obj = None


def tcx_egress_programs(ifindex: int) -> list[int]:
    """The ids of the programs on tcx links at the egress of interface `ifindex` (this thread's namespace), in
    the order they run; bpftool 7.1 lists such links only as "type 11"."""
    lib, ids, count = _lib(), (ctypes.c_uint32 * 64)(), ctypes.c_uint32(64)
    _check(lib.bpf_prog_query(ifindex, ATTACH_TCX_EGRESS, 0, None, ids, ctypes.byref(count)) == 0,
           f"listing the tcx programs of interface {ifindex}")
    return list(ids[:count.value])


_SAMPLE = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)


def _mmap_size(value_size: int, max_entries: int) -> int:
    """What an mmapable array map spans: values 8-byte aligned, whole pages."""
    size = ((value_size + 7) & ~7) * max_entries
    return (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE * mmap.PAGESIZE


class _MapInfo(ctypes.Structure):  # the head of struct bpf_map_info (uapi bpf.h); the kernel fills what fits
    _fields_ = [("type", ctypes.c_uint32), ("id", ctypes.c_uint32), ("key_size", ctypes.c_uint32),
                ("value_size", ctypes.c_uint32), ("max_entries", ctypes.c_uint32), ("map_flags", ctypes.c_uint32),
                ("name", ctypes.c_char * 16)]


def map_info(fd: int) -> _MapInfo:
    info, size = _MapInfo(), ctypes.c_uint32(ctypes.sizeof(_MapInfo))
    _check(_lib().bpf_obj_get_info_by_fd(fd, ctypes.byref(info), ctypes.byref(size)) == 0, "reading a map's info")
    return info


def mmap_fd(fd: int, prot: int = mmap.PROT_READ | mmap.PROT_WRITE) -> mmap.mmap:
    """The mmapable array map behind this descriptor (one handed to this process, or opened by id), whole."""
    info = map_info(fd)
    return mmap.mmap(fd, _mmap_size(info.value_size, info.max_entries), prot=prot)


def mmap_by_id(map_id: int, name: str) -> mmap.mmap:
    """Read-only, the mmapable array map with this id, which another process loaded (root needed). An id is
    reused once its map is gone, so the map's name must be `name`: otherwise BpfUnavailable, as for no map."""
    fd = _lib().bpf_map_get_fd_by_id(map_id)
    _check(fd >= 0, f"opening map {map_id}")
    try:
        found = map_info(fd).name.decode()
        if found != name:
            raise BpfUnavailable(f"map {map_id} is {found!r}, not {name!r}: its run has ended")
        return mmap_fd(fd, mmap.PROT_READ)
    finally:
        os.close(fd)


class RingBuffer:
    """A BPF ring buffer map read through libbpf: `fileno()` is readable when records wait; `consume()`
    hands each to `on_record(bytes)` and returns how many it handed."""

    def __init__(self, map_fd: int, on_record: Callable[[bytes], None]):
        """map_fd: the ring buffer map's descriptor (BpfObject.map_fd, or one handed to this process)."""
        self._lib = _lib()

        def sample(_ctx, data, size):
            on_record(ctypes.string_at(data, size))
            return 0

        self._callback = _SAMPLE(sample)  # kept referenced: libbpf calls it for as long as the buffer lives
        self._rb = self._lib.ring_buffer__new(map_fd, ctypes.cast(self._callback, ctypes.c_void_p), None, None)
        _check(bool(self._rb), f"opening ring buffer (map descriptor {map_fd})")

    def fileno(self) -> int:
        return self._lib.ring_buffer__epoll_fd(self._rb)

    def consume(self) -> int:
        n = self._lib.ring_buffer__consume(self._rb)
        if n < 0:
            raise OSError(-n, f"ring buffer: {os.strerror(-n)}")
        return n

    def close(self) -> None:
        if self._rb:
            self._lib.ring_buffer__free(self._rb)
            self._rb = None
