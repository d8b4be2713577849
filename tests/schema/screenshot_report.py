#!/usr/bin/python3
"""Opens `sluice report` pages in a real headless browser (Debian's Chromium), takes a screenshot
of each, and checks that the page rendered: the PNG exists and is of some size, it is not blank
(enough ink: pixels far from the white background, in more than a few colours), and the
embedded pictures loaded (the page is taller than its text alone would be). Keeps the
screenshots in OUT for a person to look at.

  screenshot_report.py OUT REPORT_DIR... (each holds an index.html)

Exit status 0 when every page passed; 1 when one failed; 2 when Chromium is missing (setup:
tools/test.sh installs it; tools/setup.sh with SLUICE_SETUP_BROWSER=1)."""
import os
import shutil
import subprocess
import sys

import matplotlib.image as mpimg
import numpy as np


def browser():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def shoot(chrome, page, png, height):
    cmd = [chrome, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
           "--disable-dev-shm-usage", f"--window-size=1280,{height}", f"--screenshot={png}", "file://" + os.path.abspath(page)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    return r.returncode, r.stderr


def check(png):
    """Ink and colour of a screenshot: (fraction of pixels far from white, distinct colours, fraction of
    chromatic pixels: the charts' coloured lines and bars, which text and tables never have)."""
    img = mpimg.imread(png)[:, :, :3]
    ink = np.abs(1.0 - img).sum(axis=2) > 0.3
    colours = len(np.unique((img * 255).astype(np.uint8).reshape(-1, 3), axis=0))
    chroma = (img.max(axis=2) - img.min(axis=2)) > 0.25
    return ink.mean(), colours, chroma.mean()


def main(out, dirs):
    chrome = browser()
    if not chrome:
        print("screenshot_report: no Chromium on this machine (tools/test.sh installs it: SLUICE_SETUP_BROWSER=1 bash tools/setup.sh)",
              file=sys.stderr)
        return 2
    os.makedirs(out, exist_ok=True)
    bad = 0
    for d in dirs:
        page = os.path.join(d, "index.html")
        name = os.path.basename(os.path.normpath(os.path.dirname(os.path.normpath(d)))) or "report"
        png = os.path.join(out, f"{name}.png")
        if not os.path.exists(page):
            print(f"{d}: no index.html")
            bad += 1
            continue
        rc, err = shoot(chrome, page, png, 2400)
        if rc != 0 or not os.path.exists(png):
            print(f"{d}: chromium exit {rc}, no screenshot: {err.strip().splitlines()[-1:] if err.strip() else ''}")
            bad += 1
            continue
        size = os.path.getsize(png)
        ink, colours, chroma = check(png)
        # A rendered report: tables and at least one chart drawn (its coloured ink), in many
        # colours; a blank, broken or chartless page is black text and grey lines on white.
        ok = size > 60_000 and ink > 0.01 and colours > 200 and chroma > 0.0005
        print(f"{name}: {png} {size} B, ink {100 * ink:.1f}% of pixels, {colours} colours, chart colour on {100 * chroma:.2f}%: "
              f"{'ok' if ok else 'BLANK OR BROKEN'}")
        bad += not ok
    return 1 if bad else 0


if __name__ == "__main__":
    if len(sys.argv) < 3:
        print(__doc__)
        sys.exit(2)
    sys.exit(main(sys.argv[1], sys.argv[2:]))
