"""The X display of computer-use channels: started and supervised by ``geode serve``, or an
existing one the operator configured; and the lock that gives it to one turn at a time.

* :class:`XvfbSupervisor` runs a private ``Xvfb``. The first start lets the server pick a
  free display number (``-displayfd``: it writes the number once it accepts connections, so
  there is no polling); a restart after it died keeps that number, so the ``DISPLAY`` every
  session was given stays valid (if the number is taken meanwhile it picks a new one).
  Restarts back off (0.5 s doubling to 30 s; reset after a minute of uptime) and each is a
  log line. ``stop()`` ends it (SIGTERM, then SIGKILL); started through ``setpriv
  --pdeathsig KILL`` where util-linux has it, it also dies with a ``geode serve`` that was
  killed -9, so no X server is left behind.
* :class:`ComputerDisplay` is what the channel layer sees: the display's current name and
  :meth:`ComputerDisplay.turn`, one computer-use turn at a time (a pointer and a keyboard
  cannot be shared by two agents).

``open_computer_display`` decides between them from ``[computer]`` (see
:class:`geode.settings.ComputerSettings`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import time
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING

import structlog

from geode.errors import ConfigError

if TYPE_CHECKING:
    from geode.settings import Settings

__all__ = ["ComputerDisplay", "XvfbSupervisor", "open_computer_display", "wants_display"]

log = structlog.get_logger(__name__)

_START_TIMEOUT_S = 15.0
_STOP_TIMEOUT_S = 5.0


class XvfbError(ConfigError):
    """Xvfb is missing or did not start (the message says what it printed)."""


class XvfbSupervisor:
    """A private Xvfb kept running until :meth:`stop` (see the module docstring)."""

    def __init__(
        self, *, screen: str = "1280x800x24", min_backoff_s: float = 0.5,
        max_backoff_s: float = 30.0, stable_s: float = 60.0,
    ) -> None:
        self.screen = screen
        self.min_backoff_s = min_backoff_s
        self.max_backoff_s = max_backoff_s
        self.stable_s = stable_s
        #: ":N" once started (kept across restarts)
        self.display: str | None = None
        #: times it was started again after it died
        self.restarts = 0
        self._proc: asyncio.subprocess.Process | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self._up = asyncio.Event()
        self._last_error = ""
        self._drainer: asyncio.Task[None] | None = None

    @property
    def pid(self) -> int | None:
        """The running server's pid (None while it is down)."""
        proc = self._proc
        return proc.pid if proc is not None and proc.returncode is None else None

    async def start(self) -> str:
        """Start the server and its supervision; the display name (":N").

        Raises:
            XvfbError: Xvfb is not installed or exits before it accepts connections.
        """
        self._stopping = False
        self.display = await self._spawn(None)
        self._task = asyncio.create_task(self._supervise(), name="xvfb-supervisor")
        log.info("display.xvfb_started", display=self.display, pid=self.pid, screen=self.screen)
        return self.display

    async def wait_up(self) -> None:
        """Until the server runs (at once unless it is being restarted)."""
        await self._up.wait()

    async def stop(self) -> None:
        """Stop supervising and end the server (SIGTERM, then SIGKILL)."""
        self._stopping = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self._end(self._proc)
        self._proc = None
        self._up.clear()
        if self.display is not None:
            log.info("display.xvfb_stopped", display=self.display)

    async def _supervise(self) -> None:
        backoff = self.min_backoff_s
        started = time.monotonic()
        while not self._stopping:
            proc = self._proc
            code = await proc.wait() if proc is not None else None
            self._up.clear()
            if self._stopping:
                return
            if time.monotonic() - started >= self.stable_s:
                backoff = self.min_backoff_s  # it ran a good while: not a crash loop
            log.warning("display.xvfb_exited", display=self.display, returncode=code,
                        restart_in_s=backoff)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, self.max_backoff_s)
            started = time.monotonic()
            try:
                name = await self._spawn(self.display)
            except XvfbError as exc:
                self._proc = None
                log.warning("display.xvfb_restart_failed", display=self.display,
                            error=str(exc), retry_in_s=backoff)
                continue
            if name != self.display:
                log.warning("display.xvfb_display_changed", old=self.display, new=name)
                self.display = name
            self.restarts += 1
            log.info("display.xvfb_restarted", display=self.display, pid=self.pid,
                     restarts=self.restarts)

    async def _spawn(self, display: str | None) -> str:
        """Start Xvfb (on ``display``, falling back to a free number); its name once it
        accepts connections."""
        xvfb = shutil.which("Xvfb")
        if xvfb is None:
            raise XvfbError("computer use needs Xvfb to start a display: apt-get install xvfb "
                            "(or set [computer] display to an X display that runs already)")
        self._last_error = ""
        name = await self._try_spawn(xvfb, display)
        if name is None and display is not None:
            name = await self._try_spawn(xvfb, None)  # the number was taken meanwhile
        if name is None:
            raise XvfbError(f"Xvfb did not start: {self._last_error or 'no reason given'}")
        self._up.set()
        return name

    async def _try_spawn(self, xvfb: str, display: str | None) -> str | None:
        read_fd, write_fd = os.pipe()
        argv = [xvfb, *([display] if display else []), "-displayfd", str(write_fd),
                "-screen", "0", self.screen, "-noreset", "-nolisten", "tcp"]
        setpriv = shutil.which("setpriv")
        if setpriv is not None:  # dies with us even when we are killed -9
            argv = [setpriv, "--pdeathsig", "KILL", "--", *argv]
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.PIPE, pass_fds=(write_fd,),
                start_new_session=True,  # a terminal's Ctrl-C is serve's to handle, not its
            )
        finally:
            os.close(write_fd)
        try:
            number = await asyncio.wait_for(asyncio.to_thread(_read_number, read_fd),
                                            _START_TIMEOUT_S)
        except TimeoutError:  # the reading thread ends (and closes it) once Xvfb is gone
            number = None
        except BaseException:  # stopped while it started: it must not outlive us
            await asyncio.shield(self._end(proc))
            raise
        if number is None:
            await self._end(proc)
            err = b""
            if proc.stderr is not None:
                with contextlib.suppress(Exception):
                    err = await asyncio.wait_for(proc.stderr.read(), 1.0)
            lines = [ln for ln in err.decode("utf-8", "replace").splitlines() if ln.strip()]
            self._last_error = " / ".join(lines[-3:])
            return None
        assert proc.stderr is not None
        # its later complaints (fonts, extensions) must not fill a pipe nobody reads
        self._drainer = asyncio.create_task(_drain(proc.stderr))
        self._proc = proc
        return f":{number}"

    @staticmethod
    async def _end(proc: asyncio.subprocess.Process | None) -> None:
        if proc is None or proc.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            proc.terminate()
        try:
            await asyncio.wait_for(asyncio.shield(proc.wait()), _STOP_TIMEOUT_S)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()


