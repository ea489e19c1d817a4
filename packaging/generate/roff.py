"""Shared by the generators: escaping text for roff (man(7)) and writing a gzipped page the way
Debian wants it (gzip -n9: no name, no time stamp, so two builds give the same bytes)."""
import gzip
import os
import re


def escape(text):
    """Plain text -> roff: backslashes and minus signs escaped, a line never starts a request."""
    text = text.replace("\\", "\\e").replace("-", "\\-")
    return re.sub(r"^([.'])", r"\\&\1", text, flags=re.M)


def inline_markdown(text):
    """`code` and **bold** in bold, *emphasis* in italics, [text](link) as its text."""
    text = re.sub(r"\[([^\]]+)\]\([^)]+\)", r"\1", text)
    parts = re.split(r"(`[^`]*`)", text)
    out = []
    for part in parts:
        if part.startswith("`") and part.endswith("`") and len(part) >= 2:
            out.append("\\fB" + escape(part[1:-1]) + "\\fR")
            continue
        part = escape(part)
        part = re.sub(r"\*\*([^*]+)\*\*", r"\\fB\1\\fR", part)
        part = re.sub(r"(?<![\w*])\*([^*\s][^*]*)\*(?![\w*])", r"\\fI\1\\fR", part)
        out.append(part)
    return "".join(out)


def write_gzipped(path, text):
    """Writes text to path (ending .gz) as gzip -n9 would, atomically."""
    tmp = path + ".tmp"
    with open(tmp, "wb") as raw:
        with gzip.GzipFile(filename="", mode="wb", compresslevel=9, fileobj=raw, mtime=0) as out:
            out.write(text.encode("utf-8"))
    os.replace(tmp, path)


def header(title, section, date, version, manual):
    return '.TH "{}" "{}" "{}" "ravnest {}" "{}"\n'.format(title.upper(), section, date, version,
                                                         manual)
