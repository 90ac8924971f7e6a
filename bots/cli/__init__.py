"""What the chat layer adds to the ``geode`` command line, through its plugin
(:mod:`bots.plugin`, the ``geode.plugins`` entry point group): the channel commands
(:mod:`bots.cli.channels`, :mod:`bots.cli.queue`), the start and doctor checks and the
``.env`` lines (:mod:`bots.cli.checks`), a session's attachments (:mod:`bots.cli.sessions`).

Each module is imported when its part is used; none imports an SDK or the store at import.
"""
