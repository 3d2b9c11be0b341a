"""The shell's conveniences, made from the one parser (`main.build_parser(every=True)`): a
completion script for bash or zsh (shtab, which reads an argparse parser) and the manual page
(argparse-manpage). Neither is hand-written, so neither can fall behind a flag."""

from __future__ import annotations

import argparse


def completion(parser: argparse.ArgumentParser, shell: str) -> str:
    """The completion script of `parser` for `shell` ("bash" or "zsh")."""
    import shtab

    script: str = shtab.complete(parser, shell=shell)
    return script


def manpage(parser: argparse.ArgumentParser) -> str:
    """The manual page of `parser`, troff (`aner manpage | man -l -`)."""
    from argparse_manpage.manpage import Manpage

    from aner_coord import __version__

    page = Manpage(
        parser,
        _data={"project_name": "aner", "version": __version__, "manual_title": "aner manual"},
    )
    return str(page)
