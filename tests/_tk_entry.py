"""A small Tk entry window as the program a computer-use test drives (the computer tool's
tests and the computer channel's): Return writes the entry's text to the file named by its
first argument; as they arrive, each key release appends the text so far to ``<file>.keys``
and each button press ``"<button> <x_root> <y_root>"`` to ``<file>.click``."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

TK_APP = """
import sys, tkinter as tk
root = tk.Tk()
root.title(sys.argv[2])
root.geometry("400x100+0+0")
entry = tk.Entry(root)
entry.pack(fill="both", expand=True)
def done(_event):
    with open(sys.argv[1], "w") as fh:
        fh.write(entry.get())
entry.bind("<Return>", done)
def typed(_event):
    with open(sys.argv[1] + ".keys", "a") as fh:
        fh.write(entry.get() + "\\n")
entry.bind("<KeyRelease>", typed, add="+")
def clicked(event):
    with open(sys.argv[1] + ".click", "a") as fh:
        fh.write(f"{event.num} {event.x_root} {event.y_root}\\n")
entry.bind("<ButtonPress>", clicked, add="+")
root.mainloop()
"""


def tk_python() -> str:
    """A Python interpreter that can import tkinter (this one, or Debian's python3-tk); ""
    when there is none."""
    for candidate in (sys.executable, "/usr/bin/python3"):
        if os.path.exists(candidate) and subprocess.run(
            [candidate, "-c", "import tkinter"], capture_output=True, check=False
        ).returncode == 0:
            return candidate
    return ""


def open_entry(python: str, display: str, folder: Path) -> tuple[subprocess.Popen[bytes], Path]:
    """Start the entry window at (0,0) 400x100 on ``display`` and wait until it is mapped
    (blocking: from a coroutine, call it in a thread); returns the process and the file its
    Return writes (in ``folder``). The caller kills the process with :func:`close_entry`."""
    app = folder / "app.py"
    app.write_text(TK_APP)
    out = folder / "received.txt"
    title = f"geode-entry-{uuid.uuid4().hex[:8]}"
    env = {"DISPLAY": display, "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    proc = subprocess.Popen([python, str(app), str(out), title], env=env)
    try:
        # --sync: until the window is mapped (bounded by the timeout)
        subprocess.run(["xdotool", "search", "--sync", "--onlyvisible", "--name", title],
                       env=env, check=True, capture_output=True, timeout=30)
    except BaseException:
        close_entry(proc)
        raise
    return proc, out


def close_entry(proc: subprocess.Popen[bytes]) -> None:
    proc.kill()
    proc.wait()
