#!/usr/bin/python3
"""Bash completion of ravnest and ravnestd from the command line itself (`PROGRAM --dump-options`,
apps/cli_support/cli_description.h): every subcommand and every option, so it cannot drift.
Only how an option's value is completed is chosen here (VALUES: directories, or a fixed list);
any other option that takes a value completes file names. Usage:

    completion.py RAVNEST_JSON RAVNESTD_JSON OUT
"""
import json
import os
import sys

# How values are completed, by option name. An option not named here that takes a value
# completes file names; the lists name what the programs accept (their --help says the same).
DIRECTORIES = {"--plan", "--from", "--out", "--data-dir"}
VALUES = {
    "--mode": "pipeline ps hybrid",
    "--schedule": "gpipe 1f1b async",
    "--compression": "none fp16 bf16 int8",
    "--log-level": "trace debug info warn error critical off",
    "--device": "cpu cuda",
}


def walk(command, path, out):
    """(path, subcommand names, option names, options taking a value) for every command."""
    options = [n for o in command["options"] for n in o["names"]]
    valued = [n for o in command["options"] if o["value"] for n in o["names"]]
    out.append((path, [s["name"] for s in command["subcommands"]], options, valued))
    for sub in command["subcommands"]:
        walk(sub, (path + " " + sub["name"]).strip(), out)
    return out


def function(name, program):
    commands = walk(program, "", [])
    lines = [
        "_{}() {{".format(name),
        "  local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]} path= w",
        "  for w in \"${COMP_WORDS[@]:1:COMP_CWORD-1}\"; do",
        "    case \"$path:$w\" in",
    ]
    for path, subs, _, _ in commands:
        for sub in subs:
            lines.append("      \"{}:{}\") path=\"{}\" ;;".format(
                path, sub, (path + " " + sub).strip()))
    lines += ["    esac", "  done"]
    lines.append("  case \"$prev\" in")
    all_valued = sorted({n for _, _, _, valued in commands for n in valued})
    dirs = [n for n in all_valued if n in DIRECTORIES]
    if dirs:
        lines.append("    {}) COMPREPLY=($(compgen -d -- \"$cur\")); return ;;".format(
            "|".join(dirs)))
    for option in all_valued:
        if option in VALUES:
            lines.append("    {}) COMPREPLY=($(compgen -W \"{}\" -- \"$cur\")); return ;;".format(
                option, VALUES[option]))
    lines.append("  esac")
    lines.append("  case \"$path:$prev\" in")
    for path, _, _, valued in commands:
        rest = [n for n in valued if n not in DIRECTORIES and n not in VALUES]
        if rest:
            lines.append("    {}) COMPREPLY=($(compgen -f -- \"$cur\")); return ;;".format(
                "|".join("\"{}:{}\"".format(path, n) for n in rest)))
    lines.append("  esac")
    lines.append("  local subs= opts=")
    lines.append("  case \"$path\" in")
    for path, subs, options, _ in commands:
        lines.append("    \"{}\") subs=\"{}\" opts=\"{}\" ;;".format(
            path, " ".join(subs), " ".join(options)))
    lines += [
        "  esac",
        "  if [[ $cur == -* ]]; then",
        "    COMPREPLY=($(compgen -W \"$opts\" -- \"$cur\"))",
        "  elif [[ -n $subs ]]; then",
        "    COMPREPLY=($(compgen -W \"$subs\" -- \"$cur\"))",
        "  else",
        "    COMPREPLY=($(compgen -f -- \"$cur\"))  # models, job files, data",
        "  fi",
        "}",
    ]
    return "\n".join(lines) + "\n"


def main():
    ravnest_json, ravnestd_json, target = sys.argv[1:4]
    with open(ravnest_json) as f:
        ravnest = json.load(f)
    with open(ravnestd_json) as f:
        ravnestd = json.load(f)
    text = ("# bash completion for ravnest and ravnestd, generated from their `--dump-options` by\n"
            "# packaging/generate/completion.py; installed in\n"
            "# /usr/share/bash-completion/completions.\n"
            + function("ravnest", ravnest) + function("ravnestd", ravnestd)
            + "complete -F _ravnest ravnest\ncomplete -F _ravnestd ravnestd\n")
    with open(target + ".tmp", "w") as f:
        f.write(text)
    os.replace(target + ".tmp", target)


if __name__ == "__main__":
    main()
