"""An MkDocs hook: the page that holds ``<!-- firesafe-cli-help -->`` gets, in its place, the
``--help`` of every ``firesafe`` command and subcommand, as the installed code prints it. The
command-line reference therefore lists every command and cannot drift from the code."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import click

MARKER = "<!-- firesafe-cli-help -->"


def commands(group: click.Command, path: str, parent: click.Context | None = None
             ) -> Iterator[tuple[str, click.Command, click.Context]]:
    """Every command under ``group`` (itself first), depth first, in name order."""
    settings = {**group.context_settings, "max_content_width": 88, "terminal_width": 88}
    ctx = click.Context(group, info_name=path.split()[-1], parent=parent, **settings)
    yield path, group, ctx
    if isinstance(group, click.Group):
        for name in sorted(group.list_commands(ctx)):
            sub = group.get_command(ctx, name)
            if sub is not None and not sub.hidden:
                yield from commands(sub, f"{path} {name}", ctx)


def render() -> str:
    from firesafe.cli.main import cli

    parts = []
    for path, command, ctx in commands(cli, "firesafe"):
        level = "##" if path.count(" ") <= 1 else "###"
        parts.append(f"{level} `{path}`\n\n```text\n{command.get_help(ctx)}\n```\n")
    return "\n".join(parts)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    if MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, render())
