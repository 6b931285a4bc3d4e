"""A tiny HTML reader for the dashboard tests: elements by tag and attribute, their
text, and the forms with their fields, without a third-party parser."""
from __future__ import annotations

from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Dict, List, Optional, Tuple

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta",
        "source", "track", "wbr"}


@dataclass
class Element:
    tag: str
    attrs: Dict[str, str]
    children: List["Element"] = field(default_factory=list)
    parts: List[str] = field(default_factory=list)  # text, in order, with children's

    def text(self) -> str:
        return " ".join("".join(self.parts).split())

    def find_all(self, tag: Optional[str] = None, **attrs: str) -> List["Element"]:
        wanted = {key.rstrip("_").replace("_", "-"): value for key, value in attrs.items()}
        found = []
        for child in self.children:
            if (tag is None or child.tag == tag) and all(
                    child.attrs.get(k) == v for k, v in wanted.items()):
                found.append(child)
            found.extend(child.find_all(tag, **attrs))
        return found

    def find(self, tag: Optional[str] = None, **attrs: str) -> "Element":
        found = self.find_all(tag, **attrs)
        assert found, f"no <{tag} {attrs}> in the page"
        return found[0]

    def fields(self) -> List[Tuple[str, str]]:
        """A form's (name, value) pairs as a browser would submit them (inputs only)."""
        return [(e.attrs["name"], e.attrs.get("value", "")) for e in self.find_all("input")
                if "name" in e.attrs]


class _Builder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Element("#root", {})
        self.stack = [self.root]

    def handle_starttag(self, tag, attrs):
        element = Element(tag, {k: (v if v is not None else "") for k, v in attrs})
        self.stack[-1].children.append(element)
        if tag not in VOID:
            self.stack.append(element)

    def handle_endtag(self, tag):
        for index in range(len(self.stack) - 1, 0, -1):
            if self.stack[index].tag == tag:
                del self.stack[index:]
                return

    def handle_data(self, data):
        for element in self.stack:
            element.parts.append(data)


def parse(body: bytes) -> Element:
    builder = _Builder()
    builder.feed(body.decode("utf-8"))
    builder.close()
    return builder.root
