"""ravnest.local(nodes=3): `ravnest local` in a subprocess for a with-block (docs/local.md).

    with ravnest.local(nodes=3) as pool:
        ravnest.clusterize(model, example_args=(x,), nodes=pool.pool_file)
        ...

It returns once every daemon answers (the command's one line), and stops them on leaving the
block (SIGINT, as Ctrl-C; SIGKILL after a bounded wait). A script killed inside the block (SIGTERM,
kill -9) takes them along: on Linux `ravnest local` gets SIGTERM when the thread that started it
ends (PR_SET_PDEATHSIG), and stops its daemons.
"""

import ctypes
import os
import signal
import subprocess
import sys
import threading

from ._cli import RavnestError, binary, error_line


def _die_with_parent():
    # In the child, before exec: SIGTERM when the parent's thread ends. Best effort (Linux only).
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG
    except Exception:
        pass


class local:
    def __init__(self, nodes=3, dir=".", gpus=None, ram=None, bandwidth=None, force=False,
                 timeout=120):
        self.dir = dir
        self.args = ["local", "--nodes", str(int(nodes)), "--dir", dir]
        if gpus is not None:
            self.args += ["--gpus", ",".join(str(g) for g in gpus)]
        if ram is not None:
            self.args += ["--ram", repr(float(ram))]
        if bandwidth is not None:
            self.args += ["--bandwidth", repr(float(bandwidth))]
        if force:
            self.args.append("--force")
        self.timeout = timeout
        self.pool_file = os.path.join(dir, "node_data", "node_configs.json")
        self.secret_file = os.path.join(dir, "node_data", "secret")
        self.proc = None
        self.line = None

    def __enter__(self):
        self.proc = subprocess.Popen([binary()] + self.args, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, universal_newlines=True,
                                     preexec_fn=_die_with_parent if sys.platform.startswith("linux")
                                     else None)
        lines = []
        reader = threading.Thread(target=lambda: lines.append(self.proc.stdout.readline()))
        reader.daemon = True
        reader.start()
        reader.join(self.timeout)
        if not lines or not lines[0].startswith("ravnest local:"):
            self._stop()
            err = self.proc.stderr.read()
            raise RavnestError(error_line(err, "local") if err.strip() else
                               "ravnest local: the daemons did not start within %g s" % self.timeout)
        self.line = lines[0].strip()
        print(self.line)
        return self

    def _stop(self, interrupted=False):
        # Ctrl-C at a terminal reached `ravnest local` too (one process group): a second SIGINT
        # would end it at once, before it stopped its daemons.
        if self.proc.poll() is None and not interrupted:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def __exit__(self, exc_type, exc, tb):
        self._stop(interrupted=exc_type is KeyboardInterrupt)
        return False
