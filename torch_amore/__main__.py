"""``python -m torch_amore``: the ``torch-amore`` command line (see :mod:`torch_amore.cli.commands`)."""

from torch_amore.cli.commands import main

if __name__ == "__main__":
    raise SystemExit(main())
