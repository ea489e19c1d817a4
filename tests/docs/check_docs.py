#!/usr/bin/python3
"""Runs a command the documentation tells a user to type, as the documentation writes it.

    check_docs.py CHECK        run one check (ctest runs each as docs_CHECK, tests/docs/CMakeLists.txt)
    check_docs.py --list       the checks, one a line

Environment (ctest sets it): RAVNEST_SOURCE_DIR (the repository), RAVNEST_BINARY_DIR (the build
whose programs are checked), RAVNEST_PYTHON (the Python with the torch that build goes with).

What the checks are (CHECKS below):
- scripts and examples README names, run as README writes them: `scripts/demo`,
  `examples/ps/run.sh`, `examples/hybrid/run.sh`;
- blocks of the documents themselves (README.md, packaging/README.md, docs/*.md): a fenced block right after a line
  `<!-- checked: NAME -->` (the whole line) is extracted from its document at run time and run as written (sh with
  bash -eu -o pipefail, python with RAVNEST_PYTHON from a file), so the document and the check are
  one text;
- the benchmarks README names, in a short form (fewer jobs, sizes or models; the same code path);
- `coverage`: every script, example and benchmark README names is one of these checks or is in
  NOT_RUN with the reason, and every marked block of the documents is a check. A command added to
  README without a check, or a check whose block was removed, fails here.

Every check runs in a shadow of the repository root (a temporary folder holding a link to each
of its top-level entries, and `build` linking to RAVNEST_BINARY_DIR), because README's commands are
typed from the repository root: what they write lands in the shadow, not in the checkout. The
shadow and every process the check started (its own process group) are removed at the end.
Exit: 0 when the command exited 0 (and its output holds what the check expects), 1 otherwise.
"""

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile

SOURCE = os.environ.get("RAVNEST_SOURCE_DIR") or os.path.dirname(os.path.dirname(
    os.path.dirname(os.path.abspath(__file__))))
BINARY = os.environ.get("RAVNEST_BINARY_DIR") or os.path.join(SOURCE, "build")
PYTHON = os.environ.get("RAVNEST_PYTHON") or "/usr/bin/python3"

# name -> (what it runs, the expected line's pattern or None). A command is a list run from the
# shadow root; ("block", DOC, NAME) is the marked block NAME of DOC.
CHECKS = {
    # README's first command: the main job (its last line says the accuracy and the goal).
    "demo": (["scripts/demo"], r"accuracy \d+\.\d+% \(goal: at least 95%\)"),
    "example_ps": (["examples/ps/run.sh"], r"ok \d+ tensors"),
    "example_hybrid": (["examples/hybrid/run.sh"], r"ok \d+ tensors"),
    # README, "The whole path on one machine": torch.export's (the 2.x build), TorchScript's.
    "export_path": (("block", "README.md", "export-path"), r"accuracy \d"),
    "users_path": (("block", "README.md", "users-path"), r"accuracy \d"),
    # docs/python.md's script.
    "python_path": (("block", "docs/python.md", "python-path"), r"accuracy"),
    # docs/local.md's two terminals, as one script.
    "local_path": (("block", "docs/local.md", "local-path"), r"loss"),
    # packaging/README.md's one command for the .deb.
    "deb": (("block", "packaging/README.md", "deb"), r"(?i)package: .*ravnest_.*_amd64\.deb"),
    # The benchmarks of README's Development section, short.
    "bench_soak": (["bench/soak", "--jobs", "3", "--seed", "2", "--every", "3",
                    "--kill-probability", "1"],
                   r"jobs with the uninterrupted weights|lost"),
    "bench_allreduce": (["build/apps/ravnest/ravnest", "bench", "allreduce", "--nodes", "2",
                         "--size", "4MiB"], r"(?i)gloo"),
    "bench_pipeline": (["bench/pipeline.sh", "--models", "digits", "--stages", "2"], r"\d\.\d+x"),
    "bench_wire_throughput": (["bench/wire_throughput.sh", "build", "1"], r"ratio wire/raw: median \d"),
    "bench_relay_throughput": (["bench/relay_throughput.sh", "build", "1", "4"],
                               r"ratio relayed/direct: median \d"),
    "bench_elastic_recovery": (["bench/elastic_recovery.sh", "build", "1"],
                               r"ratio recovery/expiry: median \d"),
    "bench_clusterize_resnet50": (["env", "BATCH=4", "bench/clusterize_resnet50.sh"], r"(?i)save"),
    "bench_planner": (["bench/planner.sh", "--sizes", "16,128"], r"\d"),
}

