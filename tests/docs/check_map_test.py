#!/usr/bin/python3
# scripts/check-map can fail: on a copy of the source tree it breaks each rule on purpose and
# expects the checker to exit 1 with a line naming the file, the line and the rule (ctest
# map_check_fails). Lines the untouched copy already prints are left out of each comparison, so
# this test says whether the checker works, and map_check whether the tree holds.
#   tests/docs/check_map_test.py [SOURCE_DIR]    (default: RAVNEST_SOURCE_DIR, else ../..)
import os
import re
import shutil
import subprocess
import sys
import tempfile

SOURCE = (sys.argv[1] if len(sys.argv) > 1 else
          os.environ.get("RAVNEST_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", "..")))
SOURCE = os.path.abspath(SOURCE)


def copy_tree(dest):
    def ignore(folder, names):
        top = os.path.abspath(folder) == SOURCE
        return [n for n in names if n.startswith(".") or n == "__pycache__" or
                (top and n.startswith("build"))]
    shutil.copytree(SOURCE, dest, ignore=ignore, symlinks=True)


def run(root):
    p = subprocess.run([sys.executable, os.path.join(root, "scripts", "check-map"), "--root", root],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    return p.returncode, set(p.stdout.splitlines())


class Tree:
    """The copy, with each change undone by restore() (one copy serves every case)."""

    def __init__(self, root):
        self.root, self.saved, self.made = root, {}, []

    def _keep(self, path):
        full = os.path.join(self.root, path)
        if path not in self.saved:
            if os.path.exists(full):
                with open(full, encoding="utf-8") as f:
                    self.saved[path] = f.read()
            else:
                self.saved[path] = None
        return full

    def append(self, path, text):
        full = self._keep(path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "a", encoding="utf-8") as f:
            f.write(text)
        with open(full, encoding="utf-8") as f:
            return f.read().count("\n")  # the line just written, when `text` is one line

    def replace(self, path, old, new):
        full = self._keep(path)
        with open(full, encoding="utf-8") as f:
            text = f.read()
        assert old in text, f"{path} has no '{old}' to break"
        with open(full, "w", encoding="utf-8") as f:
            f.write(text.replace(old, new, 1))
        return text[:text.index(old)].count("\n") + 1

    def remove(self, path):
        os.remove(self._keep(path))

    def restore(self):
        for path, text in self.saved.items():
            full = os.path.join(self.root, path)
            if text is None:
                os.remove(full)
            else:
                with open(full, "w", encoding="utf-8") as f:
                    f.write(text)
        self.saved = {}


MAP = "docs/architecture.md"


def upward_include(tree):
    n = tree.append("libs/base/clock.h", '#include "libs/daemon/daemon.h"\n')
    return rf"^libs/base/clock\.h:{n}: include: `libs/base` includes `libs/daemon`"


def header_not_allowed(tree):
    n = tree.append("libs/ring/ring_transport.h", '#include "libs/wire/value_codec.h"\n')
    return rf"^libs/ring/ring_transport\.h:{n}: include: .*allows only"


def system_include(tree):
    n = tree.append("libs/worker/job_worker.h", "#include <capnp/message.h>\n")
    return rf"^libs/worker/job_worker\.h:{n}: system: "


def wrong_namespace(tree):
    n = tree.replace("libs/base/clock.h", "namespace ravnest::base {", "namespace ravnest::core {")
    return rf"^libs/base/clock\.h:{n}: namespace: opens ravnest::core"


def link_line(tree):
    n = tree.append("libs/config/CMakeLists.txt", "target_link_libraries(ravnest_config PUBLIC ravnest_daemon)\n")
    return rf"^libs/config/CMakeLists\.txt:{n}: link: .*ravnest_daemon"


def stale_column(tree):
    n = tree.replace(MAP, "(`measured_planning.h`) | base, config |", "(`measured_planning.h`) | base, config, wire |")
    return rf"^docs/architecture\.md:{n}: column: `libs/planner` lists `libs/wire`"


def missing_named_file(tree):
    tree.remove("libs/base/crc32c.h")
    return r"^docs/architecture\.md:\d+: missing-file: names `crc32c\.h`"


def missing_name(tree):
    n = tree.replace(MAP, "`RootFeeder::inject_micro`", "`RootFeeder::inject_micro_gone`")
    return rf"^docs/architecture\.md:{n}: missing-name: .*inject_micro_gone"


def missing_comment_path(tree):
    n = tree.append("libs/base/clock.h", "// See libs/base/no_such_clock.h.\n")
    return rf"^libs/base/clock\.h:{n}: missing-file: .*no_such_clock\.h"


def long_file(tree):
    tree.append("libs/base/sha256.cpp", "// padding\n" * 601)
    return r"^libs/base/sha256\.cpp:1: long-file: "


LONG_BODY = "  int x = 0;\n" + "  x += 1;\n" * 100 + "  return x;\n"


def long_function(tree):
    n = tree.append("libs/worker/compute_threads.cpp",
                    "namespace ravnest::worker {\nint padded_count(int a) {\n" + LONG_BODY + "}\n}\n")
    return rf"^libs/worker/compute_threads\.cpp:{n - 104}: long-function: padded_count is 104 lines"


def unmapped_folder(tree):
    tree.append("libs/orphan/orphan.cpp", "int orphan() { return 0; }\n")
    return r"^libs/orphan:0: row: "


CASES = [upward_include, header_not_allowed, system_include, wrong_namespace, link_line, stale_column,
         missing_named_file, missing_name, missing_comment_path, long_file, long_function,
         unmapped_folder]


def main():
    failures = []
    with tempfile.TemporaryDirectory(prefix="check_map_") as tmp:
        root = os.path.join(tmp, "tree")
        copy_tree(root)
        tree = Tree(root)
        _, baseline = run(root)
        for case in CASES:
            expected = case(tree)
            code, lines = run(root)
            tree.restore()
            new = sorted(lines - baseline)
            hits = [l for l in new if re.search(expected, l)]
            if code != 1 or not hits:
                failures.append(f"{case.__name__}: exit {code}, expected a line /{expected}/; new lines: "
                                + ("; ".join(new) or "none"))
            else:
                print(f"{case.__name__}: fails as it should: {hits[0]}")
        # A long file that says why passes.
        tree.replace("libs/base/sha256.cpp", "#include", "// Long because: a test of scripts/check-map.\n#include")
        tree.append("libs/base/sha256.cpp", "// padding\n" * 601)
        _, lines = run(root)
        tree.restore()
        said = [l for l in lines - baseline if "sha256.cpp" in l]
        if said:
            failures.append("long_with_reason: a 'Long because:' line should pass: " + "; ".join(said))
        else:
            print("long_with_reason: passes as it should")
        # A long function that says why passes.
        tree.append("libs/worker/compute_threads.cpp",
                    "namespace ravnest::worker {\n// Long because: a test of scripts/check-map.\n"
                    "int padded_count(int a) {\n" + LONG_BODY + "}\n}\n")
        _, lines = run(root)
        tree.restore()
        said = [l for l in lines - baseline if "padded_count" in l]
        if said:
            failures.append("long_function_with_reason: a 'Long because:' line should pass: " + "; ".join(said))
        else:
            print("long_function_with_reason: passes as it should")
        if run(root)[1] != baseline:
            failures.append("the copy did not come back to what it was after the cases")
    for f in failures:
        print("FAILED " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
