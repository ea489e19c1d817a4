#!/usr/bin/python3
"""Man pages from the command line itself: ravnest(1), one ravnest-COMMAND(1) per subcommand and
ravnestd(8), each with every option the program takes, read from `PROGRAM --dump-options`
(apps/cli_support/cli_description.h). Usage:

    cli_man.py RAVNEST_JSON RAVNESTD_JSON OUT_DIR VERSION DATE

writes OUT_DIR/man1/*.1.gz and OUT_DIR/man8/ravnestd.8.gz (gzip -n9)."""
import json
import os
import sys

from roff import escape, header, write_gzipped

MANUAL = "ravnest manual"


def option_synopsis(option):
    names = ", ".join("\\fB" + escape(n) + "\\fR" for n in option["names"])
    if option["value"]:
        names += " \\fI" + escape(option["value"]) + "\\fR"
        if option["multiple"]:
            names += " ..."
    return names


def options_section(options, title="OPTIONS"):
    out = ".SH " + title + "\n"
    for option in options:
        out += ".TP\n" + option_synopsis(option) + "\n"
        text = option["description"] or ""
        if option["required"]:
            text += " (required)"
        if option["default"] not in ("", "[]"):
            text += " (default: " + option["default"] + ")"
        out += escape(text.strip() or "see --help") + "\n"
    return out


def positional_synopsis(command):
    words = []
    for positional in command["positionals"]:
        word = "\\fI" + escape(positional["names"][0]) + "\\fR"
        if positional["multiple"]:
            word += " ..."
        words.append(word if positional["required"] else "[" + word + "]")
    return " ".join(words)


def command_page(command, version, date, see_also):
    name = "ravnest-" + command["name"]
    out = header(name, 1, date, version, MANUAL)
    out += ".SH NAME\n" + escape(name) + " \\- " + escape(command["description"]) + "\n"
    out += ".SH SYNOPSIS\n"
    subs = command["subcommands"]
    if subs:
        for sub in subs:
            out += ".B ravnest " + escape(command["name"]) + " " + escape(sub["name"]) + "\n"
            out += "[\\fIOPTIONS\\fR] " + positional_synopsis(sub) + "\n.br\n"
    else:
        out += ".B ravnest " + escape(command["name"]) + "\n"
        out += "[\\fIOPTIONS\\fR] " + positional_synopsis(command) + "\n"
    out += ".SH DESCRIPTION\n" + escape(command["description"]) + ".\n"
    if command["positionals"]:
        out += ".SH ARGUMENTS\n"
        for positional in command["positionals"]:
            out += ".TP\n\\fI" + escape(positional["names"][0]) + "\\fR\n"
            out += escape(positional["description"]) + "\n"
    out += options_section(command["options"])
    for sub in subs:
        out += ".SH \"" + escape(command["name"] + " " + sub["name"]).upper() + "\"\n"
        out += escape(sub["description"]) + ".\n"
        out += options_section(sub["options"], "OPTIONS OF " + escape(sub["name"]).upper())
    out += ".SH SEE ALSO\n" + see_also + "\n"
    out += ".PP\nThe documentation: /usr/share/doc/ravnest/docs/.\n"
    return out


def program_page(program, title, section, version, date, summary, see_also, extra=""):
    out = header(title, section, date, version, MANUAL)
    out += ".SH NAME\n" + escape(title) + " \\- " + escape(summary) + "\n"
    out += ".SH SYNOPSIS\n.B " + escape(title) + "\n"
    out += ("\\fICOMMAND\\fR [\\fIOPTIONS\\fR]\n" if program["subcommands"]
            else "[\\fIOPTIONS\\fR]\n")
    description = program["description"]
    if description.startswith(title + ": "):  # CLI11's description names the program
        description = description[len(title) + 2:]
    out += ".SH DESCRIPTION\n" + escape(description[:1].upper() + description[1:]) + ".\n" + extra
    if program["subcommands"]:
        out += ".SH COMMANDS\nEach command has its own page, ravnest\\-\\fICOMMAND\\fR(1).\n"
        for command in program["subcommands"]:
            out += ".TP\n\\fBravnest\\-" + escape(command["name"]) + "\\fR(1)\n"
            out += escape(command["description"]) + "\n"
    out += options_section(program["options"])
    out += ".SH SEE ALSO\n" + see_also + "\n"
    return out


def see_also(pages, leave_out):
    return ",\n".join("\\fB" + escape(name) + "\\fR(" + section + ")"
                      for name, section in pages if name != leave_out)


def main():
    ravnest_json, ravnestd_json, out_dir, version, date = sys.argv[1:6]
    with open(ravnest_json) as f:
        ravnest = json.load(f)
    with open(ravnestd_json) as f:
        ravnestd = json.load(f)
    os.makedirs(os.path.join(out_dir, "man1"), exist_ok=True)
    os.makedirs(os.path.join(out_dir, "man8"), exist_ok=True)
    pages = ([("ravnest", "1")] + [("ravnest-" + c["name"], "1") for c in ravnest["subcommands"]]
             + [("ravnest-job", "5"), ("ravnestd", "8")])
    for command in ravnest["subcommands"]:
        name = "ravnest-" + command["name"]
        write_gzipped(os.path.join(out_dir, "man1", name + ".1.gz"),
                      command_page(command, version, date, see_also(pages, name)))
    write_gzipped(os.path.join(out_dir, "man1", "ravnest.1.gz"),
                  program_page(ravnest, "ravnest", 1, version, date,
                               "train PyTorch models across many ordinary machines",
                               see_also(pages, "ravnest"),
                               ".PP\nThe job file that \\fBravnest train\\fR reads is described "
                               "in \\fBravnest\\-job\\fR(5); examples are in "
                               "/usr/share/doc/ravnest/examples.\n"))
    write_gzipped(os.path.join(out_dir, "man8", "ravnestd.8.gz"),
                  program_page(ravnestd, "ravnestd", 8, version, date,
                               "serve one provider node of a ravnest plan",
                               see_also(pages, "ravnestd"),
                               ".PP\nOn a provider machine it runs as the systemd service "
                               "\\fBravnestd.service\\fR; its configuration is "
                               "/etc/ravnest/ravnestd.toml (example: "
                               "/etc/ravnest/ravnestd.toml.example).\n"))


if __name__ == "__main__":
    main()