# Checks that need the LibTorch 2.x build: only its ctest registers them.
TORCH2_CHECKS = {"export_path"}

# What README names and CI does not run, and why. Nothing else may be missing from CHECKS.
NOT_RUN = {
    "scripts/test": "it is CI itself (.ci/run runs it)",
    "scripts/build": "every check above runs after it; scripts/test runs it first",
    "scripts/bootstrap": "scripts/test and scripts/demo run it first",
    "scripts/fuzz": "scripts/test runs its quick form before ctest",
    "scripts/venv": "scripts/test runs it for the LibTorch 2.x build",
    "scripts/gpu-check": "needs a GPU (docs/performance.md#gpu: run on a lent machine)",
    "bench/allreduce.sh": "the grid of `ravnest bench allreduce` next to Gloo, which bench_allreduce "
                          "runs once; several minutes a run",
    "bench/profile_allreduce.sh": "needs perf (linux-perf), which the project does not install",
    "bench/wan.sh": "shapes links between network namespaces for minutes; its rings and pipelines "
                    "run in the *_hosts_* tests",
}


def marked_block(document, name):
    """The fenced block right after `<!-- checked: NAME -->` in DOCUMENT: (language, text)."""
    path = os.path.join(SOURCE, document)
    text = open(path, encoding="utf-8").read()
    match = re.search(r"(?m)^<!-- checked: " + re.escape(name) + r" -->\n```(\w*)\n(.*?)\n```", text,
                      re.S)
    if not match:
        raise SystemExit(f"{document}: no block marked <!-- checked: {name} --> (the check "
                         f"docs_{name.replace('-', '_')} runs it)")
    return match.group(1), match.group(2) + "\n"


def marked_blocks_everywhere():
    """Every (document, name) marked in README.md and docs/*.md."""
    found = []
    documents = ["README.md", "packaging/README.md"] + [
        "docs/" + f for f in sorted(os.listdir(os.path.join(SOURCE, "docs"))) if f.endswith(".md")]
    for document in documents:
        text = open(os.path.join(SOURCE, document), encoding="utf-8").read()
        found += [(document, n) for n in re.findall(r"(?m)^<!-- checked: ([\w-]+) -->$", text)]
    return found


def coverage():
    """README's scripts, examples and benchmarks against CHECKS and NOT_RUN; marked blocks."""
    readme = open(os.path.join(SOURCE, "README.md"), encoding="utf-8").read()
    named = set(re.findall(r"\b((?:scripts|bench|examples/\w+)/[\w./-]*\w)", readme))
    named = {n for n in named if os.path.isfile(os.path.join(SOURCE, n))}
    checked = {next(a for a in c[0] if a != "env" and "=" not in a) for c in CHECKS.values()
               if isinstance(c[0], list)}
    # What a checked block runs is checked too (the users' path runs examples/digits/make_data.py).
    # Reading every block also exits, naming it, when a check's block is gone from its document.
    block_text = "".join(marked_block(c[0][1], c[0][2])[1] for c in CHECKS.values()
                         if isinstance(c[0], tuple))
    checked |= {n for n in named if re.search(r"(^|[\s/.])" + re.escape(n) + r"\b", block_text)}
    problems = [f"README.md names {n}, which no docs check runs and NOT_RUN does not excuse "
                f"(tests/docs/check_docs.py)" for n in sorted(named - checked - set(NOT_RUN))]
    problems += [f"tests/docs/check_docs.py excuses {n}, which README.md no longer names"
                 for n in sorted(set(NOT_RUN) - named)]
    blocks = {c[0][1:] for c in CHECKS.values() if isinstance(c[0], tuple)}
    for document, name in marked_blocks_everywhere():
        if (document, name) not in blocks:
            problems.append(f"{document}: the block marked {name} is not a check of "
                            f"tests/docs/check_docs.py")
    registered = os.environ.get("RAVNEST_DOCS_CTEST_CHECKS")
    # The 1.13 build registers every check but the 2.x build's own.
    if registered is not None and set(registered.split(",")) not in (
            set(CHECKS) | {"coverage"}, (set(CHECKS) - TORCH2_CHECKS) | {"coverage"}):
        problems.append("tests/docs/CMakeLists.txt registers " + ", ".join(sorted(
            set(registered.split(",")) ^ (set(CHECKS) | {"coverage"}))) + " differently from "
            "tests/docs/check_docs.py's CHECKS")
    for p in problems:
        print("FAIL: " + p)
    print(f"coverage: {len(named)} commands named in README.md, {len(named & checked)} run, "
          f"{len(NOT_RUN)} excused; {len(blocks)} marked blocks run")
    return 1 if problems else 0


