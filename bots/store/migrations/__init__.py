"""The channel layer\x27s migration branch ``bots`` (see ``geode.store.schema``)."""
