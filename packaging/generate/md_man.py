#!/usr/bin/python3
"""A man page from one of the project's markdown documents (pandoc is not in the build's Debian
packages): enough markdown for docs/job-file.md: headings, paragraphs, lists, fenced and indented
code, tables (each row a tagged paragraph: the first cell the tag, the others under it), inline
code, bold, emphasis and links. Usage:

    md_man.py DOC.md OUT.N.gz NAME SECTION "SUMMARY" VERSION DATE
"""
import re
import sys

from roff import escape, header, inline_markdown, write_gzipped


def split_row(line):
    cells = line.strip().strip("|").split("|")
    return [cell.strip() for cell in cells]


def table(rows):
    head = split_row(rows[0])
    out = ""
    for row in rows[2:]:  # rows[1] is the |---| line
        cells = split_row(row)
        out += ".TP\n" + inline_markdown(cells[0]) + "\n"
        details = ["{} {}".format(h, c) for h, c in zip(head[1:-1], cells[1:-1]) if c]
        if details:
            out += inline_markdown("; ".join(details)) + ".\n.br\n"
        if len(cells) > 1:
            out += inline_markdown(cells[-1]) + "\n"
    return out


def convert(markdown, name, section, summary, version, date):
    lines = markdown.splitlines()
    out = header(name, section, date, version, "ravnest manual")
    out += ".SH NAME\n" + escape(name) + " \\- " + escape(summary) + "\n"
    i = 0
    paragraph = []

    def flush():
        nonlocal out, paragraph
        if paragraph:
            out += ".PP\n" + inline_markdown(" ".join(paragraph)) + "\n"
            paragraph = []

    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            flush()
            i += 1
            out += ".PP\n.RS 4\n.nf\n"
            while i < len(lines) and not lines[i].startswith("```"):
                out += escape(lines[i]) + "\n"
                i += 1
            out += ".fi\n.RE\n"
        elif line.startswith("    ") and not paragraph:
            out += ".PP\n.RS 4\n.nf\n"
            while i < len(lines) and (lines[i].startswith("    ") or not lines[i].strip()):
                if not lines[i].strip() and not (i + 1 < len(lines)
                                                 and lines[i + 1].startswith("    ")):
                    break
                out += escape(lines[i][4:]) + "\n"
                i += 1
            out += ".fi\n.RE\n"
            continue
        elif line.startswith("#"):
            flush()
            level = len(line) - len(line.lstrip("#"))
            title = line.lstrip("#").strip()
            if level == 1:
                out += ".SH DESCRIPTION\n.PP\n\\fB" + inline_markdown(title) + "\\fR\n"
            elif level == 2:
                out += ".SH \"" + inline_markdown(title).upper() + "\"\n"
            else:
                out += ".SS \"" + inline_markdown(title) + "\"\n"
        elif line.startswith("|"):
            flush()
            rows = []
            while i < len(lines) and lines[i].startswith("|"):
                rows.append(lines[i])
                i += 1
            out += table(rows)
            continue
        elif re.match(r"^\s*([-*]|\d+\.) ", line):
            flush()
            item = [re.sub(r"^\s*([-*]|\d+\.) ", "", line)]
            i += 1
            while i < len(lines) and lines[i].startswith("  ") and lines[i].strip() and \
                    not re.match(r"^\s*([-*]|\d+\.) ", lines[i]):
                item.append(lines[i].strip())
                i += 1
            out += ".IP \\(bu 2\n" + inline_markdown(" ".join(item)) + "\n"
            continue
        elif not line.strip():
            flush()
        else:
            paragraph.append(line.strip())
        i += 1
    flush()
    return out


def main():
    source, target, name, section, summary, version, date = sys.argv[1:8]
    with open(source, encoding="utf-8") as f:
        text = f.read()
    write_gzipped(target, convert(text, name, section, summary, version, date))


if __name__ == "__main__":
    main()