def source_entries():
    """The repository root's entries a document may use: what git tracks, and the build folders
    (build-torch2 for the torch.export path). What a run leaves in the root (.ravnest, node_data,
    my_first_job) is not linked: a block writing there would write through into the checkout."""
    try:
        tracked = subprocess.run(["git", "-C", SOURCE, "ls-files"], capture_output=True,
                                 text=True, check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        return [e for e in os.listdir(SOURCE) if e != ".git"]
    entries = {path.split("/", 1)[0] for path in tracked}
    entries |= {e for e in os.listdir(SOURCE) if e.startswith("build")}
    return sorted(entries)


def shadow_root():
    """A temporary folder that looks like the repository root, with build -> RAVNEST_BINARY_DIR."""
    shadow = tempfile.mkdtemp(prefix="ravnest-docs-")
    for entry in source_entries():
        if entry in (".git", "build") or not os.path.exists(os.path.join(SOURCE, entry)):
            continue
        os.symlink(os.path.join(SOURCE, entry), os.path.join(shadow, entry))
    os.symlink(BINARY, os.path.join(shadow, "build"))
    return shadow


def run(check):
    command, expected = CHECKS[check]
    shadow = shadow_root()
    env = dict(os.environ)
    env.update({
        "RAVNEST_BUILD_DIR": BINARY,
        "RAVNEST_DEMO_DIR": os.path.join(shadow, "demo_run"),
        "RAVNEST_PS_DIR": os.path.join(shadow, "ps_run"),
        "RAVNEST_HYBRID_DIR": os.path.join(shadow, "hybrid_run"),
        "RAVNEST_BIN": os.path.join(BINARY, "apps", "ravnest", "ravnest"),
        "PYTHONPATH": os.path.join(SOURCE, "python"),
        "PYTHONDONTWRITEBYTECODE": "1",
        # The documents say "with the programs on PATH": the build's, first.
        "PATH": os.pathsep.join([os.path.join(BINARY, "apps", "ravnest"),
                                 os.path.join(BINARY, "apps", "ravnestd"), os.environ["PATH"]]),
    })
    if isinstance(command, tuple):
        language, text = marked_block(command[1], command[2])
        print(f"== {command[1]}, the block marked {command[2]}:\n{text}", flush=True)
        script = os.path.join(shadow, f".check_{check}")
        with open(script, "w") as f:
            f.write(text)
        if language == "python":
            argv = [PYTHON, script]
        elif language in ("sh", "bash"):
            argv = ["bash", "-eu", "-o", "pipefail", script]
        else:
            raise SystemExit(f"{command[1]}: block {command[2]} is ```{language}, not sh or python")
    else:
        argv = list(command)
        print("== " + " ".join(argv), flush=True)
    process = subprocess.Popen(argv, cwd=shadow, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, start_new_session=True)
    lines = []
    try:
        for line in process.stdout:
            sys.stdout.write(line)
            sys.stdout.flush()
            lines.append(line)
        code = process.wait()
    finally:
        try:  # whatever the command left running (daemons, `ravnest local`)
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        shutil.rmtree(shadow, ignore_errors=True)
    if code != 0:
        print(f"FAIL: docs check {check} exited {code}")
        return 1
    if expected and not re.search(expected, "".join(lines)):
        print(f"FAIL: docs check {check} printed no line matching {expected!r}")
        return 1
    print(f"docs check {check}: ok")
    return 0


def main():
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    if sys.argv[1] == "--list":
        print("\n".join(list(CHECKS) + ["coverage"]))
        return 0
    if sys.argv[1] == "coverage":
        return coverage()
    if sys.argv[1] not in CHECKS:
        raise SystemExit(f"check_docs.py: no check {sys.argv[1]!r}; --list shows them")
    return run(sys.argv[1])


if __name__ == "__main__":
    sys.exit(main())
