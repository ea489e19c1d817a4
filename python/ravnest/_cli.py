"""Runs the `ravnest` binary: where it is, and its failures as RavnestError.

The binary is $RAVNEST_BIN, else the build tree's apps/ravnest/ravnest under $RAVNEST_BINARY_DIR
(what ctest sets), else `ravnest` on PATH. Every failing command prints one line
"ravnest: error: ..." on stderr and exits non-zero; that line becomes the exception's message.
"""

import os
import shutil
import subprocess
import sys


class RavnestError(RuntimeError):
    """A ravnest command failed; str() is its one-line message."""


def binary():
    env = os.environ.get("RAVNEST_BIN")
    if env:
        if not (os.path.isfile(env) and os.access(env, os.X_OK)):
            raise RavnestError("$RAVNEST_BIN (%s) names no executable file: point it at the "
                               "ravnest binary, or unset it" % env)
        return env
    build = os.environ.get("RAVNEST_BINARY_DIR")
    if build:
        candidate = os.path.join(build, "apps", "ravnest", "ravnest")
        if os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which("ravnest")
    if found:
        return found
    raise RavnestError("no ravnest binary: install the ravnest package, put it on PATH or set "
                       "$RAVNEST_BIN")


def error_line(stderr, command):
    """The one line a failed command gave ("ravnest: error: X" -> "X"), else its last line."""
    lines = [line for line in stderr.splitlines()
             if line.strip() and not line.startswith("Run with --help")]
    for line in reversed(lines):
        if line.startswith("ravnest: error: "):
            return line[len("ravnest: error: "):]
    return lines[-1] if lines else "`ravnest %s` failed" % command


def run(args, stream=False, cwd=None):
    """Runs `ravnest ARGS`; returns its stdout. stream: its stdout goes to sys.stdout line by line
    as it comes (train's progress) and is returned too. Raises RavnestError on failure."""
    cmd = [binary()] + [str(a) for a in args]
    if not stream:
        done = subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              universal_newlines=True)
        if done.returncode != 0:
            raise RavnestError(error_line(done.stderr, args[0]))
        return done.stdout
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            universal_newlines=True, bufsize=1)
    out = []
    try:
        for line in proc.stdout:
            out.append(line)
            sys.stdout.write(line)
            sys.stdout.flush()
        err = proc.stderr.read()
    except KeyboardInterrupt:
        # Ctrl-C at a terminal reached the command too (one process group), which stops the job
        # on every node: let it finish doing so (a second SIGINT would end it at once).
        proc.wait()
        raise
    if proc.wait() != 0:
        raise RavnestError(error_line(err, args[0]))
    if err:
        sys.stderr.write(err)
    return "".join(out)
