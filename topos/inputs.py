"""Files on a machine shared with others: input read bounded, confined and never echoed; new files made
without following links.

The testbed runs as root on machines shared with students, so an input file is
read as if hostile: only regular files of bounded size, only UTF-8, YAML with
its alias expansion bounded, paths named in a spec kept inside the spec's own
folder, and errors that name the file and the line but never print what the
file holds (it could be any file root can read). Lives in the lowest layer so
every parser (experiments, workloads, labs) goes through the same door. A file
the testbed creates (a token, a student's answers template) is created new,
never through whatever link someone left at its name; every other file it
writes (results, logs, pictures, records, outputs the user names) goes
through `open_output`, which refuses a link, a device or a FIFO at the name.
"""

from __future__ import annotations

import errno
import io
import os
import stat
from pathlib import Path
from typing import BinaryIO

import yaml

from .errors import InputError

MAX_FILE_BYTES = 64 << 20  # the largest SimAI workload we know is ~1 MB
MAX_YAML_NODES = 200_000  # after alias expansion; a shipped experiment has a few hundred


def read_text(path: str | Path, field: str, max_bytes: int = MAX_FILE_BYTES) -> str:
    """The text of a regular file of at most `max_bytes`, as UTF-8."""
    p = Path(path)
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO must not block the open
    except OSError as exc:
        raise InputError(f"cannot open it ({exc.strerror})", "give the path of a readable file", field=field,
                         value=str(p)) from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise InputError("not a regular file", "give the path of a file", field=field, value=str(p))
        if st.st_size > max_bytes:
            raise InputError(f"{st.st_size} bytes, more than the {max_bytes} an input file may have",
                             "give a smaller file", field=field, value=str(p))
        raw = f.read(max_bytes + 1)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise InputError(f"not UTF-8 text (line {line})", "save it as UTF-8", field=field, value=str(p)) from None


def read_head(path: str | Path, n: int) -> bytes | None:
    """The first `n` bytes of a regular file (a magic number), or None for anything else or an unreadable
    name: a device is not read on, a FIFO does not block, a folder is no file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    with os.fdopen(fd, "rb") as f:
        return f.read(n)


def _expanded_size(node: yaml.Node, memo: dict[int, int], active: set[int], limit: int) -> int:
    key = id(node)
    if key in memo:
        return memo[key]
    if key in active:
        raise InputError("a YAML alias refers to itself", "remove the recursive anchor", field="file", value=None)
    active.add(key)
    if isinstance(node, yaml.MappingNode):
        _no_twice(node)
        children = [n for pair in node.value for n in pair]
    elif isinstance(node, yaml.SequenceNode):
        children = list(node.value)
    else:
        children = []
    size = 1
    for c in children:
        size += _expanded_size(c, memo, active, limit)
        if size > limit:
            break
    active.discard(key)
    memo[key] = size
    return size


def _no_twice(node: yaml.MappingNode) -> None:
    """A key given twice in one mapping: PyYAML keeps the last one silently, so a setting a user thought they
    made would vanish."""
    seen: set[str] = set()
    for key, _value in node.value:
        if isinstance(key, yaml.ScalarNode):
            if key.value in seen:
                raise InputError(f"a key given twice in one mapping (line {key.start_mark.line + 1})",
                                 "keep one of them", field=key.value, value=None)
            seen.add(key.value)


def load_yaml(text: str, field: str, max_nodes: int = MAX_YAML_NODES) -> object:
    """YAML (safe types only) whose aliases expand to at most `max_nodes` nodes.

    PyYAML shares an aliased object, but everything downstream (validation, copies,
    the results record) expands it: a 345-byte file of nested aliases became 210 MB.
    """
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        size = _expanded_size(node, {}, set(), max_nodes)
        if size > max_nodes:
            raise InputError(f"expands to more than {max_nodes} YAML nodes (aliases)",
                             "write the values out, or use fewer nested aliases", field=field, value=None)
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or "syntax error"
        raise InputError(f"not valid YAML ({problem}{where})", "fix the syntax", field=field, value=None) from None
    except RecursionError:
        raise InputError("nested too deeply", "flatten the file", field=field, value=None) from None
    finally:
        loader.dispose()


def confined(name: str, base: Path, field: str) -> Path:
    """`name` (relative to `base`) resolved, symlinks included, to a path inside `base`."""
    if not name or "\x00" in name:
        raise InputError("empty or invalid path", "give a file name relative to the experiment file", field=field,
                         value=name)
    root = base.resolve()
    p = (root / name).resolve()
    if not p.is_relative_to(root):
        raise InputError("points outside the experiment file's folder",
                         "copy the file next to the experiment file (or into a folder below it)", field=field,
                         value=name)
    return p


def create_new(path: str | Path, data: bytes, mode: int) -> None:
    """A new file holding `data`; FileExistsError if anything (a file, a dangling link) has that name."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


# Opening a file to write, whatever name it is given: a link at the name is refused (O_NOFOLLOW), a FIFO
# does not block the open, and only a regular file (or a new one) is written.
_WRITE = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def open_output(path: str | Path, field: str, append: bool = False, mode: int = 0o644) -> BinaryIO:
    """A file hpnlab writes (a result, a log, a picture, a record, an output the user named), opened as a
    regular file of its own name: never through a symbolic link left there, never a device or a FIFO.
    Emptied unless `append`. Refused in one line (InputError), before anything is written."""
    p = Path(path)
    fix = "remove what is there, or give another path"
    try:  # a device is refused before it is opened: opening some (a watchdog, a tape) already acts
        kind = os.lstat(p).st_mode
    except OSError:  # nothing there yet (or the open below says why not)
        kind = stat.S_IFREG
    if not (stat.S_ISREG(kind) or stat.S_ISLNK(kind)):
        raise InputError("not a regular file", fix, field=field, value=str(p))
    try:
        fd = os.open(p, _WRITE | (os.O_APPEND if append else 0), mode)
    except OSError as exc:
        if exc.errno == errno.ENXIO:  # a FIFO nobody reads
            raise InputError("not a regular file", fix, field=field, value=str(p)) from None
        if exc.errno == errno.ELOOP:
            raise InputError("is a symbolic link; hpnlab writes only to a file of its own name", fix, field=field,
                             value=str(p)) from None
        raise InputError(f"cannot write it ({exc.strerror})", "give a path in a folder you can write to",
                         field=field, value=str(p)) from None
    f = os.fdopen(fd, "ab" if append else "wb")
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_nlink > 1:
        f.close()
        raise InputError("not a regular file" if not stat.S_ISREG(st.st_mode) else "a file with other names "
                         "(hard links); hpnlab writes only to a file of its own", fix, field=field, value=str(p))
    os.set_blocking(fd, True)
    if not append:
        f.truncate(0)
    return f


def write_file(path: str | Path, data: bytes | str, field: str, mode: int = 0o644) -> Path:
    """`data` written whole to `path` through open_output (a full disk is a one-line error too)."""
    raw = data.encode() if isinstance(data, str) else data
    with open_output(path, field, mode=mode) as f:
        try:
            f.write(raw)
            f.flush()
        except OSError as exc:
            raise InputError(f"cannot write it ({exc.strerror})", "free some space, or give another path",
                             field=field, value=str(path)) from None
    return Path(path)


def save_figure(fig, path: str | Path, field: str, **kw) -> Path:
    """A matplotlib figure as a PNG at `path`, written through write_file (matplotlib opens names itself)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", **kw)
    return write_file(path, buf.getvalue(), field)
