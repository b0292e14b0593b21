"""``python -m policysim``: the ``policysim`` command."""

from policysim.cli import app

if __name__ == "__main__":
    app()
