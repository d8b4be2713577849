#!/usr/bin/python3
"""Checks a `sluice report` directory: every named picture exists as PNG and SVG, each is
non-trivial (a real PNG of some size with ink on it, an SVG with drawing elements), and
index.html embeds every PNG.  usage: check_report.py DIR NAME..."""
import base64
import os
import sys


def main(d, names):
    page = open(os.path.join(d, "index.html")).read()
    bad = 0
    for n in names:
        png, svg = os.path.join(d, n + ".png"), os.path.join(d, n + ".svg")
        for p in (png, svg):
            if not os.path.exists(p):
                print(f"missing {p}")
                bad += 1
        if bad:
            continue
        data = open(png, "rb").read()
        ok_png = data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 8000
        text = open(svg).read()
        ok_svg = "<svg" in text and (text.count("<path") + text.count("<polygon") + text.count("<polyline")) >= 10
        embedded = base64.b64encode(data).decode()[:200] in page
        print(f"{n}: png {len(data)} B {'ok' if ok_png else 'TRIVIAL'}, svg {len(text)} B {'ok' if ok_svg else 'TRIVIAL'}, "
              f"{'embedded' if embedded else 'NOT IN index.html'}")
        bad += (not ok_png) + (not ok_svg) + (not embedded)
    if page.count("data:image/png;base64,") < len(names):
        print("index.html embeds fewer pictures than expected")
        bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2:]))
