"""The Python sandbox's bootstrap program, in `__main__.py` next to this file.

`rtpo.tools.sandbox_process` reads `__main__.py` once as text (its `BOOT`), fills in the placeholder
`_BOOT_DIR`, compiles it into a private directory and runs it as `python -s -S -B <compiled file>`:
the fork server and the per-call processes P, C and D. Nothing imports it, and nothing may: it acts at
its top level (as an import it stops at once, with a NameError for `_BOOT_DIR`).

Why a package holding a `__main__.py` rather than a plain module: the program is a file of Python
that readers and tools see as code; setuptools ships it in the wheel like any module; and, being a
`__main__` file, it is what the import checks of tests/test_imports.py treat as an entry point to
run, not a module to import. This `__init__.py` defines nothing.
"""