def _read_number(fd: int) -> int | None:
    """The display number Xvfb writes on its -displayfd once it is ready ("57\\n", possibly
    in pieces: the pipe stays open until the newline, or Xvfb dies of the broken pipe);
    None at EOF (it exited first). Closes ``fd``."""
    try:
        data = b""
        while not data.endswith(b"\n"):
            chunk = os.read(fd, 64)
            if not chunk:
                return None
            data += chunk
        text = data.strip()
        return int(text) if text.isdigit() else None
    finally:
        os.close(fd)


async def _drain(stream: asyncio.StreamReader) -> None:
    with contextlib.suppress(Exception):
        while await stream.read(65536):
            pass


class ComputerDisplay:
    """The X display computer-use turns of this daemon use, one turn at a time.

    ``name`` is the display's current name (``:N``); ``supervisor`` is the Xvfb
    ``geode serve`` runs for it (None: a display the operator runs).
    """

    def __init__(
        self, *, name: str, supervisor: XvfbSupervisor | None = None,
        screenshot_every_s: float = 10.0,
    ) -> None:
        self._name = name
        self.supervisor = supervisor
        #: while a turn uses it, its thread sees the screen at most this often (0: only at
        #: the end of the turn)
        self.screenshot_every_s = screenshot_every_s
        self._lock = asyncio.Lock()
        #: who has the display now (a thread key), "" when nobody
        self.holder = ""

    @property
    def name(self) -> str:
        if self.supervisor is not None and self.supervisor.display:
            return self.supervisor.display
        return self._name

    @property
    def busy(self) -> bool:
        return self._lock.locked()

    @contextlib.asynccontextmanager
    async def turn(
        self, holder: str, *, on_wait: Callable[[str], None] | None = None
    ) -> AsyncIterator[str]:
        """Hold the display for one turn (FIFO among the waiting ones); yields its name.

        ``on_wait`` is told a line for ``/status`` while another turn has it, and "" once
        this one got it. Released on every way out (the answer, an error, a cancel).
        """
        if self._lock.locked() and on_wait is not None:
            # who holds it stays out of the line: it is shown in another channel's thread
            on_wait(f"waiting for the computer display {self.name}: another thread's "
                    "computer-use turn is using it")
        try:
            await self._lock.acquire()
        finally:
            if on_wait is not None:
                on_wait("")
        self.holder = holder
        try:
            yield self.name
        finally:
            self.holder = ""
            self._lock.release()

    async def aclose(self) -> None:
        if self.supervisor is not None:
            await self.supervisor.stop()


def wants_display(settings: Settings) -> bool:
    """Whether a binding of ``settings`` enables computer use (the literal ``true``)."""
    return any(b.computer_use is True for b in settings.bindings)


async def open_computer_display(settings: Settings) -> ComputerDisplay | None:
    """The display for computer-use bindings: None when no binding enables computer use;
    ``[computer] display`` (or ``$DISPLAY``) when set; else a private Xvfb, started now.

    Raises:
        XvfbError: the Xvfb could not be started.
    """
    if not wants_display(settings):
        return None
    conf = settings.computer
    if conf.display and conf.display != "xvfb":
        log.info("display.configured", display=conf.display)
        return ComputerDisplay(name=conf.display, screenshot_every_s=conf.screenshot_every_s)
    supervisor = XvfbSupervisor(screen=conf.screen)
    name = await supervisor.start()
    return ComputerDisplay(name=name, supervisor=supervisor,
                           screenshot_every_s=conf.screenshot_every_s)
