"""MkDocs hook: adds the generated pages (docs/generate.py) to every build, in memory.

Nothing is written into docs/, so the generated pages are always those of the code and the
results in this checkout. Listed under `hooks:` in mkdocs.yml.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from mkdocs.structure.files import File

_spec = importlib.util.spec_from_file_location("htap_docs_generate", Path(__file__).with_name("generate.py"))
generate = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(generate)


def on_files(files, config):
    for path, content in generate.generated_files().items():
        files.append(File.generated(config, path, content=content))
    return files
