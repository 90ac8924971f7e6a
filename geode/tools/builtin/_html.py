"""The HTML parser of ``web_fetch`` (imported by the first fetch: ``html.parser`` and its
entity tables cost every start ~3 ms otherwise)."""

from __future__ import annotations

from html.parser import HTMLParser

__all__ = ["TextExtractor"]


class TextExtractor(HTMLParser):
    _SKIP = frozenset({"script", "style", "noscript", "template", "svg", "head"})
    _BLOCK = frozenset(
        {
            "p", "div", "br", "tr", "li", "ul", "ol", "table", "section", "article", "header",
            "footer", "nav", "main", "aside", "h1", "h2", "h3", "h4", "h5", "h6", "pre",
            "blockquote", "hr", "dt", "dd", "form", "title",
        }
    )  # fmt: skip

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.title = ""
        self._skip_depth = 0
        self._in_title = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title":
            self._in_title = True
        elif tag in self._SKIP:
            self._skip_depth += 1
        if tag in self._BLOCK:
            self.parts.append("\n")
        if tag == "li":
            self.parts.append("- ")

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title = False
        elif tag in self._SKIP and self._skip_depth:
            self._skip_depth -= 1
        if tag in self._BLOCK:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title += data
        elif not self._skip_depth:
            self.parts.append(data)
