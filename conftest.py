"""Runs the ```python blocks of docs/*.md and README.md as tests: the blocks of one page share a
namespace and run in order, so a page reads like a session."""
import re

import pytest

_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


class MarkdownPage(pytest.File):
    def collect(self):
        text = self.path.read_text()
        blocks = _BLOCK.findall(text)
        if blocks:
            yield MarkdownBlocks.from_parent(self, name=self.path.name, blocks=blocks)


class MarkdownBlocks(pytest.Item):
    def __init__(self, *, blocks, **kwargs):
        super().__init__(**kwargs)
        self.blocks = blocks

    def runtest(self):
        namespace = {"__name__": "__doc_example__"}
        for i, block in enumerate(self.blocks):
            try:
                exec(compile(block, f"{self.path.name}[block {i + 1}]", "exec"), namespace)
            except Exception as exc:
                raise MarkdownError(i + 1, block, exc) from exc

    def repr_failure(self, excinfo):
        if isinstance(excinfo.value, MarkdownError):
            err = excinfo.value
            return f"block {err.index} failed: {err.exc!r}\n\n{err.block}"
        return super().repr_failure(excinfo)

    def reportinfo(self):
        return self.path, 0, f"docs page {self.path.name}"


class MarkdownError(Exception):
    def __init__(self, index, block, exc):
        super().__init__(index, block, exc)
        self.index, self.block, self.exc = index, block, exc


def pytest_collect_file(parent, file_path):
    if file_path.suffix == ".md" and (file_path.parent.name == "docs" or
                                      file_path.name == "README.md"):
        return MarkdownPage.from_parent(parent, path=file_path)
